"""The losses generate_artifacts appends (torch.nn's definitions, reduction ``mean``)."""

from __future__ import annotations

from collections.abc import Callable

from ..onnx_core import OnnxLightError, TensorProto
from ._emit import Emitter

__all__ = ["LOSSES", "label_type"]

LossFn = Callable[[Emitter, str, str], str]


def cross_entropy(e: Emitter, logits: str, labels: str) -> str:
    """mean over the batch of -log softmax(logits)[label] (class axis 1)."""
    return str(e.SoftmaxCrossEntropyLoss(logits, labels, reduction="mean"))


def mse(e: Emitter, pred: str, target: str) -> str:
    """mean((pred - target)^2)."""
    d = e.Sub(pred, target)
    return str(e.ReduceMean(e.Mul(d, d), keepdims=0))


def l1(e: Emitter, pred: str, target: str) -> str:
    """mean(|pred - target|)."""
    return str(e.ReduceMean(e.Abs(e.Sub(pred, target)), keepdims=0))


def huber(e: Emitter, pred: str, target: str, delta: float = 1.0) -> str:
    """mean(0.5 d^2 where |d| < delta, else delta (|d| - delta / 2)), d = pred - target."""
    d = e.Sub(pred, target)
    a = e.Abs(d)
    quad = e.Mul(e.Mul(d, d), e.const(0.5))
    lin = e.Mul(e.Sub(a, e.const(0.5 * delta)), e.const(delta))
    return str(e.ReduceMean(e.Where(e.Less(a, e.const(delta)), quad, lin), keepdims=0))


def bce_with_logits(e: Emitter, x: str, y: str) -> str:
    """mean(max(x, 0) - x y + log(1 + exp(-|x|))), the stable form torch uses."""
    pos = e.Relu(x)
    soft = e.Log(e.Add(e.const(1.0), e.Exp(e.Neg(e.Abs(x)))))
    return str(e.ReduceMean(e.Add(e.Sub(pos, e.Mul(x, y)), soft), keepdims=0))


LOSSES: dict[str, LossFn] = {
    "CrossEntropyLoss": cross_entropy,
    "MSELoss": mse,
    "L1Loss": l1,
    "HuberLoss": huber,
    "BCEWithLogitsLoss": bce_with_logits,
}


def label_type(
    loss: str, pred_dtype: int, pred_shape: list[int | str | None] | None
) -> tuple[int, list[int | str | None] | None]:
    """The dtype and shape of ``labels`` for ``loss`` given the prediction's."""
    if loss == "CrossEntropyLoss":
        if pred_shape is not None and len(pred_shape) < 2:
            raise OnnxLightError(
                f"CrossEntropyLoss takes logits of shape [N, C, ...]; the prediction has shape {pred_shape}:"
                " pick the logits output (loss_input_names) or another loss"
            )
        shape = None if pred_shape is None else [pred_shape[0], *pred_shape[2:]]
        return TensorProto.INT64, shape
    return pred_dtype, pred_shape
