"""Rules for normalizations: Batch, Layer, Group, Instance, Lp, MeanVariance and RMS.

Most share one formula. With ``xhat = (x - mean(x)) / std`` over some axes and
``std = sqrt(var(x) + eps)``, for an upstream gradient ``g`` on ``xhat``::

    dx = (g - mean(g) - xhat * mean(g * xhat)) / std

The statistics are recomputed in the backward graph in X's own type, so the gradient
is as precise as X; LayerNormalization on float32/float16/bfloat16 X instead reuses
the op's own Mean and InvStdDev outputs (stashed as float, as precise as X).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...onnx_core.gradient import GradContext, Grads, TangentContext, Tangents
from ._table import jvp_rule, rule
from ._tensor_common import fill_shape, reshape_fill


def _standardize(ctx: GradContext, x: str, axes: str, eps: float) -> tuple[str, str, str]:
    """(centered, std, xhat) over ``axes`` (kept as size-1 dims)."""
    centered = ctx.op.Sub(x, ctx.op.ReduceMean(x, axes))
    var = ctx.op.ReduceMean(ctx.op.Mul(centered, centered), axes)
    std = ctx.op.Sqrt(ctx.op.Add(var, ctx.const(eps, like=x)))
    return centered, std, ctx.op.Div(centered, std)


def _standardize_grad(ctx: GradContext, g: str, xhat: str, std: str, axes: str) -> str:
    """dx = (g - mean(g) - xhat * mean(g * xhat)) / std."""
    centered_g = ctx.op.Sub(g, ctx.op.ReduceMean(g, axes))
    projection = ctx.op.Mul(xhat, ctx.op.ReduceMean(ctx.op.Mul(g, xhat), axes))
    return ctx.op.Div(ctx.op.Sub(centered_g, projection), std)


def _per_channel_standardize_grad(
    ctx: GradContext, dy: str, xhat: str, std: str, axes: str, scale_c: str
) -> tuple[str, str]:
    """(dx, dy * xhat) for g = dY * s with s constant over ``axes`` (one value per channel):

    mean(g) = s mean(dY) and mean(g xhat) = s mean(dY xhat), so
    dx = (dY - mean(dY) - xhat * mean(dY xhat)) * (s / std); ``dY * xhat`` also gives dScale.
    """
    dy_xhat = ctx.op.Mul(dy, xhat)
    centered = ctx.op.Sub(dy, ctx.op.ReduceMean(dy, axes))
    projection = ctx.op.Mul(xhat, ctx.op.ReduceMean(dy_xhat, axes))
    return ctx.op.Mul(ctx.op.Sub(centered, projection), ctx.op.Div(scale_c, std)), dy_xhat


def _per_channel(ctx: GradContext, v: str, rank: int) -> str:
    """A (C,) vector shaped (C, 1, ...) to broadcast against (N, C, D...)."""
    return ctx.op.Unsqueeze(v, ctx.ints(list(range(1, rank - 1)))) if rank > 2 else v


def _count(ctx: GradContext, x: str, axes: list[int]) -> str:
    """The number of elements of ``x`` over ``axes``, in x's type."""
    shape = ctx.shape(x)
    if shape is not None and all(isinstance(shape[a], int) for a in axes):
        return ctx.const(float(np.prod([shape[a] for a in axes])), like=x)
    dims = ctx.op.Gather(ctx.shape_of(x), ctx.ints(axes))
    return ctx.op.CastLike(ctx.op.ReduceProd(dims, keepdims=0), x)


def _channel_sum(ctx: GradContext, t: str, rank: int) -> str:
    return ctx.op.ReduceSum(t, ctx.ints([0, *range(2, rank)]), keepdims=0)


#: LayerNormalization's Mean / InvStdDev are reused when X has one of these types and
#: the statistics are stashed as float (``stash_type`` 1) or in X's own type
_LN_STASHED = {1: "float", 10: "float16", 16: "bfloat16"}


def _layer_norm_stats(ctx: GradContext, x: str) -> tuple[str, str] | None:
    """(Mean, InvStdDev) of the forward LayerNormalization in X's type, or None where the
    statistics must be recomputed (float64 X, whose float stash would lose precision)."""
    dtype = ctx.dtype(x)
    stash = int(ctx.attr("stash_type", 1))
    if dtype not in _LN_STASHED or stash not in (1, dtype):
        return None
    mean, inv = ctx.forward_output(1), ctx.forward_output(2)
    if stash != dtype:
        mean, inv = ctx.op.Cast(mean, to=dtype), ctx.op.Cast(inv, to=dtype)
    return mean, inv


@rule("", "LayerNormalization")
def layer_norm_grad(ctx: GradContext, dy: str) -> Grads:
    """Y = xhat * scale + bias over axes [axis, rank), xhat = (X - mean) * inv, inv = 1/std:

    dX = (g - mean(g) - xhat mean(g xhat)) * inv with g = dY * scale,
         + dMean / n - dInvStdDev * xhat * inv^2 / n  (when those outputs have gradients);
    dScale = sum(dY * xhat), dBias = sum(dY) over the broadcast axes.

    For float32, float16 and bfloat16 X, mean and inv are the forward node's Mean and
    InvStdDev outputs (computed by the re-emitted node when the source omitted them);
    for float64 X they are recomputed in float64 (the op stashes them as float).
    """
    x, scale = ctx.input(0), ctx.input(1)
    rank = ctx.require_rank(x)
    axis = int(ctx.attr("axis", -1)) % rank
    red = list(range(axis, rank))
    axes = ctx.ints(red)
    stats = _layer_norm_stats(ctx, x)
    if stats is not None:
        mean, inv = stats
        xhat = ctx.op.Mul(ctx.op.Sub(x, mean), inv)

        def per_std(t: str) -> str:
            return ctx.op.Mul(t, inv)

        def inv_var() -> str:
            return ctx.op.Mul(inv, inv)
    else:
        _, std, xhat = _standardize(ctx, x, axes, float(ctx.attr("epsilon", 1e-5)))

        def per_std(t: str) -> str:
            return ctx.op.Div(t, std)

        def inv_var() -> str:
            return ctx.op.Reciprocal(ctx.op.Mul(std, std))

    d_mean = ctx.output_grads[1] if len(ctx.output_grads) > 1 else None
    d_inv = ctx.output_grads[2] if len(ctx.output_grads) > 2 else None
    dx = None
    if ctx.needs_grad(0):
        parts = []
        if dy is not None:
            g = ctx.op.Mul(dy, scale)
            centered_g = ctx.op.Sub(g, ctx.op.ReduceMean(g, axes))
            projection = ctx.op.Mul(xhat, ctx.op.ReduceMean(ctx.op.Mul(g, xhat), axes))
            parts.append(per_std(ctx.op.Sub(centered_g, projection)))
        if d_mean is not None:
            parts.append(ctx.op.Div(ctx.op.CastLike(d_mean, x), _count(ctx, x, red)))
        if d_inv is not None:
            scaled = ctx.op.Mul(ctx.op.Mul(ctx.op.CastLike(d_inv, x), xhat), inv_var())
            parts.append(ctx.op.Neg(ctx.op.Div(scaled, _count(ctx, x, red))))
        dx = parts[0] if len(parts) == 1 else ctx.op.Sum(*parts)
    d_scale = d_bias = None
    if ctx.needs_grad(1):
        d_scale = ctx.unbroadcast(ctx.op.Mul(dy, xhat), scale) if dy is not None else ctx.zeros_like(scale)
    if ctx.needs_grad(2):
        d_bias = ctx.unbroadcast(dy, ctx.input(2)) if dy is not None else ctx.zeros_like(ctx.input(2))
    return (dx, d_scale, d_bias)[: len(ctx.inputs)]


@rule("", "BatchNormalization", since=15)
def batch_norm_grad(ctx: GradContext, dy: str) -> Grads:
    """Y = (X - mean) / std * scale + B per channel (axis 1), std = sqrt(var + eps).

    Inference: dX = dY scale / std, dScale = sum(dY xhat), dB = sum(dY),
    dMean = -sum(dY) scale / std, dVar = -sum(dY xhat) scale / (2 std^2); sum(dY xhat) is
    sum(dY (X - mean)) / std, the division on the channel vector instead of on X's cells.
    Training (batch statistics over N and the spatial axes): dX is the standardize
    gradient of g = dY scale, i.e. (dY - mean(dY) - xhat mean(dY xhat)) scale / std
    (scale is constant over the reduced axes); the running outputs ``input * m + batch * (1 - m)`` add
    dInputMean = dRM m, dInputVar = dRV m and to dX dRM (1-m)/n + 2 dRV (1-m)(X - mean)/n.
    """
    x, scale, _, mean, var = (ctx.input(i) for i in range(5))
    rank = ctx.require_rank(x)
    eps = float(ctx.attr("epsilon", 1e-5))
    if dy is None:
        dy = ctx.zeros_like(ctx.output(0))
    if int(ctx.attr("training_mode", 0)):
        return _batch_norm_training(ctx, dy, rank, eps)
    std = ctx.op.Sqrt(ctx.op.Add(var, ctx.const(eps, like=var)))
    ratio = ctx.op.Div(scale, std) if ctx.needs_grad(0) or ctx.needs_grad(3) else None
    dx = ctx.op.Mul(dy, _per_channel(ctx, ratio, rank)) if ratio is not None and ctx.needs_grad(0) else None
    sum_dy_xhat = None
    if ctx.needs_grad(1) or ctx.needs_grad(4):
        centered = ctx.op.Sub(x, _per_channel(ctx, mean, rank))
        sum_dy_xhat = ctx.op.Div(_channel_sum(ctx, ctx.op.Mul(dy, centered), rank), std)
    sum_dy = _channel_sum(ctx, dy, rank) if ctx.needs_grad(2) or ctx.needs_grad(3) else None
    d_mean = ctx.op.Neg(ctx.op.Mul(sum_dy, ratio)) if ratio is not None and ctx.needs_grad(3) else None
    d_var = None
    if ctx.needs_grad(4):
        half = ctx.const(-0.5, like=var)
        d_var = ctx.op.Div(ctx.op.Mul(ctx.op.Mul(sum_dy_xhat, scale), half), ctx.op.Mul(std, std))
    return dx, (sum_dy_xhat if ctx.needs_grad(1) else None), sum_dy, d_mean, d_var


def _batch_norm_training(ctx: GradContext, dy: str, rank: int, eps: float) -> tuple[str | None, ...]:
    x, scale = ctx.input(0), ctx.input(1)
    red = [0, *range(2, rank)]
    axes = ctx.ints(red)
    centered, std, xhat = _standardize(ctx, x, axes, eps)
    momentum = float(ctx.attr("momentum", 0.9))
    d_run_mean = ctx.output_grads[1] if len(ctx.output_grads) > 1 else None
    d_run_var = ctx.output_grads[2] if len(ctx.output_grads) > 2 else None
    dx = dy_xhat = None
    if ctx.needs_grad(0):
        main, dy_xhat = _per_channel_standardize_grad(ctx, dy, xhat, std, axes, _per_channel(ctx, scale, rank))
        parts = [main]
        rest = ctx.const(1.0 - momentum, like=x)
        if d_run_mean is not None:
            parts.append(ctx.op.Div(ctx.op.Mul(_per_channel(ctx, d_run_mean, rank), rest), _count(ctx, x, red)))
        if d_run_var is not None:
            two_rest = ctx.const(2.0 * (1.0 - momentum), like=x)
            scaled = ctx.op.Mul(_per_channel(ctx, d_run_var, rank), two_rest)
            parts.append(ctx.op.Div(ctx.op.Mul(scaled, centered), _count(ctx, x, red)))
        dx = parts[0] if len(parts) == 1 else ctx.op.Sum(*parts)
    d_scale = _channel_sum(ctx, dy_xhat or ctx.op.Mul(dy, xhat), rank) if ctx.needs_grad(1) else None
    d_bias = _channel_sum(ctx, dy, rank) if ctx.needs_grad(2) else None
    grads: list[str | None] = [dx, d_scale, d_bias]
    for i, d_run in ((3, d_run_mean), (4, d_run_var)):
        if not ctx.needs_grad(i):
            grads.append(None)
        elif d_run is None:
            grads.append(ctx.zeros_like(ctx.input(i)))  # Y reads only the batch statistics
        else:
            grads.append(ctx.op.Mul(d_run, ctx.const(momentum, like=ctx.input(i))))
    return tuple(grads)


@rule("", "InstanceNormalization")
def instance_norm_grad(ctx: GradContext, dy: str) -> Grads:
    """Y = xhat * scale + B per (n, c) over the spatial axes:

    dX = (g - mean(g) - xhat mean(g xhat)) / std with g = dY scale
       = (dY - mean(dY) - xhat mean(dY xhat)) scale / std  (scale is constant per plane);
    dScale = sum(dY xhat), dB = sum(dY) over N and the spatial axes.
    """
    x, scale = ctx.input(0), ctx.input(1)
    rank = ctx.require_rank(x)
    axes = ctx.ints(list(range(2, rank)))
    _, std, xhat = _standardize(ctx, x, axes, float(ctx.attr("epsilon", 1e-5)))
    dx = dy_xhat = None
    if ctx.needs_grad(0):
        dx, dy_xhat = _per_channel_standardize_grad(ctx, dy, xhat, std, axes, _per_channel(ctx, scale, rank))
    d_scale = _channel_sum(ctx, dy_xhat or ctx.op.Mul(dy, xhat), rank) if ctx.needs_grad(1) else None
    d_bias = _channel_sum(ctx, dy, rank) if ctx.needs_grad(2) else None
    return dx, d_scale, d_bias


@rule("", "GroupNormalization", since=21)
def group_norm_grad(ctx: GradContext, dy: str) -> Grads:
    """Y = xhat * scale[c] + bias[c], xhat standardized over (C/G, spatial) per (n, group):

    on X viewed as (N, G, -1): dX = (g - mean(g) - xhat mean(g xhat)) / std, g = dY scale;
    dScale = sum(dY xhat), dBias = sum(dY) over N and the spatial axes.
    """
    x, scale = ctx.input(0), ctx.input(1)
    rank = ctx.require_rank(x)
    grouped = fill_shape(ctx, x, [0, int(ctx.attr("num_groups")), -1])
    axes = ctx.ints([2])
    _, std, xhat = _standardize(ctx, ctx.op.Reshape(x, grouped), axes, float(ctx.attr("epsilon", 1e-5)))
    dx = None
    if ctx.needs_grad(0):
        g = ctx.op.Reshape(ctx.op.Mul(dy, _per_channel(ctx, scale, rank)), grouped)
        dx = ctx.op.Reshape(_standardize_grad(ctx, g, xhat, std, axes), ctx.shape_of(x))
    d_scale = None
    if ctx.needs_grad(1):
        d_scale = _channel_sum(ctx, ctx.op.Mul(dy, ctx.op.Reshape(xhat, ctx.shape_of(x))), rank)
    d_bias = _channel_sum(ctx, dy, rank) if ctx.needs_grad(2) else None
    return dx, d_scale, d_bias


@rule("", "LpNormalization")
def lp_norm_grad(ctx: GradContext, dy: str) -> Grads:
    """Y = X / |X|_p along ``axis``:  dX = (dY - s * sum(dY * Y)) / |X|_p, with s = Y for
    p = 2 and s = sign(X) for p = 1."""
    x, y = ctx.input(0), ctx.output(0)
    p = int(ctx.attr("p", 2))
    if p not in (1, 2):
        raise ctx.error(f"p={p}: LpNormalization is defined for p = 1 and 2 only")
    axes = ctx.ints([int(ctx.attr("axis", -1))])
    norm = ctx.op.ReduceL2(x, axes) if p == 2 else ctx.op.ReduceL1(x, axes)
    direction = y if p == 2 else ctx.op.Sign(x)
    inner = ctx.op.ReduceSum(ctx.op.Mul(dy, y), axes)
    return (ctx.op.Div(ctx.op.Sub(dy, ctx.op.Mul(direction, inner)), norm),)


@rule("", "MeanVarianceNormalization")
def mean_variance_norm_grad(ctx: GradContext, dy: str) -> Grads:
    """Y = c / s with c = X - mean(X), sigma = sqrt(mean(c^2)), s = sigma + 1e-9 (the
    spec's function body):  dX = (dY - mean(dY) - c * mean(dY c) / (s sigma)) / s.

    Where sigma = 0 (X constant over the axes, e.g. axes of size 1) c is 0 and the last
    term c * 0 / 0 has the limit 0: its denominator is 1 there, and sigma's square root
    reads 1 (the safe-Where form, so that differentiating again gives no NaN either).
    """
    x = ctx.input(0)
    axes = ctx.ints([int(a) for a in ctx.attr("axes", [0, 2, 3])])
    centered = ctx.op.Sub(x, ctx.op.ReduceMean(x, axes))
    var = ctx.op.ReduceMean(ctx.op.Mul(centered, centered), axes)
    zero, one = ctx.const(0.0, like=x), ctx.const(1.0, like=x)
    positive = ctx.op.Greater(var, zero)
    sigma = ctx.op.Where(positive, ctx.op.Sqrt(ctx.op.Where(positive, var, one)), zero)
    s = ctx.op.Add(sigma, ctx.const(1e-9, like=x))
    denominator = ctx.op.Where(positive, ctx.op.Mul(s, sigma), one)
    inner = ctx.op.Div(ctx.op.ReduceMean(ctx.op.Mul(dy, centered), axes), denominator)
    g = ctx.op.Sub(ctx.op.Sub(dy, ctx.op.ReduceMean(dy, axes)), ctx.op.Mul(centered, inner))
    return (ctx.op.Div(g, s),)


@rule("", "RMSNormalization", since=23)
def rms_norm_grad(ctx: GradContext, dy: str) -> Grads:
    """Y = xhat * scale, xhat = X / rms, rms = sqrt(mean(X^2 over [axis, rank)) + eps):

    dX = (g - xhat * mean(g xhat)) / rms with g = dY scale;  dScale = sum(dY xhat)
    over the broadcast axes.
    """
    x, scale = ctx.input(0), ctx.input(1)
    rank = ctx.require_rank(x)
    axes = ctx.ints(list(range(int(ctx.attr("axis", -1)) % rank, rank)))
    mean_sq = ctx.op.ReduceMean(ctx.op.Mul(x, x), axes)
    rms = ctx.op.Sqrt(ctx.op.Add(mean_sq, ctx.const(float(ctx.attr("epsilon", 1e-5)), like=x)))
    xhat = ctx.op.Div(x, rms)
    dx = None
    if ctx.needs_grad(0):
        g = ctx.op.Mul(dy, scale)
        projection = ctx.op.Mul(xhat, ctx.op.ReduceMean(ctx.op.Mul(g, xhat), axes))
        dx = ctx.op.Div(ctx.op.Sub(g, projection), rms)
    d_scale = ctx.unbroadcast(ctx.op.Mul(dy, xhat), scale) if ctx.needs_grad(1) else None
    return dx, d_scale


# -- forward rules ------------------------------------------------------------------------------
@jvp_rule("", "LayerNormalization")
def layer_norm_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """With c = X - mu, r = InvStdDev over the axes from ``axis``, xhat = c r: tmu = mean(tX),
    tc = tX - tmu, tr = -r^3 mean(c tc) = -r^2 mean(xhat tc),
    tY = (tc r + c tr) scale + xhat tScale + tB, with tc r + c tr = r (tc - xhat mean(xhat tc)):
    r^3 overflowed float16 (inf at std < 0.025) where the tangent itself is finite.

    mu and r are the forward node's Mean and InvStdDev where they are as precise as X
    (``_layer_norm_stats``, as the reverse rule), else recomputed in X's own type.
    """
    x = ctx.inputs[0]
    rank = ctx.require_rank(x)
    axis = int(ctx.attr("axis", -1)) % rank
    axes = ctx.ints(list(range(axis, rank)))
    stashed = _layer_norm_stats(ctx, x)
    if stashed is not None:
        mu, r = stashed
        c = ctx.op.Sub(x, mu)
    else:
        mu = ctx.op.ReduceMean(x, axes, keepdims=1)
        c = ctx.op.Sub(x, mu)
        var = ctx.op.ReduceMean(ctx.op.Mul(c, c), axes, keepdims=1)
        r = ctx.op.Reciprocal(ctx.op.Sqrt(ctx.op.Add(var, ctx.const(float(ctx.attr("epsilon", 1e-5)), like=x))))
    tx, tscale = ts[0], ts[1] if len(ts) > 1 else None
    tb = ts[2] if len(ts) > 2 else None
    terms: list[str | None] = []
    tmu = tr = None
    xhat = ctx.op.Mul(c, r) if tx is not None or tscale is not None else None
    if tx is not None:
        tmu = ctx.op.ReduceMean(tx, axes, keepdims=1)
        tc = ctx.op.Sub(tx, tmu)
        along = ctx.op.ReduceMean(ctx.op.Mul(xhat, tc), axes, keepdims=1)  # mean(xhat tc)
        dxhat = ctx.op.Mul(ctx.op.Sub(tc, ctx.op.Mul(xhat, along)), r)
        terms.append(ctx.op.Mul(dxhat, ctx.inputs[1]))
        tr = ctx.op.Neg(ctx.op.Mul(r, ctx.op.Mul(r, along))) if ctx.output(2) else None
    if tscale is not None:
        terms.append(ctx.op.Mul(xhat, tscale))
    if tb is not None:
        terms.append(ctx.op.Expand(tb, ctx.shape_of(ctx.output(0))))
    stats = [ctx.op.CastLike(t, ctx.forward_output(k)) if t and ctx.output(k) else None for k, t in ((1, tmu), (2, tr))]
    return ctx.add(*terms), *stats


@jvp_rule("", "BatchNormalization")
def batch_norm_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """Inference mode, Y = (X - mean) s + B with s = scale / sqrt(var + eps) per channel:
    tY = (tX - tMean) s + (X - mean) ts + tB, ts = tScale r - scale r^3 tVar / 2."""
    if int(ctx.attr("training_mode", 0)):
        return _batch_norm_training_jvp(ctx, ts)
    x, scale, _, mean, var = ctx.inputs[:5]
    rank = ctx.require_rank(x)
    eps = ctx.const(float(ctx.attr("epsilon", 1e-5)), like=var)
    r = ctx.op.Reciprocal(ctx.op.Sqrt(ctx.op.Add(var, eps)))
    s = ctx.op.Mul(scale, r)
    tx, tscale, tb, tmean, tvar = (list(ts) + [None] * 5)[:5]
    terms: list[str | None] = []
    centred = ctx.add(tx, ctx.op.Neg(_per_channel(ctx, tmean, rank)) if tmean else None)
    if centred is not None:
        terms.append(ctx.op.Mul(centred, _per_channel(ctx, s, rank)))
    t_s = ctx.add(
        ctx.op.Mul(tscale, r) if tscale else None,
        ctx.op.Mul(ctx.op.Mul(scale, ctx.op.Mul(r, ctx.op.Mul(r, r))), ctx.op.Mul(tvar, ctx.const(-0.5, like=var)))
        if tvar
        else None,
    )
    if t_s is not None:
        terms.append(ctx.op.Mul(ctx.op.Sub(x, _per_channel(ctx, mean, rank)), _per_channel(ctx, t_s, rank)))
    if tb is not None:
        terms.append(ctx.op.Expand(_per_channel(ctx, tb, rank), ctx.shape_of(ctx.output(0))))
    return ctx.add(*terms)


@jvp_rule("", "InstanceNormalization")
def instance_norm_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """The standardization's Jacobian is symmetric, so ``_standardize_grad`` applied to tX
    gives tXhat; tY = tXhat scale + xhat tScale + tB (per channel)."""
    x, scale = ctx.input(0), ctx.input(1)
    rank = ctx.require_rank(x)
    axes = ctx.ints(list(range(2, rank)))
    _, std, xhat = _standardize(ctx, x, axes, float(ctx.attr("epsilon", 1e-5)))
    tx, tscale, tb = (list(ts) + [None] * 3)[:3]
    terms: list[str | None] = []
    if tx is not None:
        terms.append(ctx.op.Mul(_standardize_grad(ctx, tx, xhat, std, axes), _per_channel(ctx, scale, rank)))
    if tscale is not None:
        terms.append(ctx.op.Mul(xhat, _per_channel(ctx, tscale, rank)))
    if tb is not None:
        terms.append(ctx.op.Expand(_per_channel(ctx, tb, rank), ctx.shape_of(ctx.output(0))))
    return ctx.add(*terms)


@jvp_rule("", "MeanVarianceNormalization")
def mean_variance_norm_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """The Jacobian (a centring projection and a rank-one term, over s) is symmetric:
    the reverse rule applied to tX."""
    return None if ts[0] is None else mean_variance_norm_grad(ctx, ts[0])


@jvp_rule("", "LpNormalization")
def lp_norm_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """tY = (tX - Y * sum(s * tX)) / |X|_p, s = Y for p = 2 and sign(X) for p = 1."""
    if ts[0] is None:
        return None
    x, y = ctx.input(0), ctx.output(0)
    p = int(ctx.attr("p", 2))
    if p not in (1, 2):
        raise ctx.error(f"p={p}: LpNormalization is defined for p = 1 and 2 only")
    axes = ctx.ints([int(ctx.attr("axis", -1))])
    norm = ctx.op.ReduceL2(x, axes) if p == 2 else ctx.op.ReduceL1(x, axes)
    direction = y if p == 2 else ctx.op.Sign(x)
    inner = ctx.op.ReduceSum(ctx.op.Mul(ts[0], direction), axes)
    return ctx.op.Div(ctx.op.Sub(ts[0], ctx.op.Mul(y, inner)), norm)


@jvp_rule("", "RMSNormalization")
def rms_norm_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """tY = scale (tX - xhat mean(tX xhat)) / rms + xhat tScale."""
    x, scale = ctx.input(0), ctx.input(1)
    rank = ctx.require_rank(x)
    axes = ctx.ints(list(range(int(ctx.attr("axis", -1)) % rank, rank)))
    mean_sq = ctx.op.ReduceMean(ctx.op.Mul(x, x), axes)
    rms = ctx.op.Sqrt(ctx.op.Add(mean_sq, ctx.const(float(ctx.attr("epsilon", 1e-5)), like=x)))
    xhat = ctx.op.Div(x, rms)
    terms: list[str | None] = []
    if ts[0] is not None:
        projection = ctx.op.Mul(xhat, ctx.op.ReduceMean(ctx.op.Mul(ts[0], xhat), axes))
        terms.append(ctx.op.Mul(scale, ctx.op.Div(ctx.op.Sub(ts[0], projection), rms)))
    if len(ts) > 1 and ts[1] is not None:
        terms.append(ctx.op.Mul(xhat, ts[1]))
    return ctx.add(*terms)


def _batch_norm_training_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """Training mode standardizes over N and the spatial axes with the batch statistics:
    tY = tXhat scale + xhat tScale + tB, tXhat by the symmetric ``_standardize_grad``.
    The running statistics ``input * m + batch * (1 - m)``: tRM = tInputMean m + mean(tX) (1 - m),
    tRV = tInputVar m + 2 mean((X - mean) tX) (1 - m) (the batch variance is the population one)."""
    x, scale = ctx.input(0), ctx.input(1)
    rank = ctx.require_rank(x)
    red = [0, *range(2, rank)]
    axes = ctx.ints(red)
    centered, std, xhat = _standardize(ctx, x, axes, float(ctx.attr("epsilon", 1e-5)))
    tx, tscale, tb, tmean, tvar = (list(ts) + [None] * 5)[:5]
    terms: list[str | None] = []
    if tx is not None:
        terms.append(ctx.op.Mul(_standardize_grad(ctx, tx, xhat, std, axes), _per_channel(ctx, scale, rank)))
    if tscale is not None:
        terms.append(ctx.op.Mul(xhat, _per_channel(ctx, tscale, rank)))
    if tb is not None:
        terms.append(ctx.op.Expand(_per_channel(ctx, tb, rank), ctx.shape_of(ctx.output(0))))
    if not (ctx.output(1) or ctx.output(2)):
        return ctx.add(*terms)
    momentum = float(ctx.attr("momentum", 0.9))
    stats: list[str | None] = []
    for k, t_in, batch in ((3, tmean, tx), (4, tvar, ctx.op.Mul(centered, tx) if tx else None)):
        if not ctx.output(k - 2):
            stats.append(None)
            continue
        rest = 1.0 - momentum if k == 3 else 2.0 * (1.0 - momentum)
        stats.append(
            ctx.add(
                ctx.op.Mul(t_in, ctx.const(momentum, like=ctx.input(k))) if t_in else None,
                ctx.op.Mul(ctx.op.ReduceMean(batch, axes, keepdims=0), ctx.const(rest, like=x)) if batch else None,
            )
        )
    return ctx.add(*terms), *stats


@jvp_rule("", "GroupNormalization")
def group_norm_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """On X viewed as (N, G, -1), tXhat = ``_standardize_grad`` of tX (symmetric);
    tY = tXhat scale + xhat tScale + tBias (scale and bias per channel)."""
    x, scale = ctx.input(0), ctx.input(1)
    rank = ctx.require_rank(x)
    grouped = fill_shape(ctx, x, [0, int(ctx.attr("num_groups")), -1])
    axes = ctx.ints([2])
    _, std, xhat = _standardize(ctx, ctx.op.Reshape(x, grouped), axes, float(ctx.attr("epsilon", 1e-5)))
    tx, tscale, tb = (list(ts) + [None] * 3)[:3]
    terms: list[str | None] = []
    if tx is not None:
        t_xhat = ctx.op.Reshape(_standardize_grad(ctx, ctx.op.Reshape(tx, grouped), xhat, std, axes), ctx.shape_of(x))
        terms.append(ctx.op.Mul(t_xhat, _per_channel(ctx, scale, rank)))
    if tscale is not None:
        terms.append(ctx.op.Mul(ctx.op.Reshape(xhat, ctx.shape_of(x)), _per_channel(ctx, tscale, rank)))
    if tb is not None:
        # Y has X's shape: Shape(X), not Shape(Y), leaves the tangent graph free of the forward
        # op (onnxruntime's GroupNormalization itself fails on an empty batch)
        terms.append(ctx.op.Expand(_per_channel(ctx, tb, rank), ctx.shape_of(x)))
    return ctx.add(*terms)


# -- LRN ----------------------------------------------------------------------------------------
def _channel_window_sum(ctx: GradContext, v: str, before: int, after: int) -> str:
    """W(v)[n, c, ...] = sum of v[n, i, ...] over i in [c - before, c + after] (inside [0, C)).

    One Conv over the channel axis: v viewed as (N, 1, C, L) (L the other dims, flattened)
    against ones(1, 1, before + after + 1, 1) with the channel axis padded by (before, after).
    The transpose of W(before, after) is W(after, before).
    """
    shape = ctx.shape(ctx.input(0))  # v is shaped like X
    viewed = reshape_fill(
        ctx, ctx.op.Unsqueeze(v, ctx.ints([1])), [0, 0, 0, -1], None if shape is None else [shape[0], 1, *shape[1:]]
    )
    ones = ctx.const(np.ones((1, 1, before + after + 1, 1)), like=v)
    summed = ctx.op.Conv(viewed, ones, pads=[before, 0, after, 0])
    return ctx.op.Reshape(summed, ctx.shape_of(v))


def _lrn_terms(ctx: GradContext) -> tuple[int, int, float, float, str]:
    """(before, after, alpha / size, beta, s) with s = bias + alpha / size * W(X^2), the
    spec's window over channels [c - floor((size - 1) / 2), c + ceil((size - 1) / 2)]."""
    x = ctx.input(0)
    size = int(ctx.attr("size"))
    before, after = (size - 1) // 2, size // 2
    alpha, beta, bias = (float(ctx.attr(k, d)) for k, d in (("alpha", 1e-4), ("beta", 0.75), ("bias", 1.0)))
    square_sum = _channel_window_sum(ctx, ctx.op.Mul(x, x), before, after)
    s = ctx.op.Add(ctx.const(bias, like=x), ctx.op.Mul(ctx.const(alpha / size, like=x), square_sum))
    return before, after, alpha / size, beta, s


@rule("", "LRN")
def lrn_grad(ctx: GradContext, dy: str) -> Grads:
    """Y = X s^-beta, s = bias + alpha / size * W(X^2) (W the channel window sum):

    dX = dY s^-beta - 2 beta (alpha / size) X W^T(dY Y / s).

    Y is recomputed as X s^-beta (the backward graph needs no LRN: onnxruntime's refuses
    even sizes).
    """
    x = ctx.input(0)
    before, after, a, beta, s = _lrn_terms(ctx)
    scale = ctx.op.Pow(s, ctx.const(-beta, like=x))
    direct = ctx.op.Mul(dy, scale)
    y_over_s = ctx.op.Div(ctx.op.Mul(x, scale), s)
    spread = _channel_window_sum(ctx, ctx.op.Mul(dy, y_over_s), after, before)
    through_s = ctx.op.Mul(ctx.op.Mul(x, spread), ctx.const(2.0 * beta * a, like=x))
    return (ctx.op.Sub(direct, through_s),)


@jvp_rule("", "LRN")
def lrn_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """tY = tX s^-beta - 2 beta (alpha / size) (Y / s) W(X tX)."""
    if ts[0] is None:
        return None
    x = ctx.input(0)
    before, after, a, beta, s = _lrn_terms(ctx)
    scale = ctx.op.Pow(s, ctx.const(-beta, like=x))
    direct = ctx.op.Mul(ts[0], scale)
    gathered = _channel_window_sum(ctx, ctx.op.Mul(x, ts[0]), before, after)
    y_over_s = ctx.op.Div(ctx.op.Mul(x, scale), s)
    through_s = ctx.op.Mul(ctx.op.Mul(y_over_s, gathered), ctx.const(2.0 * beta * a, like=x))
    return ctx.op.Sub(direct, through_s)
