"""Training toolkit: onnxruntime.training's names over standard ONNX artifacts.

``generate_artifacts`` writes training_model.onnx, eval_model.onnx, optimizer_model.onnx,
train_step.onnx and a checkpoint (onnxruntime's on-device training format);
``CheckpointState``, ``Module``, ``Optimizer`` and the LR schedulers run them in our
runtime or, with ``backend="onnxruntime"``, in onnxruntime.
"""

from __future__ import annotations

from ._artifacts import ArtifactPaths, generate_artifacts
from ._checkpoint import CheckpointError, CheckpointState, Parameter
from ._loop import FitResult, fit
from ._module import Module, Optimizer
from ._progress import Progress
from ._schedulers import CosineLRScheduler, LinearLRScheduler

__all__ = [
    "generate_artifacts",
    "ArtifactPaths",
    "CheckpointState",
    "CheckpointError",
    "Parameter",
    "Module",
    "Optimizer",
    "LinearLRScheduler",
    "CosineLRScheduler",
    "fit",
    "FitResult",
    "Progress",
]
