"""Rules for broadcasting arithmetic: Add Sub Mul Div Mod PRelu (broadcasting undone by the core)."""

from __future__ import annotations

from ...onnx_core.gradient import GradContext, Grads
from ._table import rule


@rule("", "Add", broadcast=True)
def add_grad(ctx: GradContext, dy: str) -> Grads:
    """dA = dY, dB = dY."""
    return dy, dy


@rule("", "Sub", broadcast=True)
def sub_grad(ctx: GradContext, dy: str) -> Grads:
    """dA = dY, dB = -dY."""
    return dy, (ctx.op.Neg(dy) if ctx.needs_grad(1) else None)


@rule("", "Mul", broadcast=True)
def mul_grad(ctx: GradContext, dy: str) -> Grads:
    """dA = dY * B, dB = dY * A."""
    a, b = ctx.inputs
    return (
        ctx.op.Mul(dy, b) if ctx.needs_grad(0) else None,
        ctx.op.Mul(dy, a) if ctx.needs_grad(1) else None,
    )


@rule("", "Div", broadcast=True)
def div_grad(ctx: GradContext, dy: str) -> Grads:
    """dA = dY / B, dB = -dY * Y / B."""
    a, b = ctx.inputs
    da = ctx.op.Div(dy, b) if ctx.needs_grad(0) else None
    db = ctx.op.Neg(ctx.op.Div(ctx.op.Mul(dy, ctx.output(0)), b)) if ctx.needs_grad(1) else None
    return da, db


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


@rule("", "PRelu", broadcast=True)
def prelu_grad(ctx: GradContext, dy: str) -> Grads:
    """Y = X if X > 0 else slope * X: dX = dY * (1 or slope), dSlope = dY * X where X <= 0."""
    x, slope = ctx.inputs
    positive = ctx.op.Greater(x, ctx.const(0.0, like=x))
    dx = ctx.op.Where(positive, dy, ctx.op.Mul(dy, slope)) if ctx.needs_grad(0) else None
    dslope = ctx.op.Where(positive, ctx.const(0.0, like=x), ctx.op.Mul(dy, x)) if ctx.needs_grad(1) else None
    return dx, dslope
