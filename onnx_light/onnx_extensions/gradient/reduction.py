"""Rules for the Reduce* family.

Every rule first makes ``dY`` broadcastable against X (``g``): as it is with
``keepdims=1`` or when every axis was reduced (a scalar), else ``Unsqueeze(dY, axes)``
(axes from the attribute of older opsets or input 1, known or computed at run time).
The reduced output is re-expanded the same way where a rule reads it (``y``). Then:

    ReduceSum        dX = Expand(g, Shape(X))
    ReduceMean       dX = Expand(g / n, Shape(X)),  n = Size(X) / Size(Y)
    ReduceMax/Min    dX = m · g / Σm,  m = (X == y): ties share the gradient evenly
    ReduceProd       dX = g · Π_{j≠i} X_j  (y / X without zeros; see below)
    ReduceL1         dX = Sign(X) · g
    ReduceL2         dX = X · g / y  (0 where y = 0)
    ReduceSumSquare  dX = 2 X · g
    ReduceLogSumExp  dX = g · Exp(X - y)
    ReduceLogSum     dX = Expand(g / Exp(y), Shape(X))

``noop_with_empty_axes=1`` with empty axes reduces over no axis (Y is X, or its
elementwise transform: |X| for L1, X² for SumSquare, ...); the formulas above hold
unchanged there. Axes computed at run time that turn out empty with keepdims=0 are
not supported (``Unsqueeze`` with no axes).

Zeros: ReduceProd's co-product Π_{j≠i} X_j is y / X_i in a group without zeros; in a
group with one zero it is the product of the group's other elements at that zero and 0
elsewhere, and with two or more zeros it is 0 everywhere, each written so that its
derivative is right too (exact zeros, e.g. after a Relu, give the true gradient and
Hessian, not NaN). ReduceL2 is not differentiable where the norm is 0; its gradient
there is 0 (torch's choice). ReduceLogSum is the derivative of ``log`` and is infinite
where the sum is 0.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

from ...onnx_core.gradient import GradContext, Grads, JvpFn, TangentContext, Tangents, same_op
from ._table import jvp_rule, rule
from ._tensor_common import arg_ints


def _broadcastable(ctx: GradContext, value: str) -> str:
    """``value`` (shaped like Y) with the reduced axes restored as size 1."""
    if int(ctx.attr("keepdims", 1)):
        return value
    axes_name, axes = arg_ints(ctx, 1, "axes")
    if not axes_name or (axes is not None and not axes):
        return value  # every axis reduced (a scalar) or none (noop): broadcasts as it is
    return ctx.op.Unsqueeze(value, axes_name)


def _spread(ctx: GradContext, g: str) -> str:
    return ctx.op.Expand(g, ctx.shape_of(ctx.inputs[0]))


@rule("", "ReduceSum")
def reduce_sum_grad(ctx: GradContext, dy: str) -> Grads:
    """dX = Expand(g, Shape(X))."""
    return _spread(ctx, _broadcastable(ctx, dy))


@rule("", "ReduceMean")
def reduce_mean_grad(ctx: GradContext, dy: str) -> Grads:
    """dX = Expand(g / n, Shape(X)), n the number of elements averaged."""
    x = ctx.inputs[0]
    shape_x, shape_y = ctx.static_shape(x), ctx.static_shape(ctx.output(0))
    if shape_x is not None and shape_y is not None:
        size_x = _product(shape_x)
        size_y = _product(shape_y)
        count = ctx.const(size_x // size_y if size_y else 1, like=x)
    else:
        count = ctx.op.CastLike(ctx.op.Div(ctx.op.Size(x), ctx.op.Size(dy)), dy)
    return _spread(ctx, ctx.op.Div(_broadcastable(ctx, dy), count))


def _product(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


@rule("", "ReduceMax", "ReduceMin")
def reduce_extreme_grad(ctx: GradContext, dy: str) -> Grads:
    """dX = m · g / Σm with m = (X == y): the gradient goes to the extreme elements,
    shared evenly between ties (the average of the one-sided derivatives)."""
    x = ctx.inputs[0]
    hit = ctx.op.CastLike(ctx.op.Equal(x, _broadcastable(ctx, ctx.output(0))), x)
    axes_name = arg_ints(ctx, 1, "axes")[0]
    count = ctx.op.ReduceSum(
        hit, axes_name or None, keepdims=1, noop_with_empty_axes=int(ctx.attr("noop_with_empty_axes", 0))
    )
    return ctx.op.Mul(hit, ctx.op.Div(_broadcastable(ctx, dy), count))


@rule("", "ReduceProd")
def reduce_prod_grad(ctx: GradContext, dy: str) -> Grads:
    """dX = g · c, c_i = Π_{j≠i} X_j the co-product, with zeros counted per reduced group.

    With Z = [X == 0], N = Where(Z, 1, X), p = Π N, z = Σ Z and s = Σ Where(Z, X, 0) over
    the group (s is 0, but carries the zeros' derivative):
        z = 0:  c = p / N
        z = 1:  c = p at the zero,  s · p / N elsewhere
        z = 2:  c = (s - X) · p at each zero (the other zero's value),  0 elsewhere
        z ≥ 3:  c = 0
    Every case has c's value and, through s, its derivative (the Hessian of the product),
    so the backward graph can be differentiated again at exact zeros too.
    """
    x = ctx.inputs[0]
    zero, one, two = ctx.const(0, like=x), ctx.const(1, like=x), ctx.const(2, like=x)
    axes_name = arg_ints(ctx, 1, "axes")[0]
    group = {"keepdims": 1, "noop_with_empty_axes": int(ctx.attr("noop_with_empty_axes", 0))}

    def over_group(op: str, value: str) -> str:
        return getattr(ctx.op, op)(value, axes_name or None, **group)

    is_zero = ctx.op.Equal(x, zero)
    nonzero = ctx.op.Where(is_zero, one, x)
    p = over_group("ReduceProd", nonzero)
    z = over_group("ReduceSum", ctx.op.CastLike(is_zero, x))
    s = over_group("ReduceSum", ctx.op.Where(is_zero, x, zero))

    def pick(cases: list[tuple[str, str]]) -> str:  # Where(z == count, value, ...) down to 0
        out = zero
        for count, value in reversed(cases):
            out = ctx.op.Where(ctx.op.Equal(z, count), value, out)
        return out

    at_nonzero = ctx.op.Mul(ctx.op.Div(p, nonzero), pick([(zero, one), (one, s)]))
    at_zero = ctx.op.Mul(p, pick([(one, one), (two, ctx.op.Sub(s, x))]))
    return ctx.op.Mul(_broadcastable(ctx, dy), ctx.op.Where(is_zero, at_zero, at_nonzero))


@rule("", "ReduceL1")
def reduce_l1_grad(ctx: GradContext, dy: str) -> Grads:
    """dX = Sign(X) · g."""
    return ctx.op.Mul(ctx.op.Sign(ctx.inputs[0]), _broadcastable(ctx, dy))


def _l2_weight(ctx: GradContext) -> str:
    """dY/dX = X / y, and 0 for a group whose norm is 0 (the subgradient torch and
    numpy-based trainers use; X is all zeros there, so dividing by 1 instead gives it).
    The reverse and the forward rule both read it, so they agree at the zeros."""
    x, y = ctx.inputs[0], _broadcastable(ctx, ctx.output(0))
    zero, one = ctx.const(0, like=x), ctx.const(1, like=x)
    return ctx.op.Div(x, ctx.op.Where(ctx.op.Equal(y, zero), one, y))


@rule("", "ReduceL2")
def reduce_l2_grad(ctx: GradContext, dy: str) -> Grads:
    """dX = X · g / y (0 where y = 0: see ``_l2_weight``)."""
    return ctx.op.Mul(_l2_weight(ctx), _broadcastable(ctx, dy))


@rule("", "ReduceSumSquare")
def reduce_sum_square_grad(ctx: GradContext, dy: str) -> Grads:
    """dX = 2 X · g."""
    x = ctx.inputs[0]
    return ctx.op.Mul(x, ctx.op.Mul(_broadcastable(ctx, dy), ctx.const(2.0, like=x)))


@rule("", "ReduceLogSumExp")
def reduce_log_sum_exp_grad(ctx: GradContext, dy: str) -> Grads:
    """dX = g · Exp(X - y): the softmax of X over the reduced axes, times g."""
    x = ctx.inputs[0]
    return ctx.op.Mul(_broadcastable(ctx, dy), ctx.op.Exp(ctx.op.Sub(x, _broadcastable(ctx, ctx.output(0)))))


@rule("", "ReduceLogSum")
def reduce_log_sum_grad(ctx: GradContext, dy: str) -> Grads:
    """dX = Expand(g / Exp(y), Shape(X)): d log(s) = ds / s with s = Exp(y)."""
    scale = ctx.op.Div(_broadcastable(ctx, dy), ctx.op.Exp(_broadcastable(ctx, ctx.output(0))))
    return _spread(ctx, scale)


# -- forward rules ------------------------------------------------------------------------------
jvp_rule("", "ReduceSum", "ReduceMean")(same_op(0))


def _reduce_sum(ctx: TangentContext, v: str) -> str:
    """ReduceSum of ``v`` (shaped like X) over the node's axes, with its keepdims."""
    axes_name = arg_ints(ctx, 1, "axes")[0]
    return ctx.op.ReduceSum(
        v,
        axes_name or None,
        keepdims=int(ctx.attr("keepdims", 1)),
        noop_with_empty_axes=int(ctx.attr("noop_with_empty_axes", 0)),
    )


def _weighted_jvp(weight: Callable[[TangentContext], str], scale: float = 1.0) -> JvpFn:
    """tY = scale * ReduceSum(weight(ctx) * tX): the forward rule of a reduction whose
    gradient is ``weight`` (shaped like X) times dY."""

    def jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
        if ts[0] is None:
            return None
        out = _reduce_sum(ctx, ctx.op.Mul(weight(ctx), ts[0]))
        return out if scale == 1.0 else ctx.op.Mul(out, ctx.const(scale, like=out))

    return jvp


def _y_like_x(ctx: TangentContext) -> str:
    return _broadcastable(ctx, ctx.output(0))


def _extreme_weight(ctx: TangentContext) -> str:
    x = ctx.inputs[0]
    hit = ctx.op.CastLike(ctx.op.Equal(x, _y_like_x(ctx)), x)
    axes_name = arg_ints(ctx, 1, "axes")[0]
    count = ctx.op.ReduceSum(
        hit, axes_name or None, keepdims=1, noop_with_empty_axes=int(ctx.attr("noop_with_empty_axes", 0))
    )
    return ctx.op.Div(hit, count)


jvp_rule("", "ReduceMax", "ReduceMin")(_weighted_jvp(_extreme_weight))
jvp_rule("", "ReduceSumSquare")(_weighted_jvp(lambda ctx: ctx.inputs[0], 2.0))
jvp_rule("", "ReduceL1")(_weighted_jvp(lambda ctx: ctx.op.Sign(ctx.inputs[0])))
jvp_rule("", "ReduceL2")(_weighted_jvp(_l2_weight))
jvp_rule("", "ReduceLogSumExp")(_weighted_jvp(lambda ctx: ctx.op.Exp(ctx.op.Sub(ctx.inputs[0], _y_like_x(ctx)))))
jvp_rule("", "ReduceLogSum")(_weighted_jvp(lambda ctx: ctx.op.Reciprocal(ctx.op.Exp(_y_like_x(ctx)))))


@jvp_rule("", "ReduceProd")
def reduce_prod_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """tY = <dY/dX, tX>: the reverse rule's gradient at dY = 1 (exact at zeros) times tX, summed."""
    if ts[0] is None:
        return None
    ones = ctx.op.CastLike(ctx.op.ConstantOfShape(ctx.shape_of(ctx.output(0))), ctx.output(0))
    ones = ctx.op.Add(ones, ctx.const(1.0, like=ctx.output(0)))
    g = reduce_prod_grad(ctx, ones)
    dydx = g if isinstance(g, str) else cast(str, cast(tuple, g)[0])
    return _reduce_sum(ctx, ctx.op.Mul(dydx, ts[0]))
