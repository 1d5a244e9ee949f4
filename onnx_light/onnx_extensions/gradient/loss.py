"""Rules for losses: SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss.

With ``P`` the log-probabilities (N, C, D...), labels ``l`` and class weights ``w``
(1 when omitted), ``loss_i = -w[l_i] P[i, l_i]`` for labels other than
``ignore_index`` (0 for those); ``mean`` divides the sum by ``W = sum_i w[l_i]`` over
the kept labels. With the one-hot mask ``M[i, c] = [c == l_i != ignore_index]``::

    dP = -coef * M * w,   coef = dy_i (none), dy (sum), dy / W (mean)
    dw[c] = -sum_i coef_i M[i, c] P[i, c]   (minus L * sum_i M[i, c] / W for mean)

SoftmaxCrossEntropyLoss is the same on ``P = LogSoftmax(scores, axis=1)``, followed by
LogSoftmax's backward ``ds = dP - softmax * sum_c dP``; a gradient on its optional
``log_prob`` output joins ``dP`` first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from ...onnx_core.gradient import GradContext, Grads, TangentContext, Tangents
from ._table import jvp_rule, refuses, rule


def _mask(ctx: GradContext, labels: str, scores: str) -> str:
    """``M[i, c] = [c == l_i]`` in the scores' type, zero rows where ``l_i == ignore_index``.

    The class ids are a constant when the class count is static, else ``Range(0,
    Shape(scores)[1])`` at run time.
    """
    shape = ctx.shape(scores)
    rank = len(shape) if shape is not None else ctx.rank(labels)
    if rank is None:
        raise ctx.error(
            f"needs the rank of {scores!r} or of the labels {labels!r}, which shape inference could not "
            "determine; declare the graph input's shape (its dims may be symbolic)"
        )
    if shape is None:
        rank += 1  # scores are (N, C, D...) for labels (N, D...)
    int32 = ctx.dtype(labels) == 6
    ignore = ctx.attr("ignore_index")
    count = shape[1] if shape is not None and isinstance(shape[1], int) else None
    if count is not None:
        values = np.arange(count, dtype=np.int32 if int32 else np.int64)
        if ignore is not None and 0 <= int(ignore) < count:
            values[int(ignore)] = -(2**31) if int32 else -(2**62)  # a value no kept label can have
        classes = values.reshape((1, -1) + (1,) * (rank - 2))
    else:  # a symbolic class count: the class ids from Shape(scores)[1] at run time
        ids = ctx.op.Range(ctx.ints(0), ctx.op.Squeeze(ctx.op.Shape(scores, start=1, end=2)), ctx.ints(1))
        if ignore is not None and int(ignore) >= 0:  # (a negative one is no class id)
            ids = ctx.op.Where(ctx.op.Equal(ids, ctx.ints(int(ignore))), ctx.ints(-(2**31)), ids)
        if int32:
            ids = ctx.op.Cast(ids, to=6)
        classes = ctx.op.Reshape(ids, ctx.ints([1, -1] + [1] * (rank - 2)))
    hit = ctx.op.Equal(ctx.op.Unsqueeze(labels, ctx.ints([1])), classes)
    return ctx.op.CastLike(hit, scores)


def _nll_backward(
    ctx: GradContext, dy: str | None, logp: str, labels: str, weights: str
) -> tuple[str | None, str | None]:
    """(dP, dWeights) of the negative log-likelihood of ``logp``; see the module docstring.

    ``logp`` is shaped like input 0, whose inferred shape gives the rank and class count.
    """
    if dy is None:
        return None, (ctx.zeros_like(weights) if weights and ctx.needs_grad(2) else None)
    rank = ctx.require_rank(ctx.input(0))
    mask = _mask(ctx, labels, ctx.input(0))
    w_c = ctx.op.Unsqueeze(weights, ctx.ints([0, *range(2, rank)])) if weights else None
    weighted = ctx.op.Mul(mask, w_c) if w_c else mask
    reduction = str(ctx.attr("reduction", "mean"))
    total = None
    if reduction == "none":
        coef = ctx.op.Unsqueeze(dy, ctx.ints([1]))
    elif reduction == "sum":
        coef = dy
    else:
        total = ctx.op.ReduceSum(weighted, keepdims=0)
        coef = ctx.op.Div(dy, total)
    d_logp = ctx.op.Neg(ctx.op.Mul(weighted, coef))
    d_w = None
    if weights and ctx.needs_grad(2):
        # -log p at the labels, shifted by the loss for mean (the denominator's share)
        picked = ctx.op.Neg(logp)
        if total is not None:
            picked = ctx.op.Sub(picked, ctx.output(0))
        d_w = ctx.op.ReduceSum(ctx.op.Mul(ctx.op.Mul(mask, picked), coef), ctx.ints([0, *range(2, rank)]), keepdims=0)
    return d_logp, d_w


@rule("", "NegativeLogLikelihoodLoss", nondiff=(1,))
def nll_loss_grad(ctx: GradContext, dy: str) -> Grads:
    """dInput = -coef * M * w; dWeight as in the module docstring."""
    d_input, d_w = _nll_backward(ctx, dy, ctx.input(0), ctx.input(1), ctx.input(2))
    return (d_input, None, d_w)[: len(ctx.inputs)]


@rule("", "SoftmaxCrossEntropyLoss", nondiff=(1,))
def softmax_cross_entropy_grad(ctx: GradContext, dy: str) -> Grads:
    """dScores = dP - softmax(scores) * sum_c dP, with dP the NLL gradient plus d(log_prob).

    P is the forward node's ``log_prob`` output (computed by the re-emitted node when the
    source omitted it). Without class weights or a gradient on log_prob, dP = -coef * M
    and sum_c M = [l != ignore_index], so dScores = coef * (softmax * [l != ignore] - M):
    the softmax term needs no row sum when there is no ignore_index.
    """
    scores, labels, weights = ctx.input(0), ctx.input(1), ctx.input(2)
    logp = ctx.forward_output(1)
    d_extra = ctx.output_grads[1] if len(ctx.output_grads) > 1 else None
    if dy is not None and d_extra is None and not weights:
        return (_unweighted_scores_grad(ctx, dy, scores, labels, logp) if ctx.needs_grad(0) else None, None)
    d_logp, d_w = _nll_backward(ctx, dy, logp, labels, weights)
    if d_extra is not None:
        d_logp = d_extra if d_logp is None else ctx.op.Add(d_logp, d_extra)
    d_scores = None
    if ctx.needs_grad(0) and d_logp is not None:
        row_sum = ctx.op.ReduceSum(d_logp, ctx.ints([1]))
        d_scores = ctx.op.Sub(d_logp, ctx.op.Mul(ctx.op.Exp(logp), row_sum))
    return (d_scores, None, d_w)[: len(ctx.inputs)]


def _unweighted_scores_grad(ctx: GradContext, dy: str, scores: str, labels: str, logp: str) -> str:
    """dScores = coef * (softmax * [l != ignore_index] - M) (no class weights)."""
    shape = ctx.shape(scores)
    mask = _mask(ctx, labels, scores)
    can_ignore = ctx.attr("ignore_index") is not None  # out-of-range values are ignorable labels too
    prob = ctx.op.Exp(logp)
    if can_ignore:
        prob = ctx.op.Mul(prob, ctx.op.ReduceSum(mask, ctx.ints([1])))
    reduction = str(ctx.attr("reduction", "mean"))
    if reduction == "none":
        coef = ctx.op.Unsqueeze(dy, ctx.ints([1]))
    elif reduction == "sum":
        coef = dy
    elif not can_ignore and shape is not None and all(isinstance(d, int) for d in shape):
        coef = ctx.op.Div(dy, ctx.const(float(np.prod(shape)) / shape[1], like=scores))
    else:
        coef = ctx.op.Div(dy, ctx.op.ReduceSum(mask, keepdims=0))
    return ctx.op.Mul(ctx.op.Sub(prob, mask), coef)


# -- forward rules ------------------------------------------------------------------------------
def _nll_tangent(
    ctx: TangentContext, scores: str, t_s: str | None, t_w: str | None, loss: str, attrs: dict[str, Any]
) -> str | None:
    """The tangent of NLL(scores, labels, weights): linear in the scores; in the weights
    linear for reduction none/sum, and for mean (loss = S / W, W the picked weights' sum)
    tLoss = (S(tW) - loss W(tW)) / W."""
    labels = ctx.inputs[1]
    w = ctx.input(2)

    def nll(s: str, weights: str, **kw: Any) -> str:
        return cast(str, ctx.op.NegativeLogLikelihoodLoss(s, labels, weights or None, **{**attrs, **kw}))

    term_s = nll(t_s, w) if t_s is not None else None
    if t_w is None:
        return term_s
    if attrs.get("reduction", "mean") != "mean":
        return ctx.add(term_s, nll(scores, t_w))
    neg_ones = ctx.op.Neg(ctx.op.Add(ctx.zeros_like(scores), ctx.const(1.0, like=scores)))
    summed, tw_of = nll(scores, t_w, reduction="sum"), nll(neg_ones, t_w, reduction="sum")
    term_w = ctx.op.Div(ctx.op.Sub(summed, ctx.op.Mul(loss, tw_of)), nll(neg_ones, w, reduction="sum"))
    return ctx.add(term_s, term_w)


def _loss_attrs(ctx: TangentContext) -> dict[str, Any]:
    attrs: dict[str, Any] = {"reduction": ctx.attr("reduction", "mean")}
    if ctx.attr("ignore_index") is not None:
        attrs["ignore_index"] = ctx.attr("ignore_index")
    return attrs


@jvp_rule("", "NegativeLogLikelihoodLoss")
def nll_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """See ``_nll_tangent``."""
    t_w = ts[2] if len(ts) > 2 else None
    return _nll_tangent(ctx, ctx.inputs[0], ts[0], t_w, ctx.output(0), _loss_attrs(ctx))


@jvp_rule("", "SoftmaxCrossEntropyLoss")
def softmax_cross_entropy_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """The loss is NLL(LogSoftmax(scores, axis=1)):
    tLogProb = tS - sum(exp(LogProb) tS, axis=1), then the NLL tangent."""
    log_prob = ctx.forward_output(1)
    t_logp = None
    if ts[0] is not None:
        p = ctx.op.Exp(log_prob)
        t_logp = ctx.op.Sub(ts[0], ctx.op.ReduceSum(ctx.op.Mul(p, ts[0]), ctx.ints([1]), keepdims=1))
    t_w = ts[2] if len(ts) > 2 else None
    return _nll_tangent(ctx, log_prob, t_logp, t_w, ctx.output(0), _loss_attrs(ctx)), t_logp


# -- what these rules refuse (the README's table) ----------------------------------------------
refuses(
    "",
    "SoftmaxCrossEntropyLoss",
    "NegativeLogLikelihoodLoss",
    what="an unknown number of classes",
    why="the one-hot of the labels is built with it",
)
