"""``onnx_light.gradient_model`` and ``function_to_model``: runnable backward models (issue 14 §1)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import onnx_light as ol
from onnx_light import TensorProto, helper, numpy_helper
from onnx_light.runtime import InferenceSession

RNG = np.random.default_rng(0)
W = RNG.standard_normal((3, 4)).astype(np.float32)
B = RNG.standard_normal(4).astype(np.float32)


def _forward(opset: int = 21) -> ol.ModelProto:
    """loss = sum(tanh(reshape(X, [2, 3]) @ W + b)^2), W and b and the shape are initializers."""
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [1])
    if opset >= 13:
        reduce = helper.make_node("ReduceSum", ["sq", "axes"], ["row"], keepdims=0)
    else:
        reduce = helper.make_node("ReduceSum", ["sq"], ["row"], axes=[1], keepdims=0)
    nodes = [
        helper.make_node("Reshape", ["X", "shape"], ["X2"]),
        helper.make_node("MatMul", ["X2", "W"], ["h"]),
        helper.make_node("Add", ["h", "b"], ["hb"]),
        helper.make_node("Tanh", ["hb"], ["t"]),
        helper.make_node("Mul", ["t", "t"], ["sq"]),
        reduce,
        helper.make_node("ReduceMean", ["row"], ["loss"], keepdims=0),
    ]
    inits = [
        numpy_helper.from_array(W, "W"),
        numpy_helper.from_array(B, "b"),
        numpy_helper.from_array(np.array([2, 3], np.int64), "shape"),
    ]
    if opset >= 13:
        inits.append(axes)
    graph = helper.make_graph(
        nodes,
        "fwd",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [6])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _ort(model: ol.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _reference(x: np.ndarray) -> tuple[float, np.ndarray]:
    """loss and d loss / d b in float64, by hand."""
    t = np.tanh(x.reshape(2, 3).astype(np.float64) @ W + B)
    loss = float(np.mean(np.sum(t * t, axis=1)))
    db = np.sum(2 * t * (1 - t * t) / 2, axis=0)
    return loss, db


@pytest.mark.parametrize("inline", [False, True])
@pytest.mark.parametrize("opset", [21, 11])
def test_gradient_model_keeps_initializers_and_runs_in_onnxruntime(inline: bool, opset: int) -> None:
    model = _forward(opset)
    out = ol.gradient_model(model, ["b"], "loss", inline=inline, with_loss=True)
    assert [i.name for i in out.graph.input] == ["b", "X", "dy"]
    assert [o.name for o in out.graph.output] == ["loss", "grad_b"]
    assert {"W", "shape"} <= {t.name for t in out.graph.initializer}
    onnx.checker.check_model(out.to_onnx(), full_check=True)
    x = RNG.standard_normal(6).astype(np.float32)
    loss, db = _reference(x)
    for run in (_ort, lambda m, f: InferenceSession(m).run(None, f)):
        got_loss, got_db = run(out, {"b": B, "X": x})  # dy defaults to 1 for a scalar loss
        np.testing.assert_allclose(got_loss, loss, rtol=1e-5)
        np.testing.assert_allclose(got_db, db, rtol=1e-4, atol=1e-6)
        got_db2 = run(out, {"b": B, "X": x, "dy": np.array(2.0, np.float32)})[1]
        np.testing.assert_allclose(got_db2, 2 * db, rtol=1e-4, atol=1e-6)


def test_gradient_model_without_initializers_feeds_everything() -> None:
    out = ol.gradient_model(_forward(), ["b"], "loss", keep_initializers=False)
    names = [i.name for i in out.graph.input]
    assert names[0] == "b" and names[-1] == "dy" and {"W", "X", "shape"} <= set(names)
    assert [o.name for o in out.graph.output] == ["grad_b"]
    x = RNG.standard_normal(6).astype(np.float32)
    feeds = {"b": B, "X": x, "W": W, "shape": np.array([2, 3], np.int64), "axes": np.array([1], np.int64)}
    (db,) = _ort(out, {k: v for k, v in feeds.items() if k in names})
    np.testing.assert_allclose(db, _reference(x)[1], rtol=1e-4, atol=1e-6)


def test_gradient_model_weight_inputs_stay_overridable() -> None:
    """A forward that declares an initializer as an input too keeps it a (defaulted) input."""
    model = _forward()
    model.graph.input.append(helper.make_tensor_value_info("W", TensorProto.FLOAT, [3, 4]))
    out = ol.gradient_model(model, ["b"], "loss")
    assert "W" in [i.name for i in out.graph.input] and "W" in [t.name for t in out.graph.initializer]
    x = RNG.standard_normal(6).astype(np.float32)
    (db,) = _ort(out, {"b": B, "X": x, "W": np.zeros_like(W)})
    t = np.tanh(B.astype(np.float64))  # W = 0: both rows are tanh(b)
    np.testing.assert_allclose(db, 2 * t * (1 - t * t), rtol=1e-4)


def test_function_to_model_types_from_pairs() -> None:
    fn = helper.make_function(
        "my", "twice", ["a"], ["c"], [helper.make_node("Add", ["a", "a"], ["c"])], [helper.make_opsetid("", 21)]
    )
    model = ol.function_to_model(fn, {"a": (TensorProto.FLOAT, [2])})
    (c,) = _ort(model, {"a": np.array([1.0, 2.0], np.float32)})
    np.testing.assert_array_equal(c, [2.0, 4.0])
    with pytest.raises(ol.GradientError, match="types of \\['a'\\]"):
        ol.function_to_model(fn, {})


def test_no_private_export_import_outside_gradient() -> None:
    import pathlib

    root = pathlib.Path(ol.__file__).parent
    bad = [
        str(p)
        for p in [*root.rglob("*.py"), *(root.parent / "benchmarks").rglob("*.py")]
        if "gradient._export" in p.read_text() and "onnx_core/gradient" not in str(p)
    ]
    assert not bad
