"""Rules for the ops that select, reorder or place elements beyond ``tensor.py``: Trilu,
ReverseSequence, Compress, Unique, the deprecated Scatter and TensorScatter.

Each is linear in its data input(s), so its gradient is the adjoint applied to ``dY``
(the op itself for the self-adjoint masks and reversals, a scatter back to the source
positions for the selections) and its forward rule is the op applied to the tangent.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...onnx_core.gradient import GradContext, Grads, TangentContext, Tangents, same_op
from ._table import jvp_rule, linear, rule
from ._tensor_common import axis_index, index64, positions
from .tensor import scatter_elements_grad, scatter_jvp


def _same_op_on_dy(ctx: GradContext, dy: str) -> Grads:
    """dX = the op applied to dY (its other inputs and attributes kept): Trilu keeps the
    same triangle, ReverseSequence reverses the same prefixes back (both self-adjoint)."""
    inputs = [dy, *ctx.inputs[1:]]
    return getattr(ctx.op, ctx.node.op_type)(*inputs, **ctx.attrs)


linear("", "Trilu", _same_op_on_dy)
linear("", "ReverseSequence", _same_op_on_dy)


@rule("", "Compress")
def compress_grad(ctx: GradContext, dy: str) -> Grads:
    """dX = dY scattered back where the kept elements came from, zeros elsewhere.

    The positions are those of ``Compress(P, condition, axis)`` with ``P[i] = i`` the flat
    position of each element of X (computed at run time: the condition is data).
    """
    x, condition = ctx.inputs[:2]
    positions = ctx.op.Reshape(ctx.op.Range(ctx.ints(0), ctx.op.Size(x), ctx.ints(1)), ctx.shape_of(x))
    picked = ctx.op.Compress(positions, condition, **ctx.attrs)
    flat = ctx.op.Reshape(ctx.zeros_like(x), ctx.ints([-1]))
    placed = ctx.op.ScatterND(flat, ctx.op.Unsqueeze(picked, ctx.ints([-1])), dy)
    return ctx.op.Reshape(placed, ctx.shape_of(x)), None


jvp_rule("", "Compress")(same_op(0))


def _unique_counts(ctx: GradContext, like: str, axis: int | None, rank: int) -> str:
    """``counts`` as ``like``'s dtype, shaped to broadcast along ``axis`` of Y."""
    counts = ctx.op.CastLike(ctx.forward_output(3), like)
    if axis is None:
        return counts
    return ctx.op.Reshape(counts, ctx.ints([1] * axis + [-1] + [1] * (rank - axis - 1)))


def _unique_axis(ctx: GradContext) -> tuple[int | None, int]:
    rank = ctx.require_rank(ctx.inputs[0])
    axis = ctx.attr("axis")
    return (None if axis is None else axis_index(int(axis), rank)), rank


@rule("", "Unique")
def unique_grad(ctx: GradContext, dy: str) -> Grads:
    """dX = Gather(dY / counts, inverse_indices, axis): each element (slice) of X gets the
    gradient of the unique value it equals, shared equally among its duplicates.

    This is the gradient of Y as the mean of each group of equal elements (the same Y,
    duplicates being equal): the documented choice at duplicates, where Unique itself has
    no derivative (moving one duplicate alone splits a value). Without duplicates it is
    the exact derivative. The other outputs are integers and pass nothing.
    """
    if dy is None:
        return None
    x = ctx.inputs[0]
    axis, rank = _unique_axis(ctx)
    share = ctx.op.Div(dy, _unique_counts(ctx, dy, axis, rank))
    inverse = ctx.forward_output(2)
    if axis is None:
        return ctx.op.Reshape(ctx.op.Gather(share, inverse), ctx.shape_of(x))
    return ctx.op.Gather(share, inverse, axis=axis)


@jvp_rule("", "Unique")
def unique_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """tY = the mean of tX over each group of equal elements (slices): a ScatterND-add of
    tX by inverse_indices (along ``axis`` moved first), divided by counts."""
    tx = ts[0]
    if tx is None:
        return None
    axis, rank = _unique_axis(ctx)
    y, inverse = ctx.output(0), ctx.forward_output(2)
    where = ctx.op.Unsqueeze(inverse, ctx.ints([-1]))
    if axis is None:
        summed = ctx.op.ScatterND(ctx.zeros_like(y), where, ctx.op.Reshape(tx, ctx.ints([-1])), reduction="add")
    else:
        perm = [axis, *(i for i in range(rank) if i != axis)]
        back = [perm.index(i) for i in range(rank)]
        zeros = ctx.op.Transpose(ctx.zeros_like(y), perm=perm)
        moved = ctx.op.ScatterND(zeros, where, ctx.op.Transpose(tx, perm=perm), reduction="add")
        summed = ctx.op.Transpose(moved, perm=back)
    return ctx.op.Div(summed, _unique_counts(ctx, tx, axis, rank)), None, None, None


# the deprecated Scatter (opsets 9-10) is ScatterElements without reduction (the pass
# upgrades it to ScatterElements from opset 11 on; this entry serves older target opsets)
rule("", "Scatter")(scatter_elements_grad)
jvp_rule("", "Scatter")(scatter_jvp)


def _tensor_scatter_positions(ctx: GradContext, axis: int, rank: int) -> str:
    """For each element of ``update``, its position along ``axis`` in the cache:
    ``write_indices[b] + s`` (modulo the cache length in circular mode), int64."""
    cache, update = ctx.inputs[:2]
    s = positions(ctx, update, axis)
    s = ctx.op.Reshape(s, ctx.ints([1] * axis + [-1] + [1] * (rank - axis - 1)))
    write = ctx.input(2)
    if write:
        w = ctx.op.Reshape(index64(ctx, write), ctx.ints([-1] + [1] * (rank - 1)))
        s = ctx.op.Add(s, w)
        if ctx.attr("mode", "linear") == "circular":
            s = ctx.op.Mod(s, ctx.op.Shape(cache, start=axis, end=axis + 1))
    return ctx.op.Expand(s, ctx.shape_of(update))


@rule("", "TensorScatter")
def tensor_scatter_grad(ctx: GradContext, dy: str) -> Grads:
    """dPast = dY with the written positions zeroed (TensorScatter of zeros into dY);
    dUpdate = GatherElements(dY, write_indices[b] + s, axis) (modulo the cache length in
    circular mode); write_indices pass nothing."""
    cache, update = ctx.inputs[:2]
    rank = ctx.require_rank(cache)
    axis = axis_index(int(ctx.attr("axis", -2)), rank)
    d_past = d_update = None
    if ctx.needs_grad(0):
        d_past = ctx.op.TensorScatter(dy, ctx.zeros_like(update), *ctx.inputs[2:], **ctx.attrs)
    if ctx.needs_grad(1):
        d_update = ctx.op.GatherElements(dy, _tensor_scatter_positions(ctx, axis, rank), axis=axis)
    return (d_past, d_update, None)[: len(ctx.inputs)]


jvp_rule("", "TensorScatter")(same_op(0, 1))
