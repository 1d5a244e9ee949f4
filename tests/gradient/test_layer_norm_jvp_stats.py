"""LayerNormalization's forward rule on float32 X reads the node's Mean and InvStdDev
(as the reverse rule does) instead of recomputing them: fewer nodes, the same tangent.

Checked against central finite differences of the float64 formula, and the same
function run in onnxruntime.
"""

from __future__ import annotations

import numpy as np
import pytest

import onnx_light as ol
from onnx_light import helper

FLOAT = ol.TensorProto.FLOAT
SHAPE = [2, 3, 8]


def _layer_norm(x: np.ndarray, scale: np.ndarray, bias: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps) * scale + bias


def _tangent() -> ol.FunctionProto:
    node = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1)
    inputs = [helper.make_tensor_value_info(n, FLOAT, d) for n, d in (("x", SHAPE), ("s", [8]), ("b", [8]))]
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", FLOAT, SHAPE)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    return ol.TangentOfFunction(model, ["x", "s", "b"], ["y"])


def _feeds() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    names = ("x", "s", "b", "fwd_x", "fwd_s", "fwd_b")
    shapes = (SHAPE, [8], [8], SHAPE, [8], [8])
    return {n: rng.standard_normal(d).astype(np.float32) for n, d in zip(names, shapes)}


def test_reads_the_node_statistics() -> None:
    fn = _tangent()
    ops = [n.op_type for n in fn.node]
    assert "Sqrt" not in ops and "Reciprocal" not in ops, ops
    (ln,) = [n for n in fn.node if n.op_type == "LayerNormalization"]
    assert len([o for o in ln.output if o]) == 3


def test_matches_finite_differences_and_onnxruntime() -> None:
    fn = _tangent()
    f = _feeds()
    (ours,) = ol.runtime.InferenceSession(fn).run(None, f)
    p = {k: f[k].astype(np.float64) for k in ("x", "s", "b")}
    t = {k: f[f"fwd_{k}"].astype(np.float64) for k in ("x", "s", "b")}
    h = 1e-6
    plus = _layer_norm(*(p[k] + h * t[k] for k in ("x", "s", "b")))
    minus = _layer_norm(*(p[k] - h * t[k] for k in ("x", "s", "b")))
    np.testing.assert_allclose(ours, (plus - minus) / (2 * h), rtol=1e-4, atol=1e-4)
    ort = pytest.importorskip("onnxruntime")
    onnx = pytest.importorskip("onnx")
    graph = onnx.helper.make_graph(
        [onnx.NodeProto.FromString(n.SerializeToString()) for n in fn.node],
        "jvp",
        [onnx.helper.make_tensor_value_info(n, 1, None) for n in fn.input],
        [onnx.helper.make_tensor_value_info(n, 1, None) for n in fn.output],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 21)], ir_version=10)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (theirs,) = sess.run(None, {n: f[n] for n in fn.input})
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


def test_float16_rows_of_small_spread_keep_a_finite_tangent() -> None:
    """A float16 row with std 0.011 has InvStdDev r ~ 90: the rule's r^3 (7e5) overflowed
    float16 (max 65504), so tY was inf although it is ~16. Now r (tc - xhat mean(xhat tc))."""
    f16 = ol.TensorProto.FLOAT16
    node = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1)
    inputs = [helper.make_tensor_value_info(n, f16, d) for n, d in (("x", [2, 4]), ("s", [4]), ("b", [4]))]
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", f16, [2, 4])])
    fwd = ol.TangentOfFunction(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), ["x"], ["y"])
    x = np.array([[0.01, 0.02, -0.01, 0.0], [1.0, -2.0, 0.5, 3.0]])
    s, b = np.array([1.0, 0.5, -1.0, 2.0]), np.zeros(4)
    tx = np.random.default_rng(0).standard_normal(x.shape)
    h = 1e-7  # float64 central differences of the formula, at the float16-rounded point
    x16 = x.astype(np.float16).astype(np.float64)
    expected = (_layer_norm(x16 + h * tx, s, b) - _layer_norm(x16 - h * tx, s, b)) / (2 * h)
    feeds = {"x": x, "s": s, "b": b, "fwd_x": tx}
    (got,) = ol.runtime.InferenceSession(fwd).run(None, {n: feeds[n].astype(np.float16) for n in fwd.input})
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got.astype(np.float64), expected, rtol=2e-2, atol=2e-2 * np.abs(expected).max())
