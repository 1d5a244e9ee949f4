"""The native loops, or their pure-Python twins.

``onnx_light._native`` (C++, nanobind) is used when it was built and
``ONNX_LIGHT_PURE_PYTHON`` is not ``1``; every function here has a numpy twin with the
same signature and results, so the package works (and is tested) both ways.
"""

from __future__ import annotations

import atexit
import contextvars
import os
from types import ModuleType
from typing import Any

import numpy as np

from onnx_light.onnx_core.ops import output_size

__all__ = [
    "NATIVE",
    "EXTENSION",
    "RECURRENT",
    "CONV_THREADS",
    "DEFAULT_THREADS",
    "conv2d_native",
    "conv_epilogue_native",
    "gather_points",
    "gather_points_twin",
    "max_pool2d",
    "max_pool2d_twin",
    "max_pool2d_f32",
    "max_pool2d_f32_twin",
    "max_unpool_f32",
    "max_unpool_f32_twin",
    "layer_norm_rows_f32",
    "layer_norm_rows_f32_twin",
    "mean_rows_f32",
    "mean_rows_f32_twin",
    "pointwise_f32",
    "pointwise_f32_twin",
    "replicate2d",
    "replicate2d_twin",
    "sigmoid_f32",
    "sigmoid_f32_twin",
    "softmax_rows_f32",
    "softmax_rows_f32_twin",
    "where_f32",
    "where_f32_twin",
    "resample_axis",
    "resample_axis_twin",
    "scatter_add_flat",
    "scatter_add_flat_twin",
    "using_native",
]


def _import_extension() -> ModuleType | None:
    try:
        from .. import _native  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _native


#: the built extension, whatever ONNX_LIGHT_PURE_PYTHON says (tests compare it with the twins)
EXTENSION = _import_extension()
#: the extension when selected, else None (then every function runs its twin)
NATIVE = None if os.environ.get("ONNX_LIGHT_PURE_PYTHON", "") == "1" else EXTENSION


#: the extension runs threaded kernels on a persistent pool of helper threads
#: (``src/thread_pool.h``), stopped and joined at interpreter exit; its pooling, Sigmoid,
#: Softmax and resampling loops take ``threads`` too
THREAD_POOL = EXTENSION is not None and hasattr(EXTENSION, "thread_pool_shutdown")
if THREAD_POOL and EXTENSION is not None:
    atexit.register(EXTENSION.thread_pool_shutdown)


def _env_int(name: str, default: int) -> int:
    """A positive integer setting from the environment (benchmarks tune the thresholds below)."""
    try:
        return max(1, int(os.environ.get(name, default)))
    except ValueError:
        return default


#: the thread count of sessions not told one and of kernels called outside a session:
#: ``ONNX_LIGHT_THREADS`` (1 when unset: one thread stays the default on small shared machines;
#: the test suite runs its kernel tests with 2 as well)
DEFAULT_THREADS = min(_env_int("ONNX_LIGHT_THREADS", 1), 64)
#: the native kernels' thread count in this context (``InferenceSession``'s
#: ``intra_op_num_threads`` sets it while the session runs; DEFAULT_THREADS otherwise)
CONV_THREADS: contextvars.ContextVar[int] = contextvars.ContextVar("onnx_light_conv_threads", default=DEFAULT_THREADS)


#: output elements each worker of a pooling, Sigmoid, Softmax or resampling call must get
#: (fewer workers below that, down to one): the pool's cost of a call against the work it splits
_THREAD_MIN_ELEMENTS = _env_int("ONNX_LIGHT_THREAD_MIN_ELEMENTS", 1 << 15)


def _threads(size: int) -> dict[str, int]:
    """``threads=`` for a native loop (other than the convolution) of ``size`` output elements:
    the context's count when the pool runs it and the work is large enough (at most one worker
    per ``_THREAD_MIN_ELEMENTS``), else nothing."""
    threads = CONV_THREADS.get()
    if threads > 1 and THREAD_POOL and NATIVE is not None:
        threads = min(threads, size // _THREAD_MIN_ELEMENTS)
        if threads > 1:
            return {"threads": threads}
    return {}


def using_native() -> bool:
    """True when the native extension is loaded and selected."""
    return NATIVE is not None


def lent(out: Any, dtype: np.dtype, shape: tuple[int, ...], x: np.ndarray) -> np.ndarray | None:
    """``out`` when it is a writeable C-contiguous array of exactly ``dtype`` and ``shape`` that does
    not overlap ``x`` (a buffer of the runtime's pool, which a native loop writes into), else None."""
    if out.__class__ is not np.ndarray or out.dtype != dtype or out.shape != shape:
        return None
    if not (out.flags.c_contiguous and out.flags.writeable) or (out.size and np.may_share_memory(out, x)):
        return None
    return out


def max_pool2d_twin(
    xp: np.ndarray,
    kh: int,
    kw: int,
    sh: int,
    sw: int,
    dh: int,
    dw: int,
    oh: int,
    ow: int,
    pad_top: int,
    pad_left: int,
    height: int,
    width: int,
    storage_order: int,
    want_indices: bool,
    out: np.ndarray | None = None,
    indices_out: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """2-D max pooling of an NCHW array padded by ``pad_top``/``pad_left`` (and as far as the windows
    reach after): ``(y, indices or None)``.

    Only the input's cells count, never a pad: ties keep the first maximum in kernel order (a
    window whose cells all equal the pad value reports its first cell), a NaN makes the maximum
    NaN (the index stays the largest number's before it); a window with no input cell gives the
    dtype's lowest value and index ``-(width + 1)`` (column-major ``-(height + 1)``), as
    onnxruntime does. Indices are flat positions in the unpadded input (row-major, or
    column-major for ``storage_order`` 1) plus the offset of the (n, c) plane. ``out`` /
    ``indices_out``: the buffer pool's arrays, used (and returned) when :func:`lent` takes them.
    """
    n, c = xp.shape[:2]
    shape = (n, c, oh, ow)
    y = lent(out, xp.dtype, shape, xp)
    y = np.empty(shape, xp.dtype) if y is None else y
    idx = lent(indices_out, np.dtype(np.int64), shape, xp) if want_indices else None
    idx = np.empty(shape, np.int64) if want_indices and idx is None else idx
    low = np.finfo(xp.dtype).min if xp.dtype.kind == "f" else np.iinfo(xp.dtype).min
    y[...] = low
    if idx is not None:
        idx[...] = -(height + 1) if storage_order else -(width + 1)
    found = np.zeros((oh, ow), dtype=bool)  # whether an input cell of the window was seen
    rows = np.arange(oh)[:, None] * sh
    cols = np.arange(ow)[None, :] * sw
    for a in range(kh):
        for b in range(kw):
            tap = xp[:, :, a * dh : a * dh + (oh - 1) * sh + 1 : sh, b * dw : b * dw + (ow - 1) * sw + 1 : sw]
            r = rows + a * dh - pad_top
            q = cols + b * dw - pad_left
            inside = (r >= 0) & (r < height) & (q >= 0) & (q < width)
            first, later = inside & ~found, inside & found
            flat = np.broadcast_to(q * height + r if storage_order else r * width + q, (oh, ow))
            if idx is not None:
                np.copyto(idx, flat, where=first | (later & (tap > y)))
            np.copyto(y, np.where(first, tap, np.maximum(y, tap)), where=inside)
            found |= inside
    if idx is not None:
        idx += (np.arange(n * c, dtype=np.int64) * (height * width)).reshape(n, c, 1, 1)
    return y, idx


#: the dtypes of the native max_pool2d loops
_MAX_POOL2D_DTYPES = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int8), np.dtype(np.uint8))


def max_pool2d(*args: Any, **lent_out: Any) -> tuple[np.ndarray, np.ndarray | None]:
    """:func:`max_pool2d_twin`, natively when the extension is selected (float32/float64, int8/uint8);
    ``out`` / ``indices_out`` (keywords) as the twin takes them."""
    xp = args[0]
    if NATIVE is not None and xp.dtype in _MAX_POOL2D_DTYPES:
        return NATIVE.max_pool2d(np.ascontiguousarray(xp), *args[1:], **lent_out)
    return max_pool2d_twin(*args, **lent_out)


def max_pool2d_f32_twin(
    x: np.ndarray,
    kh: int,
    kw: int,
    sh: int,
    sw: int,
    dh: int,
    dw: int,
    oh: int,
    ow: int,
    pad_top: int,
    pad_left: int,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """2-D max pooling of an unpadded float32 NCHW array, no indices (``src/pool.cpp``'s twin).

    Separable: the maximum over the window's rows first, then over its columns (the native
    loop's order, so that even the sign of a zero maximum agrees);
    the padding (``pad_top``/``pad_left`` before, whatever the windows read after) is -inf, and
    a window with no input cell gives the lowest float (onnxruntime's answer). ``out``: the
    buffer pool's array, used (and returned) when :func:`lent` takes it.
    """
    n, c, h, w = x.shape
    if oh <= 0 or ow <= 0:
        return np.empty((n, c, max(oh, 0), max(ow, 0)), np.float32)
    hp = max((oh - 1) * sh + (kh - 1) * dh + 1, pad_top + h)
    wp = max((ow - 1) * sw + (kw - 1) * dw + 1, pad_left + w)
    xp = np.full((n, c, hp, wp), -np.inf, np.float32)
    xp[:, :, pad_top : pad_top + h, pad_left : pad_left + w] = x
    vmax = xp[:, :, 0 : (oh - 1) * sh + 1 : sh].copy()
    for a in range(1, kh):
        np.maximum(vmax, xp[:, :, a * dh : a * dh + (oh - 1) * sh + 1 : sh], out=vmax)
    y = lent(out, np.dtype(np.float32), (n, c, oh, ow), x)
    y = np.empty((n, c, oh, ow), np.float32) if y is None else y
    np.copyto(y, vmax[..., 0 : (ow - 1) * sw + 1 : sw])
    for b in range(1, kw):
        np.maximum(y, vmax[..., b * dw : b * dw + (ow - 1) * sw + 1 : sw], out=y)
    rows = _windows_reading_input(oh, sh, kh, dh, pad_top, h)
    cols = _windows_reading_input(ow, sw, kw, dw, pad_left, w)
    if not (rows.all() and cols.all()):
        y[:, :, ~rows, :] = np.finfo(np.float32).min
        y[:, :, :, ~cols] = np.finfo(np.float32).min
    return y


def _windows_reading_input(out: int, stride: int, kernel: int, dilation: int, pad: int, size: int) -> np.ndarray:
    """Along one axis, whether each of the ``out`` windows holds a cell of the input (not only padding)."""
    cells = np.arange(out)[:, None] * stride + np.arange(kernel) * dilation - pad
    return np.asarray(((cells >= 0) & (cells < size)).any(axis=1))


def max_pool2d_f32(
    x: np.ndarray,
    kh: int,
    kw: int,
    sh: int,
    sw: int,
    dh: int,
    dw: int,
    oh: int,
    ow: int,
    pad_top: int,
    pad_left: int,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """:func:`max_pool2d_f32_twin`, natively when the extension is selected."""
    if NATIVE is not None and hasattr(NATIVE, "max_pool2d_f32"):
        extra = _threads(x.shape[0] * x.shape[1] * oh * ow)
        return NATIVE.max_pool2d_f32(
            np.ascontiguousarray(x), kh, kw, sh, sw, dh, dw, oh, ow, pad_top, pad_left, out=out, **extra
        )
    return max_pool2d_f32_twin(x, kh, kw, sh, sw, dh, dw, oh, ow, pad_top, pad_left, out)


def max_unpool_f32_twin(x: np.ndarray, idx: np.ndarray, out: np.ndarray) -> bool:
    """MaxUnpool's flat scatter into a C-contiguous float32 ``out``: zeros, then ``out.flat[idx[i]] =
    x.flat[i]`` (float32 ``x``, int64 ``idx`` of one size); False, writing nothing, when an index
    is outside ``[0, out.size)``."""
    flat = idx.reshape(-1)
    if flat.size and (flat.min() < 0 or flat.max() >= out.size):
        return False
    out.fill(0)
    out.reshape(-1)[flat] = x.reshape(-1)
    return True


def max_unpool_f32(x: np.ndarray, idx: np.ndarray, out: np.ndarray) -> bool:
    """:func:`max_unpool_f32_twin`, natively (``src/native.cpp``, one pass; ``out`` partly written
    when it gives False) when selected."""
    if NATIVE is not None and hasattr(NATIVE, "max_unpool_f32"):
        return bool(NATIVE.max_unpool_f32(x, idx, out))
    return max_unpool_f32_twin(x, idx, out)


def mean_rows_f32_twin(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``y[p] = mean(x[p, :])`` for a C-contiguous float32 matrix ``x`` into the 1-D ``y``
    (numpy's pairwise sum, divided in float32: GlobalAveragePool's twin of ``src/pool.cpp``)."""
    np.add.reduce(x, axis=1, out=y)
    return np.divide(y, np.float32(x.shape[1]), out=y)


def mean_rows_f32(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """:func:`mean_rows_f32_twin`, natively when selected (bitwise the same: numpy's summation order)."""
    if NATIVE is not None and hasattr(NATIVE, "mean_rows_f32") and x.shape[1] > 0:
        NATIVE.mean_rows_f32(x, y)
        return y
    return mean_rows_f32_twin(x, y)


def scatter_add_flat_twin(y: np.ndarray, index: np.ndarray, u: np.ndarray) -> np.ndarray:
    """``y[index[i]] += u[i]`` in order of ``i``, in place, for 1-D ``y``, int64 ``index`` and
    ``u`` of ``y``'s dtype (negative indices count from the end): ScatterElements-add on a flat
    array, the gradient of a MaxPool whose windows overlap."""
    np.add.at(y, index, u)
    return y


def scatter_add_flat(y: np.ndarray, index: np.ndarray, u: np.ndarray) -> np.ndarray:
    """:func:`scatter_add_flat_twin`, natively when selected (the same additions in the same
    order; numpy's ``add.at`` ran 10x slower inside a CNN backward than alone: 10-15 ms on
    ResNet-18's stem pool)."""
    if (
        NATIVE is not None
        and hasattr(NATIVE, "scatter_add_flat")
        and y.dtype in (np.float32, np.float64)
        and u.dtype == y.dtype
        and index.dtype == np.int64
        and y.flags.c_contiguous
    ):
        NATIVE.scatter_add_flat(y, np.ascontiguousarray(index), np.ascontiguousarray(u))
        return y
    return scatter_add_flat_twin(y, index, u)


def replicate2d_twin(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``y[p, i, j] = x[p, i // kh, j // kw]`` for C-contiguous ``x`` (planes, h, w) into ``y``
    (planes, h * kh, w * kw) of the same dtype: nearest upsampling by whole factors."""
    p, h, w = x.shape
    kh, kw = y.shape[1] // h, y.shape[2] // w
    y.reshape(p, h, kh, w, kw)[...] = x[:, :, None, :, None]
    return y


def replicate2d(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """:func:`replicate2d_twin`, natively when selected (cells of 1, 2, 4 or 8 bytes, as bits)."""
    if NATIVE is not None and hasattr(NATIVE, "replicate2d") and x.dtype.itemsize in (1, 2, 4, 8) and x.size:
        bits = np.dtype(f"u{x.dtype.itemsize}")
        NATIVE.replicate2d(x.view(bits), y.view(bits), **_threads(y.size))
        return y
    return replicate2d_twin(x, y)


def layer_norm_rows_f32_twin(
    x: np.ndarray,
    scale: np.ndarray,
    bias: np.ndarray | None,
    epsilon: np.float32,
    y: np.ndarray,
    mean: np.ndarray | None = None,
    inv_std: np.ndarray | None = None,
) -> np.ndarray:
    """LayerNormalization of each row of a C-contiguous float32 matrix ``x`` into ``y``:
    ``(x - mean) * (1 / sqrt(var + epsilon)) * scale (+ bias)``, numpy's passes in their order
    (the native loop of ``src/elementwise.cpp`` gives the same bits); with ``mean`` and
    ``inv_std`` (C-contiguous float32, one value per row) each row's mean and
    ``1 / sqrt(var + epsilon)`` are written there too."""
    row_mean = x.mean(axis=1, keepdims=True)
    np.subtract(x, row_mean, out=y)
    row_inv_std = 1 / np.sqrt(np.multiply(y, y).mean(axis=1, keepdims=True) + epsilon)
    if mean is not None and inv_std is not None:
        mean[...] = row_mean[:, 0]
        inv_std[...] = row_inv_std[:, 0]
    np.multiply(y, row_inv_std, out=y)
    np.multiply(y, scale, out=y)
    return y if bias is None else np.add(y, bias, out=y)


def layer_norm_rows_f32(
    x: np.ndarray,
    scale: np.ndarray,
    bias: np.ndarray | None,
    epsilon: np.float32,
    y: np.ndarray,
    mean: np.ndarray | None = None,
    inv_std: np.ndarray | None = None,
) -> np.ndarray:
    """:func:`layer_norm_rows_f32_twin`, natively when selected (``scale``/``bias``: 1-D, one per column)."""
    if mean is not None and inv_std is not None:
        if NATIVE is not None and hasattr(NATIVE, "layer_norm_rows_stats_f32") and x.shape[1]:
            b = scale if bias is None else bias
            NATIVE.layer_norm_rows_stats_f32(x, scale, b, bias is not None, float(epsilon), y, mean, inv_std)
            return y
    elif NATIVE is not None and hasattr(NATIVE, "layer_norm_rows_f32") and x.shape[1]:
        NATIVE.layer_norm_rows_f32(x, scale, scale if bias is None else bias, bias is not None, float(epsilon), y)
        return y
    return layer_norm_rows_f32_twin(x, scale, bias, epsilon, y, mean, inv_std)


def sigmoid_f32_twin(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``y = 1 / (1 + exp(-x))`` for C-contiguous float32 arrays of one size (``y`` may be ``x``)."""
    np.negative(x, out=y)
    np.exp(y, out=y)
    np.add(y, np.float32(1), out=y)
    return np.divide(np.float32(1), y, out=y)


def softmax_rows_f32_twin(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Softmax of each row of a C-contiguous float32 matrix into ``y`` (which may be ``x``)."""
    np.subtract(x, np.maximum.reduce(x, axis=1, keepdims=True), out=y)
    np.exp(y, out=y)
    return np.divide(y, np.add.reduce(y, axis=1, keepdims=True), out=y)


#: float32 elements below which numpy's passes cost less than a native call
_ELEMENTWISE_MIN = 1024

#: the operations of a pointwise program (``enum PointwiseOp`` of ``src/elementwise.cpp``), by ufunc
POINTWISE_OPS: dict[np.ufunc, int] = {np.add: 0, np.subtract: 1, np.multiply: 2, np.divide: 3, np.sqrt: 4}
_POINTWISE_UFUNCS = {code: ufunc for ufunc, code in POINTWISE_OPS.items()}


def pointwise_f32_twin(inputs: list[np.ndarray], outputs: list[np.ndarray], code: np.ndarray, temps: int) -> None:
    """Runs a straight-line program of float32 operations (``code``: rows ``(op, dst, a, b)``).

    Register ``r`` is ``inputs[r]`` (C-contiguous float32, of the outputs' size or one value,
    broadcast), then ``outputs[r - len(inputs)]`` (C-contiguous float32, one size), then temporary
    ``r - len(inputs) - len(outputs)``; ``op`` is a key of ``POINTWISE_OPS`` (``sqrt`` reads ``a``
    only); ``dst`` is never an input. Each row is one numpy ufunc call, so the native loop
    (``src/elementwise.cpp``, block by block) gives the same bits.
    """
    n = outputs[0].size
    flat = [x.reshape(-1) if x.size == n else x.reshape(()) for x in inputs]
    regs: list[np.ndarray] = [*flat, *(o.reshape(-1) for o in outputs)]
    regs += [np.empty(n, np.float32) for _ in range(temps)]
    for op, dst, a, b in code.tolist():
        ufunc = _POINTWISE_UFUNCS[op]
        if ufunc.nin == 1:
            ufunc(regs[a], out=regs[dst])
        else:
            ufunc(regs[a], regs[b], out=regs[dst])


def pointwise_f32(inputs: list[np.ndarray], outputs: list[np.ndarray], code: np.ndarray, temps: int) -> None:
    """:func:`pointwise_f32_twin`, natively when selected."""
    if NATIVE is not None and hasattr(NATIVE, "pointwise_f32"):
        NATIVE.pointwise_f32(inputs, outputs, code, temps)
    else:
        pointwise_f32_twin(inputs, outputs, code, temps)


def where_f32_twin(cond: np.ndarray, x: np.ndarray, y: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``out = x where cond else y`` for a C-contiguous bool ``cond`` and float32 ``out`` of one
    size, ``x`` and ``y`` each C-contiguous float32 of that size or one value."""
    n = out.size
    np.copyto(
        out.reshape(-1),
        np.where(cond.reshape(-1), x.reshape(-1 if x.size == n else ()), y.reshape(-1 if y.size == n else ())),
    )
    return out


def where_f32(cond: np.ndarray, x: np.ndarray, y: np.ndarray, out: np.ndarray) -> np.ndarray:
    """:func:`where_f32_twin`, natively (``src/elementwise.cpp``) when selected and large enough
    (numpy's ``where`` with a broadcast operand takes ~3 ns per element, the native loop ~0.5)."""
    if NATIVE is not None and out.size >= _ELEMENTWISE_MIN and hasattr(NATIVE, "where_f32"):
        NATIVE.where_f32(cond, x, y, out)
        return out
    return where_f32_twin(cond, x, y, out)


def sigmoid_f32(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """:func:`sigmoid_f32_twin`, natively (``src/elementwise.cpp``) when selected and large enough."""
    if NATIVE is not None and x.size >= _ELEMENTWISE_MIN and hasattr(NATIVE, "sigmoid_f32"):
        NATIVE.sigmoid_f32(x, y, **_threads(x.size))
        return y
    return sigmoid_f32_twin(x, y)


def softmax_rows_f32(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """:func:`softmax_rows_f32_twin`, natively when selected and large enough."""
    if NATIVE is not None and x.size >= _ELEMENTWISE_MIN and hasattr(NATIVE, "softmax_rows_f32"):
        NATIVE.softmax_rows_f32(x, y, **_threads(x.size))
        return y
    return softmax_rows_f32_twin(x, y)


#: the native float32 RNN/GRU/LSTM step loop runs (``src/recurrent.cpp``; its twin is the numpy
#: step loop of ``runtime/kernels/recurrent.py``). It always wins where it applies: see
#: ``benchmarks/bench_recurrent.py`` (the numpy loop's per-step overhead of ~20 array ops).
RECURRENT = NATIVE is not None and hasattr(NATIVE, "recurrent")

#: the activation codes of the native convolution's epilogue (``enum Act`` in ``src/conv.h``)
ACT_RELU, ACT_CLIP, ACT_HARDSWISH, ACT_HARDSIGMOID, ACT_SILU, ACT_SIGMOID = 1, 2, 3, 4, 5, 6

#: the native float32 convolution runs (built, selected, and the CPU has AVX-512F or AVX2 + FMA)
CONV2D = NATIVE is not None and bool(NATIVE.conv2d_supported())
#: which of its kernels: the extension's default (AVX2 wherever the CPU has it: the kernels with
#: Winograd and packed weights, see ``conv2d_default_isa`` in ``src/conv.cpp``), or
#: ``ONNX_LIGHT_CONV_ISA`` (``avx512`` / ``avx2``; for tests and benchmarks on a machine that has both)
CONV_ISA = (
    (os.environ.get("ONNX_LIGHT_CONV_ISA") or getattr(NATIVE, "conv2d_default_isa", NATIVE.conv2d_isa)())
    if CONV2D and NATIVE is not None
    else ""
)
#: the CPU runs both tiles and no ``ONNX_LIGHT_CONV_ISA`` names one: :func:`conv2d_isa_for` picks per geometry
_ISA_PER_GEOMETRY = (
    CONV_ISA == "avx2"
    and not os.environ.get("ONNX_LIGHT_CONV_ISA")
    and NATIVE is not None
    and NATIVE.conv2d_isa() == "avx512"
)


def conv2d_isa_for(
    x_shape: tuple[int, ...],
    w_shape: tuple[int, ...],
    strides: list[int],
    dilations: list[int],
    begin: list[int],
    end: list[int],
    group: int,
    pixels: int,
) -> str:
    """The native conv2d's kernel for this 4-D geometry (``pixels`` = oh * ow): :data:`CONV_ISA`,
    but the 8 x 32 AVX-512 tile on a CPU that has it where it beats the AVX2 driver.

    Thread CPU per Conv of the real models, AVX-512 / AVX2 (``benchmarks/bench_conv_isa.py``, Zen 4):
    1 x 1 convolutions 0.75-0.92 (a few ties, 88 -> 24 at 28 x 28 1.24); larger windows read their
    panels in place (src/conv.cpp run_wrapped), whatever the outputs: 16 -> 16 3 x 3 at 80 x 80
    0.80, 3 -> 16 3 x 3 / 2 stems 0.67-0.86, 32 -> 32 at 40 x 40 0.58; Winograd F(2x2, 3x3) by the
    AVX-512 tile 0.78-1.01 (one process: 256 -> 256 at 20 x 20 0.78, 128 -> 128 at 40 x 40 0.86,
    64 -> 64 at 56 x 56 0.99, 64 -> 128 at 8 x 40 1.06). Depthwise 1.2-2.5 (the AVX2 phase planes)
    and 7 x 7 stems 0.95-1.11 stay on AVX2, as do 1 x 1 ones of fewer than 32 outputs (88 -> 24
    1.24; the other 16-output ones tie).
    """
    taps = w_shape[2] * w_shape[3]
    if not _ISA_PER_GEOMETRY or group != 1 or taps >= 49 or (taps == 1 and w_shape[0] < 32):
        return CONV_ISA
    return "avx512"


#: the extension's conv2d takes ``threads`` (an extension built before that option does not)
_CONV_TAKES_THREADS = CONV2D and NATIVE is not None and "threads:" in (NATIVE.conv2d.__doc__ or "")
#: the extension's conv2d takes ``out`` (the buffer pool's array; an older extension does not)
_CONV_TAKES_OUT = CONV2D and NATIVE is not None and "out: object" in (NATIVE.conv2d.__doc__ or "")
#: multiply-adds each worker of a threaded convolution must get (fewer workers below that, down
#: to one): ~20 us of one core's work, where handing items to the pool's spinning helper costs
#: about a microsecond and waking a sleeping one tens
_THREAD_MIN_MACS = _env_int("ONNX_LIGHT_THREAD_MIN_MACS", 1 << 19)


def conv_threads(macs: int) -> int:
    """The workers for a convolution of ``macs`` multiply-adds: the context's count
    (``intra_op_num_threads``), at most one per ``_THREAD_MIN_MACS``, at least one."""
    threads = CONV_THREADS.get()
    return max(1, min(threads, macs // _THREAD_MIN_MACS)) if threads > 1 else 1


#: output pixels per register tile of that kernel
_TILE = 32 if CONV_ISA == "avx512" else 16
_F32 = np.dtype(np.float32)


def _filled(n: int) -> float:
    """The fraction of the kernel's register tiles (32 pixels; 16 with AVX2) that ``n`` pixels fill."""
    return n / (_TILE * -(-n // _TILE))


def _native_conv_pays(
    x_shape: tuple[int, ...],
    w_shape: tuple[int, ...],
    strides: list[int],
    dilations: list[int],
    begin: list[int],
    end: list[int],
    group: int,
) -> bool:
    """Whether the native kernel beats im2col + OpenBLAS on this geometry.

    From ``benchmarks/bench_conv.py``. AVX2: see below. AVX-512 (measured on the kernel before
    its driver was blocked, not re-measured since: no AVX-512 machine): reading in place
    (column stride 1, output rows that fill 3/4 of the tiles) always won; packed panels win when the output
    pixels fill the tiles (a ResNet stem 3.4 vs 4.6 ms) but lose on 7x7 maps (49 pixels in
    64 lanes: 4.7 vs 3.6 ms) and when only some of the tile's 8 channel rows are used
    (grouped weights with one output channel per group); depthwise weights (one input and
    one output channel per group) have their own kernel, and tiny convolutions always win
    (numpy's fixed cost). Several outputs per input channel (the one-hot im2col Conv of the
    Conv gradient: 9) follow the general rules.
    """
    oh, ow = (
        output_size(size, k, s, d, b, e)
        for size, k, s, d, b, e in zip(x_shape[2:], w_shape[2:], strides, dilations, begin, end)
    )
    if oh <= 0 or ow <= 0:
        return False  # the numpy path reports the geometry error
    if w_shape[1] == 1 and w_shape[0] == group > 1:
        return True  # depthwise: its own kernel (0.46 vs 2.2 ms at stride 1, 0.26 vs 0.64 at stride 2)
    pointwise = w_shape[2] * w_shape[3] == 1 and group == 1 and strides == [1, 1] and not any(begin + end)
    if CONV_ISA == "avx2":
        # the blocked 6x16 tile (one packed copy of each kc x 256-pixel block) beats im2col +
        # OpenBLAS on every windowed or strided geometry of bench_conv.py (ResNet-18 3x3 at 56:
        # 4.0 vs 5.1 ms, stem 7x7/2 4.2 vs 6.1, 3x3 at 7: 4.8 vs 5.2); on a 1 x 1 it ties with
        # OpenBLAS's plain GEMM (64 -> 128 at 80 x 80: 2.8 vs 3.0 ms, 256 -> 64 at 56: 2.9 vs 2.9,
        # 16 -> 72 at 56: 0.20 vs 0.22) and fuses the epilogue, but loses on long reductions
        # (2048 -> 512 at 7: 3.2 vs 2.7) and on matrix-vector products (SE blocks on 1 x 1 maps)
        if pointwise:
            return oh * ow >= 16 and x_shape[1] <= 1024
        return w_shape[0] // group >= 3 or (w_shape[1] == 1 and w_shape[0] == group)
    if x_shape[0] * w_shape[0] * int(np.prod(w_shape[1:])) * oh * ow < 250_000:
        return True  # a few dozen microseconds: numpy's fixed cost dominates
    in_place = strides[1] == 1 and _filled(ow) >= 0.75
    return in_place or (w_shape[0] // group > 1 and _filled(oh * ow) >= 0.85)


def _conv2d_options(macs: int, winograd: np.ndarray | None, packed: np.ndarray | None = None) -> dict[str, Any]:
    """conv2d's keyword options: ``threads`` for a convolution of ``macs`` multiply-adds, ``winograd``,
    ``packed``."""
    extra: dict[str, Any] = {}
    threads = conv_threads(macs)
    if threads > 1 and _CONV_TAKES_THREADS:
        extra["threads"] = threads
    if winograd is not None:
        extra["winograd"] = winograd
    if packed is not None:
        extra["packed"] = packed
    return extra


def _conv2d_native_takes(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, begin: list[int], end: list[int]) -> bool:
    """Whether the extension's conv2d can run this convolution at all: 1-D or 2-D, float32,
    non-empty, no negative padding."""
    return (
        CONV2D
        and x.ndim - 2 in (1, 2)
        and x.dtype == _F32
        and w.dtype == _F32
        and (b is None or b.dtype == _F32)
        and x.size != 0
        and w.size != 0
        and min(begin + end) >= 0
    )


def conv2d_native(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None,
    strides: list[int],
    dilations: list[int],
    begin: list[int],
    end: list[int],
    group: int,
    relu: bool,
    act: int = 0,
    a: float = 0.0,
    b_act: float = 0.0,
    residual: np.ndarray | None = None,
    winograd: np.ndarray | None = None,
    into: np.ndarray | None = None,
    packed: np.ndarray | None = None,
) -> np.ndarray | None:
    """A float32 1-D or 2-D convolution (+ ReLU) by the extension, or None when it does not apply.

    ``act`` (with its parameters ``a``, ``b_act``) and ``residual`` are the epilogue of
    ``src/conv.h``: ``act(conv + residual)``, the residual a float32 array of the output's shape.
    ``winograd`` / ``packed``: the weights' Winograd transform / ``conv2d_pack_weights`` form kept
    by the caller (``kernels/conv.py``; 2-D only), or None. ``into``: a buffer of the plan's pool
    (``KernelOptions.writes_out``): a writeable C-contiguous float32 array of exactly the result's
    shape that overlaps no input gets the result and is returned; any other array is ignored (a
    new array, as without it). The twin is the numpy im2col convolution in
    ``runtime/kernels/conv.py``, which runs whenever this returns None.
    """
    nd = x.ndim - 2
    if not _conv2d_native_takes(x, w, b, begin, end):
        return None
    if nd == 1:
        x, w = x[:, :, None, :], w[:, :, None, :]
        strides, dilations, begin, end = [1, *strides], [1, *dilations], [0, *begin], [0, *end]
        residual = None if residual is None else residual[:, :, None, :]
    if not _native_conv_pays(x.shape, w.shape, strides, dilations, begin, end, group):
        return None
    out = tuple(
        output_size(size, k, s, d, b, e)
        for size, k, s, d, b, e in zip(x.shape[2:], w.shape[2:], strides, dilations, begin, end)
    )
    if residual is not None:
        if residual.dtype != _F32 or residual.shape != (x.shape[0], w.shape[0], *out):
            return None  # broadcast or another dtype: the caller adds it
    assert NATIVE is not None
    macs = x.shape[0] * w.size * out[0] * out[1]
    isa = conv2d_isa_for(x.shape, w.shape, strides, dilations, begin, end, group, out[0] * out[1])
    if isa != "avx2":
        packed = None  # the AVX2 driver's form (both drivers run Winograd)
    extra = _conv2d_options(macs, winograd if nd == 2 else None, packed if nd == 2 else None)
    if into is not None and _CONV_TAKES_OUT and into.flags.c_contiguous and into.dtype == _F32:
        if into.shape == (x.shape[0], w.shape[0], *out[2 - nd :]):
            extra["out"] = into.reshape(x.shape[0], w.shape[0], *out)  # 1-D: a 4-D view of it
    y = NATIVE.conv2d(
        np.ascontiguousarray(x),
        np.ascontiguousarray(w),
        None if b is None else np.ascontiguousarray(b.reshape(-1)),
        *strides,
        *dilations,
        *begin[:2],
        *end[:2],
        group,
        relu,
        isa,
        act,
        a,
        b_act,
        None if residual is None else np.ascontiguousarray(residual),
        **extra,
    )
    if "out" in extra and y is extra["out"]:
        return into
    return y[:, :, 0, :] if nd == 1 else y


#: the extension has the blocked transposed copy (src/transpose.cpp)
TRANSPOSE = NATIVE is not None and hasattr(NATIVE, "transpose_rows_f32")
#: its column bands go to the thread pool (an extension built before that option copies on one thread)
_TRANSPOSE_THREADS = TRANSPOSE and NATIVE is not None and "threads" in (NATIVE.transpose_rows_f32.__doc__ or "")
TRANSPOSE_MIN = 1 << 16  # smaller views: numpy's copy costs as little (yolo 85 x 100 heads: 0.016 vs 0.022 ms)


def contiguous_transposed(x: np.ndarray) -> np.ndarray | None:
    """A C-contiguous copy of ``x`` when ``x`` is a float32 view whose last two axes are those of
    a C-contiguous array swapped (a Transpose's view), by the extension's blocked copy; None
    otherwise (the caller's numpy copy, the twin, gives the same bits). Large views split their
    column bands over the context's threads (a copy: the same bits on any count)."""
    if not TRANSPOSE or x.__class__ is not np.ndarray or x.dtype is not _F32 or x.ndim < 2 or x.size < TRANSPOSE_MIN:
        return None
    t = x.swapaxes(-1, -2)
    if x.flags.c_contiguous or not t.flags.c_contiguous:
        return None
    assert NATIVE is not None
    y: np.ndarray = NATIVE.transpose_rows_f32(
        t.reshape(-1, t.shape[-2], t.shape[-1]), **(_threads(x.size) if _TRANSPOSE_THREADS else {})
    )
    return y.reshape(x.shape)


#: the extension has the resampling loops (an extension built before them lacks them)
RESAMPLE = NATIVE is not None and hasattr(NATIVE, "resample_axis")
_RESAMPLE_TYPES = (np.dtype(np.float32), np.dtype(np.float64))


def resample_axis_twin(x: np.ndarray, index: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """``y[o, i, :] = sum_k weight[i, k] * x[o, index[i, k], :]`` for ``x`` (outer, n_in, inner).

    ``index`` (n_out, taps) holds indices into axis 1, already inside it; ``weight`` has its
    shape and ``x``'s dtype. One whole-array gather per tap into a reused scratch buffer
    (taps whose weights are all zero are skipped).
    """
    out = np.empty((x.shape[0], index.shape[0], x.shape[2]), dtype=x.dtype)
    live = [k for k in range(index.shape[1]) if weight[:, k].any()]
    if not live:  # every weight zero (exclude_outside with nothing inside)
        out[...] = 0
        return out
    scratch = np.empty_like(out) if len(live) > 1 else out
    for n, k in enumerate(live):
        term = out if n == 0 else scratch
        np.take(x, index[:, k], axis=1, out=term, mode="clip")
        term *= weight[:, k].reshape(1, -1, 1)
        if n:
            out += term
    return out


def resample_axis(x: np.ndarray, index: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """:func:`resample_axis_twin`, natively when the extension is selected (float32/float64)."""
    if RESAMPLE and x.dtype in _RESAMPLE_TYPES:
        assert NATIVE is not None
        return NATIVE.resample_axis(
            np.ascontiguousarray(x),
            np.ascontiguousarray(index, dtype=np.int64),
            np.ascontiguousarray(weight, dtype=x.dtype),
            **_threads(x.shape[0] * index.shape[0] * x.shape[2]),
        )
    return resample_axis_twin(x, index, weight.astype(x.dtype, copy=False))


def gather_points_twin(x: np.ndarray, index: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """``y[b, c, p] = sum_k weight[k, b, p] * x[b, c, index[k, b, p]]`` for ``x`` (batch, channels, size).

    ``index`` (taps, batch, points) holds flat positions inside axis 2; ``weight`` has its
    shape and ``x``'s dtype. One gather of every channel per tap and batch item (taps whose
    weights are all zero are skipped).
    """
    taps, batch, points = index.shape
    out = np.zeros((batch, x.shape[1], points), dtype=x.dtype)
    scratch = np.empty((x.shape[1], points), dtype=x.dtype)
    for k in range(taps):
        if not weight[k].any():
            continue
        for b in range(batch):
            np.take(x[b], index[k, b], axis=1, out=scratch, mode="clip")
            scratch *= weight[k, b]
            out[b] += scratch
    return out


def gather_points(x: np.ndarray, index: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """:func:`gather_points_twin`, natively when the extension is selected (float32/float64)."""
    if RESAMPLE and x.dtype in _RESAMPLE_TYPES:
        assert NATIVE is not None
        return NATIVE.gather_points(
            np.ascontiguousarray(x),
            np.ascontiguousarray(index, dtype=np.int64),
            np.ascontiguousarray(weight, dtype=x.dtype),
        )
    return gather_points_twin(x, index, weight.astype(x.dtype, copy=False))


def conv_epilogue_native(y: np.ndarray, act: int, a: float, b_act: float, residual: np.ndarray | None) -> bool:
    """``y = act(y + residual)`` in place by the extension (the epilogue of a convolution that
    BLAS computed); False, with ``y`` untouched, when the extension cannot (the caller then runs
    the fused nodes' kernels)."""
    if not CONV2D or y.dtype != _F32 or not y.flags.c_contiguous or not y.flags.writeable:
        return False
    if residual is not None and (residual.dtype != _F32 or residual.shape != y.shape):
        return False
    assert NATIVE is not None
    NATIVE.conv_epilogue(y, act, a, b_act, None if residual is None else np.ascontiguousarray(residual), CONV_ISA)
    return True
