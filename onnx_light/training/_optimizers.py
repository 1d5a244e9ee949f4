"""torch.optim's SGD, Adam and AdamW as ONNX nodes (defaults and formulas as torch documents them).

Each optimizer updates one parameter ``p`` from its gradient ``g``, its states, the
scalar ``learning_rate`` (float) and ``step`` (int64, the 1-based number of this update):

- SGD: ``g += wd p``; with momentum ``b = g`` at step 1, else ``b = mu b + (1 - dampening) g``;
  ``g = g + mu b`` (nesterov) or ``g = b``; ``p -= lr g``.
- Adam: ``g += wd p``; ``m = lerp(m, g, 1 - beta1)``; ``v = beta2 v + (1 - beta2) g^2``;
  (amsgrad: ``vmax = max(vmax, v)``, used for v); ``p -= lr / (1 - beta1^t) * m /
  (sqrt(v) / sqrt(1 - beta2^t) + eps)``.
- AdamW: Adam with ``p *= 1 - lr wd`` first instead of ``g += wd p``.

The bias corrections are computed in float64, as torch does in Python.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..onnx_core import OnnxLightError, TensorProto
from ._emit import Emitter

__all__ = ["OptimizerSpec", "make_optimizer", "emit_update", "emit_clip", "check_learning_rate"]


@dataclass(frozen=True)
class OptimizerSpec:
    """An optimizer's name and hyper-parameters (torch.optim's defaults)."""

    name: str
    lr: float
    options: dict[str, Any]

    @property
    def state_kinds(self) -> tuple[str, ...]:
        """The per-parameter states, as torch.optim names them."""
        if self.name == "SGD":
            return ("momentum_buffer",) if self.options["momentum"] != 0 else ()
        return ("exp_avg", "exp_avg_sq", "max_exp_avg_sq") if self.options["amsgrad"] else ("exp_avg", "exp_avg_sq")


_DEFAULTS: dict[str, dict[str, Any]] = {
    "SGD": {"lr": 1e-3, "momentum": 0.0, "dampening": 0.0, "weight_decay": 0.0, "nesterov": False},
    "Adam": {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0, "amsgrad": False},
    "AdamW": {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 1e-2, "amsgrad": False},
}


def make_optimizer(name: str, options: dict[str, Any]) -> OptimizerSpec:
    """Validates ``options`` for optimizer ``name`` and fills torch.optim's defaults.

    Raises:
        OnnxLightError: an unknown optimizer or option, or a value torch would refuse.
    """
    canonical = {k.lower(): k for k in _DEFAULTS}.get(str(name).lower())
    if canonical is None:
        raise OnnxLightError(f"unknown optimizer {name!r}; choose one of {sorted(_DEFAULTS)}")
    merged = dict(_DEFAULTS[canonical])
    unknown = sorted(set(options) - set(merged))
    if unknown:
        raise OnnxLightError(f"{canonical} has no option {unknown}; its options are {sorted(merged)}")
    merged.update(options)
    if canonical == "SGD" and merged["nesterov"] and (merged["momentum"] <= 0 or merged["dampening"] != 0):
        raise OnnxLightError("SGD: nesterov momentum requires a momentum and zero dampening (as in torch.optim)")
    if canonical != "SGD":
        b1, b2 = merged["betas"]
        if not (0.0 <= b1 < 1.0 and 0.0 <= b2 < 1.0):
            raise OnnxLightError(f"{canonical}: betas must be in [0, 1), got {merged['betas']}")
    for key in ("eps", "weight_decay", "momentum"):  # the ones torch.optim checks
        if key in merged and not float(merged[key]) >= 0.0:
            raise OnnxLightError(f"{canonical}: {key} must be >= 0, got {merged[key]}")
    lr = check_learning_rate(merged.pop("lr"))
    return OptimizerSpec(canonical, lr, merged)


def check_learning_rate(lr: float) -> float:
    """``lr`` as a float if it is finite and >= 0 (a NaN or infinite one makes every weight NaN).

    Raises:
        OnnxLightError: otherwise.
    """
    value = float(lr)
    if not 0.0 <= value < float("inf"):
        raise OnnxLightError(f"the learning rate must be finite and >= 0, got {lr}")
    return value


class _Scalars:
    """The per-step scalars shared by every parameter's update (emitted once)."""

    def __init__(self, e: Emitter, spec: OptimizerSpec, lr: str, step: str) -> None:
        self.lr, self.step = lr, step
        o = spec.options
        if spec.name == "AdamW":
            self.decay = e.Sub(e.const(1.0), e.Mul(lr, e.const(o["weight_decay"])))
        if spec.name in ("Adam", "AdamW"):
            t = e.Cast(step, to=TensorProto.DOUBLE)
            b1, b2 = (e.const(b, np.float64) for b in o["betas"])
            one = e.const(1.0, np.float64)
            bc1 = e.Sub(one, e.Pow(b1, t))
            bc2 = e.Sub(one, e.Pow(b2, t))
            self.step_size = e.Cast(e.Div(e.Cast(lr, to=TensorProto.DOUBLE), bc1), to=TensorProto.FLOAT)
            self.bc2_sqrt = e.Cast(e.Sqrt(bc2), to=TensorProto.FLOAT)
        if spec.name == "SGD" and o["dampening"] != 0:
            self.first = e.Equal(step, e.const(1, np.int64))


def _sgd(
    e: Emitter, spec: OptimizerSpec, s: _Scalars, p: str, g: str, st: dict[str, str]
) -> tuple[str, dict[str, str]]:
    o = spec.options
    if o["weight_decay"] != 0:
        g = e.Add(g, e.Mul(p, e.const(o["weight_decay"])))
    new: dict[str, str] = {}
    if o["momentum"] != 0:
        mu = e.const(o["momentum"])
        buf = e.Add(e.Mul(st["momentum_buffer"], mu), e.Mul(g, e.const(1.0 - o["dampening"])))
        if o["dampening"] != 0:
            buf = e.Where(s.first, g, buf)
        new["momentum_buffer"] = buf
        g = e.Add(g, e.Mul(buf, mu)) if o["nesterov"] else buf
    return e.Sub(p, e.Mul(g, s.lr)), new


def _adam(
    e: Emitter, spec: OptimizerSpec, s: _Scalars, p: str, g: str, st: dict[str, str]
) -> tuple[str, dict[str, str]]:
    o = spec.options
    b1, b2 = o["betas"]
    if spec.name == "AdamW":
        p = e.Mul(p, s.decay)
    elif o["weight_decay"] != 0:
        g = e.Add(g, e.Mul(p, e.const(o["weight_decay"])))
    m = e.Add(st["exp_avg"], e.Mul(e.Sub(g, st["exp_avg"]), e.const(1.0 - b1)))
    v = e.Add(e.Mul(st["exp_avg_sq"], e.const(b2)), e.Mul(e.Mul(g, g), e.const(1.0 - b2)))
    new = {"exp_avg": m, "exp_avg_sq": v}
    if o["amsgrad"]:
        v = new["max_exp_avg_sq"] = e.Max(st["max_exp_avg_sq"], v)
    denom = e.Add(e.Div(e.Sqrt(v), s.bc2_sqrt), e.const(o["eps"]))
    return e.Sub(p, e.Mul(e.Div(m, denom), s.step_size)), new


def emit_clip(e: Emitter, grads: list[str], max_norm: float) -> list[str]:
    """torch.nn.utils.clip_grad_norm_: g *= min(1, max_norm / (||all g||_2 + 1e-6))."""
    total = e.Sqrt(
        e.Sum(*[e.ReduceSumSquare(g, keepdims=0) for g in grads])
        if len(grads) > 1
        else e.ReduceSumSquare(grads[0], keepdims=0)
    )
    coef = e.Min(e.Div(e.const(max_norm), e.Add(total, e.const(1e-6))), e.const(1.0))
    return [e.Mul(g, coef) for g in grads]


def emit_update(
    e: Emitter,
    spec: OptimizerSpec,
    lr: str,
    step: str,
    params: list[tuple[str, str, dict[str, str]]],
    max_grad_norm: float | None = None,
) -> list[tuple[str, dict[str, str]]]:
    """Emits the update of every ``(param, grad, {kind: state})``; returns the new values' names."""
    grads = [g for _, g, _ in params]
    if max_grad_norm is not None and grads:
        grads = emit_clip(e, grads, float(max_grad_norm))
    scalars = _Scalars(e, spec, lr, step)
    fn = _sgd if spec.name == "SGD" else _adam
    return [fn(e, spec, scalars, p, g, st) for (p, _, st), g in zip(params, grads)]
