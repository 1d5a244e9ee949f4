"""Rules for tensor ops: layout (Reshape, Transpose, Concat, Split, Tile, Expand, CumSum)
and selection (Slice, Gather*, Scatter*, Pad, TopK).

Layout ops are linear, so their gradient is the adjoint applied to ``dY``: a Reshape
back to the input's shape, the inverse permutation, a Split of a Concat, a sum over
the copies of a Tile or an Expand.

A selection's gradient puts ``dY`` back where the elements came from, in zeros:
static code (Pad, Slice, Reshape with constants) when the positions are known when
the pass runs, a scatter with indices computed at run time otherwise. Gathers scatter
with ``reduction="add"`` so that an index used twice accumulates both gradients.

Integer inputs (shapes, repeats, axes, split sizes, indices) carry no gradient. Ops
whose outputs are integers or constants are declared ``no_grad`` here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ...onnx_core.gradient import GradContext, Grads, TangentContext, Tangents, same_op
from ...onnx_core.numpy_helper import from_array
from ._table import jvp_rule, linear, no_grad, refuses, rule
from ._tensor_common import (
    INT64_MAX,
    INT64_MIN,
    arg_ints,
    axis_index,
    const_ints,
    dim_of,
    index64,
    pad_axes,
    zeros_of_shape,
)

no_grad("", "Shape", "Size", "Constant", "ConstantOfShape", "EyeLike", "NonZero", "OneHot")


@rule("", "Range", nondiff=(1,))
def range_grad(ctx: GradContext, dy: str) -> Grads:
    """Y_i = start + i * delta: dStart = ΣdY, dDelta = Σ i * dY; limit (which only sets
    the length, a step function) has no gradient."""
    d_start = ctx.op.ReduceSum(dy, keepdims=0) if ctx.needs_grad(0) else None
    d_delta = None
    if ctx.needs_grad(2):
        steps = ctx.op.Range(ctx.ints(0), ctx.op.Size(dy), ctx.ints(1))
        d_delta = ctx.op.ReduceSum(ctx.op.Mul(dy, ctx.op.CastLike(steps, dy)), keepdims=0)
    return d_start, None, d_delta


def _reshape_back(ctx: GradContext, dy: str) -> Grads:
    """dX = Reshape(dY, Shape(X)): the op only reinterprets the element order."""
    return ctx.op.Reshape(dy, ctx.shape_of(ctx.inputs[0]))


for _op in ("Reshape", "Flatten", "Squeeze", "Unsqueeze"):
    linear("", _op, _reshape_back)


@rule("", "Transpose")
def transpose_grad(ctx: GradContext, dy: str) -> Grads:
    """dX = Transpose(dY, perm⁻¹); the default perm (reversal) is its own inverse."""
    perm = ctx.attr("perm")
    if perm is None:
        return ctx.op.Transpose(dy)
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[int(p)] = i
    if inverse == list(range(len(perm))):
        return dy
    return ctx.op.Transpose(dy, perm=inverse)


@rule("", "Expand")
def expand_grad(ctx: GradContext, dy: str) -> Grads:
    """dX = dY summed over the axes the broadcast created or stretched."""
    return ctx.unbroadcast(dy, ctx.inputs[0])


@rule("", "Tile")
def tile_grad(ctx: GradContext, dy: str) -> Grads:
    """dX[j] = Σ_k dY[k·d + j] per axis: view dY as ``[r0, d0, r1, d1, ...]``, sum the r axes.

    The view is static when the repeats are known and at most one dimension of X is
    not (it becomes -1); otherwise it is interleaved from ``repeats`` and ``Shape(X)``
    at run time.
    """
    x, repeats = ctx.inputs[0], ctx.inputs[1]
    rank = ctx.require_rank(x)
    reps = arg_ints(ctx, 1, "repeats")[1]
    shape = ctx.shape(x) or (None,) * rank
    unknown = sum(1 for d in shape if not isinstance(d, int))
    if reps is not None and unknown <= 1:
        if all(r == 1 for r in reps):
            return dy
        target: list[int] = []
        axes: list[int] = []
        for r, d in zip(reps, shape):
            if r != 1:
                axes.append(len(target))
                target.append(r)
            target.append(d if isinstance(d, int) else -1)
        view = ctx.op.Reshape(dy, ctx.ints(target))
        return ctx.op.ReduceSum(view, ctx.ints(axes), keepdims=0)
    col = ctx.ints([-1, 1])
    pairs = ctx.op.Concat(ctx.op.Reshape(repeats, col), ctx.op.Reshape(ctx.shape_of(x), col), axis=1)
    view = ctx.op.Reshape(dy, ctx.op.Reshape(pairs, ctx.ints([-1])))
    return ctx.op.ReduceSum(view, ctx.ints(list(range(0, 2 * rank, 2))), keepdims=0)


def _dim(shape: tuple[Any, ...] | None, axis: int) -> Any:
    """Dimension ``axis`` of ``shape`` (None when the shape is unknown)."""
    return None if shape is None else shape[axis]


@rule("", "Concat")
def concat_grad(ctx: GradContext, dy: str) -> Grads:
    """dX_i = the i-th piece of Split(dY, [size_0, size_1, ...], axis).

    Sizes known when the pass runs become a constant; the others are read with
    ``Shape(X_i, start=axis, end=axis+1)`` at run time.
    """
    axis = axis_index(int(ctx.attr("axis", 0)), ctx.require_rank(ctx.output(0)))
    xs = ctx.inputs
    if len(xs) == 1:
        return (dy,)
    dims = [_dim(ctx.shape(x), axis) for x in xs]
    if all(isinstance(d, int) for d in dims):
        sizes = ctx.ints(dims)
    else:
        sizes = ctx.op.Concat(*[dim_of(ctx, x, axis) for x in xs], axis=0)
    return tuple(ctx.op.Split(dy, sizes, axis=axis, _outputs=len(xs)))


@rule("", "Split")
def split_grad(ctx: GradContext, dy: str) -> Grads:
    """dX = Concat(dY_0, dY_1, ..., axis), zeros for an output that has no gradient."""
    pieces = [g if g is not None else ctx.zeros_like(out) for g, out in zip(ctx.output_grads, ctx.outputs)]
    if len(pieces) == 1:
        return pieces[0]
    return ctx.op.Concat(*pieces, axis=int(ctx.attr("axis", 0)))


@rule("", "CumSum")
def cumsum_grad(ctx: GradContext, dy: str) -> Grads:
    """dX = CumSum(dY) in the other direction, same ``exclusive``.

    Y_i = Σ_{j≤i} X_j gives dX_j = Σ_{i≥j} dY_i (and strict inequalities when exclusive).
    """
    reverse = int(ctx.attr("reverse", 0))
    return ctx.op.CumSum(dy, ctx.inputs[1], exclusive=int(ctx.attr("exclusive", 0)), reverse=1 - reverse)


# -- selection helpers --------------------------------------------------------------


def _merged_shape(ctx: GradContext, value: str, typed: str, b: int) -> str:
    """``[-1, *Shape(value)[b:]]``: the shape of ``value`` with its first b dims merged.

    A constant when ``typed`` (which has the same shape) is static from dim b on.
    """
    shape = ctx.shape(typed)
    if shape is not None and all(isinstance(d, int) for d in shape[b:]):
        return ctx.ints([-1, *shape[b:]])
    return ctx.op.Concat(ctx.ints([-1]), ctx.op.Shape(value, start=b), axis=0)


def _scalar_dim(ctx: GradContext, name: str, axis: int) -> str:
    """Dimension ``axis`` of ``name`` as an int64 scalar."""
    shape = ctx.shape(name)
    if shape is not None and isinstance(shape[axis], int):
        return ctx.ints(shape[axis])
    return ctx.op.Reshape(ctx.op.Shape(name, start=axis, end=axis + 1), ctx.ints([]))


def _wrap_negative(ctx: GradContext, indices: str, bound: Callable[[], str]) -> str:
    """``i + n`` where ``i < 0``: indices in ``[-n, n)`` made non-negative (skipped when known
    to be), as int64 (the dtype of ``n`` and what ScatterND takes) whatever their own."""
    known = const_ints(ctx, indices)
    if known is not None and all(i >= 0 for i in known):
        return index64(ctx, indices)
    indices = index64(ctx, indices)
    return ctx.op.Where(ctx.op.Less(indices, ctx.ints(0)), ctx.op.Add(indices, bound()), indices)


def _sum(ctx: GradContext, parts: list[str]) -> str:
    if len(parts) == 1:
        return parts[0]
    return ctx.op.Add(*parts) if len(parts) == 2 else ctx.op.Sum(*parts)


# -- Slice ----------------------------------------------------------------------------


@rule("", "Slice")
def slice_grad(ctx: GradContext, dy: str) -> Grads:
    """dX = dY placed back at the sliced positions, zeros elsewhere.

    With known starts/ends/steps and known sizes on the sliced axes: reverse dY on the
    axes with negative steps, spread it with zeros on the axes with |step| > 1
    (``Unsqueeze``, ``Pad`` the new axis to |step|, merge), then one ``Pad`` (negative
    pads crop the overhang of the last stride). Otherwise the positions are computed
    at run time by slicing ``Range(Size(X))`` viewed as X, and dY is scattered there.
    """
    x = ctx.inputs[0]
    rank = ctx.require_rank(x)
    starts_n, starts = arg_ints(ctx, 1, "starts")
    ends_n, ends = arg_ints(ctx, 2, "ends")
    axes_n, axes = arg_ints(ctx, 3, "axes")
    steps_n, steps = arg_ints(ctx, 4, "steps")
    if starts is not None and ends is not None:
        axes = axes if axes_n else list(range(len(starts)))
        steps = steps if steps_n else [1] * len(starts)
        if axes is not None and steps is not None:
            static = _static_slice_grad(ctx, dy, rank, starts, ends, axes, steps)
            if static is not None:
                return static
    size = ctx.op.Size(x)
    positions = ctx.op.Reshape(ctx.op.Range(ctx.ints(0), size, ctx.ints(1)), ctx.shape_of(x))
    picked = ctx.op.Slice(positions, starts_n, ends_n, axes_n or None, steps_n or None)
    flat = ctx.op.Reshape(ctx.zeros_like(x), ctx.ints([-1]))
    placed = ctx.op.ScatterND(flat, ctx.op.Unsqueeze(picked, ctx.ints([-1])), dy)
    return ctx.op.Reshape(placed, ctx.shape_of(x))


def _static_slice_grad(
    ctx: GradContext, dy: str, rank: int, starts: list[int], ends: list[int], axes: list[int], steps: list[int]
) -> str | None:
    shape = ctx.shape(ctx.inputs[0])
    if shape is None:
        return None
    out_shape = list(ctx.shape(ctx.output(0)) or [None] * rank)
    reverse: list[int] = []
    strided: list[tuple[int, int, int]] = []  # (axis, count, |step|)
    padded: list[int] = []
    begins: list[int] = []
    finals: list[int] = []
    for start, end, axis, step in zip(starts, ends, axes, steps):
        a = axis_index(axis, rank)
        d = shape[a]
        if not isinstance(d, int):
            return None
        # (a start before the first element with a negative step is clamped to 0 by the spec)
        picked = range(*slice(0 if step < 0 and start < -d else start, end, step).indices(d))
        n = len(picked)
        if n == 0:
            return ctx.zeros_like(ctx.inputs[0])
        k = abs(step) if n > 1 else 1
        if step < 0 and n > 1:
            reverse.append(a)
        if k > 1:
            strided.append((a, n, k))
        first = min(picked)
        if first or d - first - n * k:
            padded.append(a)
            begins.append(first)
            finals.append(d - first - n * k)
        out_shape[a] = n
    if strided and sum(1 for d in out_shape[min(a for a, _, _ in strided) + 1 :] if not isinstance(d, int)) > 1:
        return None  # the merging Reshapes below allow one unknown dim after the first strided axis
    g = dy
    if reverse:
        m = len(reverse)
        g = ctx.op.Slice(g, ctx.ints([-1] * m), ctx.ints([INT64_MIN] * m), ctx.ints(reverse), ctx.ints([-1] * m))
    for a, n, k in strided:
        spread = pad_axes(ctx, ctx.op.Unsqueeze(g, ctx.ints([a + 1])), rank + 1, [a + 1], [0], [k - 1])
        out_shape[a] = n * k
        # dims before the axis are copied (0); after it, known or the single unknown (-1)
        target = [0 if i < a else d if isinstance(d, int) else -1 for i, d in enumerate(out_shape)]
        g = ctx.op.Reshape(spread, ctx.ints(target))
    if padded:
        g = pad_axes(ctx, g, rank, padded, begins, finals)
    return g


# -- Gather family --------------------------------------------------------------------


@rule("", "Gather")
def gather_grad(ctx: GradContext, dy: str) -> Grads:
    """dX = ScatterND(zeros, indices, dY, reduction="add"), with ``axis`` moved first.

    Negative indices are wrapped (i + n) unless known non-negative; repeated indices
    accumulate. A single constant index i (a scalar or one element) along an axis of
    static size n needs no scatter: dX = Pad(dY, i before and n - 1 - i after on
    ``axis``), dY unsqueezed there first for a scalar index (torch's q/k/v split).
    """
    x, idx = ctx.inputs[0], ctx.inputs[1]
    r, q = ctx.require_rank(x), ctx.require_rank(idx)
    a = axis_index(int(ctx.attr("axis", 0)), r)
    known, shape = const_ints(ctx, idx), ctx.shape(x)
    if known is not None and len(known) == 1 and q <= 1 and shape is not None and isinstance(shape[a], int):
        n = shape[a]
        i = known[0] + n if known[0] < 0 else known[0]
        g = ctx.op.Unsqueeze(dy, ctx.ints([a])) if q == 0 else dy
        return pad_axes(ctx, g, r, [a], [i], [n - 1 - i])
    where = ctx.op.Unsqueeze(_wrap_negative(ctx, idx, lambda: _scalar_dim(ctx, x, a)), ctx.ints([-1]))
    if a == 0:
        return ctx.op.ScatterND(ctx.zeros_like(x), where, dy, reduction="add")
    perm_x = [a] + [i for i in range(r) if i != a]
    perm_dy = list(range(a, a + q)) + list(range(a)) + list(range(a + q, r - 1 + q))
    g = dy if perm_dy == sorted(perm_dy) else ctx.op.Transpose(dy, perm=perm_dy)
    shape = ctx.static_shape(x)
    if shape is not None:
        zeros = zeros_of_shape(ctx, ctx.ints([shape[i] for i in perm_x]), x)
    else:
        zeros = ctx.op.Transpose(ctx.zeros_like(x), perm=perm_x)
    placed = ctx.op.ScatterND(zeros, where, g, reduction="add")
    inverse = [perm_x.index(i) for i in range(r)]
    return ctx.op.Transpose(placed, perm=inverse)


@rule("", "GatherElements")
def gather_elements_grad(ctx: GradContext, dy: str) -> Grads:
    """dX = ScatterElements(zeros, indices, dY, axis, reduction="add")."""
    x, idx = ctx.inputs[0], ctx.inputs[1]
    return ctx.op.ScatterElements(ctx.zeros_like(x), idx, dy, axis=int(ctx.attr("axis", 0)), reduction="add")


@rule("", "GatherND")
def gather_nd_grad(ctx: GradContext, dy: str) -> Grads:
    """dX = ScatterND(zeros, indices, dY, reduction="add").

    With ``batch_dims`` b > 0, X, indices and dY are viewed with their b batch dims
    merged into one of size B, and each index tuple is prefixed with its batch number
    (``Range(B)`` expanded), which makes it an ordinary ScatterND into ``[B, ...]``.
    """
    x, idx = ctx.inputs[0], ctx.inputs[1]
    b = int(ctx.attr("batch_dims", 0))
    idx_shape = ctx.shape(idx)
    if idx_shape is None or not isinstance(idx_shape[-1], int):
        raise ctx.error("needs the static size of the last dimension of the indices")
    k = idx_shape[-1]

    def bounds() -> str:
        shape = ctx.shape(x)
        if shape is not None and all(isinstance(d, int) for d in shape[b : b + k]):
            return ctx.ints(list(shape[b : b + k]))
        return ctx.op.Shape(x, start=b, end=b + k)

    idx_n = _wrap_negative(ctx, idx, bounds)
    if b == 0:
        return ctx.op.ScatterND(ctx.zeros_like(x), idx_n, dy, reduction="add")
    x_view = _merged_shape(ctx, x, x, b)
    idx_view = ctx.op.Reshape(idx_n, _merged_shape(ctx, idx, idx, b))
    dy_view = ctx.op.Reshape(dy, _merged_shape(ctx, dy, ctx.output(0), b))
    middle = len(idx_shape) - b - 1
    static_idx = ctx.static_shape(idx)
    if static_idx is not None:
        count = int(np.prod(static_idx[:b], dtype=np.int64))
        column = np.arange(count, dtype=np.int64).reshape([-1] + [1] * (middle + 1))
        numbers = np.ascontiguousarray(np.broadcast_to(column, (count, *static_idx[b:-1], 1)))
    else:
        batches = ctx.op.Reshape(ctx.op.Shape(idx_view, start=0, end=1), ctx.ints([]))
        column = ctx.op.Reshape(ctx.op.Range(ctx.ints(0), batches, ctx.ints(1)), ctx.ints([-1] + [1] * (middle + 1)))
        numbers = ctx.op.Expand(column, ctx.op.Concat(ctx.op.Shape(idx_view, end=-1), ctx.ints([1]), axis=0))
    full = ctx.op.Concat(numbers, idx_view, axis=-1)
    placed = ctx.op.ScatterND(ctx.op.Reshape(ctx.zeros_like(x), x_view), full, dy_view, reduction="add")
    return ctx.op.Reshape(placed, ctx.shape_of(x))


# -- Scatter family -------------------------------------------------------------------


def _check_reduction(ctx: GradContext) -> str:
    reduction = ctx.attr("reduction", "none")
    if reduction not in ("none", "add", "max", "min"):
        raise ctx.error(
            f"reduction={reduction!r} is not differentiated: the gradient of a colliding update is "
            "the product of the others, which no standard op computes without dividing by zero; "
            "'none', 'add', 'max' and 'min' have rules"
        )
    return str(reduction)


def _extremum_grads(
    ctx: GradContext, dy: str, gather: Callable[[str], str], scatter_add: Callable[[str, str], str]
) -> Any:
    """reduction max/min: Y[t] is the largest (smallest) of Data[t] and the updates written
    to t; dY[t] goes to those equal to Y[t], shared equally among ties (as Max/Min do)."""
    data, _, updates = ctx.inputs[:3]
    y = ctx.output(0)
    at_data = ctx.op.CastLike(ctx.op.Equal(data, y), dy)
    at_update = ctx.op.CastLike(ctx.op.Equal(updates, gather(y)), dy)
    share = ctx.op.Div(dy, scatter_add(at_data, at_update))  # the count is at least 1
    d_data = ctx.op.Mul(share, at_data) if ctx.needs_grad(0) else None
    d_updates = ctx.op.Mul(gather(share), at_update) if ctx.needs_grad(2) else None
    return d_data, None, d_updates


@rule("", "ScatterElements")
def scatter_elements_grad(ctx: GradContext, dy: str) -> Grads:
    """dData = dY with the scattered positions zeroed ('none') or dY ('add');
    dUpdates = GatherElements(dY, indices, axis), masked for 'none' to the updates that
    win a collision (the last written, see ``_winners``): the others left no trace in Y.
    """
    data, idx, updates = ctx.inputs[:3]
    axis = int(ctx.attr("axis", 0))
    reduction = _check_reduction(ctx)
    if reduction in ("max", "min"):
        return _extremum_grads(
            ctx,
            dy,
            lambda v: ctx.op.GatherElements(v, idx, axis=axis),
            lambda base, add: ctx.op.ScatterElements(base, idx, add, axis=axis, reduction="add"),
        )
    d_data = d_updates = None
    if ctx.needs_grad(0):
        d_data = dy if reduction == "add" else ctx.op.ScatterElements(dy, idx, ctx.zeros_like(updates), axis=axis)
    if ctx.needs_grad(2):
        d_updates = ctx.op.GatherElements(dy, idx, axis=axis)
        if reduction == "none":
            d_updates = _winners(ctx, d_updates, _element_targets, axis)
    return d_data, None, d_updates


@rule("", "ScatterND")
def scatter_nd_grad(ctx: GradContext, dy: str) -> Grads:
    """dData = dY with the scattered positions zeroed ('none') or dY ('add');
    dUpdates = GatherND(dY, indices), masked for 'none' to the updates that win a
    collision (the last written, see ``_winners``)."""
    data, idx, updates = ctx.inputs[:3]
    reduction = _check_reduction(ctx)
    if reduction in ("max", "min"):
        return _extremum_grads(
            ctx,
            dy,
            lambda v: ctx.op.GatherND(v, idx),
            lambda base, add: ctx.op.ScatterND(base, idx, add, reduction="add"),
        )
    d_data = d_updates = None
    if ctx.needs_grad(0):
        d_data = dy if reduction == "add" else ctx.op.ScatterND(dy, idx, ctx.zeros_like(updates))
    if ctx.needs_grad(2):
        d_updates = ctx.op.GatherND(dy, idx)
        if reduction == "none":
            d_updates = _winners(ctx, d_updates, _nd_targets, None)
    return d_data, None, d_updates


def _winners(ctx: GradContext, g: str, targets: Callable[..., list[tuple[int, ...]] | None], axis: int | None) -> str:
    """``g`` (dUpdates) zeroed where another update overwrote this one's target.

    Updates are written in index order, so the last one to a target wins (as onnxruntime
    and the spec's reference write them). With indices known when the pass runs, the mask
    is a constant (none when nothing collides). Otherwise the update positions
    themselves are scattered like the updates, gathered back, and compared: an update
    wins where it reads back its own position.
    """
    data, idx, updates = ctx.inputs[:3]
    known, shape = ctx.value(idx), ctx.static_shape(data)
    if known is not None and shape is not None:
        where = targets(np.asarray(known), shape, axis)
        if where is not None:
            last = {t: k for k, t in enumerate(where)}
            win = np.array([last[t] == k for k, t in enumerate(where)])
            if win.all():
                return g
            mask = win.reshape(np.asarray(known).shape[: None if axis is not None else -1])
            if axis is None:  # one flag per index tuple, broadcast over the slice it writes
                mask = mask.reshape(mask.shape + (1,) * (len(shape) - np.asarray(known).shape[-1]))
            return ctx.op.Mul(g, ctx.const(mask.astype(np.float64), like=g))
    if axis is not None:  # ScatterElements: one position per update element
        count, pos_shape = ctx.op.Size(updates), ctx.shape_of(updates)
        table = ctx.op.ConstantOfShape(ctx.shape_of(data), value=_int64_fill(-1))
    else:  # ScatterND: one position per index tuple
        pos_shape = ctx.op.Shape(idx, end=-1)
        count = ctx.op.ReduceProd(pos_shape, keepdims=0)
        k = ctx.op.Shape(idx, start=-1)
        table = ctx.op.ConstantOfShape(ctx.op.Slice(ctx.shape_of(data), ctx.ints([0]), k), value=_int64_fill(-1))
    pos = ctx.op.Reshape(ctx.op.Range(ctx.ints(0), count, ctx.ints(1)), pos_shape)
    if axis is not None:
        back = ctx.op.GatherElements(ctx.op.ScatterElements(table, idx, pos, axis=axis), idx, axis=axis)
        mask = ctx.op.Equal(back, pos)
    else:
        back = ctx.op.GatherND(ctx.op.ScatterND(table, idx, pos), idx)
        # [1] * (rank(data) - k): the slice each tuple writes
        tail = ctx.op.ConstantOfShape(ctx.op.Sub(ctx.op.Size(ctx.shape_of(data)), k), value=_int64_fill(1))
        mask = ctx.op.Reshape(ctx.op.Equal(back, pos), ctx.op.Concat(pos_shape, tail, axis=0))
    return ctx.op.Where(mask, g, ctx.const(0.0, like=g))


def _int64_fill(value: int) -> Any:
    """The ``value`` attribute of an int64 ConstantOfShape."""
    return from_array(np.array([value], np.int64))


def _element_targets(idx: np.ndarray, shape: tuple[int, ...], axis: int) -> list[tuple[int, ...]] | None:
    """The element of data each ScatterElements update writes, in write order."""
    a = axis_index(axis, len(shape))
    out = []
    for u in np.ndindex(*idx.shape):
        i = int(idx[u])
        out.append(u[:a] + (i + shape[a] if i < 0 else i,) + u[a + 1 :])
    return out


def _nd_targets(idx: np.ndarray, shape: tuple[int, ...], _axis: None) -> list[tuple[int, ...]] | None:
    """The slice of data (its leading index tuple) each ScatterND index tuple writes, in write order."""
    k = idx.shape[-1]
    flat = idx.reshape(-1, k)
    return [tuple(int(i) + d if i < 0 else int(i) for i, d in zip(row, shape)) for row in flat]


@rule("", "TopK")
def topk_grad(ctx: GradContext, dy: str) -> Grads:
    """dX = ScatterElements(zeros, Indices, dValues, axis, reduction="add"); Indices pass nothing."""
    if dy is None:
        return None
    x = ctx.inputs[0]
    axis = int(ctx.attr("axis", -1))
    return ctx.op.ScatterElements(ctx.zeros_like(x), ctx.output(1), dy, axis=axis, reduction="add")


# -- Pad ------------------------------------------------------------------------------


@rule("", "Pad")
def pad_grad(ctx: GradContext, dy: str) -> Grads:
    """Constant mode: dX = Pad(dY, -pads), i.e. dY cropped to X (negative pads, which
    cropped X, become zeros); dValue = ΣdY - ΣdX, the sum over the padded border.

    edge / reflect / wrap (known non-negative pads and sizes): per padded axis, dX is
    the centre of dY plus its borders folded back onto the positions they copied:
    summed onto the first/last element (edge), reversed onto positions 1..p / n-1-p..n-2
    (reflect), or placed at the other end (wrap). Pads or sizes known only at run time
    (pads computed from ``Shape``) route dY through the padded source index
    (``_pad_by_source_index``).
    """
    x = ctx.inputs[0]
    mode = ctx.attr("mode", "constant")
    pads_n, pads = arg_ints(ctx, 1, "pads")
    axes_n, axes = arg_ints(ctx, 3, "axes")
    if mode == "constant":
        rank = ctx.rank(x)
        if pads is not None and rank is not None and (not axes_n or axes is not None):
            at = [axis_index(a, rank) for a in axes] if axes_n and axes is not None else list(range(rank))
            m = len(at)
            dx = pad_axes(ctx, dy, rank, at, [-p for p in pads[:m]], [-p for p in pads[m:]])
        else:
            neg = ctx.ints([-p for p in pads]) if pads is not None else ctx.op.Neg(pads_n)
            dx = ctx.op.Pad(dy, neg, None, axes_n or None)
        d_value = None
        if ctx.needs_grad(2):
            d_value = ctx.op.Sub(ctx.op.ReduceSum(dy, keepdims=0), ctx.op.ReduceSum(dx, keepdims=0))
            if ctx.rank(ctx.inputs[2]) != 0:
                d_value = ctx.op.Reshape(d_value, ctx.shape_of(ctx.inputs[2]))
        return (dx, None, d_value)[: len(ctx.inputs)]
    if mode not in ("edge", "reflect", "wrap"):
        raise ctx.error(f"unknown pad mode {mode!r}; the modes are constant, reflect, edge and wrap")
    folds = _border_folds(ctx, pads, axes_n, axes, mode)
    if folds is None:
        return _pad_by_source_index(ctx, dy, pads_n, axes_n)
    g = dy
    for a, d, b, e in folds:
        g = _fold_border(ctx, g, mode, a, d, b, e)
    return g


def _border_folds(
    ctx: GradContext, pads: list[int] | None, axes_n: str, axes: list[int] | None, mode: str
) -> list[tuple[int, int, int, int]] | None:
    """(axis, size, begin, end) of each padded axis when pads, axes and the padded sizes
    are known when the pass runs and the pads are non-negative and within reach of the
    border folds; else None (the gradient then goes through the source index)."""
    rank = ctx.rank(ctx.inputs[0])
    if pads is None or rank is None:
        return None
    if axes_n:
        if axes is None:
            return None
        at = [axis_index(a, rank) for a in axes]
    else:
        at = list(range(rank))
    shape = ctx.require_shape(ctx.inputs[0])  # known: the rank is
    m = len(at)
    folds = []
    for i, a in enumerate(at):
        b, e = pads[i], pads[i + m]
        if b == 0 and e == 0:
            continue
        d = shape[a]
        limit = d - 1 if isinstance(d, int) and mode == "reflect" else d
        if not isinstance(d, int) or b < 0 or e < 0 or b > limit or e > limit:
            return None
        folds.append((a, d, b, e))
    return folds


def _pad_by_source_index(ctx: GradContext, dy: str, pads: str, axes: str) -> str:
    """dX = ScatterElements-add of dY into zeros(X) at J = Pad(I, pads, mode) (flattened),
    with I[p] = p the flat position of each element of X.

    Pad moves indices as it moves values, so J names for every output cell the input
    cell it copies; this holds for pads and sizes known only at run time, negative pads
    (crops) and any mode.
    """
    x = ctx.inputs[0]
    shape = ctx.shape_of(x)
    flat = ctx.ints([-1])
    positions = ctx.op.Reshape(ctx.op.Range(ctx.ints(0), ctx.op.Size(x), ctx.ints(1)), shape)
    source = ctx.op.Pad(positions, pads, None, axes or None, mode=ctx.attr("mode"))
    zeros = ctx.op.Reshape(ctx.zeros_like(x), flat)
    summed = ctx.op.ScatterElements(zeros, ctx.op.Reshape(source, flat), ctx.op.Reshape(dy, flat), reduction="add")
    dx: str = ctx.op.Reshape(summed, shape)
    return dx


def _fold_border(ctx: GradContext, g: str, mode: str, a: int, d: int, b: int, e: int) -> str:
    """Folds the padded border of ``g`` on axis ``a`` (size d + b + e) back onto size d."""
    ax = ctx.ints([a])
    rank = ctx.require_rank(ctx.inputs[0])

    def place(part: str, before: int, after: int) -> str:
        return pad_axes(ctx, part, rank, [a], [before], [after])

    def reverse(part: str) -> str:
        return ctx.op.Slice(part, ctx.ints([-1]), ctx.ints([INT64_MIN]), ax, ctx.ints([-1]))

    parts = [ctx.op.Slice(g, ctx.ints([b]), ctx.ints([b + d]), ax)]
    if b:
        head = ctx.op.Slice(g, ctx.ints([0]), ctx.ints([b]), ax)
        if mode == "edge":
            parts.append(place(ctx.op.ReduceSum(head, ax, keepdims=1), 0, d - 1))
        elif mode == "reflect":
            parts.append(place(reverse(head), 1, d - 1 - b))
        else:
            parts.append(place(head, d - b, 0))
    if e:
        tail = ctx.op.Slice(g, ctx.ints([b + d]), ctx.ints([INT64_MAX]), ax)
        if mode == "edge":
            parts.append(place(ctx.op.ReduceSum(tail, ax, keepdims=1), d - 1, 0))
        elif mode == "reflect":
            parts.append(place(reverse(tail), d - 1 - e, 1))
        else:
            parts.append(place(tail, 0, d - e))
    return _sum(ctx, parts)


# -- forward rules: layout ops are linear in their data input(s) ---------------------------
for _op in ("Transpose", "Expand", "Tile", "CumSum", "Slice", "Gather", "GatherElements", "GatherND"):
    jvp_rule("", _op)(same_op(0))
jvp_rule("", "Split")(same_op(0))
_scatter_linear_jvp = same_op(0, 2)


@jvp_rule("", "ScatterElements", "ScatterND")
def scatter_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """reduction none/add: tY = Scatter(tData, indices, tUpdates) (the op is linear in both).

    max/min: the transpose of the reverse rule's sharing among ties, tY[t] = (at_data tData[t]
    + sum of at_update tUpdates written to t) / count[t], with at_* the indicators of the
    values equal to Y[t] and count their number (at least 1)."""
    reduction = _check_reduction(ctx)
    if reduction not in ("max", "min"):
        return _scatter_linear_jvp(ctx, ts)
    data, idx, updates = ctx.inputs[:3]
    y = ctx.output(0)
    if ctx.node.op_type == "ScatterElements":
        axis = int(ctx.attr("axis", 0))
        picked = ctx.op.GatherElements(y, idx, axis=axis)

        def scatter_add(base: str, add: str) -> str:
            return ctx.op.ScatterElements(base, idx, add, axis=axis, reduction="add")
    else:
        picked = ctx.op.GatherND(y, idx)

        def scatter_add(base: str, add: str) -> str:
            return ctx.op.ScatterND(base, idx, add, reduction="add")

    at_data = ctx.op.CastLike(ctx.op.Equal(data, y), data)
    at_update = ctx.op.CastLike(ctx.op.Equal(updates, picked), updates)
    t_data = ctx.op.Mul(ts[0], at_data) if ts[0] is not None else ctx.zeros_like(data)
    t_updates = ctx.op.Mul(ts[2], at_update) if len(ts) > 2 and ts[2] is not None else ctx.zeros_like(updates)
    return ctx.op.Div(scatter_add(t_data, t_updates), scatter_add(at_data, at_update))


@jvp_rule("", "Range")
def range_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """Y_i = start + i * delta: tY_i = tStart + i * tDelta (limit only sets the length)."""
    t_start, t_delta = ts[0], ts[2] if len(ts) > 2 else None
    if t_start is None and t_delta is None:
        return None
    y = ctx.output(0)
    terms: list[str] = []
    if t_delta is not None:
        steps = ctx.op.Range(ctx.ints(0), ctx.op.Size(y), ctx.ints(1))
        terms.append(ctx.op.Mul(ctx.op.CastLike(steps, y), t_delta))
    if t_start is not None:
        terms.append(ctx.op.Expand(t_start, ctx.op.Shape(y)))
    return terms[0] if len(terms) == 1 else ctx.op.Add(*terms)


@jvp_rule("", "Concat")
def concat_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """tY = Concat(tX_i), zeros where an input has no tangent."""
    return same_op(*range(len(ctx.inputs)))(ctx, ts)


@jvp_rule("", "TopK")
def topk_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """tValues = GatherElements(tX, Indices, axis)."""
    if ts[0] is None:
        return None
    axis = ctx.attr("axis", -1)
    return ctx.op.GatherElements(ts[0], ctx.forward_output(1), axis=axis), None


@jvp_rule("", "Pad")
def pad_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """Pad is linear in (X, constant_value) jointly: tY = Pad(tX, pads, tValue) (0 for an
    absent tangent; the opset-2 ``value`` attribute has none)."""
    tv = ts[2] if len(ts) > 2 else None
    if ts[0] is None and tv is None:
        return None
    inputs = [ts[0] if ts[0] is not None else ctx.zeros_like(ctx.inputs[0]), *ctx.inputs[1:]]
    if len(inputs) > 2:
        inputs[2] = tv or ""
    extra = {"value": 0.0} if "value" in ctx.attrs else {}
    return ctx.emit_like(inputs, **extra)


# -- what these rules refuse (the README's table) ----------------------------------------------
refuses(
    "",
    "ScatterElements",
    "ScatterND",
    what="`reduction` mul",
    why="a colliding update's gradient is the product of the others (max and min share dY among ties)",
)
refuses(
    "",
    "Pad",
    what="edge/reflect/wrap with pads known only at run time, negative pads, or symbolic padded axes; "
    "reflect with a pad >= the dim, wrap with a pad > the dim",
    why="the border is folded back with static slices",
)
