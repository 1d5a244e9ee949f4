"""A grouped Conv whose kernels are one-hot (an im2col written as a Conv) as strided copies.

The weight gradient of a Conv (``onnx_extensions/gradient``) gathers every input window
with a Conv of ``group = C`` whose ``M`` output channels per input channel hold one-hot
``kh x kw`` kernels: output channel ``c * M + m`` is input channel ``c`` shifted by the
kernel offset of the ``m``-th one. Computed as a convolution, every output costs
``kh * kw`` multiply-adds by zero; here it is a copy of a strided view (16x32x31x31 to
16x288x29x29: one copy of a strided view instead of a 35 M-tap depthwise convolution). The result is the
convolution's exactly, for finite inputs (``0 * inf`` is NaN in the convolution: a
non-finite input keeps the convolution).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from onnx_light.runtime import _native

__all__ = ["one_hot_offsets", "one_hot_conv"]


def _fits(into: np.ndarray, shape: tuple[int, ...], x: np.ndarray) -> bool:
    """Whether the pool's buffer ``into`` may take the columns of ``x``: writeable, C-contiguous,
    ``x``'s dtype and ``shape``, not overlapping ``x``."""
    return (
        into.shape == shape
        and into.dtype == x.dtype
        and into.flags.c_contiguous
        and into.flags.writeable
        and not np.may_share_memory(into, x)
    )


def _native_columns(
    x: np.ndarray,
    offsets: Sequence[tuple[int, ...]],
    strides: Sequence[int],
    dilations: Sequence[int],
    begin: Sequence[int],
    out_shape: Sequence[int],
    into: np.ndarray | None,
) -> np.ndarray | None:
    """The columns of every tap in kernel order of a float32 2-D ``x`` natively (``src/conv_backward.cpp``
    ``im2col_f32``: row copies, no padded copy of ``x``; the strided view's copy below is its twin), or
    None when the extension is not selected or the taps are not the whole kernel in order."""
    ext = _native.NATIVE
    if ext is None or not hasattr(ext, "im2col_f32") or x.dtype != np.float32 or x.ndim != 4:
        return None
    kh, kw = (max(k[i] for k in offsets) + 1 for i in range(2))
    if list(offsets) != list(np.ndindex(kh, kw)):
        return None
    shape = (x.shape[0], x.shape[1] * kh * kw, *out_shape)
    y = into if into is not None and _fits(into, shape, x) else np.empty(shape, np.float32)
    ext.im2col_f32(np.ascontiguousarray(x), kh, kw, *strides, *dilations, *begin, y)
    return y


def one_hot_offsets(w: np.ndarray, group: int) -> list[tuple[int, ...]] | None:
    """The kernel offset of each of the ``M`` one-hot kernels per group, or None.

    Args:
        w: a Conv weight ``(group * M, 1, *kernel)``.
        group: the Conv's ``group`` (the input's channel count, one input channel per group).

    Returns:
        ``M`` offsets when every kernel holds a single 1 and zeros elsewhere and kernel
        ``m`` has its 1 at the same offset in every group; None otherwise.
    """
    if w.ndim < 3 or w.shape[1] != 1 or group < 1 or w.shape[0] % group or w.dtype.kind != "f" or not w.size:
        return None
    m = w.shape[0] // group
    flat = w.reshape(group, m, -1)
    pos = flat.argmax(axis=-1)
    if not (pos == pos[:1]).all():
        return None
    if np.count_nonzero(flat) != group * m or not (np.take_along_axis(flat, pos[..., None], -1) == 1).all():
        return None
    return [tuple(int(i) for i in np.unravel_index(int(p), w.shape[2:])) for p in pos[0]]


def one_hot_conv(
    x: np.ndarray,
    offsets: Sequence[tuple[int, ...]],
    strides: Sequence[int],
    dilations: Sequence[int],
    begin: Sequence[int],
    end: Sequence[int],
    out_shape: Sequence[int],
    into: np.ndarray | None = None,
) -> np.ndarray | None:
    """The one-hot grouped Conv of ``x`` (N, C, *spatial) as copies, or None for a non-finite ``x``.

    ``into``: a buffer of the plan's pool, written and returned when it is C-contiguous with
    the result's dtype and shape (and the taps are every tap of the kernel in order).

    Output channel ``c * M + m`` is ``x[:, c]`` (zero-padded by ``begin`` / ``end``) read
    at ``offsets[m] * dilations + out * strides``.
    """
    if not np.isfinite(np.add.reduce(x, axis=None)):  # NaN / inf, or a float overflow: convolve
        return None
    y = _native_columns(x, offsets, strides, dilations, begin, out_shape, into)
    if y is not None:
        return y
    if any(begin) or any(end):
        x = np.pad(x, [(0, 0), (0, 0), *zip(begin, end)])
    n, c, nd = x.shape[0], x.shape[1], x.ndim - 2
    kernel = [max(k[i] for k in offsets) + 1 for i in range(nd)]
    st = x.strides
    # (N, C, *kernel, *out): every window of every cell, a view; one copy takes the taps
    view = np.lib.stride_tricks.as_strided(
        x,
        (n, c, *kernel, *out_shape),
        (*st[:2], *[st[2 + i] * dilations[i] for i in range(nd)], *[st[2 + i] * strides[i] for i in range(nd)]),
        writeable=False,
    )
    shape = (n, c * len(offsets), *out_shape)
    if list(offsets) == list(np.ndindex(*kernel)):
        if into is not None and _fits(into, shape, x):
            np.copyto(into.reshape(view.shape), view)
            return into
        y = np.ascontiguousarray(view)  # every tap in kernel order (9 copies: 3.0 vs 1.8 ms)
    else:
        taps: tuple[slice | np.ndarray, ...] = (slice(None), slice(None))
        taps += tuple(np.array([k[i] for k in offsets]) for i in range(nd))
        y = view[taps]
    return y.reshape(shape)
