"""Classification losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.

Inputs are ``(N, C, d1, ..., dk)`` scores and ``(N, d1, ..., dk)`` integer targets.
"""

from __future__ import annotations

import numpy as np

from onnx_light.runtime._registry import kernel


def _nll(
    log_prob: np.ndarray,
    target: np.ndarray,
    weight: np.ndarray | None,
    ignore_index: int | None,
    reduction: str,
) -> np.ndarray:
    """``-log_prob[n, target[n, ...], ...] * weight[target]``, reduced as asked.

    ``mean`` divides by the sum of the weights that applied, so ignored targets count
    neither in the numerator nor in the denominator.
    """
    keep = np.ones(target.shape, dtype=bool) if ignore_index is None else target != ignore_index
    classes = log_prob.shape[1]
    bad = keep & ((target < 0) | (target >= classes))
    if bad.any():  # numpy would wrap a negative one to the last class: a silently wrong loss
        raise ValueError(
            f"target {int(target[bad].flat[0])} is not a class index in [0, {classes}) nor ignore_index "
            f"({ignore_index}); pass class indices, or set ignore_index for the ones to skip"
        )
    safe = np.where(keep, target, 0).astype(np.int64)
    picked = np.take_along_axis(log_prob, safe[:, None], axis=1)[:, 0]
    dt = log_prob.dtype
    w = keep.astype(dt) if weight is None else np.where(keep, weight[safe], 0).astype(dt)
    loss = -picked * w
    if reduction == "none":
        return loss
    if reduction == "sum":
        return np.asarray(loss.sum(), dtype=dt)
    if reduction == "mean":
        return np.asarray(loss.sum() / w.sum(), dtype=dt)
    raise ValueError(f"reduction must be none, sum or mean, got {reduction!r}")


@kernel("", "NegativeLogLikelihoodLoss", since=(12, 13, 22))
def nll_loss(
    input: np.ndarray,
    target: np.ndarray,
    weight: np.ndarray | None = None,
    *,
    ignore_index: int | None = None,
    reduction: str = "mean",
) -> np.ndarray:
    """Negative log-likelihood of ``target`` under ``input`` (already log-probabilities)."""
    return _nll(input, target, weight, ignore_index, reduction)


@kernel("", "SoftmaxCrossEntropyLoss", since=(12, 13))
def softmax_cross_entropy_loss(
    scores: np.ndarray,
    labels: np.ndarray,
    weights: np.ndarray | None = None,
    *,
    ignore_index: int | None = None,
    reduction: str = "mean",
    _num_outputs: int = 1,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Log-softmax over the class axis (1), then the NLL loss; optionally the log-probs too."""
    shifted = scores - scores.max(axis=1, keepdims=True)
    log_prob = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    loss = _nll(log_prob, labels, weights, ignore_index, reduction)
    return loss if _num_outputs == 1 else (loss, log_prob)
