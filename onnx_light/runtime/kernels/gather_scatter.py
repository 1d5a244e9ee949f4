"""Indexing kernels: Gather*, Scatter*, Compress and NonZero."""

from __future__ import annotations

import numpy as np

from onnx_light.runtime._native import scatter_add_flat
from onnx_light.runtime._registry import kernel
from onnx_light.runtime.kernels._axes import axis_index

_REDUCE = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


@kernel("", "Gather", since=(1, 11, 13))
def gather(data: np.ndarray, indices: np.ndarray, *, axis: int = 0) -> np.ndarray:
    """Gather: picks entries of ``data`` along ``axis``; negative indices count from the end.

    A scalar index picks one slab: a view of ``data`` (basic indexing), not a copy, so a
    Gather splitting Q, K and V out of one projection costs nothing (the readers of a view
    never write into it: see ``_codegen``).
    """
    if indices.ndim == 0 and data.ndim > 0:
        return data[(slice(None),) * axis_index(axis, data.ndim) + (int(indices), Ellipsis)]
    return np.take(data, indices.astype(np.int64), axis=axis)


@kernel("", "GatherElements", since=(11, 13))
def gather_elements(data: np.ndarray, indices: np.ndarray, *, axis: int = 0) -> np.ndarray:
    """GatherElements: ``out[i][j] = data[indices[i][j]][j]`` for ``axis`` 0 (and so on).

    The output has ``indices``' shape, which may be smaller than ``data``'s on the other
    axes: ``data`` is cut to it there first (numpy would broadcast instead).
    """
    if data.ndim == 1 and indices.ndim == 1:  # a flat gather (MaxPool's tangent): take is 2x faster
        return np.take(data, indices.astype(np.int64, copy=False))
    axis = axis_index(axis, data.ndim)
    cut = tuple(slice(None) if a == axis else slice(0, n) for a, n in enumerate(indices.shape))
    return np.take_along_axis(data[cut], indices.astype(np.int64), axis=axis)


def _gather_nd(data: np.ndarray, indices: np.ndarray, batch_dims: int) -> np.ndarray:
    batch_shape = data.shape[:batch_dims]
    n_batch = int(np.prod(batch_shape))
    flat_data = data.reshape((n_batch, *data.shape[batch_dims:]))
    flat_idx = indices.astype(np.int64).reshape((n_batch, *indices.shape[batch_dims:]))
    depth = indices.shape[-1]
    batch = np.arange(n_batch).reshape((n_batch,) + (1,) * (flat_idx.ndim - 2))
    picked = flat_data[(batch, *(flat_idx[..., i] for i in range(depth)))]
    tail = data.shape[batch_dims + depth :]
    return picked.reshape(batch_shape + indices.shape[batch_dims:-1] + tail)


@kernel("", "GatherND", since=11)
def gather_nd_11(data: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """GatherND-11: the last axis of ``indices`` addresses a slice of ``data``."""
    return _gather_nd(data, indices, 0)


@kernel("", "GatherND", since=(12, 13))
def gather_nd_12(data: np.ndarray, indices: np.ndarray, *, batch_dims: int = 0) -> np.ndarray:
    """GatherND-12: the first ``batch_dims`` axes are shared by data and indices."""
    return _gather_nd(data, indices, batch_dims)


def _scatter(out: np.ndarray, index: tuple[np.ndarray, ...], updates: np.ndarray, reduction: str) -> np.ndarray:
    if reduction == "none":
        out[index] = updates
    elif reduction in _REDUCE:
        _REDUCE[reduction].at(out, index, updates)
    else:
        raise ValueError(f"unknown reduction {reduction!r}")
    return out


def _scatter_elements(
    data: np.ndarray, indices: np.ndarray, updates: np.ndarray, axis: int, reduction: str
) -> np.ndarray:
    axis = axis_index(axis, data.ndim)
    if reduction == "add" and data.ndim == 1 and updates.shape == indices.shape:
        return scatter_add_flat(data.copy(), indices.astype(np.int64, copy=False), updates)
    index: list[np.ndarray] = list(np.indices(indices.shape, sparse=True))
    idx = indices.astype(np.int64)
    index[axis] = np.where(idx < 0, idx + data.shape[axis], idx)
    return _scatter(data.copy(), tuple(index), updates, reduction)


@kernel("", "Scatter", since=(9, 11))
def scatter_9(data: np.ndarray, indices: np.ndarray, updates: np.ndarray, *, axis: int = 0) -> np.ndarray:
    """Scatter-9 (and its deprecation marker, 11): ScatterElements-11 under its old name."""
    return _scatter_elements(data, indices, updates, axis, "none")


@kernel("", "ScatterElements", since=(11, 13))
def scatter_elements_11(data: np.ndarray, indices: np.ndarray, updates: np.ndarray, *, axis: int = 0) -> np.ndarray:
    """ScatterElements-11: writes ``updates`` at per-element ``indices`` along ``axis``."""
    return _scatter_elements(data, indices, updates, axis, "none")


@kernel("", "ScatterElements", since=(16, 18))
def scatter_elements_16(
    data: np.ndarray, indices: np.ndarray, updates: np.ndarray, *, axis: int = 0, reduction: str = "none"
) -> np.ndarray:
    """ScatterElements-16/18: ``reduction`` none, add, mul (16) and max, min (18)."""
    return _scatter_elements(data, indices, updates, axis, reduction)


def _scatter_nd(data: np.ndarray, indices: np.ndarray, updates: np.ndarray, reduction: str) -> np.ndarray:
    idx = indices.astype(np.int64)
    index = tuple(idx[..., i] for i in range(idx.shape[-1]))
    return _scatter(data.copy(), index, updates, reduction)


@kernel("", "ScatterND", since=(11, 13))
def scatter_nd_11(data: np.ndarray, indices: np.ndarray, updates: np.ndarray) -> np.ndarray:
    """ScatterND-11: writes ``updates`` at the slices addressed by ``indices``."""
    return _scatter_nd(data, indices, updates, "none")


@kernel("", "ScatterND", since=(16, 18))
def scatter_nd_16(data: np.ndarray, indices: np.ndarray, updates: np.ndarray, *, reduction: str = "none") -> np.ndarray:
    """ScatterND-16/18: ``reduction`` none, add, mul (16) and max, min (18)."""
    return _scatter_nd(data, indices, updates, reduction)


@kernel("", "Compress", since=(9, 11, 28))
def compress(x: np.ndarray, condition: np.ndarray, *, axis: int | None = None) -> np.ndarray:
    """Compress: keeps the slices along ``axis`` (or flat elements) where ``condition`` holds."""
    return np.compress(condition.astype(bool), x, axis=axis)


@kernel("", "NonZero", since=(9, 13))
def non_zero(x: np.ndarray) -> np.ndarray:
    """NonZero: the indices of the non-zero elements, one row per axis, as int64."""
    if x.ndim == 0:  # no axes to index: zero rows, one column if the scalar is non-zero
        return np.zeros((0, int(bool(x))), dtype=np.int64)
    return np.array(np.nonzero(x), dtype=np.int64)
