"""ai.onnx.preview.training optimizers (1): Adagrad, Adam, Momentum, as the spec's pseudo code.

Each takes ``R`` (learning rate), ``T`` (update count) and then, for ``n`` optimized
tensors, the ``n`` values ``X``, the ``n`` gradients ``G`` and the ``n`` of each state
(``H`` for Adagrad; ``V``, ``H`` for Adam; ``V`` for Momentum). It returns the ``n`` new
values, then the ``n`` new values of each state. Arithmetic is in the tensors' dtype with
the scalar factors applied as in the pseudo code.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from onnx_light.runtime._registry import kernel

_DOMAIN = "ai.onnx.preview.training"


def _groups(op: str, args: tuple[np.ndarray, ...], per_tensor: int) -> list[tuple[np.ndarray, ...]]:
    """Splits ``X..., G..., S1..., S2...`` into one tuple ``(X, G, S1, ...)`` per optimized tensor."""
    if len(args) % per_tensor or not args:
        raise ValueError(
            f"{_DOMAIN}::{op} takes R, T and then {per_tensor} inputs per optimized tensor, got {len(args) + 2} inputs"
        )
    n = len(args) // per_tensor
    return [tuple(args[k * n + i] for k in range(per_tensor)) for i in range(n)]


def _unpack(outs: Sequence[tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
    """Per-tensor results ``(X_new, S_new, ...)`` as the op's outputs: all X_new, then each state."""
    return tuple(out[k] for k in range(len(outs[0])) for out in outs)


def _item(x: np.ndarray) -> float:
    return float(np.asarray(x).reshape(-1)[0])


@kernel(_DOMAIN, "Adagrad", since=1)
def adagrad(
    r: np.ndarray,
    t: np.ndarray,
    *args: np.ndarray,
    decay_factor: float = 0.0,
    epsilon: float = 1e-6,
    norm_coefficient: float = 0.0,
) -> tuple[np.ndarray, ...]:
    """``r = R / (1 + T decay)``, ``G' = λX + G``, ``H' = H + G'²``, ``X' = X - r G' / (√H' + ε)``."""
    rate = _item(r) / (1 + _item(t) * decay_factor)
    outs = []
    for x, g, h in _groups("Adagrad", args, 3):
        g_reg = norm_coefficient * x + g
        h_new = h + g_reg * g_reg
        x_new = x - rate * g_reg / (np.sqrt(h_new) + epsilon)
        outs.append((x_new.astype(x.dtype), h_new.astype(h.dtype)))
    return _unpack(outs)


@kernel(_DOMAIN, "Adam", since=1)
def adam(
    r: np.ndarray,
    t: np.ndarray,
    *args: np.ndarray,
    alpha: float = 0.9,
    beta: float = 0.999,
    epsilon: float = 1e-6,
    norm_coefficient: float = 0.0,
    norm_coefficient_post: float = 0.0,
) -> tuple[np.ndarray, ...]:
    """``V' = αV + (1-α)G'``, ``H' = βH + (1-β)G'²``, ``X' = (1-λ_post)(X - R_adj V' / (√H' + ε))``.

    ``G' = λX + G``; ``R_adj = R √(1-β^T) / (1-α^T)`` when ``T > 0``, else ``R``.
    """
    step = _item(t)
    rate = _item(r) * np.sqrt(1 - beta**step) / (1 - alpha**step) if step > 0 else _item(r)
    outs = []
    for x, g, v, h in _groups("Adam", args, 4):
        g_reg = norm_coefficient * x + g
        v_new = alpha * v + (1 - alpha) * g_reg
        h_new = beta * h + (1 - beta) * g_reg * g_reg
        x_new = (1 - norm_coefficient_post) * (x - rate * v_new / (np.sqrt(h_new) + epsilon))
        outs.append((x_new.astype(x.dtype), v_new.astype(v.dtype), h_new.astype(h.dtype)))
    return _unpack(outs)


@kernel(_DOMAIN, "Momentum", since=1)
def momentum(
    r: np.ndarray,
    t: np.ndarray,
    *args: np.ndarray,
    alpha: float | None = None,
    beta: float | None = None,
    mode: str | None = None,
    norm_coefficient: float | None = None,
) -> tuple[np.ndarray, ...]:
    """``V' = αV + β_adj G'`` (``β_adj = β`` if ``T > 0`` else 1, ``G' = λX + G``) and
    ``X' = X - R V'`` (standard) or ``X' = X - R (G' + αV')`` (nesterov)."""
    given = {"alpha": alpha, "beta": beta, "mode": mode, "norm_coefficient": norm_coefficient}
    missing = sorted(k for k, v in given.items() if v is None)
    if missing:
        raise ValueError(f"{_DOMAIN}::Momentum: required attribute(s) {missing} missing")
    if mode not in ("standard", "nesterov"):
        raise ValueError(f"{_DOMAIN}::Momentum: mode must be 'standard' or 'nesterov', got {mode!r}")
    assert alpha is not None and beta is not None and norm_coefficient is not None
    rate = _item(r)
    beta_adj = beta if _item(t) > 0 else 1.0
    outs = []
    for x, g, v in _groups("Momentum", args, 3):
        g_reg = norm_coefficient * x + g
        v_new = alpha * v + beta_adj * g_reg
        x_new = x - rate * (v_new if mode == "standard" else g_reg + alpha * v_new)
        outs.append((x_new.astype(x.dtype), v_new.astype(v.dtype)))
    return _unpack(outs)
