"""Plan-time folding and fusion on the graphs a hunt probed (183 graphs, both runtimes, clean):
a weight shared by two convs with different BatchNorms, residuals that broadcast (or are
larger than the conv's output), a conv output that is also a graph output, an input that an
in-place step could overwrite. Each runs twice against onnxruntime; the feeds stay unchanged."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import onnx_light as ol
from onnx_light.runtime import InferenceSession

oh = pytest.importorskip("onnx.helper")
onh = pytest.importorskip("onnx.numpy_helper")
ort = pytest.importorskip("onnxruntime")

_rng = np.random.default_rng(8)
C = 4
X = _rng.standard_normal((1, 3, 6, 6)).astype(np.float32)
W = _rng.standard_normal((C, 3, 3, 3)).astype(np.float32)
BIAS = _rng.standard_normal(C).astype(np.float32)


def _bn_params(suffix: str, shift: float) -> dict[str, np.ndarray]:
    values = [_rng.standard_normal(C) + shift, _rng.standard_normal(C), _rng.standard_normal(C), _rng.random(C) + 0.5]
    return {f"{k}{suffix}": v.astype(np.float32) for k, v in zip("sbmv", values)}


def _bn(x: str, y: str, suffix: str = "") -> Any:
    return oh.make_node("BatchNormalization", [x, *(f"{k}{suffix}" for k in "sbmv")], [y])


def _conv(x: str, y: str) -> Any:
    return oh.make_node("Conv", [x, "w", "bias"], [y], pads=[1, 1, 1, 1])


def _residual(shape: tuple[int, ...], tail: list[Any]) -> tuple[list[Any], dict[str, np.ndarray], list[str]]:
    r = _rng.standard_normal(shape).astype(np.float32)
    return [_conv("x", "c"), oh.make_node("Add", ["c", "r"], ["sum"]), *tail], {"x": X, "r": r}, ["y"]


_RELU = [oh.make_node("Relu", ["sum"], ["y"])]
_SILU = [oh.make_node("Sigmoid", ["sum"], ["g"]), oh.make_node("Mul", ["sum", "g"], ["y"])]
CASES: dict[str, tuple[list[Any], dict[str, np.ndarray], list[str]]] = {
    "shared_weight_two_bns": (
        [
            _conv("x", "c1"),
            _bn("c1", "y1"),
            _conv("x", "c2"),
            _bn("c2", "y2", "2"),
            oh.make_node("Add", ["y1", "y2"], ["y"]),
        ],
        {"x": X},
        ["y", "y1"],
    ),
    "conv_output_is_a_graph_output": ([_conv("x", "c"), oh.make_node("Relu", ["c"], ["y"])], {"x": X}, ["y", "c"]),
    "silu_input_is_a_graph_output": (
        [_conv("x", "c"), oh.make_node("Sigmoid", ["c"], ["g"]), oh.make_node("Mul", ["c", "g"], ["y"])],
        {"x": X},
        ["y", "c"],
    ),
    "residual_per_channel": _residual((1, C, 1, 1), _RELU),
    "residual_scalar": _residual((), _SILU),
    "residual_row": _residual((6,), _RELU),
    "residual_larger_than_conv": _residual((2, C, 6, 6), _SILU),
    "relu_of_an_input_read_later": (
        [oh.make_node("Relu", ["x"], ["r"]), oh.make_node("Add", ["x", "r"], ["y"])],
        {"x": X},
        ["y", "r"],
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_matches_onnxruntime(name: str) -> None:
    nodes, feeds, outputs = CASES[name]
    inits = {"w": W, "bias": BIAS, **_bn_params("", 0.0), **_bn_params("2", 1.0)}
    graph = oh.make_graph(
        nodes,
        name,
        [oh.make_tensor_value_info(k, 1, v.shape) for k, v in feeds.items()],
        [oh.make_tensor_value_info(o, 1, None) for o in outputs],
        [onh.from_array(v, k) for k, v in inits.items()],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 9
    data = model.SerializeToString()
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    ref = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"]).run(None, feeds)
    kept = {k: v.copy() for k, v in feeds.items()}
    sess = InferenceSession(ol.ModelProto.FromString(data))
    for _ in range(2):
        for got, want in zip(sess.run(None, feeds), ref):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        for k in feeds:
            np.testing.assert_array_equal(feeds[k], kept[k])
