"""Rules for broadcasting arithmetic: Add Sub Mul Div Mod PRelu (broadcasting undone by the core)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from ...onnx_core.gradient import GradContext, Grads, TangentContext, Tangents
from ._table import jvp_rule, rule

# Forward rules of broadcast ops see tangents already expanded to the output's shape.


@rule("", "Add", broadcast=True)
def add_grad(ctx: GradContext, dy: str) -> Grads:
    """dA = dY, dB = dY."""
    return dy, dy


@jvp_rule("", "Add")
def add_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """tY = tA + tB."""
    return ctx.add(*ts)


@rule("", "Sub", broadcast=True)
def sub_grad(ctx: GradContext, dy: str) -> Grads:
    """dA = dY, dB = -dY."""
    return dy, (ctx.op.Neg(dy) if ctx.needs_grad(1) else None)


@jvp_rule("", "Sub")
def sub_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """tY = tA - tB."""
    ta, tb = ts
    if tb is None:
        return ta
    return ctx.op.Sub(ta, tb) if ta is not None else ctx.op.Neg(tb)


@rule("", "Mul", broadcast=True)
def mul_grad(ctx: GradContext, dy: str) -> Grads:
    """dA = dY * B, dB = dY * A."""
    a, b = ctx.inputs
    return (
        ctx.op.Mul(dy, b) if ctx.needs_grad(0) else None,
        ctx.op.Mul(dy, a) if ctx.needs_grad(1) else None,
    )


@jvp_rule("", "Mul")
def mul_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """tY = tA * B + A * tB."""
    a, b = ctx.inputs
    ta, tb = ts
    return ctx.add(ctx.op.Mul(ta, b) if ta else None, ctx.op.Mul(a, tb) if tb else None)


@rule("", "Div", broadcast=True)
def div_grad(ctx: GradContext, dy: str) -> Grads:
    """dA = dY / B, dB = -dY * Y / B."""
    a, b = ctx.inputs
    da = ctx.op.Div(dy, b) if ctx.needs_grad(0) else None
    db = ctx.op.Neg(ctx.op.Div(ctx.op.Mul(dy, ctx.output(0)), b)) if ctx.needs_grad(1) else None
    return da, db


@jvp_rule("", "Div")
def div_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """tY = (tA - Y * tB) / B."""
    b = ctx.inputs[1]
    ta, tb = ts
    num = ta
    if tb is not None:
        ytb = ctx.op.Mul(ctx.output(0), tb)
        num = ctx.op.Sub(ta, ytb) if ta is not None else ctx.op.Neg(ytb)
    return ctx.op.Div(num, b) if num is not None else None


@rule("", "Mod", broadcast=True)
def mod_grad(ctx: GradContext, dy: str) -> Grads:
    """Y = A - q * B with q = floor(A / B) (fmod=0) or trunc(A / B) (fmod=1): dA = dY, dB = -dY * q.

    Integer operands carry no gradient; q is piecewise constant.
    """
    a, b = ctx.inputs
    db = None
    if ctx.needs_grad(1):
        ratio = ctx.op.Div(a, b)
        if ctx.attr("fmod", 0):
            q = ctx.op.Sub(ratio, ctx.op.Mod(ratio, ctx.const(1.0, like=a), fmod=1))  # trunc
        else:
            q = ctx.op.Floor(ratio)
        db = ctx.op.Neg(ctx.op.Mul(dy, q))
    return dy, db


@jvp_rule("", "Mod")
def mod_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """tY = tA - q * tB (q piecewise constant, as in the reverse rule)."""
    ta, tb = ts
    if tb is None:
        return ta
    _, q_tb = cast(tuple, mod_grad(ctx, tb))  # the reverse rule's dB = -dY * q is linear and diagonal in dY
    return ctx.add(ta, cast("str | None", q_tb))


@rule("", "PRelu", broadcast=True)
def prelu_grad(ctx: GradContext, dy: str) -> Grads:
    """Y = X if X > 0 else slope * X: dX = dY * (1 or slope), dSlope = dY * X where X <= 0."""
    x, slope = ctx.inputs
    positive = ctx.op.Greater(x, ctx.const(0.0, like=x))
    dx = ctx.op.Where(positive, dy, ctx.op.Mul(dy, slope)) if ctx.needs_grad(0) else None
    dslope = ctx.op.Where(positive, ctx.const(0.0, like=x), ctx.op.Mul(dy, x)) if ctx.needs_grad(1) else None
    return dx, dslope


@jvp_rule("", "PRelu")
def prelu_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """tY = tX * (1 or slope) + tSlope * X where X <= 0."""
    tx, tslope = ts
    dx = cast(tuple, prelu_grad(ctx, tx))[0] if tx is not None else None
    x = ctx.inputs[0]
    ds = None
    if tslope is not None:
        positive = ctx.op.Greater(x, ctx.const(0.0, like=x))
        ds = ctx.op.Where(positive, ctx.const(0.0, like=x), ctx.op.Mul(tslope, x))
    return ctx.add(cast("str | None", dx), ds)
