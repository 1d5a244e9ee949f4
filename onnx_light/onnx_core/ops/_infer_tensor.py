"""Inference of shape-manipulating ops, with folding of shape computations.

Torch exports compute ``Reshape`` and ``Expand`` targets from ``Shape`` / ``Gather``
/ ``Unsqueeze`` / ``Concat`` chains; these ops propagate values that are known, or
partly known with symbolic entries, so the targets resolve when the pass runs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._proto import NodeProto
from ..gradient import _fastpath  # (the module: it imports _types, which imports this module)
from ..gradient._types import Dim, InferContext, Shape, ValueType, infer
from ._infer_common import (
    FLOAT,
    INT64,
    axes_arg,
    axis_index,
    broadcast_shapes,
    dim_product,
    dims_value,
    finish,
    has_input,
    in_type,
    ints_of,
    length_of,
    merge_dim,
    partial,
    partial_or_unknown,
    small,
    tensor_dtype,
    value,
)
from ._registries import upgrade
from ._traits import declare_traits
from ._upgrade import Upgrader, attr_value, clone

Result = tuple[list[ValueType], list[np.ndarray | None]]


@infer("Shape")
def shape_op(ctx: InferContext) -> Result:
    """1-D int64 of the dims in ``[start, end)``; its value when the dims are known."""
    x = in_type(ctx, 0)
    if x.shape is None:
        return [ValueType(INT64, (None,))], [None]
    rank = len(x.shape)
    start, end = int(ctx.attr("start", 0)), int(ctx.attr("end", rank))
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    dims = list(x.shape[start:end]) if end > start else []
    if dims and all(type(d) is int for d in dims):
        return [ValueType(INT64, (len(dims),))], [np.array(dims, np.int64)]  # what finish() gives then
    arr = np.empty(len(dims), dtype=object)
    arr[:] = dims
    return [ValueType(INT64, (len(dims),))], [finish(arr) if dims else np.zeros(0, np.int64)]


@infer("Size")
def size_op(ctx: InferContext) -> Result:
    """An int64 scalar; its value when the shape is static."""
    x = in_type(ctx, 0)
    n = dim_product(x.shape) if x.shape is not None else None
    return [ValueType(INT64, ())], [np.array(n, np.int64) if isinstance(n, int) else None]


def _reshape_dims(src: tuple[Dim, ...] | None, target: list[Dim], allowzero: int) -> tuple[Dim, ...]:
    out: list[Dim] = []
    for i, t in enumerate(target):
        if t == 0 and not allowzero:
            out.append(src[i] if src is not None and i < len(src) else None)
        elif t == -1 or t is None or isinstance(t, str) or (isinstance(t, int) and t >= 0):
            out.append(t)
        else:
            raise ValueError(f"bad reshape target {target}")
    if -1 in out:
        i = out.index(-1)
        out[i] = _missing_factor(src, out[:i] + out[i + 1 :])
    return tuple(out)


def _missing_factor(src: tuple[Dim, ...] | None, known: list[Dim]) -> Dim:
    """The dim d such that prod(src) == d * prod(known), when it can be told."""
    if src is None or any(d is None for d in src) or any(d is None for d in known):
        return None
    rest_src = [d for d in src if d != 1]
    for d in known:
        if d == 1:
            continue
        if isinstance(d, str):
            if d not in rest_src:
                return None
            rest_src.remove(d)
    num, den = dim_product(rest_src), dim_product([d for d in known if isinstance(d, int)])
    if isinstance(num, int) and isinstance(den, int):
        return num // den if den and num % den == 0 else None
    return num if den == 1 else None


@infer("Reshape")
def reshape(ctx: InferContext) -> Result:
    """The target shape (0 copies unless allowzero, -1 inferred); folds known values."""
    x = in_type(ctx, 0)
    allowzero = int(ctx.attr("allowzero", 0))
    if "shape" in ctx.attrs:  # Reshape-1
        target: list[Dim] | None = [int(d) for d in ctx.attrs["shape"]]
    else:
        target = dims_value(ctx, 1)
    if target is None:
        n = in_type(ctx, 1).shape
        rank = n[0] if n is not None and len(n) == 1 and isinstance(n[0], int) else None
        return [ValueType(x.dtype, None if rank is None else (None,) * rank)], [None]
    shape = _reshape_dims(x.shape, target, allowzero)
    v = value(ctx, 0)
    out: np.ndarray | None = None
    if all(isinstance(d, int) for d in shape):  # a (partly) known value folds into a static shape
        if v is not None:
            out = v.reshape(shape)  # type: ignore[arg-type]
        else:
            p = partial(ctx, 0)
            if p is not None:
                out = finish(p.reshape(shape))
    return [ValueType(x.dtype, shape)], [out]


@infer("Flatten")
def flatten(ctx: InferContext) -> list[ValueType]:
    """``(prod(d[:axis]), prod(d[axis:]))``."""
    x = in_type(ctx, 0)
    if x.shape is None:
        return [ValueType(x.dtype, (None, None))]
    axis = int(ctx.attr("axis", 1))
    axis = axis + len(x.shape) if axis < 0 else axis
    return [ValueType(x.dtype, (dim_product(x.shape[:axis]), dim_product(x.shape[axis:])))]


@infer("Squeeze")
def squeeze(ctx: InferContext) -> Result:
    """Drops ``axes`` (attribute before 13, else input), or every dim known to be 1."""
    x = in_type(ctx, 0)
    given, axes = axes_arg(ctx, 1)
    if x.shape is None or (given and axes is None):
        return [ValueType(x.dtype, _unknown_dims(x.shape, -(length_of(ctx, 1) or 0)))], [None]
    rank = len(x.shape)
    if not given or not axes:
        if any(not isinstance(d, int) for d in x.shape):
            return [ValueType(x.dtype, None)], [None]
        drop = {i for i, d in enumerate(x.shape) if d == 1}
    else:
        drop = {axis_index(a, rank) for a in axes}
    shape = tuple(d for i, d in enumerate(x.shape) if i not in drop)
    p = partial(ctx, 0)
    return [ValueType(x.dtype, shape)], [_fold_reshape(ctx, p, shape)]


def _unknown_dims(shape: Shape, added: int) -> Shape:
    """Run-time axes of a known count: the input's rank plus ``added``, every dim unknown
    (None when the input's rank, or the count, is unknown: ``added == 0``)."""
    if shape is None or added == 0 or len(shape) + added < 0:
        return None
    return (None,) * (len(shape) + added)


def _fold_reshape(ctx: InferContext, p: np.ndarray | None, shape: tuple[Dim, ...]) -> np.ndarray | None:
    if not all(isinstance(d, int) for d in shape):
        return None
    v = value(ctx, 0)
    if v is not None and small(v):
        return v.reshape(shape)  # type: ignore[arg-type]
    return finish(p.reshape(shape)) if p is not None else None


@infer("Unsqueeze")
def unsqueeze(ctx: InferContext) -> Result:
    """Inserts 1s at ``axes`` (of the output's rank)."""
    x = in_type(ctx, 0)
    _, axes = axes_arg(ctx, 1)
    if x.shape is None or axes is None:
        return [ValueType(x.dtype, _unknown_dims(x.shape, length_of(ctx, 1) or 0))], [None]
    rank = len(x.shape) + len(axes)
    ins = {axis_index(a, rank) for a in axes}
    rest = iter(x.shape)
    shape = tuple(1 if i in ins else next(rest) for i in range(rank))
    return [ValueType(x.dtype, shape)], [_fold_reshape(ctx, partial(ctx, 0), shape)]


@infer("Transpose")
def transpose(ctx: InferContext) -> Result:
    """Dims permuted by ``perm`` (reversed by default); folds known and partly known values."""
    x = in_type(ctx, 0)
    if x.shape is None:
        return [ValueType(x.dtype, None)], [None]
    perm = [int(p) for p in ctx.attr("perm") or list(range(len(x.shape)))[::-1]]
    out: np.ndarray | None = None
    if x.dtype in (6, INT64):  # shape-like values (pads computed from shapes are transposed)
        v = value(ctx, 0)
        p = v if v is not None and small(v) else (partial(ctx, 0) if v is None else None)
        out = finish(np.transpose(p, perm), p.dtype if p.dtype != object else np.int64) if p is not None else None
    return [ValueType(x.dtype, tuple(x.shape[i] for i in perm))], [out]


@infer("Concat")
def concat(ctx: InferContext) -> Result:
    """Dims summed along ``axis``; folds known and partly known 1-D values."""
    types = [t for i, t in enumerate(ctx.inputs) if has_input(ctx, i)]
    dtype = next((t.dtype for t in types if t.dtype), 0)
    if any(t.shape is None for t in types) or not types:
        rank = next((t.rank for t in types if t.rank is not None), None)
        return [ValueType(dtype, None if rank is None else (None,) * rank)], [None]
    shapes = [t.shape for t in types if t.shape is not None]
    rank = len(shapes[0])
    axis = axis_index(int(ctx.attr("axis", 0)), rank)
    shape: list[Dim] = list(shapes[0])
    for s in shapes[1:]:
        for i, d in enumerate(s):
            if i != axis:
                shape[i] = merge_dim(shape[i], d)
    along = [s[axis] for s in shapes]
    shape[axis] = sum(along) if all(isinstance(d, int) for d in along) else None  # type: ignore[arg-type]
    if shape[axis] is None and len([d for d in along if d != 0]) == 1:
        shape[axis] = next(d for d in along if d != 0)
    vals = [value(ctx, i) for i in range(len(ctx.inputs)) if has_input(ctx, i)]
    out: np.ndarray | None = None
    if all(v is not None for v in vals) and small(*vals):
        out = np.concatenate(vals, axis=axis)  # type: ignore[arg-type]
    elif rank == 1:
        parts = [partial_or_unknown(ctx, i) for i in range(len(ctx.inputs)) if has_input(ctx, i)]
        if all(p is not None for p in parts):
            out = finish(np.concatenate(parts))  # type: ignore[arg-type]
    return [ValueType(dtype, tuple(shape))], [out]


@infer("Split")
def split(ctx: InferContext) -> list[ValueType]:
    """Pieces along ``axis``: ``split`` (attribute before 13, else input), ``num_outputs`` or equal."""
    x = in_type(ctx, 0)
    n = len(ctx.node.output)
    if x.shape is None:
        return [ValueType(x.dtype, None)] * n
    axis = axis_index(int(ctx.attr("axis", 0)), len(x.shape))
    given, sizes = axes_arg(ctx, 1, "split")
    d = x.shape[axis]
    pieces: list[Dim]
    if given and sizes is not None and len(sizes) == n:
        pieces = list(sizes)
    elif isinstance(d, int) and not given:
        k = int(ctx.attr("num_outputs", n))
        step = -(-d // k)
        pieces = [min(step, max(d - i * step, 0)) for i in range(n)]
    else:
        pieces = [None] * n
    return [ValueType(x.dtype, tuple(p if i == axis else s for i, s in enumerate(x.shape))) for p in pieces]


def _slice_dim(d: Dim, start: int, end: int, step: int) -> Dim:
    if isinstance(d, int):
        # (a start before the first element with a negative step is clamped to 0 by the spec)
        return len(range(*slice(0 if step < 0 and start < -d else start, end, step).indices(d)))
    if step == 1 and start == 0 and end >= 2**31 - 1:
        return d
    if step == 1 and 0 <= start <= end < 2**31 - 1:
        return None  # depends on d
    return None


@infer("Slice")
def slice_op(ctx: InferContext) -> Result:
    """Starts/ends/axes as attributes (before opset 10) or inputs, with steps; folds values."""
    x = in_type(ctx, 0)
    if "starts" in ctx.attrs:
        starts, ends = list(ctx.attrs["starts"]), list(ctx.attrs["ends"])
        axes: list[int] | None = list(ctx.attrs.get("axes", range(len(starts))))
        steps: list[int] | None = [1] * len(starts)
    else:
        s, e = ints_of(ctx, 1), ints_of(ctx, 2)
        if s is None or e is None:
            return [ValueType(x.dtype, None if x.shape is None else (None,) * len(x.shape))], [None]
        starts, ends = s, e
        axes = ints_of(ctx, 3) if has_input(ctx, 3) else list(range(len(starts)))
        steps = ints_of(ctx, 4) if has_input(ctx, 4) else [1] * len(starts)
    if x.shape is None or axes is None or steps is None:
        return [ValueType(x.dtype, None if x.shape is None else (None,) * len(x.shape))], [None]
    rank = len(x.shape)
    shape: list[Dim] = list(x.shape)
    index: list[Any] = [slice(None)] * rank
    for st, en, ax, sp in zip(starts, ends, axes, steps):
        a = axis_index(int(ax), rank)
        shape[a] = _slice_dim(x.shape[a], int(st), int(en), int(sp))
        index[a] = slice(int(st), int(en), int(sp))
    out: np.ndarray | None = None
    v = value(ctx, 0)
    if v is not None and small(v):
        out = v[tuple(index)]
    else:
        p = partial(ctx, 0)
        out = finish(p[tuple(index)]) if p is not None else None
    return [ValueType(x.dtype, tuple(shape))], [out]


@infer("Gather")
def gather(ctx: InferContext) -> Result:
    """``data[:axis] + indices + data[axis+1:]``; folds known and partly known values."""
    x, idx = in_type(ctx, 0), in_type(ctx, 1)
    if x.shape is None or idx.shape is None:
        return [ValueType(x.dtype, None)], [None]
    axis = axis_index(int(ctx.attr("axis", 0)), len(x.shape))
    shape = (*x.shape[:axis], *idx.shape, *x.shape[axis + 1 :])
    i = value(ctx, 1)
    out: np.ndarray | None = None
    if i is not None and small(i):
        v = value(ctx, 0)
        if v is not None and small(v):
            out = np.take(v, i, axis=axis)
        else:
            p = partial(ctx, 0)
            out = finish(np.take(p, i, axis=axis)) if p is not None else None
    return [ValueType(x.dtype, shape)], [out]


@infer("GatherElements")
def gather_elements(ctx: InferContext) -> list[ValueType]:
    """The indices' shape in the data's type."""
    return [ValueType(in_type(ctx, 0).dtype, in_type(ctx, 1).shape)]


@infer("GatherND")
def gather_nd(ctx: InferContext) -> list[ValueType]:
    """``indices[:-1] + data[batch_dims + indices[-1]:]``."""
    x, idx = in_type(ctx, 0), in_type(ctx, 1)
    b = int(ctx.attr("batch_dims", 0))
    if x.shape is None or idx.shape is None or not isinstance(idx.shape[-1], int):
        return [ValueType(x.dtype, None)]
    return [ValueType(x.dtype, (*idx.shape[:-1], *x.shape[b + idx.shape[-1] :]))]


@infer("ScatterElements", "ScatterND", "Scatter")
def scatter(ctx: InferContext) -> list[ValueType]:
    """As the data."""
    return [in_type(ctx, 0)]


@infer("Expand")
def expand(ctx: InferContext) -> Result:
    """The broadcast of the input with the target shape; folds small values."""
    x = in_type(ctx, 0)
    target = dims_value(ctx, 1)
    if target is None:
        n = in_type(ctx, 1).shape
        if n is None or len(n) != 1 or not isinstance(n[0], int) or x.shape is None:
            return [ValueType(x.dtype, None)], [None]
        target = [None] * n[0]
    shape = broadcast_shapes(x.shape, tuple(target))
    v = value(ctx, 0)
    out: np.ndarray | None = None
    if v is not None and shape is not None and all(isinstance(d, int) for d in shape):
        if int(np.prod(shape)) <= 4096:  # type: ignore[arg-type]
            out = np.broadcast_to(v, shape).copy()  # type: ignore[arg-type]
    return [ValueType(x.dtype, shape)], [out]


@infer("Tile")
def tile(ctx: InferContext) -> list[ValueType]:
    """Each dim times its repeat."""
    x = in_type(ctx, 0)
    reps = ints_of(ctx, 1)
    if x.shape is None:
        return [ValueType(x.dtype, None)]
    if reps is None:
        return [ValueType(x.dtype, (None,) * len(x.shape))]
    shape = tuple(d * r if isinstance(d, int) else (d if r == 1 else None) for d, r in zip(x.shape, reps))
    return [ValueType(x.dtype, shape)]


@infer("Pad")
def pad(ctx: InferContext) -> list[ValueType]:
    """Each dim plus its begin and end pads (attribute before 11, else input; axes at 18)."""
    x = in_type(ctx, 0)
    attr = ctx.attr("pads", ctx.attr("paddings"))
    if x.shape is None:
        # full-rank pads (no axes) still tell the rank: two per dim
        full = [int(p) for p in attr] if attr is not None else (None if has_input(ctx, 3) else ints_of(ctx, 1))
        return [ValueType(x.dtype, None if full is None else (None,) * (len(full) // 2))]
    rank = len(x.shape)
    # pads computed from shapes are often partly known: the axes they leave alone keep their dims
    pads: list[Dim] | None = [int(p) for p in attr] if attr is not None else dims_value(ctx, 1)
    axes = ints_of(ctx, 3) if has_input(ctx, 3) else list(range(rank))
    if pads is None or axes is None:
        return [ValueType(x.dtype, (None,) * rank)]
    shape: list[Dim] = list(x.shape)
    k = len(axes)
    for j, a in enumerate(axes):
        i = axis_index(a, rank)
        d, begin, end = shape[i], pads[j], pads[j + k]
        if not isinstance(begin, int) or not isinstance(end, int):
            shape[i] = None
            continue
        total = begin + end
        shape[i] = d + total if isinstance(d, int) else (d if total == 0 else None)
    return [ValueType(x.dtype, tuple(shape))]


def _constant_value(attrs: dict[str, Any]) -> np.ndarray | None:
    if "value" in attrs:
        return _fastpath.tensor_array(attrs["value"])
    if "value_float" in attrs:
        return np.array(attrs["value_float"], np.float32)
    if "value_floats" in attrs:
        return np.array(attrs["value_floats"], np.float32)
    if "value_int" in attrs:
        return np.array(attrs["value_int"], np.int64)
    if "value_ints" in attrs:
        return np.array(attrs["value_ints"], np.int64)
    if "value_string" in attrs:
        return np.array(attrs["value_string"], dtype=object)
    if "value_strings" in attrs:
        return np.array(list(attrs["value_strings"]), dtype=object)
    return None


def tensor_constant(tensor: Any) -> tuple[ValueType, np.ndarray | None]:
    """The type and value of a Constant holding ``tensor`` (a ``value`` attribute): the
    common form, exporters emit one per shape or scalar the graph uses. What the general
    code of :func:`constant` gives for it, with the type taken from the tensor."""
    v = _fastpath.tensor_array(tensor)
    if v.dtype.kind == "O":  # strings
        return ValueType(8, v.shape), None
    return ValueType(int(tensor.data_type), v.shape), v


@infer("Constant")
def constant(ctx: InferContext) -> Result:
    """The attribute's tensor, type and value (sparse values: type and shape only)."""
    tensor = ctx.attrs.get("value")
    if tensor is not None and "sparse_value" not in ctx.attrs:
        t, v = tensor_constant(tensor)
        return [t], [v]
    if "sparse_value" in ctx.attrs:
        sp = ctx.attrs["sparse_value"]
        return [ValueType(int(sp.values.data_type), tuple(int(d) for d in sp.dims))], [None]
    v = _constant_value(ctx.attrs)
    if v is None:
        return [ValueType(0, None)], [None]
    if v.dtype == object:  # strings
        return [ValueType(8, v.shape)], [None]
    dt = int(ctx.attrs["value"].data_type) if "value" in ctx.attrs else tensor_dtype(v)
    return [ValueType(dt, tuple(int(d) for d in v.shape))], [v]


@infer("ConstantOfShape")
def constant_of_shape(ctx: InferContext) -> Result:
    """The shape given by the input's (partly known) value, in the ``value`` tensor's type."""
    from ..numpy_helper import to_array

    fill = to_array(ctx.attrs["value"]) if "value" in ctx.attrs else np.zeros(1, np.float32)
    dtype = int(ctx.attrs["value"].data_type) if "value" in ctx.attrs else FLOAT
    dims = dims_value(ctx, 0)
    if dims is None:
        n = in_type(ctx, 0).shape
        ok = n is not None and len(n) == 1 and isinstance(n[0], int)
        return [ValueType(dtype, (None,) * n[0] if ok else None)], [None]  # type: ignore[index, operator]
    shape = tuple(None if isinstance(d, int) and d < 0 else d for d in dims)
    out: np.ndarray | None = None
    if all(isinstance(d, int) for d in shape) and int(np.prod(shape)) <= 4096:  # type: ignore[arg-type]
        out = np.full(shape, fill.reshape(-1)[0], dtype=fill.dtype)  # type: ignore[arg-type]
    return [ValueType(dtype, shape)], [out]


@infer("Range")
def range_op(ctx: InferContext) -> Result:
    """1-D of ``max(ceil((limit - start) / delta), 0)`` elements; folded when known."""
    dtype = in_type(ctx, 0).dtype
    s, lim, d = value(ctx, 0), value(ctx, 1), value(ctx, 2)
    if s is None or lim is None or d is None:
        return [ValueType(dtype, (None,))], [None]
    n = max(int(np.ceil((lim.item() - s.item()) / d.item())), 0)
    out = np.arange(n, dtype=s.dtype) * d.astype(s.dtype) + s if n <= 4096 else None
    return [ValueType(dtype, (n,))], [out]


@infer("EyeLike")
def eye_like(ctx: InferContext) -> list[ValueType]:
    """The input's shape in ``dtype`` (default the input's type)."""
    x = in_type(ctx, 0)
    return [ValueType(int(ctx.attr("dtype", x.dtype)), x.shape)]


@infer("RandomUniform", "RandomNormal")
def random(ctx: InferContext) -> list[ValueType]:
    """The ``shape`` attribute in ``dtype`` (default float)."""
    return [ValueType(int(ctx.attr("dtype", 1)), tuple(int(d) for d in ctx.attr("shape", [])))]


@infer("Compress")
def compress(ctx: InferContext) -> list[ValueType]:
    """The input with an unknown count along ``axis``, or 1-D when there is no axis."""
    x = in_type(ctx, 0)
    axis = ctx.attr("axis")
    if axis is None or x.shape is None:
        return [ValueType(x.dtype, (None,) if axis is None else None)]
    shape = list(x.shape)
    shape[axis_index(int(axis), len(shape))] = None
    return [ValueType(x.dtype, tuple(shape))]


@infer("Unique")
def unique(ctx: InferContext) -> list[ValueType]:
    """Y: 1-D (no axis) or the input with an unknown count along ``axis``; indices and
    counts: 1-D int64 of that count; inverse_indices: one per element (slice) of the input."""
    x = in_type(ctx, 0)
    axis = ctx.attr("axis")
    count = ValueType(INT64, (None,))
    if axis is None:
        n = dim_product(x.shape) if x.shape is not None else None
        return [ValueType(x.dtype, (None,)), count, ValueType(INT64, (n,)), count]
    if x.shape is None:
        return [ValueType(x.dtype, None), count, count, count]
    shape = list(x.shape)
    a = axis_index(int(axis), len(shape))
    inverse = ValueType(INT64, (shape[a],))
    shape[a] = None
    return [ValueType(x.dtype, tuple(shape)), count, inverse, count]


@infer("NonMaxSuppression")
def non_max_suppression(ctx: InferContext) -> list[ValueType]:
    """int64 ``(count, 3)`` selected indices, the count unknown."""
    return [ValueType(INT64, (None, 3))]


@infer("OneHot")
def one_hot(ctx: InferContext) -> list[ValueType]:
    """The indices' shape with ``depth`` inserted at ``axis``; the values' type."""
    idx = in_type(ctx, 0)
    dtype = in_type(ctx, 2).dtype
    if idx.shape is None:
        return [ValueType(dtype, None)]
    depth = value(ctx, 1)
    d: Dim = int(np.asarray(depth).reshape(-1)[0]) if depth is not None else None
    rank = len(idx.shape) + 1
    axis = axis_index(int(ctx.attr("axis", -1)), rank)
    shape = list(idx.shape)
    shape.insert(axis, d)
    return [ValueType(dtype, tuple(shape))]


@infer("NonZero")
def non_zero(ctx: InferContext) -> list[ValueType]:
    """int64 ``(rank, count)``, the count unknown."""
    r = in_type(ctx, 0).rank
    return [ValueType(INT64, (r, None))]


@infer("DepthToSpace", "SpaceToDepth")
def depth_space(ctx: InferContext) -> list[ValueType]:
    """Channels divided (multiplied) by blocksize², height and width multiplied (divided)."""
    x = in_type(ctx, 0)
    b = int(ctx.attr("blocksize", 1))
    if x.shape is None or len(x.shape) != 4:
        return [ValueType(x.dtype, None if x.shape is None else (None,) * len(x.shape))]
    n, c, h, w = x.shape

    def mul(d: Dim, k: int) -> Dim:
        return d * k if isinstance(d, int) else None

    def div(d: Dim, k: int) -> Dim:
        return d // k if isinstance(d, int) else None

    if ctx.node.op_type == "DepthToSpace":
        return [ValueType(x.dtype, (n, div(c, b * b), mul(h, b), mul(w, b)))]
    return [ValueType(x.dtype, (n, mul(c, b * b), div(h, b), div(w, b)))]


@infer("If")
def if_(ctx: InferContext) -> list[ValueType]:
    """Each output as both branches declare it (a dim or rank they disagree on unknown): torch
    declares branch outputs and no value_info, and the branches' nodes are not inferred here."""
    then, other = ctx.attr("then_branch"), ctx.attr("else_branch")
    if then is None or other is None:
        return []
    return [_either(_fastpath.value_type(a), _fastpath.value_type(b)) for a, b in zip(then.output, other.output)]


def _either(a: ValueType | None, b: ValueType | None) -> ValueType:
    if a is None or b is None:
        return ValueType(0, None)
    dtype = a.dtype if a.dtype == b.dtype or not b.dtype else b.dtype if not a.dtype else 0
    if a.shape is None or b.shape is None or len(a.shape) != len(b.shape):
        return ValueType(dtype, None)
    return ValueType(dtype, tuple(x if x == y else None for x, y in zip(a.shape, b.shape)))


# --------------------------------------------------------------------------- upgrades
@upgrade("Squeeze", "Unsqueeze", until=12)
def _axes_to_input(u: Upgrader, node: NodeProto, attr: str = "axes") -> None:
    axes = attr_value(node, attr)
    if u.source >= 13 or u.target < 13 or axes is None:
        u.out.append(node)
        return
    u.out.append(clone(node, [node.input[0], u.ints(axes, f"{node.op_type}_{attr}")], drop=[attr]))


@upgrade("Split", until=17)
def _split(u: Upgrader, node: NodeProto) -> None:
    sizes = attr_value(node, "split")
    inputs = list(node.input)
    changed = False
    if u.source < 13 <= u.target and sizes is not None:
        inputs = [inputs[0], u.ints(sizes, "Split_split")]
        changed = True
    num: int | None = None
    if u.source < 18 <= u.target and (len(inputs) < 2 or not inputs[1]):
        num = len(node.output)  # equal split: at 18 the count must be explicit
        changed = True
    u.out.append(clone(node, inputs, drop=["split"], num_outputs=num) if changed else node)


@upgrade("Slice", until=9)
def _slice(u: Upgrader, node: NodeProto) -> None:
    starts = attr_value(node, "starts")
    if u.source >= 10 or u.target < 10 or starts is None:
        u.out.append(node)
        return
    inputs = [node.input[0], u.ints(starts, "Slice_starts"), u.ints(attr_value(node, "ends"), "Slice_ends")]
    axes = attr_value(node, "axes")
    if axes is not None:
        inputs.append(u.ints(axes, "Slice_axes"))
    u.out.append(clone(node, inputs, drop=["starts", "ends", "axes"]))


@upgrade("Pad", until=10)
def _pad(u: Upgrader, node: NodeProto) -> None:
    pads = attr_value(node, "pads", attr_value(node, "paddings"))
    if u.source >= 11 or u.target < 11 or pads is None:
        u.out.append(node)
        return
    inputs = [node.input[0], u.ints(pads, "Pad_pads")]
    value = float(attr_value(node, "value", 0.0))
    if value != 0.0 and str(attr_value(node, "mode", "constant")) == "constant":
        inputs.append(u.scalar_like(value, node.input[0], node, "value"))
    u.out.append(clone(node, inputs, drop=["pads", "paddings", "value"]))


@upgrade("Scan", until=8)
def _scan(u: Upgrader, node: NodeProto) -> None:
    """Scan-8 cannot be rewritten into Scan-9: it is refused with the fix."""
    if u.source >= 9 or u.target < 9:
        u.out.append(node)
        return
    raise u.error(
        node,
        "Scan-8 has a batch axis and a sequence_lens input that Scan-9 dropped; re-export the model at opset 9+",
    )


@upgrade("Scatter", until=None)
def _scatter(u: Upgrader, node: NodeProto) -> None:
    u.out.append(clone(node, op_type="ScatterElements") if u.target >= 11 else node)


# --------------------------------------------------------------------------- traits
declare_traits(
    "Identity Reshape Transpose Squeeze Unsqueeze Flatten Concat Split Slice Gather GatherElements GatherND "
    "Expand Tile Constant Where Compress DepthToSpace SpaceToDepth",
    moves_elements=True,
    bit_exact=True,
)
declare_traits("Cast CastLike EyeLike Range Shape Size", bit_exact=True)
declare_traits("If Loop Scan", subgraphs=True, bit_exact=True)
declare_traits("If", branches=("then_branch", "else_branch"))
declare_traits("SequenceMap", subgraphs=True, bit_exact=True)
# sequences and optionals hold tensors as they are; these tensor ops only place elements
declare_traits(
    "SequenceConstruct SequenceEmpty SequenceAt SequenceInsert SequenceErase SplitToSequence ConcatFromSequence "
    "Optional OptionalGetElement ReverseSequence CenterCropPad TensorScatter",
    moves_elements=True,
    bit_exact=True,
)
declare_traits("SequenceLength OptionalHasElement", bit_exact=True)
declare_traits("Constant", constant=True)
declare_traits("Range", sizes_from=(0, 1, 2))
declare_traits("Cast", casts_to="to")


# --------------------------------------------------------------------------- sequences
# A sequence value's ValueType is that of its ELEMENTS (a shape only where every element
# has it); which values are sequences the schema tells (shape_inference writes no tensor
# value_info for them). SequenceAt and ConcatFromSequence then type their tensors.
def _common(types: list[ValueType]) -> ValueType:
    """The type every one of ``types`` has: dims kept where all agree (None elsewhere)."""
    first = types[0].shape
    if first is None or any(t.shape is None or len(t.shape) != len(first) for t in types):
        return ValueType(types[0].dtype, None)
    dims = [d if all(t.shape is not None and t.shape[k] == d for t in types) else None for k, d in enumerate(first)]
    return ValueType(types[0].dtype, tuple(dims))


@infer("SequenceConstruct", since=11)
def sequence_construct(ctx: InferContext) -> list[ValueType]:
    return [_common([in_type(ctx, k) for k in range(len(ctx.inputs))])]


@infer("SequenceEmpty", since=11)
def sequence_empty(ctx: InferContext) -> list[ValueType]:
    return [ValueType(int(ctx.attr("dtype", 1)), None)]


@infer("SequenceAt", "SequenceErase", since=11)
def sequence_element(ctx: InferContext) -> list[ValueType]:
    return [in_type(ctx, 0)]


@infer("SequenceInsert", since=11)
def sequence_insert(ctx: InferContext) -> list[ValueType]:
    return [_common([in_type(ctx, 0), in_type(ctx, 1)])]


@infer("SequenceLength", since=11)
def sequence_length(ctx: InferContext) -> list[ValueType]:
    return [ValueType(INT64, ())]


@infer("SplitToSequence", since=11)
def split_to_sequence(ctx: InferContext) -> list[ValueType]:
    x = in_type(ctx, 0)
    if x.shape is None:
        return [ValueType(x.dtype, None)]
    axis = int(ctx.attr("axis", 0)) % max(len(x.shape), 1)
    dims: list[Dim] = list(x.shape)
    if has_input(ctx, 1):
        dims[axis] = None
    elif int(ctx.attr("keepdims", 1)):
        dims[axis] = 1
    else:
        del dims[axis]
    return [ValueType(x.dtype, tuple(dims))]


@infer("ConcatFromSequence", since=11)
def concat_from_sequence(ctx: InferContext) -> list[ValueType]:
    e = in_type(ctx, 0)
    if e.shape is None:
        return [ValueType(e.dtype, None)]
    dims: list[Dim] = list(e.shape)
    new_axis = int(ctx.attr("new_axis", 0))
    axis = int(ctx.attr("axis", 0)) % (len(dims) + new_axis)
    if new_axis:
        dims.insert(axis, None)
    else:
        dims[axis] = None
    return [ValueType(e.dtype, tuple(dims))]


@infer("SequenceMap", since=17)
def sequence_map(ctx: InferContext) -> list[ValueType]:
    """The body's output types, its inputs typed by the elements (sequences) or whole (tensors)."""
    from .._infer_model import infer_graph  # (it imports this module's engine)

    body = ctx.attr("body")
    result = infer_graph(body, ctx.opset, inputs=[in_type(ctx, k) for k in range(len(ctx.inputs))])
    return [result.types.get(o.name, ValueType(0, None)) for o in body.output]
