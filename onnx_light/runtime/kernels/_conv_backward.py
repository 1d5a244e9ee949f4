"""What a Conv's data gradient (a ConvTranspose) runs as: the stride-1 Conv it equals.

A stride-1 transposed convolution is the convolution of its input with its weights
``(C, M/g, k...)`` flipped along every spatial axis and with the channel axes swapped per
group, ``(M, C/g, k...)``; ``conv_transpose_weights`` makes those weights (natively for
float32 4-D weights, ``src/conv_backward.cpp``: numpy's copy of the transposed view took as
long as the convolution itself; ``conv_transpose_weights_twin`` is its pure-Python twin).

A stride-s one (dilation 1) splits by output phase: the output cells ``o`` with
``o % s == r`` (per axis) receive only the taps ``k = r + s j``, and over them it is the
stride-1 transposed convolution of the same input with the sub-kernel ``w[..., r::s]``. So
``conv_transpose_phases`` runs ``prod(s)`` stride-1 convolutions whose FLOPs add up to the
transposed convolution's own (no zeros multiplied, unlike the convolution of the input with
``s - 1`` zeros between neighbours) and writes each into its strided cells of the output.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np

from onnx_light.runtime import _native

__all__ = ["conv_transpose_phases", "conv_transpose_weights", "conv_transpose_weights_twin"]


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


#: the stride-1 transposed convolution of (x, w) cropped to (begin, size), or None where it
#: reads no input cell: ``_conv_transpose_as_conv`` in conv.py (its arguments: x, w, bias,
#: dilations, group, begin, size, into)
StrideOne = Callable[..., "np.ndarray | None"]


def conv_transpose_phases(
    x: np.ndarray,
    w: np.ndarray,
    strides: Sequence[int],
    group: int,
    begin: Sequence[int],
    size: Sequence[int],
    stride_one: StrideOne,
) -> np.ndarray:
    """The stride-``strides`` transposed convolution (dilation 1) cropped to ``begin``/``size``,
    as one stride-1 transposed convolution (``stride_one``) per output phase.

    Uncropped output cell ``o = i s + k`` (per axis); the phase ``r = o % s`` holds
    ``z[u] = sum_j x[u - j] w[r + s j]`` at ``o = r + s u``. Output cell ``t`` is uncropped
    ``begin + t``, so phase r's cells are ``t = t0 + s v`` with ``t0 = (r - begin) % s``, and
    they read ``z[u0 + v]`` with ``u0 = (begin + t0 - r) / s``: a stride-1 transposed
    convolution cropped at ``u0``. Every output cell belongs to exactly one phase.
    """
    nd = x.ndim - 2
    y = np.empty((x.shape[0], w.shape[1] * group, *size), dtype=x.dtype)
    for phase in np.ndindex(*strides):
        starts = [(r - b) % s for r, b, s in zip(phase, begin, strides)]
        counts = [(n - t0 + s - 1) // s for n, t0, s in zip(size, starts, strides)]
        if min(counts) <= 0:
            continue
        target = y[(slice(None), slice(None), *[slice(t0, None, s) for t0, s in zip(starts, strides)])]
        sub = w[(slice(None), slice(None), *[slice(r, None, s) for r, s in zip(phase, strides)])]
        z = None
        if sub.size:
            cropped = [(b + t0 - r) // s for b, t0, r, s in zip(begin, starts, phase, strides)]
            z = stride_one(x, np.ascontiguousarray(sub), None, [1] * nd, group, cropped, counts)
        if z is None:  # no tap (a stride above the kernel), or no input cell reaches these cells
            target[...] = 0
        else:
            target[...] = z
    return y
