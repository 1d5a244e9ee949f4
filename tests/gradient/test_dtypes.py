"""float16, bfloat16 (bit patterns), float32 and float64 models all differentiate."""

from __future__ import annotations

import numpy as np
import pytest

import onnx_light as ol
from onnx_light import TensorProto, helper

DTYPES = {
    "float64": (TensorProto.DOUBLE, np.float64, 1e-9),
    "float32": (TensorProto.FLOAT, np.float32, 1e-5),
    "float16": (TensorProto.FLOAT16, np.float16, 2e-2),
    "bfloat16": (TensorProto.BFLOAT16, np.float32, 6e-2),  # fed as float32 values, see _feed
}


def _model(elem: int) -> ol.ModelProto:
    """y = ReduceSum(Tanh(x * w + b) * x) / 2: broadcasting, a constant of x's type, a reduction."""
    nodes = [
        helper.make_node("Mul", ["x", "w"], ["t"]),
        helper.make_node("Add", ["t", "b"], ["u"]),
        helper.make_node("Tanh", ["u"], ["v"]),
        helper.make_node("Mul", ["v", "x"], ["p"]),
        helper.make_node("ReduceSum", ["p"], ["s"], keepdims=0),
        helper.make_node("Div", ["s", "two"], ["y"]),
    ]
    two = helper.make_tensor("two", elem, [], [2.0])
    graph = helper.make_graph(
        nodes,
        "dtypes",
        [
            helper.make_tensor_value_info("x", elem, ["N", 3]),
            helper.make_tensor_value_info("w", elem, [3]),
            helper.make_tensor_value_info("b", elem, [1]),
        ],
        [helper.make_tensor_value_info("y", elem, [])],
        [two],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _reference(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """d y / d w and d y / d b in float64, by hand."""
    u = x * w + b
    v = np.tanh(u)
    du = x * (1 - v**2) / 2
    return (du * x).sum(0), du.sum().reshape(1)


def _to_bf16_bits(a: np.ndarray) -> np.ndarray:
    bits = a.astype(np.float32).view(np.uint32)
    rounded = bits + 0x7FFF + ((bits >> 16) & 1)  # round to nearest even
    return (rounded >> 16).astype(np.uint16)


def _from_bf16_bits(a: np.ndarray) -> np.ndarray:
    return (a.astype(np.uint32) << 16).view(np.float32)


@pytest.mark.parametrize("name", list(DTYPES))
def test_gradient_in_every_float_type(name: str) -> None:
    elem, np_type, tol = DTYPES[name]
    rng = np.random.default_rng(0)
    x, w, b = rng.uniform(-1, 1, (4, 3)), rng.uniform(-1, 1, 3), rng.uniform(-0.5, 0.5, 1)
    bwd = ol.GradientOfFunction(_model(elem), xs=["w", "b"], y="y")
    assert list(bwd.input) == ["w", "b", "x", "two", "dy"]
    vi = {v.name: v.type.tensor_type.elem_type for v in bwd.value_info}
    assert vi["dy"] == elem and vi["w"] == elem
    feeds = {"x": x, "w": w, "b": b, "two": np.asarray(2.0), "dy": np.asarray(1.0)}
    if name == "bfloat16":
        feeds = {k: _from_bf16_bits(_to_bf16_bits(v)) for k, v in feeds.items()}
        ours = ol.runtime.InferenceSession(bwd).run(None, {k: _to_bf16_bits(v) for k, v in feeds.items()})
        got = [_from_bf16_bits(np.asarray(g).view(np.uint16)) for g in ours]
    else:
        feeds = {k: np.asarray(v, np_type) for k, v in feeds.items()}
        got = ol.runtime.InferenceSession(bwd).run(None, feeds)
        assert [g.dtype for g in got] == [np.dtype(np_type)] * 2
    want = _reference(*(np.asarray(feeds[k], np.float64) for k in ("x", "w", "b")))
    for g, r in zip(got, want):
        np.testing.assert_allclose(np.asarray(g, np.float64), r, rtol=tol, atol=tol)


def test_float16_backward_runs_in_onnxruntime() -> None:
    import onnxruntime as ort
    from gradcheck import backward_model

    bwd = ol.GradientOfFunction(_model(TensorProto.FLOAT16), xs=["w", "b"], y="y")
    rng = np.random.default_rng(1)
    feeds = {
        "w": rng.uniform(-1, 1, 3).astype(np.float16),
        "b": rng.uniform(-0.5, 0.5, 1).astype(np.float16),
        "x": rng.uniform(-1, 1, (4, 3)).astype(np.float16),
        "two": np.asarray(2.0, np.float16),
        "dy": np.asarray(1.0, np.float16),
    }
    model = backward_model(bwd, feeds)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    theirs = sess.run(None, feeds)
    ours = ol.runtime.InferenceSession(bwd).run(None, feeds)
    for a, c in zip(ours, theirs):
        np.testing.assert_allclose(a.astype(np.float32), c.astype(np.float32), rtol=2e-2, atol=2e-2)
