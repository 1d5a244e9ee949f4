"""Shape and layout kernels: Shape, Size, Reshape, Flatten, (Un)Squeeze, Transpose, Slice, ..."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from onnx_light.runtime import _native
from onnx_light.runtime._registry import kernel
from onnx_light.runtime.kernels._axes import axes_index


@kernel("", "Shape", since=(1, 13), reads_only_shape=True)
def shape_1(x: np.ndarray) -> np.ndarray:
    """Shape-1: the dimensions of ``x`` as int64."""
    return np.array(x.shape, dtype=np.int64)


@kernel("", "Shape", since=(15, 19, 21, 23, 24, 25), reads_only_shape=True)
def shape_15(x: np.ndarray, *, start: int = 0, end: int | None = None) -> np.ndarray:
    """Shape-15: the dimensions ``start:end`` (clamped, negatives from the back)."""
    return np.array(x.shape[start:end], dtype=np.int64)


@kernel("", "Size", since=(1, 13, 19, 21, 23, 24, 25), reads_only_shape=True)
def size(x: np.ndarray) -> np.ndarray:
    """Size: the element count as an int64 scalar."""
    return np.array(x.size, dtype=np.int64)


def _reshape(x: np.ndarray, shape: np.ndarray, allowzero: int) -> np.ndarray:
    dims = [int(d) for d in shape.tolist()] if isinstance(shape, np.ndarray) else [int(d) for d in shape]
    if not allowzero:
        dims = [x.shape[i] if d == 0 else d for i, d in enumerate(dims)]
    if not x.flags.c_contiguous and x.size >= _native.TRANSPOSE_MIN:
        # a Transpose's view that needs a copy: numpy's reads a float per cache line
        try:
            return x.reshape(dims, copy=False)  # (a view after all)
        except (ValueError, TypeError):  # a copy is needed (TypeError: numpy < 2.1 has no copy=)
            y = _native.contiguous_transposed(x)
            if y is not None:
                return y.reshape(dims)
    if x.size == 0 and -1 in dims and 0 in dims:
        raise ValueError(
            f"Reshape of an empty {list(x.shape)} to {dims} (after copying the 0s): the -1 is ambiguous "
            "beside a 0 (onnxruntime refuses it as well); give the size instead of -1"
        )
    return x.reshape(dims)


@kernel("", "Reshape", since=(5, 13))
def reshape_5(x: np.ndarray, shape: np.ndarray) -> np.ndarray:
    """Reshape-5: 0 copies the input dimension, -1 is inferred."""
    return _reshape(x, shape, 0)


@kernel("", "Reshape", since=(14, 19, 21, 23, 24, 25))
def reshape_14(x: np.ndarray, shape: np.ndarray, *, allowzero: int = 0) -> np.ndarray:
    """Reshape-14: with ``allowzero`` a 0 in ``shape`` means an empty dimension."""
    return _reshape(x, shape, allowzero)


@kernel("", "Flatten", since=(1, 9, 11, 13, 21, 23, 24, 25))
def flatten(x: np.ndarray, *, axis: int = 1) -> np.ndarray:
    """Flatten: a matrix of the dimensions before ``axis`` by those from it."""
    if not -x.ndim <= axis <= x.ndim:  # Flatten's axis may be the rank itself
        raise np.exceptions.AxisError(axis, x.ndim)
    axis = axis + x.ndim if axis < 0 else axis
    return x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))  # (np.prod: ~5 us a call)


def _squeeze(x: np.ndarray, axes: Any) -> np.ndarray:
    if axes is None:
        return x.reshape([d for d in x.shape if d != 1])
    return np.squeeze(x, axis=tuple(int(a) for a in np.asarray(axes).reshape(-1)))


@kernel("", "Squeeze", since=(1, 11))
def squeeze_1(x: np.ndarray, *, axes: list[int] | None = None) -> np.ndarray:
    """Squeeze-1: drops the size-1 ``axes`` (attribute), or all size-1 axes."""
    return _squeeze(x, axes)


@kernel("", "Squeeze", since=(13, 21, 23, 24, 25))
def squeeze_13(x: np.ndarray, axes: np.ndarray | None = None) -> np.ndarray:
    """Squeeze-13: ``axes`` is an optional input."""
    return _squeeze(x, axes)


def _unsqueeze(x: np.ndarray, axes: Any) -> np.ndarray:
    axes = np.asarray(axes).reshape(-1).tolist()  # a scalar axes tensor counts as one axis
    rank = x.ndim + len(axes)
    new = sorted(axes_index(axes, rank))
    dims = iter(x.shape)
    return x.reshape([1 if i in new else next(dims) for i in range(rank)])


@kernel("", "Unsqueeze", since=(1, 11))
def unsqueeze_1(x: np.ndarray, *, axes: list[int]) -> np.ndarray:
    """Unsqueeze-1: inserts size-1 ``axes`` (attribute) into the output shape."""
    return _unsqueeze(x, axes)


@kernel("", "Unsqueeze", since=(13, 21, 23, 24, 25))
def unsqueeze_13(x: np.ndarray, axes: np.ndarray) -> np.ndarray:
    """Unsqueeze-13: ``axes`` is an input."""
    return _unsqueeze(x, axes)


def _transpose_shape(x: tuple[int | None, ...], *, perm: list[int] | None = None) -> tuple[int | None, ...] | None:
    if not x or (perm is not None and sorted(perm) != list(range(len(x)))):
        return None
    return tuple(x[p] for p in perm) if perm is not None else x[::-1]


@kernel("", "Transpose", since=(1, 13, 21, 23, 24, 25), returns_one=True, float_shape=_transpose_shape)
def transpose(x: np.ndarray, *, perm: list[int] | None = None) -> np.ndarray:
    """Transpose: permutes the axes (reverses them without ``perm``)."""
    return np.transpose(x, perm)


def _depth_to_space(x: np.ndarray, blocksize: int, mode: str) -> np.ndarray:
    b, c, h, w = x.shape
    bs = blocksize
    if mode == "DCR":
        tmp = x.reshape(b, bs, bs, c // bs**2, h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        tmp = x.reshape(b, c // bs**2, bs, bs, h, w).transpose(0, 1, 4, 2, 5, 3)
    return tmp.reshape(b, c // bs**2, h * bs, w * bs)


@kernel("", "DepthToSpace", since=1)
def depth_to_space_1(x: np.ndarray, *, blocksize: int) -> np.ndarray:
    """DepthToSpace-1: moves depth into spatial blocks (DCR order)."""
    return _depth_to_space(x, blocksize, "DCR")


@kernel("", "DepthToSpace", since=(11, 13, 28))
def depth_to_space_11(x: np.ndarray, *, blocksize: int, mode: str = "DCR") -> np.ndarray:
    """DepthToSpace-11: ``mode`` chooses DCR or CRD order."""
    return _depth_to_space(x, blocksize, mode)


def _space_to_depth(x: np.ndarray, blocksize: int, mode: str) -> np.ndarray:
    b, c, h, w = x.shape
    bs = blocksize
    tmp = x.reshape(b, c, h // bs, bs, w // bs, bs)
    order = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)
    return tmp.transpose(order).reshape(b, c * bs * bs, h // bs, w // bs)


@kernel("", "SpaceToDepth", since=(1, 13))
def space_to_depth_1(x: np.ndarray, *, blocksize: int) -> np.ndarray:
    """SpaceToDepth-1: moves spatial blocks into depth (DCR order)."""
    return _space_to_depth(x, blocksize, "DCR")


@kernel("", "SpaceToDepth", since=28)
def space_to_depth_28(x: np.ndarray, *, blocksize: int, mode: str = "DCR") -> np.ndarray:
    """SpaceToDepth-28: ``mode`` chooses DCR or CRD order."""
    return _space_to_depth(x, blocksize, mode)


def _slice(x: np.ndarray, starts: Any, ends: Any, axes: Any, steps: Any) -> np.ndarray:
    starts = [int(s) for s in starts]
    ends = [int(e) for e in ends]
    axes = range(len(starts)) if axes is None else axes_index(axes, x.ndim)
    steps = [1] * len(starts) if steps is None else [int(s) for s in steps]
    index = [slice(None)] * x.ndim
    for a, start, end, step in zip(axes, starts, ends, steps):
        # Python slices clamp out-of-range bounds as the spec does, except a start before
        # the first element with a negative step: the spec clamps it to 0, Python to empty
        index[a] = slice(0 if step < 0 and start < -x.shape[a] else start, end, step)
    return x[tuple(index)].copy()


@kernel("", "Slice", since=1)
def slice_1(x: np.ndarray, *, starts: list[int], ends: list[int], axes: list[int] | None = None) -> np.ndarray:
    """Slice-1: ``starts``, ``ends`` and ``axes`` as attributes, step 1."""
    return _slice(x, starts, ends, axes, None)


@kernel("", "Slice", since=(10, 11, 13))
def slice_10(
    x: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    axes: np.ndarray | None = None,
    steps: np.ndarray | None = None,
) -> np.ndarray:
    """Slice-10: bounds, axes and (possibly negative) steps as inputs."""
    return _slice(x, starts, ends, axes, steps)
