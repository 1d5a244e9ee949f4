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
"""

from __future__ import annotations

import threading

import numpy as np

from onnx_light.runtime import _native

__all__ = ["conv_transpose_weights", "conv_transpose_weights_twin"]


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
