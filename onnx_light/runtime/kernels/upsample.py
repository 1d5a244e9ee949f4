"""Upsample (deprecated since opset 10 in favour of Resize): nearest and linear, per-axis scales.

Output size per axis is ``floor(dim * scale)``; output index ``o`` reads input coordinate
``o / scale`` (Resize's "asymmetric" transform): the floor of it for ``nearest``, a linear
blend of its two neighbours (the last one clamped) for ``linear``/``bilinear``.
"""

from __future__ import annotations

import numpy as np

from .._registry import kernel


def _nearest(x: np.ndarray, axis: int, scale: float) -> np.ndarray:
    out = int(np.floor(x.shape[axis] * scale))
    source = np.minimum(np.floor(np.arange(out) / scale).astype(np.int64), x.shape[axis] - 1)
    return np.take(x, source, axis=axis)


def _linear(x: np.ndarray, axis: int, scale: float) -> np.ndarray:
    dim = x.shape[axis]
    out = int(np.floor(dim * scale))
    coord = np.minimum(np.arange(out) / scale, dim - 1)
    low = np.floor(coord).astype(np.int64)
    high = np.minimum(low + 1, dim - 1)
    shape = [1] * x.ndim
    shape[axis] = out
    w = (coord - low).reshape(shape)
    blended = np.take(x, low, axis=axis) * (1 - w) + np.take(x, high, axis=axis) * w
    return blended.astype(x.dtype, copy=False)


def _upsample(x: np.ndarray, scales: list[float], mode: str) -> np.ndarray:
    if len(scales) != x.ndim:
        raise ValueError(f"Upsample: {len(scales)} scales for an input of rank {x.ndim}")
    if any(s < 1 for s in scales):
        raise ValueError(f"Upsample: scales must be >= 1, got {scales}")
    if mode == "nearest":
        step = _nearest
    elif mode in ("linear", "bilinear"):
        step = _linear
    else:
        raise ValueError(f"Upsample: mode must be 'nearest' or 'linear', got {mode!r}")
    for axis, s in enumerate(scales):
        if s != 1:
            x = step(x, axis, float(s))
    return x


@kernel("", "Upsample", since=1)
def upsample_1(x: np.ndarray, *, height_scale: float, width_scale: float, mode: str = "nearest") -> np.ndarray:
    """Upsample-1: a 4-D input scaled by ``height_scale`` and ``width_scale`` on its last two axes."""
    return _upsample(x, [1.0, 1.0, height_scale, width_scale], mode)


@kernel("", "Upsample", since=7)
def upsample_7(x: np.ndarray, *, scales: list[float], mode: str = "nearest") -> np.ndarray:
    """Upsample-7: one scale per axis, as an attribute."""
    return _upsample(x, scales, mode)


@kernel("", "Upsample", since=(9, 10))
def upsample_9(x: np.ndarray, scales: np.ndarray, *, mode: str = "nearest") -> np.ndarray:
    """Upsample-9 (and its deprecation marker, 10): one scale per axis, as an input."""
    return _upsample(x, np.asarray(scales, dtype=np.float64).reshape(-1).tolist(), mode)
