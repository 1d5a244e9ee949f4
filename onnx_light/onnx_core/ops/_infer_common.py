"""Helpers shared by the per-op inference functions (``_infer_*.py``).

Shape-like values (the outputs of ``Shape``, ``Gather`` of them, ``Concat``...) are
often only partly known when a dimension is symbolic. Such a value travels as a numpy
array of dtype ``object`` whose entries are ``int``, a symbolic name (``str``) or
``None``; :func:`finish` turns it back into an ordinary integer array once every
entry is known, so only fully known values reach the public constants.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from .._dtypes import np_dtype_to_tensor_dtype, pattern_np_dtype
from ..axes import axis_index
from ..gradient._types import UNKNOWN, Dim, InferContext, Shape, ValueType

__all__ = [
    "BOOL",
    "FLOAT",
    "INT64",
    "FOLD_LIMIT",
    "has_input",
    "in_type",
    "value",
    "ints_of",
    "partial",
    "partial_or_unknown",
    "length_of",
    "dims_value",
    "finish",
    "broadcast_dim",
    "broadcast_shapes",
    "axis_index",
    "dim_product",
    "merge_dim",
    "np_dtype",
    "tensor_dtype",
    "small",
    "axes_arg",
]

FLOAT = 1
INT64 = 7
BOOL = 9
#: largest number of elements folded when all inputs of a node are constant
FOLD_LIMIT = 4096


def has_input(ctx: InferContext, i: int) -> bool:
    """True when the node's optional input ``i`` is given."""
    names = ctx.names
    if names is None:
        names = ctx.node.input
    return i < len(names) and bool(names[i])


def in_type(ctx: InferContext, i: int) -> ValueType:
    """The type of input ``i`` (unknown when absent)."""
    return ctx.inputs[i] if i < len(ctx.inputs) else UNKNOWN


def value(ctx: InferContext, i: int) -> np.ndarray | None:
    """The fully known value of input ``i``, or None."""
    return ctx.values[i] if i < len(ctx.values) and has_input(ctx, i) else None


def ints_of(ctx: InferContext, i: int) -> list[int] | None:
    """The fully known value of input ``i`` flattened to Python ints, or None."""
    v = value(ctx, i)
    if v is None:
        return None
    a = np.asarray(v).reshape(-1)
    if a.dtype.kind in "iu":  # Python ints, as int(x) gives, in one call
        return a.tolist()
    return [int(x) for x in a]


def partial(ctx: InferContext, i: int) -> np.ndarray | None:
    """Input ``i`` as an object array of ``int | str | None`` entries, when partly known."""
    v = value(ctx, i)
    if v is not None:
        a = np.asarray(v)
        kind = a.dtype.kind
        if kind not in "iub":
            return None
        flat = a.reshape(-1)
        entries = flat.tolist() if kind != "b" else [int(x) for x in flat]  # Python ints
        return np.array(entries, dtype=object).reshape(np.shape(v))
    parts = getattr(ctx, "partial", None)
    if parts and i < len(parts) and has_input(ctx, i):
        return parts[i]
    return None


def partial_or_unknown(ctx: InferContext, i: int) -> np.ndarray | None:
    """What :func:`partial` gives, else, for an integer input of a small static shape whose
    value is unknown (a dim read from a symbolic shape), an object array of None entries,
    so that the known entries next to it survive a Concat."""
    p = partial(ctx, i)
    if p is not None or not has_input(ctx, i):
        return p
    t = in_type(ctx, i)
    shape = t.shape
    if t.dtype not in _INDEX_TYPES or shape is None or len(shape) > 1:
        return None
    dims = [d for d in shape if isinstance(d, int)]
    if len(dims) != len(shape) or (dims and dims[0] > FOLD_LIMIT):
        return None
    return np.full(tuple(dims), None, dtype=object)


#: the element types of shape-like values (int32, int64)
_INDEX_TYPES = frozenset({6, INT64})


def length_of(ctx: InferContext, i: int) -> int | None:
    """The static length of the 1-D input ``i`` (axes or a shape computed at run time), or None.

    An op whose axes are only known at run time still has a known output rank when
    their count is known: Unsqueeze adds that many dims, Squeeze and Reduce* without
    keepdims drop that many.
    """
    if not has_input(ctx, i):
        return None
    shape = in_type(ctx, i).shape
    if shape is None or len(shape) != 1 or not isinstance(shape[0], int):
        return None
    return shape[0]


def dims_value(ctx: InferContext, i: int) -> list[Dim] | None:
    """A 1-D shape-like input ``i`` as a list of dims (``int``, ``str`` or None), or None."""
    v = value(ctx, i)
    if v is not None:
        # what partial() gives, without the object array: a known integer value's entries
        # as Python ints (Reshape's target, from a Constant, on most exported graphs)
        a = np.asarray(v)
        kind = a.dtype.kind
        if kind in "iu":
            return a.reshape(-1).tolist()
        if kind == "b":
            return [int(x) for x in a.reshape(-1)]
        return None
    p = partial(ctx, i)
    if p is None:
        return None
    return list(p.reshape(-1))


def finish(arr: Any, dtype: Any = np.int64) -> np.ndarray | None:
    """An output value: a numeric array when every entry is known, else the object array.

    Entries that are neither int nor str become None; an all-unknown array is dropped.
    """
    a = np.asarray(arr, dtype=object) if not isinstance(arr, np.ndarray) else arr
    if a.dtype != object:
        return a if a.size <= FOLD_LIMIT else None
    flat: list[Dim] = [
        int(x) if isinstance(x, (int, np.integer)) else (x if isinstance(x, str) else None) for x in a.reshape(-1)
    ]
    if all(isinstance(x, int) for x in flat):
        return np.array(flat, dtype=dtype).reshape(a.shape)
    if all(x is None for x in flat):
        return None
    out = np.empty(len(flat), dtype=object)
    out[:] = flat
    return out.reshape(a.shape)


def broadcast_dim(a: Dim, b: Dim) -> Dim:
    """The numpy broadcast of two dims over symbolic names (None = unknown)."""
    if a == 1:
        return b
    if b == 1:
        return a
    if isinstance(a, int):
        return a  # b must be a or 1
    if isinstance(b, int):
        return b
    if a is not None and a == b:
        return a
    return None


def broadcast_shapes(*shapes: Shape) -> Shape:
    """The numpy broadcast of shapes; None when some rank is unknown."""
    if len(shapes) == 2:  # the common call (a binary op, MatMul's batch dims), without the generators
        a, b = shapes
        if a is None or b is None:
            return None
        if a == b:
            return tuple(a)
        # the loop below, for two shapes: its first step leaves ``a`` padded with 1s as it is
        n = len(a) - len(b)
        pad_a = (1,) * -n + tuple(a) if n < 0 else a
        pad_b = (1,) * n + tuple(b) if n > 0 else b
        return tuple([broadcast_dim(x, y) for x, y in zip(pad_a, pad_b)])
    if any(s is None for s in shapes):
        return None
    first = shapes[0] if shapes else None
    if first is not None and all(s == first for s in shapes):
        return tuple(first)  # equal shapes broadcast to themselves, dim by dim
    rank = max((len(s) for s in shapes if s is not None), default=0)
    out: list[Dim] = [1] * rank
    for s in shapes:
        assert s is not None
        pad: list[Dim] = [1] * (rank - len(s))
        pad.extend(s)
        out = [broadcast_dim(x, y) for x, y in zip(out, pad)]
    return tuple(out)


def dim_product(dims: Iterable[Dim]) -> Dim:
    """The product of dims: an int when all are ints, a name when it is the only non-1 factor."""
    prod = 1
    names: list[Dim] = []
    for d in dims:
        if isinstance(d, int):
            prod *= d
        else:
            names.append(d)
    if not names:
        return prod
    if prod == 0:
        return 0
    if len(names) == 1 and prod == 1 and isinstance(names[0], str):
        return names[0]
    return None


def merge_dim(a: Dim, b: Dim) -> Dim:
    """Two views of the same dim: the more precise one (an int over a name over None)."""
    if isinstance(a, int):
        return a
    if isinstance(b, int):
        return b
    return a if a is not None else b


def np_dtype(tensor_type: int) -> np.dtype[Any]:
    """The numpy dtype of a TensorProto type."""
    return pattern_np_dtype(tensor_type)


def tensor_dtype(arr: np.ndarray) -> int:
    """The TensorProto type of a numpy array (0 when it has none)."""
    try:
        return np_dtype_to_tensor_dtype(arr.dtype)
    except ValueError:
        return 0


def small(*arrays: np.ndarray | None) -> bool:
    """True when all arrays are known, numeric and small enough to fold."""
    return all(a is not None and a.dtype != object and a.size <= FOLD_LIMIT for a in arrays)


def axes_arg(ctx: InferContext, index: int, attr: str = "axes") -> tuple[bool, Sequence[int] | None]:
    """The axes of a node taken as attribute (older opsets) or as input ``index``.

    Returns:
        ``(given, axes)``: ``given`` is False when neither form is present; ``axes``
        is None when given as an input whose value is unknown.
    """
    if attr in ctx.attrs:
        return True, [int(a) for a in ctx.attrs[attr]]
    if has_input(ctx, index):
        return True, ints_of(ctx, index)
    return False, None
