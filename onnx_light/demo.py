"""The demo: train a small classifier on two spirals with gradients from our pass.

The forward model is an ordinary ONNX model (Gemm-Tanh-Gemm-Tanh-Gemm and a
SoftmaxCrossEntropyLoss). ``GradientOfFunction`` is called once; every epoch the
resulting backward function runs in onnx-light's runtime and Adam updates the
weights. At the end one step of the same backward graph runs in onnxruntime (if
installed) and the largest difference to ours is printed.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from typing import Any

import numpy as np

from . import GradientOfFunction, ModelProto, TensorProto, helper, numpy_helper, save
from .onnx_core.gradient import backward_model, input_types
from .runtime import InferenceSession

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
    """The forward model: logits = MLP(X), loss = mean cross-entropy(logits, labels)."""
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
        helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "labels"], ["loss"], reduction="mean"),
    ]
    graph = helper.make_graph(
        nodes,
        "spirals",
        [
            helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 2]),
            helper.make_tensor_value_info("labels", TensorProto.INT64, ["N"]),
            # the weights are inputs too (their initializers are the defaults), so a
            # training loop can feed the current values
            *[helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape)) for k, v in weights.items()],
        ],
        [
            helper.make_tensor_value_info("loss", TensorProto.FLOAT, []),
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 2]),
        ],
        [numpy_helper.from_array(v, k) for k, v in weights.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


class _Adam:
    """Adam (Kingma & Ba) on a dict of numpy arrays."""

    def __init__(self, params: dict[str, np.ndarray], lr: float = 0.01, b1: float = 0.9, b2: float = 0.999) -> None:
        self.lr, self.b1, self.b2, self.t = lr, b1, b2, 0
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}

    def step(self, params: dict[str, np.ndarray], grads: dict[str, np.ndarray]) -> None:
        self.t += 1
        for k, g in grads.items():
            self.m[k] = self.b1 * self.m[k] + (1 - self.b1) * g
            self.v[k] = self.b2 * self.v[k] + (1 - self.b2) * g * g
            m_hat = self.m[k] / (1 - self.b1**self.t)
            v_hat = self.v[k] / (1 - self.b2**self.t)
            params[k] = (params[k] - self.lr * m_hat / (np.sqrt(v_hat) + 1e-8)).astype(np.float32)


def _bar(epoch: int, epochs: int, loss: float, acc: float, width: int = 30) -> str:
    done = int(width * epoch / epochs)
    return f"epoch {epoch:4d}/{epochs} [{'#' * done}{'-' * (width - done)}] loss {loss:.4f}  accuracy {acc * 100:5.1f}%"


def train(
    epochs: int = 600, lr: float = 0.01, seed: int = 0, out_dir: str | None = None, quiet: bool = False
) -> dict[str, Any]:
    """Trains the spiral classifier; returns the final loss, accuracy and the ORT difference.

    Args:
        epochs: full-batch Adam steps.
        lr: Adam's learning rate.
        seed: seed of the data and the initial weights.
        out_dir: where to save the forward and backward models (a temporary folder if None).
        quiet: print nothing.
    """
    say = (lambda *a, **k: None) if quiet else print
    points, labels = make_spirals(seed=seed)
    model = make_classifier(seed=seed)
    params = {t.name: np.array(numpy_helper.to_array(t)) for t in model.graph.initializer}

    t0 = time.perf_counter()
    bwd = GradientOfFunction(model, xs=list(PARAMS), y="loss")
    transform_ms = (time.perf_counter() - t0) * 1e3
    say(
        f"GradientOfFunction: {len(model.graph.node)} forward nodes -> {len(bwd.node)} backward nodes "
        f"in {transform_ms:.1f} ms; inputs {list(bwd.input)}"
    )
    out_dir = out_dir or tempfile.mkdtemp(prefix="onnx-light-demo-")
    os.makedirs(out_dir, exist_ok=True)
    types = input_types(model, "loss", list(bwd.input))
    bwd_model = backward_model(bwd, types)
    save(model, os.path.join(out_dir, "spirals_forward.onnx"))
    bwd_path = os.path.join(out_dir, "spirals_backward.onnx")
    save(bwd_model, bwd_path)
    say(f"saved the backward model to {bwd_path}")

    forward = InferenceSession(model)
    backward = InferenceSession(bwd)
    adam = _Adam(params, lr=lr)
    dy = np.ones((), np.float32)
    tty = sys.stdout.isatty()
    loss = acc = float("nan")
    for epoch in range(1, epochs + 1):
        feeds = {**params, "X": points, "labels": labels, "dy": dy}
        grads = backward.run(None, {n: feeds[n] for n in bwd.input})
        adam.step(params, dict(zip(PARAMS, grads)))
        if epoch % 10 == 0 or epoch == epochs:
            loss_v, logits = forward.run(["loss", "logits"], {"X": points, "labels": labels, **params})
            loss, acc = float(loss_v), float(np.mean(logits.argmax(axis=1) == labels))
            if tty:
                say("\r" + _bar(epoch, epochs, loss, acc), end="", flush=True)
            elif epoch % 100 == 0 or epoch == epochs:
                say(_bar(epoch, epochs, loss, acc))
    if tty:
        say()
    say(f"final: loss {loss:.4f}, accuracy {acc * 100:.1f}% on {len(labels)} points")

    ort_diff = _compare_with_onnxruntime(bwd_path, {**params, "X": points, "labels": labels, "dy": dy}, backward, bwd)
    if ort_diff is None:
        say("onnxruntime is not installed: skipped the cross-check (pip install 'onnx-light[demo]')")
    else:
        say(f"one step of the same backward graph in onnxruntime: largest difference to ours {ort_diff:.3g}")
    return {"loss": loss, "accuracy": acc, "ort_max_diff": ort_diff, "backward_path": bwd_path}


def _compare_with_onnxruntime(
    path: str, feeds: dict[str, np.ndarray], ours: InferenceSession, bwd: Any
) -> float | None:
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    inputs = {n: feeds[n] for n in bwd.input}
    theirs = sess.run(None, inputs)
    mine = ours.run(None, inputs)
    return max(float(np.max(np.abs(a - b))) for a, b in zip(mine, theirs))


def main(argv: list[str] | None = None) -> int:
    """``onnx-light demo [--epochs N] [--out DIR]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="onnx-light demo", description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=600)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="folder for the saved models (default: a temporary folder)")
    args = parser.parse_args(argv)
    result = train(args.epochs, args.lr, args.seed, args.out)
    return 0 if result["accuracy"] > 0.95 else 1
