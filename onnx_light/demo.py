"""The demo: train a small classifier on two spirals with onnx_light.training.

The forward model is an ordinary ONNX model (Gemm-Tanh-Gemm-Tanh-Gemm -> logits).
``generate_artifacts`` adds the cross-entropy loss, its gradient (our symbolic pass)
and AdamW as ONNX graphs; ``Module`` and ``Optimizer`` then run them every epoch in
onnx-light's runtime. At the end the fused train_step.onnx runs one step in
onnxruntime (if installed) and the largest difference to ours is printed.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from typing import Any

import numpy as np

from . import ModelProto, OnnxLightError, TensorProto, helper, numpy_helper
from .runtime import InferenceSession
from .training import CheckpointState, Module, Optimizer, Progress, generate_artifacts

__all__ = ["make_spirals", "make_classifier", "train", "main"]

PARAMS = ("W1", "b1", "W2", "b2", "W3", "b3")


def make_spirals(n_per_class: int = 200, noise: float = 0.15, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two interleaved spirals in the plane: points [2n, 2] float32 and labels [2n] int64."""
    rng = np.random.default_rng(seed)
    t = np.sqrt(rng.uniform(0.0, 1.0, n_per_class)) * 3.0 * np.pi
    arm = np.stack([t * np.cos(t), t * np.sin(t)], axis=1) / (3.0 * np.pi)
    points = np.concatenate([arm, -arm]) + rng.normal(0.0, noise / (3.0 * np.pi) * 3, (2 * n_per_class, 2))
    labels = np.concatenate([np.zeros(n_per_class), np.ones(n_per_class)]).astype(np.int64)
    return points.astype(np.float32), labels


def make_classifier(hidden: int = 64, seed: int = 0) -> ModelProto:
    """The forward model: logits = MLP(X), weights as initializers (what torch exports)."""
    rng = np.random.default_rng(seed)

    def init(shape: tuple[int, ...], fan_in: int) -> np.ndarray:
        return (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)

    weights = {
        "W1": init((2, hidden), 2),
        "b1": np.zeros(hidden, np.float32),
        "W2": init((hidden, hidden), hidden),
        "b2": np.zeros(hidden, np.float32),
        "W3": init((hidden, 2), hidden),
        "b3": np.zeros(2, np.float32),
    }
    nodes = [
        helper.make_node("Gemm", ["X", "W1", "b1"], ["h1_pre"]),
        helper.make_node("Tanh", ["h1_pre"], ["h1"]),
        helper.make_node("Gemm", ["h1", "W2", "b2"], ["h2_pre"]),
        helper.make_node("Tanh", ["h2_pre"], ["h2"]),
        helper.make_node("Gemm", ["h2", "W3", "b3"], ["logits"]),
    ]
    graph = helper.make_graph(
        nodes,
        "spirals",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 2])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 2])],
        [numpy_helper.from_array(v, k) for k, v in weights.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


def _train_loop(d: str, points: np.ndarray, labels: np.ndarray, epochs: int, lr: float, quiet: bool) -> tuple[Any, ...]:
    state = CheckpointState.load_checkpoint(os.path.join(d, "checkpoint"))
    module = Module(os.path.join(d, "training_model.onnx"), state, os.path.join(d, "eval_model.onnx"))
    opt = Optimizer(os.path.join(d, "optimizer_model.onnx"), module)
    opt.set_learning_rate(lr)
    bar = Progress(epochs, "spirals", quiet=quiet)
    loss = acc = float("nan")
    for _ in range(epochs):
        loss = float(module(points, labels))
        opt.step()
        module.lazy_reset_grad()
        bar.update(len(labels), loss)
    module.eval()
    loss_v, logits = module(points, labels)
    loss, acc = float(loss_v), float(np.mean(logits.argmax(axis=1) == labels))
    bar.close(loss, f"accuracy {acc * 100:.1f}%")
    return state, loss, acc


def train(
    epochs: int = 600, lr: float = 0.01, seed: int = 0, out_dir: str | None = None, quiet: bool = False
) -> dict[str, Any]:
    """Trains the spiral classifier; returns the final loss, accuracy and the ORT difference.

    Args:
        epochs: full-batch AdamW steps (at least 1).
        lr: the learning rate.
        seed: seed of the data and the initial weights.
        out_dir: where to keep the artifacts (a temporary folder, removed at the end, if None).
        quiet: print nothing.

    Raises:
        OnnxLightError: ``epochs`` below 1.
    """
    if epochs < 1:
        raise OnnxLightError(f"the demo needs at least one epoch, got --epochs {epochs}")
    say = (lambda *a, **k: None) if quiet else print
    points, labels = make_spirals(seed=seed)
    d = out_dir or tempfile.mkdtemp(prefix="onnx-light-demo-")
    try:
        generate_artifacts(
            make_classifier(seed=seed), loss="CrossEntropyLoss", optimizer="AdamW", artifact_directory=d, lr=lr
        )
        say(f"generate_artifacts: training, eval, optimizer and train-step models in {d}")
        state, loss, acc = _train_loop(d, points, labels, epochs, lr, quiet)
        say(f"final: loss {loss:.4f}, accuracy {acc * 100:.1f}% on {len(labels)} points")
        ort_diff = _compare_with_onnxruntime(os.path.join(d, "train_step.onnx"), state, points, labels, lr)
    finally:
        if out_dir is None:
            shutil.rmtree(d, ignore_errors=True)
    if ort_diff is None:
        say("onnxruntime is not installed: skipped the cross-check (pip install 'onnx-light[demo]')")
    else:
        say(f"one step of train_step.onnx in onnxruntime: largest difference to ours {ort_diff:.3g}")
    return {"loss": loss, "accuracy": acc, "ort_max_diff": ort_diff, "artifact_directory": out_dir}


def _compare_with_onnxruntime(
    path: str, state: CheckpointState, points: np.ndarray, labels: np.ndarray, lr: float
) -> float | None:
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    values: dict[str, np.ndarray] = {k: p.data for k, p in state.parameters.items()}
    values.update(state.optimizer_states)
    values.update(
        X=points,
        labels=labels,
        learning_rate=np.array(lr, np.float32),
        step=np.array(state.optimizer_step + 1, np.int64),
    )
    feeds = {i.name: values[i.name] for i in sess.get_inputs()}
    theirs = sess.run(None, feeds)
    mine = InferenceSession(path).run(None, feeds)
    return max(float(np.max(np.abs(a - b))) for a, b in zip(mine, theirs))


def main(argv: list[str] | None = None) -> int:
    """``onnx-light demo [--epochs N] [--out DIR]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="onnx-light demo", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--epochs", type=int, default=600)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="folder to keep the artifacts in (default: a temporary one)")
    args = parser.parse_args(argv)
    result = train(args.epochs, args.lr, args.seed, args.out)
    sys.stdout.flush()
    return 0 if result["accuracy"] > 0.95 else 1
