"""Rules for unary and variadic math: Neg Abs Exp Log Sqrt Pow Reciprocal Erf, trigonometry,
Min Max Sum Mean, Where, Clip, Cast CastLike, Dropout, CumProd, and the ops that pass no gradient.

Contributions of rules registered with ``broadcast=True`` are shaped like the output;
the core sums them back to each input's shape.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from ...onnx_core.gradient import GradContext, Grads, ShortGradFn, TangentContext, Tangents
from ._masks import mask
from ._table import elementwise, jvp_rule, linear, no_grad, refuses, rule
from ._tensor_common import positions

# -- no gradient: piecewise-constant, boolean or integer results --------------------------
no_grad("", "Floor", "Ceil", "Round", "Sign")
no_grad("", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual")
no_grad("", "And", "Or", "Xor", "Not", "IsNaN", "IsInf")
no_grad("", "ArgMax", "ArgMin")
no_grad("", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot")
# BitCast reinterprets the bits as another type of the same width: not a smooth function of the value
no_grad("", "BitCast")


# -- linear -------------------------------------------------------------------------------
linear("", "Identity", lambda ctx, dy: (dy,))
linear("", "Neg", lambda ctx, dy: (ctx.op.Neg(dy),))


@rule("", "Sum", broadcast=True)
def sum_grad(ctx: GradContext, dy: str) -> Grads:
    """dX_i = dY for every input."""
    return tuple(dy for _ in ctx.inputs)


@rule("", "Mean", broadcast=True)
def mean_grad(ctx: GradContext, dy: str) -> Grads:
    """dX_i = dY / n for every input."""
    n = len(ctx.inputs)
    if n == 1:
        return (dy,)
    share = ctx.op.Div(dy, ctx.const(float(n), like=ctx.output(0)))
    return tuple(share for _ in ctx.inputs)


# -- unary elementwise --------------------------------------------------------------------
elementwise("", "Abs", lambda ctx, dy: ctx.op.Mul(dy, ctx.op.Sign(ctx.input(0))))
elementwise("", "Exp", lambda ctx, dy: ctx.op.Mul(dy, ctx.output(0)))
elementwise("", "Log", lambda ctx, dy: ctx.op.Div(dy, ctx.input(0)))
# dX = dY / (2 Y)
elementwise("", "Sqrt", lambda ctx, dy: ctx.op.Div(dy, ctx.op.Add(ctx.output(0), ctx.output(0))))
# dX = -dY * Y^2
elementwise("", "Reciprocal", lambda ctx, dy: ctx.op.Neg(ctx.op.Mul(dy, ctx.op.Mul(ctx.output(0), ctx.output(0)))))
elementwise("", "Sin", lambda ctx, dy: ctx.op.Mul(dy, ctx.op.Cos(ctx.input(0))))
elementwise("", "Cos", lambda ctx, dy: ctx.op.Neg(ctx.op.Mul(dy, ctx.op.Sin(ctx.input(0)))))
# dX = dY * (1 + Y^2)
elementwise("", "Tan", lambda ctx, dy: ctx.op.Add(dy, ctx.op.Mul(ctx.op.Mul(dy, ctx.output(0)), ctx.output(0))))
elementwise("", "Sinh", lambda ctx, dy: ctx.op.Mul(dy, ctx.op.Cosh(ctx.input(0))))
elementwise("", "Cosh", lambda ctx, dy: ctx.op.Mul(dy, ctx.op.Sinh(ctx.input(0))))


def _x2(ctx: GradContext) -> str:
    return ctx.op.Mul(ctx.input(0), ctx.input(0))


def _one(ctx: GradContext) -> str:
    return ctx.const(1.0, like=ctx.input(0))


# dX = dY / sqrt(1 - X^2), -dY / sqrt(1 - X^2), dY / (1 + X^2)
elementwise("", "Asin", lambda ctx, dy: ctx.op.Div(dy, ctx.op.Sqrt(ctx.op.Sub(_one(ctx), _x2(ctx)))))
elementwise("", "Acos", lambda ctx, dy: ctx.op.Neg(ctx.op.Div(dy, ctx.op.Sqrt(ctx.op.Sub(_one(ctx), _x2(ctx))))))
elementwise("", "Atan", lambda ctx, dy: ctx.op.Div(dy, ctx.op.Add(_x2(ctx), _one(ctx))))
# dX = dY / sqrt(X^2 + 1), dY / sqrt(X^2 - 1), dY / (1 - X^2)
elementwise("", "Asinh", lambda ctx, dy: ctx.op.Div(dy, ctx.op.Sqrt(ctx.op.Add(_x2(ctx), _one(ctx)))))
elementwise("", "Acosh", lambda ctx, dy: ctx.op.Div(dy, ctx.op.Sqrt(ctx.op.Sub(_x2(ctx), _one(ctx)))))
elementwise("", "Atanh", lambda ctx, dy: ctx.op.Div(dy, ctx.op.Sub(_one(ctx), _x2(ctx))))


def _erf(ctx: GradContext, dy: str) -> str:
    """dX = dY * 2/sqrt(pi) * exp(-X^2)."""
    gauss = ctx.op.Exp(ctx.op.Neg(_x2(ctx)))
    return ctx.op.Mul(ctx.op.Mul(dy, ctx.const(2.0 / math.sqrt(math.pi), like=ctx.input(0))), gauss)


elementwise("", "Erf", _erf)


@rule("", "Pow", broadcast=True)
def pow_grad(ctx: GradContext, dy: str) -> Grads:
    """dA = dY * B * A^(B-1), 0 where B = 0; dB = dY * Y * log(A), 0 where A = 0 and B >= 0.

    The two zeros are torch's: A^0 is constant in A (B * A^(B-1) would be 0 * inf = NaN at
    A = 0), and A^B at A = 0 is 0 (or 1) on a side where it is flat in B (Y * log(A) would
    be 0 * -inf). They are written inside the power and the log, on B's shape (a scalar, most
    often) for dA: A^(B-1) becomes A^0 = 1 where B = 0, and log(A) becomes log(1) = 0 at the
    masked zeros of A.

    The exponent may be an integer tensor (then it has no gradient) or another float type
    than the base (then it is cast to the base's type and its gradient back).
    """
    a, b = ctx.inputs
    y = ctx.output(0)
    same_type = ctx.dtype(a) != 0 and ctx.dtype(a) == ctx.dtype(b)
    zero_b = ctx.const(0, like=b)
    da = db = None
    if ctx.needs_grad(0):
        b_as_a = b if same_type else ctx.op.CastLike(b, a)
        b_is_0 = ctx.op.Equal(b, zero_b)
        power = ctx.op.Pow(a, ctx.op.Where(b_is_0, zero_b, ctx.op.Sub(b, ctx.const(1, like=b))))
        da = ctx.op.Mul(ctx.op.Mul(dy, b_as_a), power)
    if ctx.needs_grad(1):
        flat = ctx.op.And(ctx.op.Equal(a, ctx.const(0, like=a)), ctx.op.GreaterOrEqual(b, zero_b))
        log_a = ctx.op.Log(ctx.op.Where(flat, ctx.const(1, like=a), a))
        db = ctx.op.Mul(ctx.op.Mul(dy, y), log_a)
        if not same_type:
            db = ctx.op.CastLike(db, b)
    return da, db


# -- selection ----------------------------------------------------------------------------
@rule("", "Where", broadcast=True, nondiff=(0,))
def where_grad(ctx: GradContext, dy: str) -> Grads:
    """dX = dY where C else 0; dY' = 0 where C else dY (the condition has none)."""
    cond, x, _ = ctx.inputs
    zero = ctx.const(0.0, like=x)
    return (
        None,
        ctx.op.Where(cond, dy, zero) if ctx.needs_grad(1) else None,
        ctx.op.Where(cond, zero, dy) if ctx.needs_grad(2) else None,
    )


def _extremum_grad(wins: str) -> ShortGradFn:
    """The rule of Max (``wins="GreaterOrEqual"``) or Min (``"LessOrEqual"``).

    dX_i = dY * [X_i == Y] / #{j : X_j == Y}: tied inputs share the gradient equally,
    PyTorch's convention for ``maximum``/``minimum`` (dY / 2 on a tie) generalised to any
    number of inputs; the contributions always sum to dY. Two inputs are compared with
    each other, so the forward result is not needed.
    """

    def grad(ctx: GradContext, dy: str) -> Grads:
        if len(ctx.inputs) == 1:
            return (dy,)
        y = ctx.output(0)
        zero = ctx.const(0.0, like=y)
        if len(ctx.inputs) == 2:
            a, b = ctx.inputs
            share = ctx.op.Where(ctx.op.Equal(a, b), ctx.op.Mul(dy, ctx.const(0.5, like=y)), dy)
            wins_op = getattr(ctx.op, wins)
            return (
                ctx.op.Where(wins_op(a, b), share, zero) if ctx.needs_grad(0) else None,
                ctx.op.Where(wins_op(b, a), share, zero) if ctx.needs_grad(1) else None,
            )
        one = ctx.const(1.0, like=y)
        hits = [ctx.op.Equal(x, y) for x in ctx.inputs]
        share = ctx.op.Div(dy, ctx.op.Sum(*[ctx.op.Where(h, one, zero) for h in hits]))
        return tuple(ctx.op.Where(h, share, zero) if ctx.needs_grad(i) else None for i, h in enumerate(hits))

    grad.__doc__ = _extremum_grad.__doc__
    return grad


rule("", "Max", broadcast=True)(_extremum_grad("GreaterOrEqual"))
rule("", "Min", broadcast=True)(_extremum_grad("LessOrEqual"))


@rule("", "Clip", broadcast=True)
def clip_grad(ctx: GradContext, dy: str) -> Grads:
    """Y = Min(Max(X, min), max): dX = dY where Y == X; dmin = dY where X < min <= max;
    dmax = dY where X > max or max < min.

    When min > max ONNX outputs max everywhere (numpy's and torch's clip too), so max takes
    the whole gradient there and min none. A tie at a bound goes to X, as in PyTorch's
    ``clamp``.
    """
    x, lo, hi = ctx.input(0), ctx.input(1), ctx.input(2)
    if not lo and not hi:
        return (dy,)
    # Where(cond, dY, 0) as dY * Cast(cond): see _masks
    dx = ctx.op.Mul(dy, mask(ctx, ctx.op.Equal(x, ctx.output(0)), x)) if ctx.needs_grad(0) else None
    dlo = dhi = None
    if lo and ctx.needs_grad(1):
        below = ctx.op.Less(x, lo)
        if hi:
            below = ctx.op.And(below, ctx.op.LessOrEqual(lo, hi))
        dlo = ctx.op.Mul(dy, mask(ctx, below, x))
    if hi and ctx.needs_grad(2):
        above = ctx.op.Greater(x, hi)
        if lo:
            above = ctx.op.Or(above, ctx.op.Less(hi, lo))
        dhi = ctx.op.Mul(dy, mask(ctx, above, x))
    return (dx, dlo, dhi)[: len(ctx.inputs)]


# -- type conversion and dropout ----------------------------------------------------------
def _cast_back(ctx: GradContext, dy: str, x: str) -> str:
    dtype = ctx.dtype(x)
    return ctx.op.Cast(dy, to=dtype) if dtype else ctx.op.CastLike(dy, x)


elementwise("", "Cast", lambda ctx, dy: _cast_back(ctx, dy, ctx.input(0)))
# the second input only lends its type: its value has no influence on the result
elementwise("", "CastLike", lambda ctx, dy: _cast_back(ctx, dy, ctx.input(0)), nondiff=(1,))


@rule("", "Dropout", since=12, nondiff=(1, 2))
def dropout_grad(ctx: GradContext, dy: str) -> Grads:
    """Inference (no ``training_mode``): dX = dY. Training: dX = dY * mask / (1 - ratio).

    With a ``training_mode`` input (a constant or not), the scale is chosen at run time,
    ``Where(training_mode, 1 / (1 - ratio), 1)``, and the ``mask`` output is required;
    ``ratio`` (default 0.5) and ``training_mode`` have no gradient.
    """
    x, ratio, training = ctx.input(0), ctx.input(1), ctx.input(2)
    if not training:
        return (dy,)
    mask = ctx.output(1)
    if not mask:
        raise ctx.error(
            "a Dropout with a training_mode input needs its mask output to be differentiated "
            "(the mask cannot be recovered from the output where X == 0); add a second output"
        )
    one = ctx.const(1.0, like=x)
    if not ratio:
        keep = ctx.const(0.5, like=x)
    else:
        same = ctx.dtype(x) != 0 and ctx.dtype(x) == ctx.dtype(ratio)
        keep = ctx.op.Sub(one, ratio if same else ctx.op.CastLike(ratio, x))
    scale = ctx.op.Where(training, ctx.op.Div(one, keep), one)
    return (ctx.op.Where(mask, ctx.op.Mul(dy, scale), ctx.const(0.0, like=x)),)


# -- forward rules ----------------------------------------------------------------------------
@jvp_rule("", "Sum")
def sum_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """tY = sum of tX_i (tangents arrive expanded to the output's shape)."""
    return ctx.add(*ts)


@jvp_rule("", "Mean")
def mean_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """tY = sum of tX_i / n."""
    total = ctx.add(*ts)
    n = len(ctx.inputs)
    return total if total is None or n == 1 else ctx.op.Div(total, ctx.const(float(n), like=ctx.output(0)))


@jvp_rule("", "Pow")
def pow_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """tY = tA * B * A^(B-1) + tB * Y * log(A); the reverse rule's factors applied to each tangent."""
    ta, tb = ts
    terms = []
    if ta is not None:
        terms.append(cast(tuple, pow_grad(_only(ctx, 0), ta))[0])
    if tb is not None:
        terms.append(cast(tuple, pow_grad(_only(ctx, 1), tb))[1])
    return ctx.add(*terms)


def _only(ctx: TangentContext, i: int) -> TangentContext:
    """``ctx`` asking the reverse rule for input ``i``'s factor only (the reverse rules of
    broadcast ops are diagonal in dy: applied to a tangent shaped like Y, they give J_i t)."""
    ctx._needs = [k == i for k in range(len(ctx.inputs))]
    return ctx


@jvp_rule("", "Where")
def where_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """tY = Where(C, tA, tB)."""
    _, ta, tb = ts
    if ta is None and tb is None:
        return None
    c, a, b = ctx.inputs
    zero = ctx.const(0.0, like=ctx.output(0))
    return ctx.op.Where(c, ta if ta is not None else zero, tb if tb is not None else zero)


def _diagonal_jvp(reverse: ShortGradFn) -> Any:
    """The forward rule of a broadcast op whose reverse rule is diagonal in dy: each
    input's tangent (shaped like Y) through its factor, summed."""

    def jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
        terms = []
        for i, t in enumerate(ts):
            if t is not None:
                terms.append(cast(tuple, reverse(_only(ctx, i), t))[i])
        return ctx.add(*terms)

    return jvp


jvp_rule("", "Max")(_diagonal_jvp(_extremum_grad("GreaterOrEqual")))
jvp_rule("", "Min")(_diagonal_jvp(_extremum_grad("LessOrEqual")))
jvp_rule("", "Clip")(_diagonal_jvp(clip_grad))


@jvp_rule("", "Dropout")
def dropout_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """tY = the reverse rule's mask scaling applied to tX (diagonal)."""
    return None if ts[0] is None else cast(tuple, dropout_grad(ctx, ts[0]))[0]


# -- CumProd: without dividing by x (zeros included) ------------------------------------------
def _flip(ctx: GradContext, v: str, axis: int) -> str:
    return ctx.op.Slice(v, ctx.ints([-1]), ctx.ints([-(2**63)]), ctx.ints([axis]), ctx.ints([-1]))


def _cumprod_axis(ctx: GradContext) -> tuple[int, int]:
    """(axis, rank) of a CumProd node; the axis input must be known when the pass runs."""
    rank = ctx.require_rank(ctx.inputs[0])
    known = ctx.value(ctx.inputs[1])
    if known is None:
        raise ctx.error("needs the axis input as a constant (an initializer or Constant) to differentiate along it")
    axis = int(np.asarray(known).reshape(-1)[0])
    return (axis + rank if axis < 0 else axis), rank


def _cumprod_terms(ctx: GradContext, x: str, axis: int, rank: int) -> tuple[str, str]:
    """(E, W) for CumProd along ``axis`` (not reversed): E = the exclusive CumProd of x, and
    W[..., j, i, ...] (j a new axis at ``axis``) = Π x_k over j < k <= i (j < k < i when
    exclusive) where i >= j (i > j when exclusive), else 0, so that dY_i/dX_j = E_j W[j, i].

    W is an n x n CumProd of x with ones at k <= j: no division, exact with zeros in x.
    """
    exclusive = int(ctx.attr("exclusive", 0))
    r = positions(ctx, ctx.inputs[0], axis)  # (x may be the flipped input, of the same shape)
    tail = [1] * (rank - 1 - axis)
    j = ctx.op.Reshape(r, ctx.ints([-1, 1, *tail]))
    i = ctx.op.Reshape(r, ctx.ints([1, -1, *tail]))
    after = ctx.op.Greater(i, j)
    z = ctx.op.Where(after, ctx.op.Unsqueeze(x, ctx.ints([axis])), ctx.const(1.0, like=x))
    q = ctx.op.CumProd(z, ctx.ints(axis + 1), exclusive=exclusive)
    w = ctx.op.Where(after if exclusive else ctx.op.GreaterOrEqual(i, j), q, ctx.const(0.0, like=x))
    e = ctx.op.CumProd(x, ctx.ints(axis), exclusive=1)
    return e, w


@rule("", "CumProd")
def cumprod_grad(ctx: GradContext, dy: str) -> Grads:
    """dX_j = Σ_i dY_i Π_{k<=i, k≠j} X_k = E_j Σ_i W[j, i] dY_i (see ``_cumprod_terms``);
    ``reverse`` flips X, dY and the result along the axis. O(n²) along the axis."""
    axis, rank = _cumprod_axis(ctx)
    reverse = int(ctx.attr("reverse", 0))
    x = _flip(ctx, ctx.inputs[0], axis) if reverse else ctx.inputs[0]
    g = _flip(ctx, dy, axis) if reverse else dy
    e, w = _cumprod_terms(ctx, x, axis, rank)
    s = ctx.op.ReduceSum(ctx.op.Mul(w, ctx.op.Unsqueeze(g, ctx.ints([axis]))), ctx.ints([axis + 1]), keepdims=0)
    dx = ctx.op.Mul(e, s)
    return (_flip(ctx, dx, axis) if reverse else dx), None


@jvp_rule("", "CumProd")
def cumprod_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """tY_i = Σ_j W[j, i] E_j tX_j (the same terms as the reverse rule)."""
    if ts[0] is None:
        return None
    axis, rank = _cumprod_axis(ctx)
    reverse = int(ctx.attr("reverse", 0))
    x = _flip(ctx, ctx.inputs[0], axis) if reverse else ctx.inputs[0]
    t = _flip(ctx, ts[0], axis) if reverse else ts[0]
    e, w = _cumprod_terms(ctx, x, axis, rank)
    et = ctx.op.Unsqueeze(ctx.op.Mul(e, t), ctx.ints([axis + 1]))
    ty = ctx.op.ReduceSum(ctx.op.Mul(w, et), ctx.ints([axis]), keepdims=0)
    return _flip(ctx, ty, axis) if reverse else ty


# -- what these rules refuse (the README's table) ----------------------------------------------
refuses(
    "",
    "Dropout",
    what="training mode without the mask output",
    why="the mask cannot be recovered from the output where x was 0",
)
refuses("", "CumProd", what="an axis computed at run time", why="the n x n product terms are built along a known axis")
