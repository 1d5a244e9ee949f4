"""RoiAlign (10, 16, 22): bilinear samples averaged or maxed over each bin of each box.

Per box, the sample rows and columns are separable: each axis gets its two taps (index and
weight, zero for samples outside ``[-1, size]``), and the box is one row gather, one column
gather and a reduction over the sampling grid. The loop runs over boxes, never over pixels.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from onnx_light.runtime._registry import kernel


class _Axis(NamedTuple):
    low: np.ndarray  # (samples,) intp
    high: np.ndarray
    w_low: np.ndarray  # (samples,) float64, zero outside the map
    w_high: np.ndarray


def _samples(start: float, bin_size: float, bins: int, grid: int) -> np.ndarray:
    """Sample coordinates: ``grid`` evenly spaced points inside each of ``bins`` bins."""
    p = np.arange(bins)[:, None]
    i = np.arange(grid)[None, :]
    return (start + p * bin_size + (i + 0.5) * bin_size / grid).ravel()


def _axis(coords: np.ndarray, size: int) -> _Axis:
    """Bilinear taps along one axis, as the spec's reference clamps them."""
    outside = (coords < -1.0) | (coords > size)
    c = np.maximum(coords, 0.0)
    low = np.trunc(c).astype(np.int64)
    at_end = low >= size - 1
    low = np.where(at_end, size - 1, low)
    high = np.where(at_end, size - 1, low + 1)
    c = np.where(at_end, low, c)
    frac = c - low
    keep = ~outside
    return _Axis(low.astype(np.intp), high.astype(np.intp), (1 - frac) * keep, frac * keep)


def _one_box(
    img: np.ndarray,
    box: np.ndarray,
    out_hw: tuple[int, int],
    sampling_ratio: int,
    scale: float,
    half_pixel: bool,
    mode: str,
) -> np.ndarray:
    """(C, out_h, out_w) for one box ``[x1, y1, x2, y2]`` over ``img`` (C, H, W)."""
    offset = 0.5 if half_pixel else 0.0
    x1, y1, x2, y2 = (float(v) * scale - offset for v in box)
    roi_w, roi_h = x2 - x1, y2 - y1
    if not half_pixel:  # output_half_pixel: boxes at least one cell wide
        roi_w, roi_h = max(roi_w, 1.0), max(roi_h, 1.0)
    out_h, out_w = out_hw
    bin_h, bin_w = roi_h / out_h, roi_w / out_w
    grid_h = sampling_ratio if sampling_ratio > 0 else math.ceil(roi_h / out_h)
    grid_w = sampling_ratio if sampling_ratio > 0 else math.ceil(roi_w / out_w)
    c, h, w = img.shape
    if grid_h <= 0 or grid_w <= 0:
        return np.zeros((c, out_h, out_w), dtype=np.float64)
    ys = _axis(_samples(y1, bin_h, out_h, grid_h), h)
    xs = _axis(_samples(x1, bin_w, out_w, grid_w), w)
    if mode == "avg":
        rows = img[:, ys.low, :] * ys.w_low[:, None] + img[:, ys.high, :] * ys.w_high[:, None]
        vals = rows[:, :, xs.low] * xs.w_low + rows[:, :, xs.high] * xs.w_high
        return vals.reshape(c, out_h, grid_h, out_w, grid_w).sum(axis=(2, 4)) / max(grid_h * grid_w, 1)
    # max: the largest weighted corner of every sample (as onnxruntime and the reference do)
    corners = [
        img[:, yi, :][:, :, xi] * (wy[:, None] * wx[None, :])
        for yi, wy in ((ys.low, ys.w_low), (ys.high, ys.w_high))
        for xi, wx in ((xs.low, xs.w_low), (xs.high, xs.w_high))
    ]
    vals = np.maximum(np.maximum(corners[0], corners[1]), np.maximum(corners[2], corners[3]))
    return vals.reshape(c, out_h, grid_h, out_w, grid_w).max(axis=(2, 4))


def roi_align(
    x: np.ndarray,
    rois: np.ndarray,
    batch_indices: np.ndarray,
    *,
    half_pixel: bool,
    mode: str,
    output_height: int,
    output_width: int,
    sampling_ratio: int,
    spatial_scale: float,
) -> np.ndarray:
    """(num_rois, C, output_height, output_width) pooled features; see the module docstring."""
    if mode not in ("avg", "max"):
        raise ValueError(f"RoiAlign: mode must be avg or max, got {mode!r}")
    if x.ndim != 4 or rois.ndim != 2 or rois.shape[1] != 4 or batch_indices.shape != (rois.shape[0],):
        raise ValueError(
            f"RoiAlign: want X (N, C, H, W), rois (R, 4), batch_indices (R,); got {list(x.shape)}, "
            f"{list(rois.shape)}, {list(batch_indices.shape)}"
        )
    if output_height < 1 or output_width < 1:
        raise ValueError(f"RoiAlign: output_height and output_width must be >= 1, got {output_height}, {output_width}")
    idx = batch_indices.astype(np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= x.shape[0]):
        raise ValueError(f"RoiAlign: batch_indices must lie in [0, {x.shape[0]}), got {idx.tolist()}")
    work = x.astype(np.float64)
    out = np.zeros((rois.shape[0], x.shape[1], output_height, output_width), dtype=x.dtype)
    for r in range(rois.shape[0]):  # one vectorised pass per box
        out[r] = _one_box(
            work[idx[r]], rois[r], (output_height, output_width), sampling_ratio, spatial_scale, half_pixel, mode
        )
    return out


@kernel("", "RoiAlign", since=10)
def roi_align_10(
    x: np.ndarray,
    rois: np.ndarray,
    batch_indices: np.ndarray,
    *,
    mode: str = "avg",
    output_height: int = 1,
    output_width: int = 1,
    sampling_ratio: int = 0,
    spatial_scale: float = 1.0,
) -> np.ndarray:
    """RoiAlign-10: box corners taken as is (``output_half_pixel``), boxes at least 1x1."""
    return roi_align(
        x,
        rois,
        batch_indices,
        half_pixel=False,
        mode=mode,
        output_height=output_height,
        output_width=output_width,
        sampling_ratio=sampling_ratio,
        spatial_scale=spatial_scale,
    )


@kernel("", "RoiAlign", since=(16, 22))
def roi_align_16(
    x: np.ndarray,
    rois: np.ndarray,
    batch_indices: np.ndarray,
    *,
    coordinate_transformation_mode: str = "half_pixel",
    mode: str = "avg",
    output_height: int = 1,
    output_width: int = 1,
    sampling_ratio: int = 0,
    spatial_scale: float = 1.0,
) -> np.ndarray:
    """RoiAlign-16/22: ``coordinate_transformation_mode`` half_pixel or output_half_pixel."""
    if coordinate_transformation_mode not in ("half_pixel", "output_half_pixel"):
        raise ValueError(
            f"RoiAlign: coordinate_transformation_mode must be half_pixel or output_half_pixel, "
            f"got {coordinate_transformation_mode!r}"
        )
    return roi_align(
        x,
        rois,
        batch_indices,
        half_pixel=coordinate_transformation_mode == "half_pixel",
        mode=mode,
        output_height=output_height,
        output_width=output_width,
        sampling_ratio=sampling_ratio,
        spatial_scale=spatial_scale,
    )


def _round_half_away(v: float) -> int:
    return int(math.copysign(math.floor(abs(v) + 0.5), v))


@kernel("", "MaxRoiPool", since=(1, 22))
def max_roi_pool(x: np.ndarray, rois: np.ndarray, *, pooled_shape: list[int], spatial_scale: float = 1.0) -> np.ndarray:
    """MaxRoiPool: the max of each of ``pooled_shape`` bins of each box ``[batch, x1, y1, x2, y2]``.

    Box corners are rounded to cells (half away from zero) and the box split into bins
    ``[floor(i * bin), ceil((i + 1) * bin))`` clipped to the map; an empty bin gives 0.
    """
    if x.ndim != 4 or rois.ndim != 2 or rois.shape[1] != 5 or len(pooled_shape) != 2:
        raise ValueError(
            f"MaxRoiPool: want X (N, C, H, W), rois (R, 5) and pooled_shape of 2; got {list(x.shape)}, "
            f"{list(rois.shape)}, {pooled_shape}"
        )
    ph_n, pw_n = pooled_shape
    n, c, h, w = x.shape
    out = np.zeros((rois.shape[0], c, ph_n, pw_n), dtype=x.dtype)
    for r, (b, *corners) in enumerate(rois.astype(np.float64)):
        if not 0 <= int(b) < n:
            raise ValueError(f"MaxRoiPool: box {r} names batch {int(b)}, not in [0, {n})")
        x1, y1, x2, y2 = (_round_half_away(v * spatial_scale) for v in corners)
        bin_h, bin_w = max(y2 - y1 + 1, 1) / ph_n, max(x2 - x1 + 1, 1) / pw_n
        for i in range(ph_n):  # loops over the bins (pooled_shape), not over pixels
            top = min(max(math.floor(i * bin_h) + y1, 0), h)
            bottom = min(max(math.ceil((i + 1) * bin_h) + y1, 0), h)
            for j in range(pw_n):
                left = min(max(math.floor(j * bin_w) + x1, 0), w)
                right = min(max(math.ceil((j + 1) * bin_w) + x1, 0), w)
                if bottom > top and right > left:
                    out[r, :, i, j] = x[int(b), :, top:bottom, left:right].max(axis=(1, 2))
    return out
