"""Learning-rate schedulers (onnxruntime.training's LinearLRScheduler, and a cosine one)."""

from __future__ import annotations

import math

from ..onnx_core import OnnxLightError
from ._module import Optimizer

__all__ = ["LinearLRScheduler", "CosineLRScheduler"]


class _Scheduler:
    def __init__(self, optimizer: Optimizer, warmup_step_count: int, total_step_count: int, initial_lr: float) -> None:
        if total_step_count <= 0 or not 0 <= warmup_step_count <= total_step_count:
            raise OnnxLightError(
                f"need 0 <= warmup_step_count <= total_step_count and total_step_count > 0, "
                f"got warmup {warmup_step_count}, total {total_step_count}"
            )
        self.optimizer = optimizer
        self.warmup, self.total, self.initial_lr = warmup_step_count, total_step_count, float(initial_lr)
        self.step_count = 0
        optimizer.set_learning_rate(self.lr_at(0))

    def lr_at(self, t: int) -> float:
        """The learning rate after ``t`` scheduler steps."""
        if t < self.warmup:
            return self.initial_lr * t / max(1, self.warmup)
        # the end at total_step_count also when the warmup takes the whole schedule
        progress = 1.0 if t >= self.total else (t - self.warmup) / (self.total - self.warmup)
        return self.initial_lr * self._decay(progress)

    def _decay(self, progress: float) -> float:
        raise NotImplementedError

    def step(self) -> None:
        """Advances one step and sets the optimizer's learning rate."""
        self.step_count += 1
        self.optimizer.set_learning_rate(self.lr_at(self.step_count))


class LinearLRScheduler(_Scheduler):
    """Linear warmup from 0 to ``initial_lr``, then linear decay to 0 at ``total_step_count``."""

    def _decay(self, progress: float) -> float:
        return 1.0 - progress


class CosineLRScheduler(_Scheduler):
    """Linear warmup, then half a cosine from ``initial_lr`` down to ``min_lr``."""

    def __init__(
        self,
        optimizer: Optimizer,
        warmup_step_count: int,
        total_step_count: int,
        initial_lr: float,
        min_lr: float = 0.0,
    ) -> None:
        self.min_ratio = float(min_lr) / float(initial_lr) if initial_lr else 0.0
        super().__init__(optimizer, warmup_step_count, total_step_count, initial_lr)

    def _decay(self, progress: float) -> float:
        return self.min_ratio + (1.0 - self.min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))
