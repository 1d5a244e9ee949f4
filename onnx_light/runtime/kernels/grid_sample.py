"""GridSample (opsets 16, 20, 22) and AffineGrid (20): sampling an image at given coordinates.

``grid[n, *out, :]`` holds normalised coordinates in ``[-1, 1]``, innermost spatial axis first
(x = W, y = H, z = D). Per spatial axis the kernel computes, for every output point at once,
the filter taps' input indices, weights and validity; the result is the sum over the tap
combinations (1, 2**d or 4**d of them) of the weight product times X at the combination's
flat index, channels first as X is (no transposes): one native loop over points, taps and
channels, or its numpy twin (one whole-image gather per tap and batch item). No Python loop
runs over pixels.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from onnx_light.runtime._native import gather_points
from onnx_light.runtime._registry import kernel

_CUBIC_A = -0.75
_MODE_NAMES = {"bilinear": "linear", "bicubic": "cubic", "linear": "linear", "cubic": "cubic", "nearest": "nearest"}
_PADDING = ("zeros", "border", "reflection")


class Taps(NamedTuple):
    """One spatial axis: per output point and tap, the (clamped) index, weight and validity."""

    indices: np.ndarray  # (taps, points) intp: taps first, so numpy's loops run over points
    weight: np.ndarray  # (taps, points) float64, zero where the tap reads zero padding


def _fail(message: str) -> ValueError:
    return ValueError(f"GridSample: {message}")


def denormalise(g: np.ndarray, size: int, align_corners: bool) -> np.ndarray:
    """Pixel coordinate of normalised ``g``: -1 and 1 are the corner centres or the outer edges."""
    if align_corners:
        return (g + 1) / 2 * (size - 1)
    return ((g + 1) * size - 1) / 2


def reflect(v: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """``v`` mirrored at ``lo`` and ``hi`` until it lies between them."""
    span = hi - lo
    if span <= 0:
        return np.full_like(v, lo)
    below = v < lo
    dx = np.where(below, lo - v, v - hi)
    n = np.floor(dx / span)
    r = dx - n * span
    even = n % 2 == 0
    inside = np.where(below, np.where(even, lo + r, hi - r), np.where(even, hi - r, lo + r))
    return np.where((v < lo) | (v > hi), inside, v)


def _cubic(d: np.ndarray) -> np.ndarray:
    a = _CUBIC_A
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def axis_taps(g: np.ndarray, size: int, mode: str, padding_mode: str, align_corners: bool) -> Taps:
    """Taps of one spatial axis for normalised coordinates ``g`` (flattened points)."""
    # in the grid's own precision, as onnxruntime and onnx's reference do: ties of the
    # nearest mode (x.5) must round alike
    x = denormalise(g, size, align_corners).astype(np.float64)
    lo, hi = (0.0, size - 1.0) if align_corners else (-0.5, size - 0.5)
    if mode == "nearest":
        x = np.rint(x)
    if padding_mode == "border" and mode != "cubic":  # cubic clamps each tap instead
        x = np.where((x < lo) | (x > hi), np.clip(x, 0, size - 1), x)
    elif padding_mode == "reflection":
        x = reflect(x, lo, hi)
    if mode == "nearest":
        idx = np.trunc(x).astype(np.int64)[None, :]
        w = np.ones(idx.shape)
    else:
        i0 = np.floor(x)
        t = x - i0
        offsets = np.arange(2) if mode == "linear" else np.arange(-1, 3)
        idx = i0.astype(np.int64)[None, :] + offsets[:, None]
        d = offsets[:, None] - t[None, :]
        w = 1 - np.abs(d) if mode == "linear" else _cubic(d)
        if padding_mode == "border":
            idx = np.clip(idx, 0, size - 1)
        elif padding_mode == "reflection":
            idx = np.trunc(reflect(idx.astype(np.float64), lo, hi)).astype(np.int64)
    valid = (idx >= 0) & (idx < size)
    return Taps(np.where(valid, idx, 0).astype(np.intp), np.where(valid, w, 0.0))


def grid_sample(
    x: np.ndarray, grid: np.ndarray, mode: str = "linear", padding_mode: str = "zeros", align_corners: int = 0
) -> np.ndarray:
    """Samples ``x`` (N, C, *spatial) at ``grid`` (N, *out, d); returns (N, C, *out)."""
    if mode not in _MODE_NAMES:
        raise _fail(f"mode must be one of {sorted(_MODE_NAMES)}, got {mode!r}")
    if padding_mode not in _PADDING:
        raise _fail(f"padding_mode must be one of {_PADDING}, got {padding_mode!r}")
    spatial = x.shape[2:]
    nd = len(spatial)
    if grid.ndim != nd + 2 or grid.shape[-1] != nd or grid.shape[0] != x.shape[0]:
        raise _fail(f"grid of shape {list(grid.shape)} does not fit X of shape {list(x.shape)}: want (N, *out, {nd})")
    n, c = x.shape[:2]
    out_spatial = grid.shape[1:-1]
    if x.size == 0 or grid.size == 0:
        return np.zeros((n, c, *out_spatial), dtype=x.dtype)
    points = grid.reshape(n, -1, nd)
    taps = [
        axis_taps(points[..., nd - 1 - i].ravel(), size, _MODE_NAMES[mode], padding_mode, bool(align_corners))
        for i, size in enumerate(spatial)
    ]
    work = np.float64 if x.dtype == np.float64 else np.float32
    # channels first, as X is: every point's taps (the product of the axes' taps) as flat
    # indices and weights, then one weighted gather of every channel (native loop or numpy
    # twin, runtime/_native.py)
    strides = np.cumprod((1, *spatial[::-1]))[:-1][::-1]
    index = taps[0].indices * int(strides[0])
    weight = taps[0].weight
    for t, stride in zip(taps[1:], strides[1:]):
        index = (index[:, None, :] + t.indices[None, :, :] * int(stride)).reshape(-1, index.shape[1])
        weight = (weight[:, None, :] * t.weight[None, :, :]).reshape(-1, weight.shape[1])
    planes = x.reshape(n, c, -1).astype(work, copy=False)
    k = index.shape[0]
    out = gather_points(planes, index.reshape(k, n, -1), weight.reshape(k, n, -1).astype(work))
    return out.reshape(n, c, *out_spatial).astype(x.dtype, copy=False)


@kernel("", "GridSample", since=16)
def grid_sample_16(
    x: np.ndarray, grid: np.ndarray, *, align_corners: int = 0, mode: str = "bilinear", padding_mode: str = "zeros"
) -> np.ndarray:
    """GridSample-16: 4-D input; modes bilinear, nearest, bicubic."""
    if mode not in ("bilinear", "nearest", "bicubic"):
        raise _fail(f"opset 16 mode must be bilinear, nearest or bicubic, got {mode!r}")
    return grid_sample(x, grid, mode, padding_mode, align_corners)


@kernel("", "GridSample", since=(20, 22))
def grid_sample_20(
    x: np.ndarray, grid: np.ndarray, *, align_corners: int = 0, mode: str = "linear", padding_mode: str = "zeros"
) -> np.ndarray:
    """GridSample-20/22: N-D input; modes linear, nearest, cubic."""
    if mode not in ("linear", "nearest", "cubic"):
        raise _fail(f"mode must be linear, nearest or cubic, got {mode!r}")
    return grid_sample(x, grid, mode, padding_mode, align_corners)


def base_coords(size: int, align_corners: bool) -> np.ndarray:
    """Evenly spaced normalised positions along one axis (0 for a single position)."""
    if size <= 1:  # one position: the centre, or with align_corners the (coinciding) corner -1
        return np.full(max(size, 0), -1.0 if align_corners else 0.0)
    pos = np.linspace(-1.0, 1.0, size)
    return pos if align_corners else pos * (size - 1) / size


@kernel("", "AffineGrid", since=20)
def affine_grid(theta: np.ndarray, size: np.ndarray, *, align_corners: int = 0) -> np.ndarray:
    """AffineGrid-20: ``grid[n, ..., :] = theta[n] @ (x, y[, z], 1)`` over the base grid of ``size``."""
    dims: Sequence[int] = [int(v) for v in np.asarray(size).ravel()]
    nd = len(dims) - 2
    if nd not in (2, 3) or theta.shape != (dims[0], nd, nd + 1):
        raise ValueError(
            f"AffineGrid: theta of shape {list(theta.shape)} and size {list(dims)} do not fit: "
            "want size (N, C, H, W) with theta (N, 2, 3), or (N, C, D, H, W) with (N, 3, 4)"
        )
    axes = [base_coords(d, bool(align_corners)) for d in dims[2:]]  # D, H, W order
    mesh = np.meshgrid(*axes, indexing="ij")
    homo = np.stack([*mesh[::-1], np.ones_like(mesh[0])], axis=-1)  # (*spatial, nd + 1), x first
    grid = np.einsum("...k,njk->n...j", homo, theta.astype(np.float64))
    return grid.astype(theta.dtype)
