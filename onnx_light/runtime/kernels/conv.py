"""Convolutions: Conv and ConvTranspose over 1-D, 2-D and 3-D inputs.

Conv is im2col + matmul: a strided *view* of the padded input holds every
window, one copy lays it out as columns, and one batched matmul (over samples
and groups) does the rest. Float32 1-D and 2-D convolutions run natively instead
where that was measured faster (``runtime/_native.py``; ``src/conv.cpp`` with AVX-512,
``src/conv_avx2.cpp`` with AVX2: GEMM-style blocking, the columns packed one block of
register-tile panels at a time or read in place, never written out whole; optionally on
several threads, ``InferenceSession(intra_op_num_threads=N)``); the numpy path is their twin.
On AVX2, 3 x 3 stride-1 convolutions with at least 64 channels run as Winograd F(2x2, 3x3)
(``src/conv_winograd.cpp``: the same sums up to float rounding); the weights' transform is
computed once per immutable weights array (a session's initializers: ``winograd_weights``);
``ONNX_LIGHT_CONV_WINOGRAD=0`` turns it off (the tiled GEMM alone, for comparisons).
``conv_relu`` is Conv followed by Relu in one pass, which
the plan uses when a Conv's only reader is a Relu (``runtime/_plan.py``).
ConvTranspose is the adjoint. A stride-1 one runs as the Conv it equals (a 1 x 1 unpadded one
as one batched matmul), and so does a float32 depthwise one (one input channel per group: the
data gradient of MobileNet's depthwise convs) of any stride, over its input with s - 1 zeros
between neighbours, where the native depthwise conv beats the alternatives. Otherwise one
batched matmul over (samples, groups) produces a column per kernel offset (a depthwise one
multiplies instead) and a scatter-add per offset (never per pixel) folds them into the output.
The spatial helpers here are shared with ``pool.py``.
"""

from __future__ import annotations

import math
import mmap
import os
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from onnx_light.onnx_core.ops import legacy_transpose_split, output_size, resolve_pads, transpose_window
from onnx_light.runtime import _native
from onnx_light.runtime._native import CONV2D as USING_NATIVE
from onnx_light.runtime._native import conv2d_native, conv_epilogue_native, lent
from onnx_light.runtime._registry import kernel
from onnx_light.runtime.kernels._conv_backward import (
    conv_transpose_gemm,
    conv_transpose_weights,
    depthwise_conv_transpose,
)
from onnx_light.runtime.kernels._one_hot_conv import one_hot_conv, one_hot_offsets

__all__ = ["conv_relu", "explicit_pads", "kernel_offsets", "pad_spatial", "sliding_windows"]


def explicit_pads(
    in_shape: Sequence[int],
    kernel_shape: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[int] | None,
    auto_pad: str,
) -> tuple[list[int], list[int]]:
    """Resolves ``auto_pad`` / ``pads`` into begin and end pads per spatial axis."""
    return resolve_pads(in_shape, kernel_shape, strides, dilations, pads, auto_pad)


def pad_spatial(x: np.ndarray, begin: Sequence[int], end: Sequence[int], value: float = 0) -> np.ndarray:
    """Pads the spatial axes (2..) of an N, C, ... array with a constant; no copy if no pad."""
    if not any(begin) and not any(end):
        return x
    widths = [(0, 0), (0, 0)] + [(b, e) for b, e in zip(begin, end)]
    return np.pad(x, widths, mode="constant", constant_values=value)


def sliding_windows(
    xp: np.ndarray,
    kernel_shape: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    out_shape: Sequence[int],
) -> np.ndarray:
    """A read-only ``(N, C, *out_shape, *kernel_shape)`` view of every window of ``xp``."""
    nd = len(kernel_shape)
    st = xp.strides
    shape = xp.shape[:2] + tuple(out_shape) + tuple(kernel_shape)
    steps = (
        st[:2] + tuple(st[2 + i] * strides[i] for i in range(nd)) + tuple(st[2 + i] * dilations[i] for i in range(nd))
    )
    return np.lib.stride_tricks.as_strided(xp, shape, steps, writeable=False)


def kernel_offsets(
    kernel_shape: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    out_shape: Sequence[int],
) -> Iterator[tuple[tuple[int, ...], tuple[slice, ...]]]:
    """Yields each kernel offset with the spatial slices it reads (or writes) in a padded array.

    Slicing ``xp[(..., *slices)]`` gives, for every output position, the input cell
    that the kernel offset sees; that is the whole trick behind pooling and col2im.
    """
    for k in np.ndindex(*kernel_shape):
        yield (
            k,
            # an empty output axis (o = 0) reads nothing: a stop of ki * d - s + 1 could be
            # negative, which numpy would count from the end
            tuple(
                slice(ki * d, ki * d + ((o - 1) * s + 1 if o else 0), s)
                for ki, s, d, o in zip(k, strides, dilations, out_shape)
            ),
        )


def _defaults(nd: int, strides: list[int] | None, dilations: list[int] | None) -> tuple[list[int], list[int]]:
    """Strides and dilations with their spec default of 1 per spatial axis."""
    return list(strides or [1] * nd), list(dilations or [1] * nd)


def conv(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None = None,
    *,
    auto_pad: str = "NOTSET",
    dilations: list[int] | None = None,
    group: int = 1,
    kernel_shape: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
    _relu: bool = False,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """N-D grouped convolution; ``w`` is ``(M, C / group, *kernel)``.

    ``kernel_shape`` is always ``w.shape[2:]``, so the attribute is accepted and unused.
    ``out``: a buffer of the plan's pool (``KernelOptions.writes_out``), written and returned
    when it has the result's dtype and shape and the native kernel or the one-hot copies run
    (the numpy im2col path allocates).
    """
    nd = x.ndim - 2
    strides, dilations = _defaults(nd, strides, dilations)
    begin, end = explicit_pads(x.shape[2:], w.shape[2:], strides, dilations, pads, auto_pad)
    if b is None and not _relu and x.ndim == w.ndim and x.shape[1] == group and w.shape[0] > group:
        y = _im2col_as_copies(x, w, strides, dilations, begin, end, group, out)
        if y is not None:
            return y
    u = winograd_weights(x, w, strides, dilations, begin, end, group)
    p = None if u is not None or x.ndim != 4 else packed_weights(w, group)
    y = conv2d_native(x, w, b, strides, dilations, begin, end, group, _relu, winograd=u, into=out, packed=p)
    if y is not None:
        return y
    y = _conv_im2col(x, w, b, strides, dilations, begin, end, group)
    if _relu:
        np.maximum(y, np.zeros((), y.dtype), out=y)
    return y


#: id(weights) -> (a weak reference to them, the input shape, their Winograd transform or None
#: when that geometry does not take it): see winograd_weights
_WINOGRAD: dict[int, tuple[weakref.ref[np.ndarray], tuple[int, ...], np.ndarray | None]] = {}
_WINOGRAD_LIMIT = 256  # transforms kept at most (a session's 3 x 3 layers)


def _immutable(a: np.ndarray) -> bool:
    """Whether nothing can write ``a``'s values: read-only, and so is every array or buffer under it
    (a session's initializers and folded constants; not feeds, nor views of writeable arrays)."""
    base: object = a
    while base is not None:
        if isinstance(base, np.ndarray):
            if base.flags.writeable:
                return False
            base = base.base
        elif isinstance(base, bytes):
            return True
        elif isinstance(base, memoryview):
            if not base.readonly:
                return False
            base = base.obj
        elif isinstance(base, mmap.mmap):
            return _read_only_map(base)
        else:
            return False  # a buffer of unknown kind (bytearray, ...): it may change
    return True


def _read_only_map(m: mmap.mmap) -> bool:
    """Whether ``m`` was mapped ``ACCESS_READ`` (``load``'s zero-copy model file): nothing in the
    process can write through it, and ``save`` replaces a file by renaming a new one, so the mapped
    bytes stay (a file rewritten in place under a running session is not supported: every kernel
    would read the new bytes mid-run). Such weights keep their Winograd transform and packed form;
    before, aligned tensors of a loaded file were taken for mutable and re-transformed every call."""
    try:
        with memoryview(m) as view:
            return view.readonly
    except (TypeError, ValueError):  # closed, or an empty map
        return False


def winograd_weights(
    x: np.ndarray,
    w: np.ndarray,
    strides: list[int],
    dilations: list[int],
    begin: list[int],
    end: list[int],
    group: int,
) -> np.ndarray | None:
    """The Winograd F(2x2, 3x3) transform of immutable float32 3 x 3 weights, computed once per
    weights array (``src/conv_winograd.cpp``: 16 x M x C floats), when the native kernel runs
    this geometry by Winograd; otherwise None (the kernel then transforms per call, or not at all).
    The answer is kept per weights array and input shape, so that a session's later runs only
    look it up.

    Weights that may change (writeable, or a view of something writeable) are never cached:
    a stale transform would be a silent wrong answer; nor are weights holding an infinity or a
    NaN transformed (the transform's sums would spread them: those convolutions stay direct).
    """
    ext = _native.NATIVE if _native.CONV2D and _native.CONV_ISA == "avx2" else None
    if (
        ext is None
        or not hasattr(ext, "conv2d_winograd_weights")
        or x.ndim != 4
        or w.ndim != 4
        or w.shape[2:] != (3, 3)
        or x.dtype != np.float32
        or w.dtype != np.float32
        or not _immutable(w)
    ):
        return None
    hit = _WINOGRAD.get(id(w))
    if hit is not None and hit[0]() is w and hit[1] == x.shape:
        return hit[2]  # the transform, or None: this geometry does not take Winograd
    c, h, wd = x.shape[1:]
    applies = ext.conv2d_winograd_applies(
        c, h, wd, w.shape[0], 3, 3, *strides, *dilations, begin[0], begin[1], end[0], end[1], group, x.shape[0], True
    )
    u: np.ndarray | None = None
    if applies and np.isfinite(w).all():  # an infinity would turn into NaNs in the transform
        u = ext.conv2d_winograd_weights(np.ascontiguousarray(w))
        u.flags.writeable = False
    return _keep(_WINOGRAD, w, x.shape, u)


def _keep(
    table: dict[int, tuple[weakref.ref[np.ndarray], Any, np.ndarray | None]],
    w: np.ndarray,
    key: Any,
    value: np.ndarray | None,
) -> np.ndarray | None:
    """``value`` kept in ``table`` for weights ``w`` (and ``key``) until ``w`` is freed; returned."""
    if len(table) >= _WINOGRAD_LIMIT:
        table.clear()
    ident = id(w)

    def forget(ref: weakref.ref[np.ndarray], ident: int = ident) -> None:
        if table.get(ident, (None,))[0] is ref:
            del table[ident]

    table[ident] = (weakref.ref(w, forget), key, value)
    return value


#: id(weights) -> (a weak reference to them, the group, their packed form or None): see packed_weights
_PACKED: dict[int, tuple[weakref.ref[np.ndarray], Any, np.ndarray | None]] = {}


def packed_weights(w: np.ndarray, group: int) -> np.ndarray | None:
    """Immutable float32 weights packed once for the AVX2 tile (``conv2d_pack_weights``: each
    row block's weights k major, streamed past a pixel panel held in L1), or None where the native
    kernel would not read them (another ISA, a 1 x 1 kernel, few outputs, an older extension) or
    the weights may change (a stale copy would be a silent wrong answer). Kept per weights array.
    """
    ext = _native.NATIVE if _native.CONV2D and _native.CONV_ISA == "avx2" else None
    if (
        ext is None
        or not hasattr(ext, "conv2d_pack_weights")
        or w.ndim != 4
        or w.dtype != np.float32
        or group < 1
        or w.shape[0] % group
        or not _immutable(w)
    ):
        return None
    hit = _PACKED.get(id(w))
    if hit is not None and hit[0]() is w and hit[1] == group:
        return hit[2]
    p = ext.conv2d_pack_weights(np.ascontiguousarray(w), group)
    if p is not None:
        p.flags.writeable = False
    return _keep(_PACKED, w, group, p)


def _im2col_as_copies(
    x: np.ndarray,
    w: np.ndarray,
    strides: list[int],
    dilations: list[int],
    begin: list[int],
    end: list[int],
    group: int,
    into: np.ndarray | None = None,
) -> np.ndarray | None:
    """A Conv whose weight is one-hot kernels (the Conv gradient's im2col) as strided copies,
    or None (another weight, a non-finite input, an empty output); ``into``: the pool's buffer."""
    out = [output_size(*g) for g in zip(x.shape[2:], w.shape[2:], strides, dilations, begin, end)]
    if min(out) <= 0 or x.dtype != w.dtype or not x.size:
        return None
    offsets = _one_hot_offsets(w, group)
    return None if offsets is None else one_hot_conv(x, offsets, strides, dilations, begin, end, out, into)


#: id(weights) -> (a weak reference to them, the group, their one-hot offsets as an (M, nd) array
#: or None): the check reads all the weights (0.2 ms for 512 channels' 3 x 3 taps, as long as the
#: copies), so a session's constant weights are checked once
_ONE_HOT: dict[int, tuple[weakref.ref[np.ndarray], Any, np.ndarray | None]] = {}


def _one_hot_offsets(w: np.ndarray, group: int) -> list[tuple[int, ...]] | None:
    """``one_hot_offsets(w, group)``, kept per immutable weights array (see ``_immutable``)."""
    if not _immutable(w):
        return one_hot_offsets(w, group)
    hit = _ONE_HOT.get(id(w))
    if hit is not None and hit[0]() is w and hit[1] == group:
        table = hit[2]
    else:
        offsets = one_hot_offsets(w, group)
        table = None if offsets is None else np.array(offsets, dtype=np.int64).reshape(len(offsets), -1)
        _keep(_ONE_HOT, w, group, table)
    return None if table is None else [tuple(row) for row in table.tolist()]


def conv_relu(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, **attributes: Any) -> np.ndarray:
    """``Relu(Conv(x, w, b))``, the ReLU applied as each output tile is stored."""
    return conv(x, w, b, **attributes, _relu=True)


def conv_epilogue(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None,
    residual: np.ndarray | None,
    act: int,
    a: float,
    b_act: float,
    *,
    auto_pad: str = "NOTSET",
    dilations: list[int] | None = None,
    group: int = 1,
    kernel_shape: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
    out: np.ndarray | None = None,
) -> np.ndarray | None:
    """``act(Conv(x, w, b) + residual)`` by the native kernel (``act`` a code of ``src/conv.h``:
    1 Relu, 2 Clip [a, b_act], 3 HardSwish, 4 HardSigmoid (alpha a, beta b_act), 5 x * Sigmoid(x),
    6 Sigmoid), or None when the native kernel does not run this convolution (the plan then
    runs the Conv and the fused nodes' own kernels)."""
    f32 = np.dtype(np.float32)
    if not USING_NATIVE or x.dtype != f32 or w.dtype != f32 or (b is not None and b.dtype != f32):
        return None  # decided before any work: the plan then runs the kernels themselves
    if residual is not None and (
        residual.dtype != f32 or residual.ndim != x.ndim or residual.shape[:2] != (x.shape[0], w.shape[0])
    ):
        return None  # a broadcast residual: Add's kernel
    nd = x.ndim - 2
    strides, dilations = _defaults(nd, strides, dilations)
    begin, end = explicit_pads(x.shape[2:], w.shape[2:], strides, dilations, pads, auto_pad)
    u = winograd_weights(x, w, strides, dilations, begin, end, group)
    p = None if u is not None or x.ndim != 4 else packed_weights(w, group)
    y = conv2d_native(x, w, b, strides, dilations, begin, end, group, False, act, a, b_act, residual, u, out, p)
    if y is not None:
        return y
    # the convolution by numpy / BLAS, the epilogue natively in place
    y = _conv_im2col(x, w, b, strides, dilations, begin, end, group)
    return y if conv_epilogue_native(y, act, a, b_act, residual) else None


#: sessions built while this is true prepare their Conv steps (``ONNX_LIGHT_CONV_PREPARE=0``: not,
#: for comparisons; results are the same)
PREPARE = os.environ.get("ONNX_LIGHT_CONV_PREPARE", "1") != "0"
#: input shapes a PreparedConv keeps (a session sees one or a few)
_SHAPES = 8
_F32 = np.dtype(np.float32)
#: what runs one input shape: (output shape, conv2d's arguments or None for the matmul, multiply-adds)
_Prepared = tuple[tuple[int, ...], tuple[Any, ...] | None, int]


class PreparedConv:
    """One Conv step's native call, decided at plan time for its constant weights and bias.

    ``act(Conv(x, w, b) + residual)`` as :func:`conv_epilogue` (``act`` 0: the plain
    :func:`conv`) computes it, with everything that depends only on the weights, the attributes
    and the input's shape worked out once: the pads, the native kernel's geometry arguments,
    whether the native kernel pays (:func:`_native.conv_pays`), the Winograd transform. A run
    then checks the input (an exact float32 ndarray of the shape seen before) and calls the
    extension. A new input shape is worked out again (at most ``_SHAPES`` kept); a call this
    path does not cover returns None and the step runs the general kernels, so results are those
    of :func:`conv_epilogue` / :func:`conv` bit for bit. A pointwise convolution the native
    kernel leaves to BLAS (the squeeze-excite 1 x 1 convs on 1 x 1 maps) runs as the same
    matmul and bias add as :func:`_conv_im2col`, then the native epilogue.
    """

    __slots__ = ("_w", "_w2", "_b", "_b2", "_act", "_attrs", "_shapes", "_last")

    def __init__(self, w: np.ndarray, b: np.ndarray | None, act: tuple[int, float, float], attrs: dict[str, Any]):
        self._w, self._b, self._act, self._attrs = w, b, act, attrs
        self._w2 = w.reshape(w.shape[0], -1)
        self._b2 = None if b is None else b.reshape(-1, 1)
        #: input shape -> what runs it (_prepare_shape), None: the general kernels
        self._shapes: dict[tuple[int, ...], _Prepared | None] = {}
        #: the input shape of the last call and what ran it
        self._last: tuple[tuple[int, ...], _Prepared] = ((-1,), ((), None, 0))

    def __call__(self, x: Any, residual: Any = None, out: Any = None) -> np.ndarray | None:
        """The result, or None when the general kernels must run (class docstring)."""
        if x.__class__ is not np.ndarray or x.dtype is not _F32:
            return None
        shape, found = self._last
        if x.shape != shape:
            shape = x.shape
            known = self._shapes[shape] if shape in self._shapes else self._specialise(shape)
            if known is None:
                return None
            self._last = shape, found = shape, known
        out_shape, args, macs = found
        if residual is not None and (
            residual.__class__ is not np.ndarray or residual.dtype is not _F32 or residual.shape != out_shape
        ):
            return None
        if args is None:
            return self._matvec(x, residual, out_shape)
        threads = _native.conv_threads(macs)  # (as _native._conv2d_options decides)
        ext = _native.NATIVE
        assert ext is not None
        y: np.ndarray = ext.conv2d(
            np.ascontiguousarray(x),
            *args[:-2],
            None if residual is None else np.ascontiguousarray(residual),
            threads=threads,
            winograd=args[-2],
            out=out,
            **args[-1],
        )
        return y

    def _specialise(self, shape: tuple[int, ...]) -> _Prepared | None:
        """What runs inputs of ``shape`` (None: the general kernels), kept for later runs."""
        if len(self._shapes) >= _SHAPES:
            self._shapes.clear()
        found = self._shapes[shape] = _prepare_shape(self._w, self._b, self._act, self._attrs, shape)
        return found

    def _matvec(self, x: np.ndarray, residual: np.ndarray | None, out_shape: tuple[int, ...]) -> np.ndarray | None:
        """The pointwise convolution as :func:`_conv_im2col` computes it, then the native epilogue."""
        y = np.matmul(self._w2, x.reshape(x.shape[0], x.shape[1], -1))
        if self._b2 is not None:
            y += self._b2
        y = y.reshape(out_shape)
        code, a, b_act = self._act
        if code or residual is not None:
            ext = _native.NATIVE
            assert ext is not None
            ext.conv_epilogue(
                y, code, a, b_act, None if residual is None else np.ascontiguousarray(residual), _native.CONV_ISA
            )
        return y


def _prepare_shape(
    w: np.ndarray, b: np.ndarray | None, act: tuple[int, float, float], attrs: dict[str, Any], shape: tuple[int, ...]
) -> _Prepared | None:
    """``(output shape, conv2d's arguments after x but for the residual, threads and out, the
    multiply-adds)`` for float32 inputs of ``shape``; arguments None for the BLAS matmul of a
    pointwise convolution; None where only the general kernels decide (see PreparedConv)."""
    if len(shape) != 4 or not all(shape) or attrs.get("group", 1) < 1:
        return None
    group = attrs.get("group", 1)
    strides, dilations = _defaults(2, attrs.get("strides"), attrs.get("dilations"))
    try:
        begin, end = explicit_pads(
            shape[2:], w.shape[2:], strides, dilations, attrs.get("pads"), attrs.get("auto_pad", "NOTSET")
        )
    except Exception:  # noqa: BLE001  (the general kernel reports the attribute error)
        return None
    out = [output_size(*g) for g in zip(shape[2:], w.shape[2:], strides, dilations, begin, end)]
    if min(out) <= 0 or min(begin + end) < 0 or shape[1] != w.shape[1] * group or w.shape[0] % group:
        return None
    code, a, b_act = act
    if b is None and code == 0 and shape[1] == group and w.shape[0] > group:
        return None  # maybe one-hot kernels (conv's strided copies)
    out_shape = (shape[0], w.shape[0], *out)
    if not _native._native_conv_pays(shape, w.shape, strides, dilations, begin, end, group):
        pointwise = group == 1 and w.shape[2:] == (1, 1) and strides == [1, 1] and not any(begin + end)
        return (out_shape, None, 0) if pointwise and dilations == [1, 1] else None
    isa = _native.conv2d_isa_for(shape, w.shape, strides, dilations, begin, end, group, out[0] * out[1])
    x = np.empty(shape, _F32)  # winograd_weights reads only the shape and dtype
    u = winograd_weights(x, w, strides, dilations, begin, end, group) if isa in ("avx2", "avx512") else None
    geometry = (
        *strides,
        *dilations,
        begin[0],
        begin[1],
        end[0],
        end[1],
        group,
        False,
        isa,
        code,
        a,
        b_act,
    )
    p = None if u is not None or isa != "avx2" else packed_weights(w, group)
    extra = {} if p is None else {"packed": p}
    return out_shape, (w, b, *geometry, u, extra), shape[0] * w.size * out[0] * out[1]


def prepare_conv(
    w: np.ndarray, b: np.ndarray | None, act: int, a: float, b_act: float, **attributes: Any
) -> PreparedConv | None:
    """A :class:`PreparedConv` for constant float32 weights ``w`` and bias ``b`` (the plan's
    ``prepare_epilogue``), or None when the native convolution does not run here (numpy-only
    builds, other dtypes, weights that may change, an extension without ``out``)."""
    f32 = _F32
    if not PREPARE or not USING_NATIVE or not _native._CONV_TAKES_OUT or not _native._CONV_TAKES_THREADS:
        return None
    if not isinstance(w, np.ndarray) or w.dtype != f32 or w.dtype.metadata or w.ndim != 4:
        return None
    if b is not None and (
        not isinstance(b, np.ndarray) or b.dtype != f32 or b.dtype.metadata or b.shape != (w.shape[0],)
    ):
        return None
    if not _immutable(w) or (b is not None and not _immutable(b)):
        return None
    attrs = {k: v for k, v in attributes.items() if k != "kernel_shape"}  # always w.shape[2:]
    # the arrays the native call is given, as conv2d_native gives them (C-contiguous float32)
    w = _frozen_f32(w)
    return PreparedConv(w, None if b is None else _frozen_f32(b), (act, a, b_act), attrs)


def _frozen_f32(a: np.ndarray) -> np.ndarray:
    """``a`` (immutable float32) C-contiguous with the builtin float32 dtype, read-only."""
    if a.flags.c_contiguous and a.dtype is _F32:
        return a
    out = np.ascontiguousarray(a, dtype=_F32)
    out.flags.writeable = False
    return out


def _conv_im2col(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None,
    strides: list[int],
    dilations: list[int],
    begin: list[int],
    end: list[int],
    group: int,
) -> np.ndarray:
    """The numpy convolution: one im2col copy of a strided view, one batched matmul (a 1 x 1
    kernel with stride 1, no pads and one group is the matmul alone: no copy)."""
    nd = x.ndim - 2
    if group == 1 and all(k == 1 for k in w.shape[2:]) and set(strides) <= {1} and not any(begin + end):
        n, m = x.shape[0], w.shape[0]
        # sizes spelled out, not -1: numpy cannot infer a -1 beside a 0-size dim (empty batch)
        y = np.matmul(w.reshape(m, w.shape[1]), x.reshape(n, x.shape[1], math.prod(x.shape[2:])))
        y = y.reshape((n, m, *x.shape[2:]))
        if b is not None:
            y += b.reshape((m,) + (1,) * nd).astype(y.dtype, copy=False)
        return y
    ksize = w.shape[2:]
    xp = pad_spatial(x, begin, end)
    out_shape = [output_size(xp.shape[2 + i], ksize[i], strides[i], dilations[i]) for i in range(nd)]
    n, m = x.shape[0], w.shape[0]
    windows = sliding_windows(xp, ksize, strides, dilations, out_shape)
    # (N, C, *out, *k) -> (N, group, C / group * prod(k), prod(out)): the im2col copy.
    order = (0, 1, *range(2 + nd, 2 + 2 * nd), *range(2, 2 + nd))
    taps = w.shape[1] * int(np.prod(ksize))  # explicit: an empty batch cannot infer a -1
    cols = windows.transpose(order).reshape(n, group, taps, int(np.prod(out_shape)))
    # One batched matmul over (N, group): (group, M / group, Cg * k) @ cols.
    y = np.matmul(w.reshape(group, m // group, taps), cols).reshape((n, m, *out_shape))
    if b is not None:
        y += b.reshape((m,) + (1,) * nd).astype(y.dtype, copy=False)
    return y


def _conv_absorb(
    w: np.ndarray, b: np.ndarray | None, scale: np.ndarray, shift: np.ndarray, **attributes: Any
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]] | None:
    """``Conv(x, w, b) * scale + shift`` per output channel as ``Conv(x, w * scale, b * scale + shift)``."""
    if w.dtype.kind != "f" or (b is not None and b.dtype != w.dtype) or scale.shape != (w.shape[0],):
        return None
    w2 = (w * scale.reshape((-1,) + (1,) * (w.ndim - 1))).astype(w.dtype)
    b2 = ((0.0 if b is None else b.astype(np.float64)) * scale + shift).astype(w.dtype)
    return w2, b2, attributes


# a new array each call (runtime/_codegen.py); the plan replaces Conv -> Relu by conv_relu and
# folds a following inference BatchNormalization into w and b
kernel(
    "",
    "Conv",
    since=(1, 11, 22),
    fresh_output=True,
    with_relu=conv_relu,
    absorb_affine=_conv_absorb,
    with_epilogue=conv_epilogue,
    writes_out=True,
    prepare_epilogue=prepare_conv,
)(conv)


def _crop(buf: np.ndarray, begin: Sequence[int], size: Sequence[int]) -> np.ndarray:
    """``buf[..., begin:begin + size]`` per spatial axis, zero-filled where out of range."""
    full = buf.shape[2:]
    if all(0 <= b and b + s <= f for b, s, f in zip(begin, size, full)):
        window = tuple(slice(b, b + s) for b, s in zip(begin, size))
        return np.ascontiguousarray(buf[(..., *window)])  # type: ignore[arg-type]
    out = np.zeros(buf.shape[:2] + tuple(size), dtype=buf.dtype)
    src, dst = [], []
    for b, s, f in zip(begin, size, full):
        lo, hi = max(b, 0), max(min(b + s, f), max(b, 0))
        src.append(slice(lo, hi))
        dst.append(slice(lo - b, hi - b))
    out[(..., *dst)] = buf[(..., *src)]  # type: ignore[index,arg-type]
    return out


def _conv_transpose(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None,
    auto_pad: str,
    dilations: list[int] | None,
    group: int,
    output_padding: list[int] | None,
    output_shape: list[int] | None,
    pads: list[int] | None,
    strides: list[int] | None,
    legacy: bool,
    into: np.ndarray | None = None,
) -> np.ndarray:
    """The transposed convolution (``into``: the pool's buffer, taken when the native conv runs it)."""
    if _pointwise(w, strides, pads, output_padding, output_shape) and x.size and w.size:
        # before the window geometry (~10 us of a 1 x 1 layer's 60-100: MobileNetV3's backward has 35)
        pointwise = _conv_transpose_pointwise(x, w, group, into)
        if b is not None:
            pointwise += b.reshape((-1,) + (1,) * (x.ndim - 2)).astype(pointwise.dtype, copy=False)
        return pointwise
    nd = x.ndim - 2
    ksize = list(w.shape[2:])
    in_shape = list(x.shape[2:])
    tw = transpose_window(
        in_shape, ksize, strides, dilations, pads, auto_pad, output_padding, output_shape, legacy=legacy
    )
    strides, dilations, begin, size = tw.strides, tw.dilations, tw.begin, tw.out
    stride_1 = all(s == 1 for s in strides)
    y: np.ndarray | None = None
    if group > 1 and group == x.shape[1] and nd == 2 and w.shape[1] == 1:  # a depthwise Conv's data gradient
        y = depthwise_conv_transpose(x, w, strides, dilations, begin, size, into)
    if y is None and x.size and stride_1 and all(k == 1 for k in ksize) and not any(begin) and size == in_shape:
        y = _conv_transpose_pointwise(x, w, group)  # an output_shape equal to the input's
    elif y is None and _takes_gemm(x, w, group, stride_1, size):
        y = conv_transpose_gemm(x, w, strides, dilations, group, begin, size, into)
    elif (
        y is None
        and x.size
        and (stride_1 or (x.dtype == np.float32 and USING_NATIVE and nd <= 2 and w.shape[0] == group))
    ):
        # stride 1, or a depthwise float32 one that the native conv takes over the dilated input
        y = _conv_transpose_as_conv(_dilate_input(x, strides), w, b, dilations, group, begin, size, into)
        if y is not None:
            return y
    if y is None:
        y = _conv_transpose_scatter(x, w, strides, dilations, group, begin, size)
    if b is not None:
        y += b.reshape((-1,) + (1,) * nd).astype(y.dtype, copy=False)
    return y


def _takes_gemm(x: np.ndarray, w: np.ndarray, group: int, stride_1: bool, size: list[int]) -> bool:
    """A dense float32 2-D ConvTranspose runs as GEMM + col2im (``conv_transpose_gemm``) when
    strided (the scatter's numpy fold, natively), or at stride 1 when its input channels are at
    least a seventh of its input cells: the flipped copy of the weights the Conv path makes, and
    their packing, then cost a large part of the convolution. One BLAS thread, GEMM / Conv path:
    0.66-0.82x from channels / cells = 0.16 up (128 x 128 x 3 x 3 on 28 x 28: 3.2 vs 4.5 ms;
    256 on 20 x 20: 5.9 vs 8.4), 1.0-1.2x at 0.125-0.148 (128 on 32 x 32: 4.8 vs 4.0),
    1.0-1.4x at 0.005-0.08 (64 on 56 x 56: 4.0 vs 3.3)."""
    if x.dtype != np.float32 or w.dtype != np.float32 or x.ndim != 4 or w.ndim != 4 or not x.size or not w.size:
        return False
    if min(size) <= 0 or x.shape[1] // group == 1:
        return False
    return not stride_1 or 7 * (x.shape[1] // group) >= x.shape[2] * x.shape[3]


def _pointwise(
    w: np.ndarray,
    strides: list[int] | None,
    pads: list[int] | None,
    output_padding: list[int] | None,
    output_shape: list[int] | None,
) -> bool:
    """Whether a ConvTranspose is 1 x 1, stride 1, unpadded, its output the input's size (any
    ``auto_pad``: a 1-cell window at stride 1 pads nothing; dilations move no cell)."""
    if output_shape is not None or any(k != 1 for k in w.shape[2:]):
        return False
    return not any(s != 1 for s in strides or ()) and not any(pads or ()) and not any(output_padding or ())


def _conv_transpose_pointwise(x: np.ndarray, w: np.ndarray, group: int, into: np.ndarray | None = None) -> np.ndarray:
    """A 1 x 1 stride-1 unpadded transposed convolution: one batched matmul over groups,
    ``y[n, g, m] = w[g, :, m]^T x[n, g, :]``; on one ungrouped sample one matrix product,
    into ``into`` (the pool's buffer) when it fits."""
    n, c, mg = x.shape[0], w.shape[0], w.shape[1]
    cells = int(np.prod(x.shape[2:]))
    if n == 1 and group == 1 and x.dtype == w.dtype:
        shape = (1, mg, *x.shape[2:])
        y = None if into is None or np.may_share_memory(into, w) else lent(into, x.dtype, shape, x)
        y = np.empty(shape, x.dtype) if y is None else y
        np.matmul(w.reshape(c, mg).T, x.reshape(c, cells), out=y.reshape(mg, cells))
        return y
    wg = w.reshape(group, c // group, mg).swapaxes(1, 2)
    y = np.matmul(wg, x.reshape(n, group, c // group, cells))
    return y.reshape((n, group * mg, *x.shape[2:]))


def _dilate_input(x: np.ndarray, strides: Sequence[int]) -> np.ndarray:
    """``x`` with ``s - 1`` zeros between neighbours on each spatial axis: a stride-s
    transposed convolution is the stride-1 one of this (the zeros add nothing)."""
    if all(s == 1 for s in strides):
        return x
    up = np.zeros((*x.shape[:2], *[(i - 1) * s + 1 for i, s in zip(x.shape[2:], strides)]), dtype=x.dtype)
    up[(slice(None), slice(None), *[slice(None, None, s) for s in strides])] = x
    return up


def _conv_transpose_scatter(
    x: np.ndarray,
    w: np.ndarray,
    strides: list[int],
    dilations: list[int],
    group: int,
    begin: list[int],
    size: list[int],
) -> np.ndarray:
    """The numpy transposed convolution: one batched matmul over (samples, groups) gives a
    column per kernel offset, one strided scatter-add per offset folds them into the
    output (a depthwise one, one input channel per group, multiplies instead: no GEMM)."""
    nd = x.ndim - 2
    ksize, in_shape = list(w.shape[2:]), list(x.shape[2:])
    span = [(i - 1) * s + (k - 1) * d + 1 for i, s, k, d in zip(in_shape, strides, ksize, dilations)]
    n, c, mg = x.shape[0], x.shape[1], w.shape[1]
    cg, taps = c // group, int(np.prod(ksize))
    buf = np.zeros((n, group, mg, *span), dtype=x.dtype)
    xg = x.reshape(n, group, cg, *in_shape)
    wg = w.reshape(group, cg, mg, taps)
    if cg == 1:
        cols = None
    else:
        # (N, group, mg * taps, *in): (group, mg * taps, cg) @ (N, group, cg, prod(in))
        wt = wg.reshape(group, cg, mg * taps).swapaxes(1, 2)
        cols = np.matmul(wt, xg.reshape(n, group, cg, int(np.prod(in_shape)))).reshape(n, group, mg, taps, *in_shape)
    scale = (group, mg) + (1,) * nd
    for j, (_, sl) in enumerate(kernel_offsets(ksize, strides, dilations, in_shape)):
        target = buf[(slice(None), slice(None), slice(None), *sl)]
        if cols is None:
            target += xg * wg[:, 0, :, j].reshape(scale)
        else:
            target += cols[:, :, :, j]
    return _crop(buf.reshape(n, group * mg, *span), begin, size)


def _conv_transpose_as_conv(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None,
    dilations: list[int],
    group: int,
    begin: list[int],
    size: list[int],
    into: np.ndarray | None = None,
) -> np.ndarray | None:
    """A stride-1 transposed convolution as the convolution it is (None when an input
    or output is empty: the general path handles those); ``into``: the pool's buffer.

    Output cell t (after cropping ``begin``) is ``sum_k x[begin + t - k*d] w[k]``; with
    ``k' = K-1-k`` that is ``sum_k' x[t + k'*d - P] w[K-1-k']``, a convolution of x with
    the spatially flipped kernel (its in/out channel axes swapped per group) under the
    begin pad ``P = (K-1)*d - begin`` and the end pad that makes ``size`` outputs. A
    negative pad drops input cells instead (they are never read).
    """
    ksize = w.shape[2:]
    pad_begin, pad_end, crop = [], [], [slice(None), slice(None)]
    for i, k, d, b0, n_out in zip(x.shape[2:], ksize, dilations, begin, size):
        p = (k - 1) * d - b0
        e = n_out - i + b0
        crop.append(slice(max(-p, 0), i + min(e, 0)))
        pad_begin.append(max(p, 0))
        pad_end.append(max(e, 0))
        if n_out <= 0 or crop[-1].start >= crop[-1].stop:
            return None
    if not x.size or not w.size:
        return None
    return conv(
        x[tuple(crop)],
        conv_transpose_weights(w, group),  # (C, M/g, *k) -> (M, C/g, *k) per group, flipped
        b,
        dilations=dilations,
        group=group,
        pads=pad_begin + pad_end,
        out=into,
    )


@kernel("", "ConvTranspose", since=1, writes_out=True)
def conv_transpose_1(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None = None,
    *,
    auto_pad: str = "NOTSET",
    dilations: list[int] | None = None,
    group: int = 1,
    kernel_shape: list[int] | None = None,
    output_padding: list[int] | None = None,
    output_shape: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Transposed convolution, opset-1 split of imposed padding (extra cell at the start
    only for SAME_UPPER; ``out``: the pool's buffer, as in ``conv_transpose``)."""
    return _conv_transpose(
        x, w, b, auto_pad, dilations, group, output_padding, output_shape, pads, strides, legacy_transpose_split(1), out
    )


@kernel("", "ConvTranspose", since=(11, 22), writes_out=True)
def conv_transpose(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None = None,
    *,
    auto_pad: str = "NOTSET",
    dilations: list[int] | None = None,
    group: int = 1,
    kernel_shape: list[int] | None = None,
    output_padding: list[int] | None = None,
    output_shape: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Transposed convolution; ``w`` is ``(C, M / group, *kernel)``. ``out``: a buffer of the
    plan's pool (``KernelOptions.writes_out``), taken when the native conv runs it."""
    return _conv_transpose(
        x,
        w,
        b,
        auto_pad,
        dilations,
        group,
        output_padding,
        output_shape,
        pads,
        strides,
        legacy_transpose_split(11),
        out,
    )
