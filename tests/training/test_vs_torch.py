"""onnx_light.training against torch.optim's stored trajectories (no torch needed).

The fixtures come from ``make_fixtures.py``: torch exports, torch's losses and final
parameters for the same seeded batches.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from onnx_light import training as olt

from .make_fixtures import CASES, batches

DATA = pathlib.Path(__file__).resolve().parent / "data"


def rel(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-12))


@pytest.fixture(scope="module")
def reference() -> dict[str, np.ndarray]:
    with np.load(DATA / "reference.npz") as f:
        return {k: f[k] for k in f.files}


def train(
    case: str, directory: pathlib.Path, backend: str = "onnx_light"
) -> tuple[list[float], olt.CheckpointState, olt.Module]:
    kind, loss, opt_name, options, steps = CASES[case]
    options = dict(options)
    lr = options.pop("lr")
    olt.generate_artifacts(
        DATA / f"{kind}.onnx", loss=loss, optimizer=opt_name, artifact_directory=directory, **options
    )
    state = olt.CheckpointState.load_checkpoint(directory / "checkpoint")
    module = olt.Module(directory / "training_model.onnx", state, directory / "eval_model.onnx", backend=backend)
    opt = olt.Optimizer(directory / "optimizer_model.onnx", module)
    opt.set_learning_rate(lr)
    x, y = batches(kind, loss, steps)
    losses = []
    for i in range(steps):
        losses.append(float(module(x[i], y[i])))
        opt.step()
        module.lazy_reset_grad()
    return losses, state, module


@pytest.mark.parametrize("case", list(CASES))
def test_trajectory_matches_torch(case: str, reference: dict[str, np.ndarray], tmp_path: pathlib.Path) -> None:
    losses, state, _ = train(case, tmp_path)
    assert rel(losses, reference[f"{case}/losses"]) <= 1e-4, (losses, reference[f"{case}/losses"])
    prefix = f"{case}/param/"
    names = [k[len(prefix) :] for k in reference if k.startswith(prefix)]
    assert names and all(n in state.parameters for n in names), sorted(state.parameters)
    for n in names:
        tol = 1e-4 if "running" in n else 1e-3
        assert rel(state.parameters[n].data, reference[prefix + n]) <= tol, n


def test_inference_export_matches_torch_eval(reference: dict[str, np.ndarray], tmp_path: pathlib.Path) -> None:
    """BatchNormalization on the trained running statistics, weights embedded."""
    from onnx_light.runtime import InferenceSession

    _, _, module = train("cnn_sgd", tmp_path)
    path = tmp_path / "inference.onnx"
    module.export_model_for_inferencing(path, ["logits"])
    x, _ = batches("cnn", "CrossEntropyLoss", 1)
    got = InferenceSession(str(path)).run(None, {"input": x[0]})[0]
    assert rel(got, reference["cnn_sgd/eval_logits"]) <= 1e-3


def test_onnxruntime_backend_gives_the_same_losses(tmp_path: pathlib.Path) -> None:
    pytest.importorskip("onnxruntime")
    ours, _, _ = train("cnn_adamw", tmp_path / "a")
    theirs, _, _ = train("cnn_adamw", tmp_path / "b", backend="onnxruntime")
    assert rel(theirs, ours) <= 1e-5
