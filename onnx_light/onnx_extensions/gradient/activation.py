"""Rules for activations: Sigmoid Tanh Relu LeakyRelu Elu Selu Celu Softplus Softsign
HardSigmoid HardSwish Gelu Mish ThresholdedRelu Shrink, and Softmax LogSoftmax.

Where the forward output gives the derivative cheaply it is reused (Sigmoid, Tanh,
Elu, Selu, HardSigmoid, Softmax). An input exactly at a kink gets one of the one-sided
derivatives, the one PyTorch picks (Relu'(0) = 0, LeakyRelu'(0) = alpha).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ...onnx_core.gradient import GradContext, Grads, TangentContext, Tangents
from ._masks import mask
from ._table import elementwise, jvp_rule, no_grad, rule

# Hardmax is one-hot of the arg max: piecewise constant in X, derivative zero almost everywhere
no_grad("", "Hardmax")


#: TensorProto.FLOAT
_FLOAT = 1


def _c(ctx: GradContext, value: float) -> str:
    """A scalar constant of the input's type."""
    return ctx.const(float(value), like=ctx.input(0))


def _positive(ctx: GradContext) -> str:
    return ctx.op.Greater(ctx.input(0), _c(ctx, 0.0))


# dX = dY * Y * (1 - Y)
elementwise(
    "",
    "Sigmoid",
    lambda ctx, dy: ctx.op.Mul(ctx.op.Mul(dy, ctx.output(0)), ctx.op.Sub(_c(ctx, 1.0), ctx.output(0))),
)
# dX = dY - dY * Y * Y
elementwise("", "Tanh", lambda ctx, dy: ctx.op.Sub(dy, ctx.op.Mul(ctx.op.Mul(dy, ctx.output(0)), ctx.output(0))))


def _relu(ctx: GradContext, dy: str) -> str:
    """dX = dY * [Y != 0]: Y = max(X, 0) is non-zero exactly where X > 0.

    The indicator is ``Cast(Cast(Y, bool), type of Y)``: no constant, and onnxruntime runs
    the two casts about 3x faster than ``Sign`` (and 10x faster than ``Where``).
    """
    y = ctx.output(0)
    nonzero = ctx.op.Cast(y, to=9)  # TensorProto.BOOL
    dtype = ctx.dtype(y)
    return ctx.op.Mul(dy, ctx.op.Cast(nonzero, to=dtype) if dtype else ctx.op.CastLike(nonzero, y))


elementwise("", "Relu", _relu)
# dX = dY where X > 0 else alpha * dY
elementwise(
    "",
    "LeakyRelu",
    lambda ctx, dy: ctx.op.Where(_positive(ctx), dy, ctx.op.Mul(dy, _c(ctx, ctx.attr("alpha", 0.01)))),
)
# dX = dY where X > alpha
elementwise(
    "",
    "ThresholdedRelu",
    lambda ctx, dy: ctx.op.Where(ctx.op.Greater(ctx.input(0), _c(ctx, ctx.attr("alpha", 1.0))), dy, _c(ctx, 0.0)),
)
# dX = dY where |X| > lambd
elementwise(
    "",
    "Shrink",
    lambda ctx, dy: ctx.op.Where(
        ctx.op.Greater(ctx.op.Abs(ctx.input(0)), _c(ctx, ctx.attr("lambd", 0.5))), dy, _c(ctx, 0.0)
    ),
)
# dX = dY * sigmoid(X)
elementwise("", "Softplus", lambda ctx, dy: ctx.op.Mul(dy, ctx.op.Sigmoid(ctx.input(0))))


def _elu(ctx: GradContext, dy: str) -> str:
    """dX = dY where X > 0 else dY * (Y + alpha)   (alpha * exp(X) = Y + alpha there)."""
    alpha = _c(ctx, ctx.attr("alpha", 1.0))
    return ctx.op.Where(_positive(ctx), dy, ctx.op.Mul(dy, ctx.op.Add(ctx.output(0), alpha)))


def _selu(ctx: GradContext, dy: str) -> str:
    """dX = dY * (gamma where X > 0 else Y + gamma * alpha)."""
    alpha = ctx.attr("alpha", 1.67326319217681884765625)
    gamma = ctx.attr("gamma", 1.05070102214813232421875)
    slope = ctx.op.Where(_positive(ctx), _c(ctx, gamma), ctx.op.Add(ctx.output(0), _c(ctx, gamma * alpha)))
    return ctx.op.Mul(dy, slope)


def _celu(ctx: GradContext, dy: str) -> str:
    """dX = dY where X > 0 else dY * exp(X / alpha).

    Reads only X, so the (float32-only) Celu node is not re-emitted.
    """
    inner = ctx.op.Exp(ctx.op.Div(ctx.input(0), _c(ctx, ctx.attr("alpha", 1.0))))
    return ctx.op.Where(_positive(ctx), dy, ctx.op.Mul(dy, inner))


def _softsign(ctx: GradContext, dy: str) -> str:
    """dX = dY / (1 + |X|)^2."""
    d = ctx.op.Add(ctx.op.Abs(ctx.input(0)), _c(ctx, 1.0))
    return ctx.op.Div(dy, ctx.op.Mul(d, d))


def _hard_sigmoid(ctx: GradContext, dy: str) -> str:
    """dX = alpha * dY where 0 < Y < 1, else 0: ``Mul(dY, alpha * mask)``, see ``_masks``."""
    y = ctx.output(0)
    inside = ctx.op.And(ctx.op.Greater(y, _c(ctx, 0.0)), ctx.op.Less(y, _c(ctx, 1.0)))
    return ctx.op.Mul(dy, ctx.op.Mul(mask(ctx, inside, y), _c(ctx, ctx.attr("alpha", 0.2))))


def _hard_swish(ctx: GradContext, dy: str) -> str:
    """Y = X * H with H = HardSigmoid(X, 1/6, 1/2) = max(0, min(1, X/6 + 1/2)): dX = 0 for X < -3,
    dY for X > 3, dY * (X/3 + 1/2) between (at the kinks PyTorch's one-sided choice: 0 at X = -3,
    1 at X = 3).

    In H: the slope is ``H + [|D| < 1/2] * D`` with ``D = H - 1/2`` (between, H + D = 2H - 1/2 =
    X/3 + 1/2; outside, H is 0 or 1 and |D| = 1/2, also at the kinks), one ``Mul`` of dY by it:
    eight elementwise nodes and one constant (a mask, see ``_masks``; no Where). H is one
    HardSigmoid node in float32, a Clip of X/6 + 1/2 in the types onnxruntime's lacks.
    """
    x = ctx.input(0)
    half = _c(ctx, 0.5)
    if ctx.dtype(x) == _FLOAT:
        h = ctx.op.HardSigmoid(x, alpha=1.0 / 6.0, beta=0.5)
    else:  # onnxruntime's HardSigmoid is float32 only
        h = ctx.op.Clip(ctx.op.Add(ctx.op.Div(x, _c(ctx, 6.0)), half), _c(ctx, 0.0), _c(ctx, 1.0))
    d = ctx.op.Sub(h, half)
    inside = mask(ctx, ctx.op.Less(ctx.op.Abs(d), half), x)
    return ctx.op.Mul(dy, ctx.op.Add(h, ctx.op.Mul(inside, d)))


def _gelu(ctx: GradContext, dy: str) -> str:
    """approximate="none": Y = X Phi(X), dX = dY * (Phi(X) + X phi(X)),
    Phi(X) = (1 + erf(X / sqrt 2)) / 2, phi(X) = exp(-X^2 / 2) / sqrt(2 pi).

    approximate="tanh": Y = X (1 + T) / 2 with T = tanh(k (X + c X^3)), k = sqrt(2/pi),
    c = 0.044715; dX = dY * ((1 + T) + X (1 - T^2) k (1 + 3 c X^2)) / 2.
    """
    x = ctx.input(0)
    x2 = ctx.op.Mul(x, x)
    if ctx.attr("approximate", "none") == "tanh":
        k, c = math.sqrt(2.0 / math.pi), 0.044715
        t = ctx.op.Tanh(ctx.op.Mul(ctx.op.Mul(x, ctx.op.Add(ctx.op.Mul(x2, _c(ctx, c)), _c(ctx, 1.0))), _c(ctx, k)))
        du = ctx.op.Add(ctx.op.Mul(x2, _c(ctx, 3.0 * c * k)), _c(ctx, k))
        sech2 = ctx.op.Sub(_c(ctx, 1.0), ctx.op.Mul(t, t))
        total = ctx.op.Add(ctx.op.Add(t, _c(ctx, 1.0)), ctx.op.Mul(ctx.op.Mul(x, sech2), du))
        return ctx.op.Mul(ctx.op.Mul(dy, _c(ctx, 0.5)), total)
    cdf = ctx.op.Mul(ctx.op.Add(ctx.op.Erf(ctx.op.Mul(x, _c(ctx, math.sqrt(0.5)))), _c(ctx, 1.0)), _c(ctx, 0.5))
    pdf = ctx.op.Mul(ctx.op.Exp(ctx.op.Mul(x2, _c(ctx, -0.5))), _c(ctx, 1.0 / math.sqrt(2.0 * math.pi)))
    return ctx.op.Mul(dy, ctx.op.Add(cdf, ctx.op.Mul(x, pdf)))


def _mish(ctx: GradContext, dy: str) -> str:
    """Y = X tanh(softplus(X)): dX = dY * (T + X (1 - T^2) sigmoid(X)), T = tanh(softplus(X))."""
    x = ctx.input(0)
    t = ctx.op.Tanh(ctx.op.Softplus(x))
    sech2 = ctx.op.Sub(_c(ctx, 1.0), ctx.op.Mul(t, t))
    return ctx.op.Mul(dy, ctx.op.Add(t, ctx.op.Mul(ctx.op.Mul(x, sech2), ctx.op.Sigmoid(x))))


elementwise("", "Elu", _elu)
elementwise("", "Selu", _selu)
elementwise("", "Celu", _celu)
elementwise("", "Softsign", _softsign)
elementwise("", "HardSigmoid", _hard_sigmoid)
elementwise("", "HardSwish", _hard_swish)
elementwise("", "Gelu", _gelu, since=20)
elementwise("", "Mish", _mish)


def _softmax_axes(ctx: GradContext) -> str:
    """The ``axis`` attribute (default -1) as a 1-D Constant; refused outside [-rank, rank - 1]."""
    axis = int(ctx.attr("axis", -1))
    rank = ctx.rank(ctx.input(0))
    if rank is not None and not -rank <= axis < rank:
        raise ctx.error(f"axis {axis} is outside [{-rank}, {rank - 1}] for an input of rank {rank}")
    return ctx.ints([axis])


@rule("", "Softmax", since=13)
def softmax_grad(ctx: GradContext, dy: str) -> Grads:
    """dX = Y * (dY - sum(dY * Y, axis))   (axis default -1, opset 13 semantics)."""
    y = ctx.output(0)
    axes = _softmax_axes(ctx)
    return (ctx.op.Mul(y, ctx.op.Sub(dy, ctx.op.ReduceSum(ctx.op.Mul(dy, y), axes, keepdims=1))),)


@rule("", "LogSoftmax", since=13)
def log_softmax_grad(ctx: GradContext, dy: str) -> Grads:
    """dX = dY - exp(Y) * sum(dY, axis)   (axis default -1, opset 13 semantics)."""
    y = ctx.output(0)
    axes = _softmax_axes(ctx)
    return (ctx.op.Sub(dy, ctx.op.Mul(ctx.op.Exp(y), ctx.op.ReduceSum(dy, axes, keepdims=1))),)


# -- forward rules ------------------------------------------------------------------------------
@jvp_rule("", "Softmax")
def softmax_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """tY = Y * (tX - sum(Y * tX, axis)): the Jacobian is symmetric, so the reverse rule serves."""
    if ts[0] is None:
        return None
    g = softmax_grad(ctx, ts[0])
    return g if isinstance(g, str) or g is None else g[0]


@jvp_rule("", "LogSoftmax")
def log_softmax_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """tY = tX - sum(softmax(X) * tX, axis)."""
    if ts[0] is None:
        return None
    axis = ctx.attr("axis", -1)
    p = ctx.op.Exp(ctx.output(0))
    s = ctx.op.ReduceSum(ctx.op.Mul(p, ts[0]), ctx.ints([axis]), keepdims=1)
    return ctx.op.Sub(ts[0], s)
