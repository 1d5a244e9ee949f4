"""Ops that reorder, deduplicate or place slices: ReverseSequence, Unique, TensorScatter, CenterCropPad."""

from __future__ import annotations

import numpy as np

from .._registry import kernel
from ._axes import axes_index, axis_index


@kernel("", "ReverseSequence", since=(10, 28))
def reverse_sequence(
    x: np.ndarray, sequence_lens: np.ndarray, *, batch_axis: int = 1, time_axis: int = 0
) -> np.ndarray:
    """ReverseSequence: for each batch entry b, reverses its first ``sequence_lens[b]`` time steps."""
    lens = np.asarray(sequence_lens).astype(np.int64).reshape(-1)
    batch, steps = x.shape[batch_axis], x.shape[time_axis]
    if lens.shape[0] != batch or (lens < 0).any() or (lens > steps).any():
        raise ValueError(f"ReverseSequence: sequence_lens {lens.tolist()} must hold {batch} lengths in [0, {steps}]")
    # source time index per (batch, time): reversed below the length, unchanged above it
    t = np.arange(steps)[None, :]
    n = lens[:, None]
    source = np.where(t < n, n - 1 - t, t)
    moved = np.moveaxis(x, (batch_axis, time_axis), (0, 1))
    out = moved[np.arange(batch)[:, None], source]
    return np.moveaxis(out, (0, 1), (batch_axis, time_axis))


@kernel("", "Unique", since=(11, 28))
def unique(
    x: np.ndarray, *, axis: int | None = None, sorted: int = 1
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Unique: the distinct elements (or slices along ``axis``) with first indices, inverse and counts.

    ``sorted=1`` orders them ascending (slices lexicographically); ``sorted=0`` keeps the order
    of first occurrence.
    """
    if axis is not None:
        axis = axis_index(axis, x.ndim)
    y, first, inverse, counts = np.unique(x, return_index=True, return_inverse=True, return_counts=True, axis=axis)
    inverse = inverse.reshape(-1)
    if not sorted:
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        y = np.take(y, order, axis=0 if axis is None else axis)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    as_int64 = [a.astype(np.int64) for a in (first, inverse, counts)]
    return y, as_int64[0], as_int64[1], as_int64[2]


@kernel("", "TensorScatter", since=24)
def tensor_scatter(
    past_cache: np.ndarray,
    update: np.ndarray,
    write_indices: np.ndarray | None = None,
    *,
    axis: int = -2,
    mode: str = "linear",
) -> np.ndarray:
    """TensorScatter: writes ``update`` into a copy of the cache along ``axis``, per batch entry
    from ``write_indices[b]`` on (0 when omitted); ``mode="circular"`` wraps modulo the cache length."""
    if mode not in ("linear", "circular"):
        raise ValueError(f"TensorScatter: mode must be 'linear' or 'circular', got {mode!r}")
    axis = axis_index(axis, past_cache.ndim)
    if axis == 0:
        raise ValueError("TensorScatter: axis must not be the batch axis 0")
    max_len, seq_len = past_cache.shape[axis], update.shape[axis]
    batch = past_cache.shape[0]
    starts = np.zeros(batch, np.int64) if write_indices is None else np.asarray(write_indices).astype(np.int64)
    out = past_cache.copy()
    for b in range(batch):
        index = starts[b] + np.arange(seq_len)
        if mode == "circular":
            index %= max_len
        elif seq_len and (starts[b] < 0 or index[-1] >= max_len):
            raise ValueError(
                f"TensorScatter: batch {b} writes positions {starts[b]}..{index[-1]}, beyond the cache length {max_len}"
            )
        np.moveaxis(out[b], axis - 1, 0)[index] = np.moveaxis(update[b], axis - 1, 0)
    return out


@kernel("", "CenterCropPad", since=18)
def center_crop_pad(x: np.ndarray, shape: np.ndarray, *, axes: list[int] | None = None) -> np.ndarray:
    """CenterCropPad: crops (window start rounded down) or zero-pads (extra pixel on the right)
    each of ``axes`` to ``shape``, centred."""
    axes = axes_index(axes if axes is not None else range(x.ndim), x.ndim)
    sizes = np.asarray(shape).astype(np.int64).reshape(-1).tolist()
    if len(sizes) != len(axes):
        raise ValueError(f"CenterCropPad: shape {sizes} must hold one size per axis of {axes}")
    target = list(x.shape)
    src: list[slice] = [slice(None)] * x.ndim
    dst: list[slice] = [slice(None)] * x.ndim
    for a, size in zip(axes, sizes):
        dim = x.shape[a]
        target[a] = size
        if dim >= size:
            start = (dim - size) // 2
            src[a] = slice(start, start + size)
        else:
            start = (size - dim) // 2
            dst[a] = slice(start, start + dim)
    out = np.zeros(target, dtype=x.dtype)
    out[tuple(dst)] = x[tuple(src)]
    return out
