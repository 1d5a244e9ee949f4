"""What a Conv's data gradient (a ConvTranspose) runs as: the stride-1 Conv it equals.

A stride-1 transposed convolution is the convolution of its input with its weights
``(C, M/g, k...)`` flipped along every spatial axis and with the channel axes swapped per
group, ``(M, C/g, k...)``; ``conv_transpose_weights`` makes those weights (natively for
float32 4-D weights, ``src/conv_backward.cpp``: numpy's copy of the transposed view took as
long as the convolution itself; ``conv_transpose_weights_twin`` is its pure-Python twin).

A strided one split by output phase into ``prod(s)`` stride-1 convolutions of sub-kernels
``w[..., r::s]`` (no zeros multiplied) was measured and not taken: against the scatter path
(conv.py) it was 0.86x at 3x3/2 on 28 x 28 but 1.26x at 56 x 56, 1.3-1.7x at 1x1/2 and 2x2/2
(benchmarks/RESULTS.md, h-bwd).

A depthwise Conv's data gradient (a ConvTranspose with group C and weights ``(C, 1, kh, kw)``)
runs natively and directly, ``depthwise_conv_transpose`` (``src/conv_backward.cpp``): gathered
per output phase, no dilated input, no flipped weights; 1.3-2.3x faster than the stride-1 Conv
over the dilated input on MobileNetV3's layers. ``depthwise_conv_transpose_twin`` is its numpy
twin. (A direct weight gradient, one dot product per output cell over dY's plane, was
measured 1.6-3.8x slower than the native depthwise Conv the rule's correlation runs as, and
removed: benchmarks/RESULTS.md, h-bwd session 8.)

A dense 2-D float32 one whose weights outweigh its input map (ResNet-18's 256- and 512-channel
layers over 14 x 14 and 7 x 7 maps, every strided one) is ``conv_transpose_gemm``: one GEMM
``W^T X`` gives a column per kernel tap and input cell, ``col2im_f32`` folds them into the output
(natively, ``src/conv_backward.cpp``; ``col2im_f32_twin`` is its numpy twin): no flipped copy of
the weights, which costs as much as the convolution on a 7 x 7 map.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from onnx_light.runtime import _native

__all__ = [
    "col2im_f32",
    "col2im_f32_twin",
    "conv_transpose_gemm",
    "conv_transpose_weights",
    "conv_transpose_weights_twin",
    "depthwise_conv_transpose",
    "depthwise_conv_transpose_twin",
]


def conv_transpose_weights_twin(w: np.ndarray, group: int, out: np.ndarray | None = None) -> np.ndarray:
    """``flipped[g*Mg + m, c, k...] = w[g*Cg + c, m, K-1-k...]``: ConvTranspose weights
    ``(C, Mg, k...)`` as the weights ``(g*Mg, C/g, k...)`` of the Conv they amount to
    (written into ``out`` when given, an array of that shape and w's dtype)."""
    c, mg, ksize = w.shape[0], w.shape[1], w.shape[2:]
    cg = c // group
    swapped = w.reshape(group, cg, mg, *ksize).swapaxes(1, 2)
    flipped = swapped[(slice(None), slice(None), slice(None), *[slice(None, None, -1)] * len(ksize))]
    if out is None:
        return np.ascontiguousarray(flipped).reshape(group * mg, cg, *ksize)
    out.reshape(group, mg, cg, *ksize)[...] = flipped
    return out


#: per thread, the float32 scratch the flipped weights of a float32 ConvTranspose go into (a
#: fresh array of a deep layer's weights costs as much in page faults as the flip itself); it
#: is read only by the convolution that follows, so every call may overwrite it
_SCRATCH = threading.local()


def _scratch(shape: tuple[int, ...]) -> np.ndarray:
    size = int(np.prod(shape))
    buf: np.ndarray | None = getattr(_SCRATCH, "buf", None)
    if buf is None or buf.size < size:
        buf = np.empty(size, np.float32)
        _SCRATCH.buf = buf
    return buf[:size].reshape(shape)


def conv_transpose_weights(w: np.ndarray, group: int) -> np.ndarray:
    """``conv_transpose_weights_twin``, natively for float32 2-D kernels (``src/conv_backward.cpp``).

    A float32 result lives in a per-thread scratch buffer that the next call overwrites: read
    it before calling again (the convolution it feeds does).
    """
    if w.dtype != np.float32:
        return conv_transpose_weights_twin(w, group)
    out = _scratch((w.shape[1] * group, w.shape[0] // group, *w.shape[2:]))
    ext = _native.NATIVE
    if ext is not None and w.ndim == 4 and hasattr(ext, "conv_transpose_weights"):
        flipped: np.ndarray = ext.conv_transpose_weights(np.ascontiguousarray(w), group, out)
        return flipped
    return conv_transpose_weights_twin(w, group, out)


def _tap_cells(n_in: int, n_out: int, k: int, s: int, d: int, begin: int) -> tuple[slice, slice] | None:
    """The output cells ``t`` of one axis that tap ``k`` of a transposed convolution reaches,
    ``t + begin - k*d = i*s`` with ``0 <= i < n_in``, and the input cells ``i`` they read, as
    slices (None when there are none)."""
    first = -(begin - k * d)  # the t with i = 0
    lo = max(0, -(first // s))  # the smallest i whose t >= 0: ceil(-first / s)
    t0 = first + lo * s
    hi = min(n_in, (n_out - 1 - first) // s + 1) if n_out > 0 else 0
    if hi <= lo:
        return None
    return slice(t0, t0 + (hi - lo - 1) * s + 1, s), slice(lo, hi)


def depthwise_conv_transpose_twin(
    x: np.ndarray,
    w: np.ndarray,
    strides: Sequence[int],
    dilations: Sequence[int],
    begin: Sequence[int],
    size: Sequence[int],
) -> np.ndarray:
    """``y[n, c, t] = sum_k x[n, c, (t + begin - k*d) / s] w[c, 0, k]`` over the taps ``k`` whose
    index divides and lies in x: a 2-D ConvTranspose with group C and weights ``(C, 1, kh, kw)``,
    cropped by ``begin`` to ``size`` (no bias)."""
    y = np.zeros((*x.shape[:2], *size), dtype=x.dtype)
    (kh, kw), (h, wd) = w.shape[2:], x.shape[2:]
    for a in range(kh):
        rows = _tap_cells(h, size[0], a, strides[0], dilations[0], begin[0])
        for b in range(kw):
            cols = _tap_cells(wd, size[1], b, strides[1], dilations[1], begin[1])
            if rows is None or cols is None:
                continue
            y[:, :, rows[0], cols[0]] += x[:, :, rows[1], cols[1]] * w[:, 0, a, b][:, None, None]
    return y


def _native_f32(*arrays: np.ndarray) -> Any:
    """The extension when it has the depthwise kernels and every array is 4-D float32, else None."""
    ext = _native.NATIVE
    if ext is None or not hasattr(ext, "depthwise_conv_transpose"):
        return None
    return ext if all(a.dtype == np.float32 and a.ndim == 4 for a in arrays) else None


def _into(out: np.ndarray | None, shape: tuple[int, ...], *inputs: np.ndarray) -> np.ndarray | None:
    """``out`` when the native kernel may write it: C-contiguous float32 of ``shape``, no overlap."""
    if out is None or out.shape != shape or out.dtype != np.float32 or not out.flags.c_contiguous:
        return None
    if not out.flags.writeable or any(np.may_share_memory(out, a) for a in inputs):
        return None
    return out


def depthwise_conv_transpose(
    x: np.ndarray,
    w: np.ndarray,
    strides: Sequence[int],
    dilations: Sequence[int],
    begin: Sequence[int],
    size: Sequence[int],
    out: np.ndarray | None = None,
) -> np.ndarray | None:
    """``depthwise_conv_transpose_twin`` natively (``src/conv_backward.cpp``) for float32 2-D
    ConvTransposes with group = C and weights ``(C, 1, kh, kw)``; None otherwise. ``out``: the
    pool's buffer, written and returned when it fits."""
    ext = _native_f32(x, w)
    if ext is None or w.shape[0] != x.shape[1] or w.shape[1] != 1 or not x.size or min(size) <= 0:
        return None
    x, w = np.ascontiguousarray(x), np.ascontiguousarray(w)
    shape = (x.shape[0], x.shape[1], *size)
    y: np.ndarray = ext.depthwise_conv_transpose(
        x, w, list(strides), list(dilations), list(begin), list(size), _into(out, shape, x, w)
    )
    return y


def col2im_f32_twin(
    cols: np.ndarray,
    kh: int,
    kw: int,
    ih: int,
    iw: int,
    sh: int,
    sw: int,
    dh: int,
    dw: int,
    top: int,
    left: int,
    y: np.ndarray,
) -> np.ndarray:
    """``y[p, i*sh + a*dh - top, j*sw + b*dw - left] += cols[p, a*kw + b, i*iw + j]`` where that
    cell is in ``y`` (P, oh, ow), from zeros, one slice-add per tap (a, b) in kernel order."""
    y[...] = 0
    taps = cols.reshape(cols.shape[0], kh, kw, ih, iw)
    for a in range(kh):
        rows = _tap_cells(ih, y.shape[1], a, sh, dh, top)
        for b in range(kw):
            cells = _tap_cells(iw, y.shape[2], b, sw, dw, left)
            if rows is not None and cells is not None:
                y[:, rows[0], cells[0]] += taps[:, a, b, rows[1], cells[1]]
    return y


def col2im_f32(
    cols: np.ndarray,
    kh: int,
    kw: int,
    ih: int,
    iw: int,
    sh: int,
    sw: int,
    dh: int,
    dw: int,
    top: int,
    left: int,
    y: np.ndarray,
) -> np.ndarray:
    """:func:`col2im_f32_twin`, natively when selected (bitwise the same)."""
    ext = _native.NATIVE
    if ext is not None and hasattr(ext, "col2im_f32"):
        ext.col2im_f32(cols, kh, kw, ih, iw, sh, sw, dh, dw, top, left, y)
        return y
    return col2im_f32_twin(cols, kh, kw, ih, iw, sh, sw, dh, dw, top, left, y)


def conv_transpose_gemm(
    x: np.ndarray,
    w: np.ndarray,
    strides: Sequence[int],
    dilations: Sequence[int],
    group: int,
    begin: Sequence[int],
    size: Sequence[int],
    out: np.ndarray | None = None,
) -> np.ndarray:
    """A float32 2-D ConvTranspose (no bias) as ``cols = W^T X`` per (sample, group) and
    ``col2im_f32`` of the columns into the output cropped by ``begin`` to ``size``; ``out``:
    the pool's buffer, written and returned when it fits."""
    n, c, ih, iw = x.shape
    mg, kh, kw = w.shape[1:]
    cg = c // group
    # (group, mg * taps, cg) @ (n, group, cg, ih * iw): the weights' transposed view, no copy
    wt = w.reshape(group, cg, mg * kh * kw).swapaxes(1, 2)
    cols = np.matmul(wt, x.reshape(n, group, cg, ih * iw))
    shape = (n, group * mg, *size)
    y = _into(out, shape, x, w)
    if y is None:
        y = np.empty(shape, np.float32)
    col2im_f32(
        cols.reshape(n * group * mg, kh * kw, ih * iw),
        kh, kw, ih, iw, strides[0], strides[1], dilations[0], dilations[1], begin[0], begin[1],
        y.reshape(n * group * mg, *size),
    )  # fmt: skip
    return y
