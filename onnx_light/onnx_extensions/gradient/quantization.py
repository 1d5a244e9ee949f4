"""Rules for the quantization ops.

DequantizeLinear ``Y = (X - zero_point) * scale`` is differentiated in ``scale`` (per
tensor, per axis or per block); X and the zero point are integers (or float8/int4 bit
patterns) and carry no gradient.

QuantizeLinear is declared without gradient: its output is an integer (or float8) tensor,
a step function of X whose derivative is zero almost everywhere, and the pass carries no
gradient through integer values, so a Q -> DQ pair passes none to X (the true derivative;
the straight-through estimator of quantization-aware training is a modelling choice the
pass does not make, it would need gradients carried through integer values). Differentiate
the float model (before quantization) for QAT, or register a rule for a custom fake-quant op.
The integer products (MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv) have integer
outputs and are declared without gradient for the same reason. (DynamicQuantizeLinear is
not: its float ``y_scale`` depends on max(X) and min(X); it has no rule yet.)
"""

from __future__ import annotations

from collections.abc import Sequence

from ...onnx_core.gradient import GradContext, Grads, TangentContext, Tangents
from ._table import jvp_rule, no_grad, rule
from ._tensor_common import norm_axis, positions

no_grad("", "QuantizeLinear")
no_grad("", "MatMulInteger", "ConvInteger", "QLinearMatMul", "QLinearConv")


def _layout(ctx: GradContext) -> tuple[str, int, int]:
    """("tensor" | "axis" | "block", axis, rank) of a DequantizeLinear node's scale."""
    rank = ctx.require_rank(ctx.inputs[0])
    axis = norm_axis(int(ctx.attr("axis", 1)), rank) if rank else 0
    if int(ctx.attr("block_size", 0)) > 0:
        return "block", axis, rank
    scale_rank = ctx.require_rank(ctx.inputs[1])
    return ("tensor" if scale_rank == 0 else "axis"), axis, rank


def _block_index(ctx: GradContext, axis: int) -> str:
    """For each position along ``axis`` of X, the block it belongs to (``i // block_size``),
    expanded to X's shape."""
    x = ctx.inputs[0]
    rank = ctx.require_rank(x)
    idx = ctx.op.Div(positions(ctx, x, axis), ctx.ints(int(ctx.attr("block_size"))))
    idx = ctx.op.Reshape(idx, ctx.ints([1] * axis + [-1] + [1] * (rank - axis - 1)))
    return ctx.op.Expand(idx, ctx.shape_of(x))


def _spread(ctx: GradContext, v: str) -> str:
    """A scale-shaped ``v`` (scale, zero point or a tangent) laid out to broadcast against X."""
    layout, axis, rank = _layout(ctx)
    if layout == "tensor":
        return v
    if layout == "axis":
        return ctx.op.Reshape(v, ctx.ints([1] * axis + [-1] + [1] * (rank - axis - 1)))
    return ctx.op.GatherElements(v, _block_index(ctx, axis), axis=axis)


def _centred(ctx: GradContext, like: str) -> str:
    """X - zero_point, in ``like``'s float type."""
    centred = ctx.op.CastLike(ctx.inputs[0], like)
    zp = ctx.input(2)
    return ctx.op.Sub(centred, _spread(ctx, ctx.op.CastLike(zp, like))) if zp else centred


@rule("", "DequantizeLinear", nondiff=(0, 2))
def dequantize_linear_grad(ctx: GradContext, dy: str) -> Grads:
    """dScale = Σ (X - zero_point) dY over the elements each scale entry multiplies: all of
    them (per tensor), all but ``axis`` (per axis), or each block along ``axis`` (blocked,
    the last block possibly shorter)."""
    if not ctx.needs_grad(1):
        return None
    scale = ctx.inputs[1]
    layout, axis, rank = _layout(ctx)
    g = ctx.op.Mul(_centred(ctx, dy), dy)
    if layout == "tensor":
        ds = ctx.op.Reshape(ctx.op.ReduceSum(g, keepdims=0), ctx.shape_of(scale))
    elif layout == "axis":
        others = [i for i in range(rank) if i != axis]
        ds = ctx.op.ReduceSum(g, ctx.ints(others), keepdims=0) if others else g
    else:
        ds = ctx.op.ScatterElements(ctx.zeros_like(scale), _block_index(ctx, axis), g, axis=axis, reduction="add")
    return None, ctx.op.CastLike(ds, scale), None


@jvp_rule("", "DequantizeLinear")
def dequantize_linear_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """tY = (X - zero_point) * tScale (tScale laid out per tensor, axis or block)."""
    t = ts[1] if len(ts) > 1 else None
    if t is None:
        return None
    y = ctx.output(0)
    return ctx.op.Mul(_centred(ctx, y), _spread(ctx, ctx.op.CastLike(t, y)))
