"""Rules for broadcasting arithmetic: Add Sub Mul Div (broadcasting undone by the core)."""

from __future__ import annotations

from ._table import rule


@rule("", "Add", broadcast=True)
def add_grad(ctx, dy):  # type: ignore[no-untyped-def]
    """dA = dY, dB = dY."""
    return dy, dy


@rule("", "Sub", broadcast=True)
def sub_grad(ctx, dy):  # type: ignore[no-untyped-def]
    """dA = dY, dB = -dY."""
    return dy, (ctx.op.Neg(dy) if ctx.needs_grad(1) else None)


@rule("", "Mul", broadcast=True)
def mul_grad(ctx, dy):  # type: ignore[no-untyped-def]
    """dA = dY * B, dB = dY * A."""
    a, b = ctx.inputs
    return (
        ctx.op.Mul(dy, b) if ctx.needs_grad(0) else None,
        ctx.op.Mul(dy, a) if ctx.needs_grad(1) else None,
    )


@rule("", "Div", broadcast=True)
def div_grad(ctx, dy):  # type: ignore[no-untyped-def]
    """dA = dY / B, dB = -dY * Y / B."""
    a, b = ctx.inputs
    da = ctx.op.Div(dy, b) if ctx.needs_grad(0) else None
    db = ctx.op.Neg(ctx.op.Div(ctx.op.Mul(dy, ctx.output(0)), b)) if ctx.needs_grad(1) else None
    return da, db
