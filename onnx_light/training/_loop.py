"""fit: the training loop the CLI and the demo share (epochs, batches, validation, resume)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TextIO

import numpy as np

from ..onnx_core import OnnxLightError
from ._checkpoint import CheckpointState
from ._module import Module, Optimizer
from ._progress import Progress

__all__ = ["fit", "FitResult"]


@dataclass
class FitResult:
    """What ``fit`` did: per-epoch mean training loss and validation metrics."""

    module: Module
    state: CheckpointState
    train_loss: list[float] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    val_accuracy: list[float] = field(default_factory=list)
    epochs_run: int = 0


def _batches(n: int, batch_size: int, fixed: int | None, rng: np.random.Generator) -> list[np.ndarray]:
    order = rng.permutation(n)
    size = fixed or batch_size
    stop = n - n % size if fixed else n  # a model exported with a fixed batch takes full batches only
    return [order[i : i + size] for i in range(0, stop, size)]


def _evaluate(module: Module, inputs: list[np.ndarray], batch_size: int, fixed: int | None) -> tuple[float, float]:
    module.eval()
    losses, correct, seen = [], 0, 0
    for idx in _batches(len(inputs[-1]), batch_size, fixed, np.random.default_rng(0)):
        out = module(*[a[idx] for a in inputs])
        loss, rest = (out[0], out[1:]) if isinstance(out, list) else (out, [])
        losses.append(float(loss) * len(idx))
        seen += len(idx)
        labels = inputs[-1][idx]
        if rest and labels.dtype.kind in "iu" and rest[0].ndim >= 2:
            correct += int(np.sum(rest[0].argmax(axis=1) == labels))
    module.train()
    if not seen:
        return float("nan"), float("nan")
    return sum(losses) / seen, correct / seen


def fit(
    artifact_directory: str | os.PathLike[str],
    inputs: list[np.ndarray],
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    val: list[np.ndarray] | None = None,
    checkpoint_path: str | os.PathLike[str] | None = None,
    resume: bool = False,
    seed: int = 0,
    stream: TextIO | None = None,
    quiet: bool = False,
) -> FitResult:
    """Trains with the artifacts of ``generate_artifacts`` on arrays (the last one the labels).

    Args:
        artifact_directory: the folder generate_artifacts wrote.
        inputs: the model's data inputs then ``labels``, batch-major.
        epochs: passes over the data (at least 1).
        batch_size: examples per step (the exported batch, if the model fixed one).
        lr: the learning rate.
        val: validation arrays like ``inputs`` (loss and accuracy after every epoch).
        checkpoint_path: saved after every epoch (atomically), with the epoch as a property.
        resume: continue from ``checkpoint_path`` if it exists.
        seed: seed of the shuffling (epoch ``e`` shuffles with ``(seed, e)``).
        stream: where the progress goes (stdout).
        quiet: print nothing.
    """
    if epochs < 1:
        raise OnnxLightError(f"epochs must be at least 1, got {epochs}")
    if batch_size < 1:
        raise OnnxLightError(f"batch size must be at least 1, got {batch_size}")
    d = os.fspath(artifact_directory)
    ck = os.fspath(checkpoint_path) if checkpoint_path is not None else None
    start_from = ck if resume and ck is not None and os.path.exists(ck) else os.path.join(d, "checkpoint")
    state = CheckpointState.load_checkpoint(start_from)
    module = Module(os.path.join(d, "training_model.onnx"), state, os.path.join(d, "eval_model.onnx"))
    opt = Optimizer(os.path.join(d, "optimizer_model.onnx"), module)
    opt.set_learning_rate(lr)
    names = module.user_inputs()
    if len(inputs) != len(names):
        raise OnnxLightError(f"the model takes {names}; got {len(inputs)} arrays")
    n = len(inputs[-1])
    if any(len(a) != n for a in inputs):
        raise OnnxLightError(f"the arrays {names} have different lengths {[len(a) for a in inputs]}")
    fixed = module.fixed_batch()
    if fixed is not None and fixed > n:
        raise OnnxLightError(f"the model was exported with batch {fixed} but the data has {n} examples")
    result = FitResult(module, state)
    first = int(state.properties.get("epoch", 0)) if start_from == ck else 0
    for epoch in range(first + 1, epochs + 1):
        batches = _batches(n, batch_size, fixed, np.random.default_rng((seed, epoch)))
        bar = Progress(len(batches), f"epoch {epoch}/{epochs}", stream, quiet=quiet)
        total = 0.0
        for idx in batches:
            loss = float(module(*[a[idx] for a in inputs]))
            opt.step()
            module.lazy_reset_grad()
            total += loss
            bar.update(len(idx), loss)
        result.train_loss.append(total / max(1, len(batches)))
        extra = ""
        if val is not None:
            vl, va = _evaluate(module, val, batch_size, fixed)
            result.val_loss.append(vl)
            result.val_accuracy.append(va)
            extra = f"val loss {vl:.4f} accuracy {va * 100:.1f}%"
        bar.close(result.train_loss[-1], extra)
        state.properties["epoch"] = epoch
        if ck is not None:
            CheckpointState.save_checkpoint(state, ck)
        result.epochs_run += 1
    return result
