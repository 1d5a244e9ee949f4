"""DeformConv (19, 22): convolution whose taps sample the input at learned fractional offsets.

For every kernel tap (``prod(kernel_shape)`` whole-array steps) the sampling positions of all
output pixels are computed at once, sampled bilinearly with zero padding (one gather per
corner), scaled by the mask, and the resulting columns contracted with the weights per group.
"""

from __future__ import annotations

import numpy as np

from onnx_light.runtime._registry import kernel


def _bilinear_zeros(img: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``img`` (N, C, H, W) sampled at (N, P) positions ``y``, ``x``; zero outside. Returns (N, C, P)."""
    n, c, h, w = img.shape
    flat = img.reshape(n, c, h * w)
    y0, x0 = np.floor(y), np.floor(x)
    out = np.zeros((n, c, y.shape[1]), dtype=img.dtype)
    for dy in (0, 1):
        for dx in (0, 1):
            yi, xi = y0 + dy, x0 + dx
            weight = (1 - np.abs(y - yi)) * (1 - np.abs(x - xi))
            valid = (yi >= 0) & (yi < h) & (xi >= 0) & (xi < w)
            idx = np.where(valid, yi * w + xi, 0).astype(np.intp)
            weight = np.where(valid, weight, 0.0).astype(img.dtype)
            out += np.take_along_axis(flat, idx[:, None, :], axis=2) * weight[:, None, :]
    return out


@kernel("", "DeformConv", since=(19, 22))
def deform_conv(
    x: np.ndarray,
    w: np.ndarray,
    offset: np.ndarray,
    b: np.ndarray | None = None,
    mask: np.ndarray | None = None,
    *,
    dilations: list[int] | None = None,
    group: int = 1,
    kernel_shape: list[int] | None = None,
    offset_group: int = 1,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> np.ndarray:
    """DeformConv: 2-D deformable convolution (offsets as (dy, dx) pairs per tap, optional mask)."""
    if x.ndim != 4:
        raise NotImplementedError(f"DeformConv: only 2-D inputs (N, C, H, W) are supported, got rank {x.ndim}")
    n, c, h, wd = x.shape
    oc = w.shape[0]
    kh, kw = kernel_shape or w.shape[2:]
    sh, sw = strides or [1, 1]
    dh, dw = dilations or [1, 1]
    pt, pl, pb, pr = pads or [0, 0, 0, 0]
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    taps = kh * kw
    if offset.shape != (n, offset_group * 2 * taps, oh, ow) or c % offset_group or c % group or oc % group:
        raise ValueError(
            f"DeformConv: offset of shape {list(offset.shape)} does not fit X {list(x.shape)}, W {list(w.shape)}: "
            f"want ({n}, {offset_group * 2 * taps}, {oh}, {ow}) and channels divisible by the groups"
        )
    if mask is not None and mask.shape != (n, offset_group * taps, oh, ow):
        raise ValueError(f"DeformConv: mask of shape {list(mask.shape)}, want ({n}, {offset_group * taps}, {oh}, {ow})")
    work = x.astype(np.float64) if x.dtype == np.float64 else x.astype(np.float32)
    base_y = (np.arange(oh) * sh - pt)[:, None] * np.ones((1, ow))
    base_x = np.ones((oh, 1)) * (np.arange(ow) * sw - pl)[None, :]
    cols = np.empty((n, c, taps, oh * ow), dtype=work.dtype)
    cg = c // offset_group
    off = offset.reshape(n, offset_group, taps, 2, oh * ow).astype(np.float64)
    for g in range(offset_group):
        img = work[:, g * cg : (g + 1) * cg]
        for k in range(taps):  # one whole-array sampling step per kernel tap
            i, j = divmod(k, kw)
            y = (base_y + i * dh).ravel()[None, :] + off[:, g, k, 0]
            xx = (base_x + j * dw).ravel()[None, :] + off[:, g, k, 1]
            sampled = _bilinear_zeros(img, y, xx)
            if mask is not None:
                sampled *= mask[:, g * taps + k].reshape(n, 1, oh * ow).astype(work.dtype)
            cols[:, g * cg : (g + 1) * cg, k] = sampled
    icg, ocg = c // group, oc // group
    cols_g = cols.reshape(n, group, icg * taps, oh * ow)
    w_g = w.reshape(group, ocg, icg * taps).astype(work.dtype)
    y_out = np.matmul(w_g[None], cols_g).reshape(n, oc, oh, ow)
    if b is not None:
        y_out = y_out + b.reshape(1, oc, 1, 1)
    return y_out.astype(x.dtype)
