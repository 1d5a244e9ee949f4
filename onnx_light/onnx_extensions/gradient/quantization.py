"""Rules for the quantization ops.

DequantizeLinear ``Y = (X - zero_point) * scale`` is differentiated in ``scale`` (per
tensor, per axis or per block); the zero point is an integer and carries no gradient.

QuantizeLinear gets the straight-through estimator of quantization-aware training (what
torch's FakeQuantize and onnxruntime's FakeQuant do): its integer output is a step
function of X whose true derivative is zero almost everywhere, so a QuantizeLinear ->
DequantizeLinear pair would pass no gradient to the weights behind it. Instead the pair
passes one through the integer value (``straight_through=True`` on both rules): dQ = dY *
scale from DequantizeLinear, then dX = dQ / scale where X was not clipped (zero where it
saturated), and dScale = -dQ * X / scale² there (with DequantizeLinear's own (Q - zp) * dY
this is the LSQ gradient of the scale). This is a documented choice, not the derivative:
finite differences do not check it (see tests/gradient/test_rules_misc.py). Only these two
ops pass gradients through the integer value; any other op reading it passes none.

The integer products (MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv) have integer
outputs and are declared without gradient. (DynamicQuantizeLinear has no rule: its float
``y_scale`` depends on max(X) and min(X).)
"""

from __future__ import annotations

from collections.abc import Sequence

from ...onnx_core.gradient import GradContext, Grads, TangentContext, Tangents
from ._table import jvp_rule, no_grad, refuses, rule
from ._tensor_common import axis_index, positions

no_grad("", "MatMulInteger", "ConvInteger", "QLinearMatMul", "QLinearConv")


def _layout(ctx: GradContext) -> tuple[str, int, int]:
    """("tensor" | "axis" | "block", axis, rank) of a DequantizeLinear node's scale."""
    rank = ctx.require_rank(ctx.inputs[0])
    blocked = int(ctx.attr("block_size", 0)) > 0
    if not blocked and ctx.require_rank(ctx.inputs[1]) == 0:
        return "tensor", 0, rank  # a scalar scale: the spec ignores ``axis``
    axis = axis_index(int(ctx.attr("axis", 1)), rank) if rank else 0
    return ("block" if blocked else "axis"), axis, rank


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


def _sum_to_scale(ctx: GradContext, g: str) -> str:
    """``g`` (shaped like X) summed over the elements each scale entry multiplies: all of
    them (per tensor), all but ``axis`` (per axis), each block along ``axis`` (blocked, the
    last block possibly shorter); in the scale's type."""
    scale = ctx.inputs[1]
    layout, axis, rank = _layout(ctx)
    if layout == "tensor":
        ds = ctx.op.Reshape(ctx.op.ReduceSum(g, keepdims=0), ctx.shape_of(scale))
    elif layout == "axis":
        others = [i for i in range(rank) if i != axis]
        ds = ctx.op.ReduceSum(g, ctx.ints(others), keepdims=0) if others else g
    else:
        ds = ctx.op.ScatterElements(ctx.zeros_like(scale), _block_index(ctx, axis), g, axis=axis, reduction="add")
    return ctx.op.CastLike(ds, scale)


def _scale_like(ctx: GradContext, like: str) -> str:
    """The scale laid out against X, in ``like``'s type."""
    return _spread(ctx, ctx.op.CastLike(ctx.inputs[1], like))


@rule("", "DequantizeLinear", nondiff=(0, 2), straight_through=True)
def dequantize_linear_grad(ctx: GradContext, dy: str) -> Grads:
    """dScale = Σ (X - zero_point) dY per scale entry (``_sum_to_scale``); dX = dY * scale,
    a float gradient for the integer X only when a QuantizeLinear produced it (the
    straight-through estimator, module docstring)."""
    dx = ctx.op.Mul(dy, _scale_like(ctx, dy)) if ctx.needs_grad(0) else None
    ds = _sum_to_scale(ctx, ctx.op.Mul(_centred(ctx, dy), dy)) if ctx.needs_grad(1) else None
    return dx, ds, None


@jvp_rule("", "DequantizeLinear")
def dequantize_linear_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """tY = (X - zero_point) * tScale + scale * tX (tX: QuantizeLinear's straight-through tangent)."""
    y = ctx.output(0)
    tx = ts[0] if ts else None
    t = ts[1] if len(ts) > 1 else None
    terms = []
    if t is not None:
        terms.append(ctx.op.Mul(_centred(ctx, y), _spread(ctx, ctx.op.CastLike(t, y))))
    if tx is not None:
        terms.append(ctx.op.Mul(ctx.op.CastLike(tx, y), _scale_like(ctx, y)))
    return ctx.add(*terms)


_FLOAT8 = {17, 18, 19, 20, 23}  # FLOAT8E4M3FN, FLOAT8E4M3FNUZ, FLOAT8E5M2, FLOAT8E5M2FNUZ, FLOAT4E2M1


def _kept(ctx: GradContext) -> tuple[str, str, str]:
    """(X / scale, scale laid out against X, 1 where X was not clipped else 0) of a QuantizeLinear node.

    Not clipped: the output equals the unsaturated Round(X / scale) + zero_point.
    """
    x, y = ctx.inputs[0], ctx.output(0)
    if ctx.dtype(y) in _FLOAT8:
        raise ctx.error(
            "has no straight-through rule for a float8/float4 output (its rounding is not Round); "
            "quantize to an integer type, or register a rule"
        )
    s = _scale_like(ctx, x)
    u = ctx.op.Div(x, s)
    rounded = ctx.op.Round(u)
    zp = ctx.input(2)
    if zp:
        rounded = ctx.op.Add(rounded, _spread(ctx, ctx.op.CastLike(zp, x)))
    kept = ctx.op.CastLike(ctx.op.Equal(ctx.op.CastLike(y, x), rounded), x)
    return u, s, kept


@rule("", "QuantizeLinear", nondiff=(2,), straight_through=True)
def quantize_linear_grad(ctx: GradContext, dy: str) -> Grads:
    """Straight through: dX = dQ / scale where X was not clipped, 0 where it saturated;
    dScale = Σ -dQ * (X / scale) / scale there, per scale entry (module docstring)."""
    u, s, kept = _kept(ctx)
    g = ctx.op.Mul(ctx.op.CastLike(dy, u), kept)
    dx = ctx.op.Div(g, s) if ctx.needs_grad(0) else None
    ds = _sum_to_scale(ctx, ctx.op.Neg(ctx.op.Div(ctx.op.Mul(g, u), s))) if ctx.needs_grad(1) else None
    return dx, ds, None


@jvp_rule("", "QuantizeLinear")
def quantize_linear_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """tQ = kept * (tX - (X / scale) tScale) / scale (a float tangent for the integer Q)."""
    tx = ts[0]
    t = ts[1] if len(ts) > 1 else None
    if tx is None and t is None:
        return None
    u, s, kept = _kept(ctx)
    inner = tx if tx is not None else ctx.zeros_like(ctx.inputs[0])
    if t is not None:
        inner = ctx.op.Sub(inner, ctx.op.Mul(u, _spread(ctx, ctx.op.CastLike(t, u))))
    return ctx.op.Div(ctx.op.Mul(inner, kept), s)


refuses(
    "",
    "QuantizeLinear",
    what="a float8/float4 output (integer outputs get the straight-through estimator)",
    why="the straight-through mask compares with Round, which is not a float8 rounding",
)
