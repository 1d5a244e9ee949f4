"""The optimizer's SiLU-gradient rewrite (``onnx_core/optimizer/_silu.py``).

``dy * s + ((dy * x) * s) * (1 - s)`` with ``s = Sigmoid(x)`` (what the Mul and Sigmoid rules
emit for ``x * Sigmoid(x)``) becomes ``dy * (s + y (1 - s))``. Checked against torch's SiLU
gradient in float64, against the unoptimized backward, and in onnxruntime.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

import onnx_light as ol
from onnx_light import helper

DOUBLE = ol.TensorProto.DOUBLE
SHAPE = [2, 3, 4]


def _model(nodes: list[ol.NodeProto], dtype: int = DOUBLE) -> ol.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", dtype, SHAPE)],
        [helper.make_tensor_value_info("z", dtype, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _silu(order: str, extra: list[ol.NodeProto] | None = None) -> ol.ModelProto:
    ins = ["x", "s"] if order == "xs" else ["s", "x"]
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ins, ["y"])]
    return _model(nodes + (extra or [helper.make_node("Mul", ["y", "y"], ["z"])]))


def _run(fn: ol.FunctionProto, x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    (dx,) = ol.runtime.InferenceSession(fn).run(None, {"x": x, "dy": dy})
    return np.asarray(dx)


def _torch_grad(x: np.ndarray, dy: np.ndarray, also_s: bool = False) -> np.ndarray:
    torch = pytest.importorskip("torch")
    t = torch.tensor(x, requires_grad=True)
    y = torch.nn.functional.silu(t)
    z = y * y + (torch.sigmoid(t) if also_s else 0)
    z.backward(torch.tensor(dy))
    return np.asarray(t.grad.numpy())


@pytest.mark.parametrize("order", ["xs", "sx"])
def test_silu_gradient_takes_the_short_form_and_matches_torch(order: str) -> None:
    model = _silu(order)
    fast = ol.GradientOfFunction(model, ["x"], "z", optimize=True)
    slow = ol.GradientOfFunction(model, ["x"], "z", optimize=False)
    ops, before = Counter(n.op_type for n in fast.node), Counter(n.op_type for n in slow.node)
    # the 6-node chain (4 Mul, Sub, Add) became Mul(y, 1 - s), Add(s, .), Mul(dy_y, .)
    assert before["Mul"] - ops["Mul"] == 3 and ops["Sub"] == 1, (ops, before)
    assert any(n.op_type == "Add" and "s" in n.input for n in fast.node)
    rng = np.random.default_rng(0)
    x, dy = rng.uniform(-6, 6, SHAPE), rng.standard_normal(SHAPE)
    np.testing.assert_allclose(_run(fast, x, dy), _torch_grad(x, dy), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(_run(fast, x, dy), _run(slow, x, dy), rtol=1e-12, atol=1e-12)


def test_silu_gradient_in_onnxruntime_float32() -> None:
    ort = pytest.importorskip("onnxruntime")
    from onnx_light.onnx_core.gradient import backward_model, input_types

    model = _model(
        [
            helper.make_node("Sigmoid", ["x"], ["s"]),
            helper.make_node("Mul", ["x", "s"], ["y"]),
            helper.make_node("ReduceSum", ["y"], ["z"], keepdims=0),
        ],
        ol.TensorProto.FLOAT,
    )
    fast = ol.GradientOfFunction(model, ["x"], "z", optimize=True)
    assert Counter(n.op_type for n in fast.node)["Mul"] == 3  # y, y (1 - s), dy (...)
    wrapped = backward_model(fast, input_types(model, "z", list(fast.input)), inline=True)
    x = np.random.default_rng(1).uniform(-6, 6, SHAPE).astype(np.float32)
    feeds = {"x": x, "dy": np.ones((), np.float32)}
    (theirs,) = ort.InferenceSession(wrapped.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    s = 1 / (1 + np.exp(-x.astype(np.float64)))
    np.testing.assert_allclose(theirs, s * (1 + x * (1 - s)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ol.runtime.InferenceSession(wrapped).run(None, feeds)[0], theirs, rtol=1e-5, atol=1e-6)


def test_sigmoid_read_elsewhere_keeps_the_rules_form() -> None:
    # s also feeds the loss: its gradient is a sum, not the pattern; the result stays right
    extra = [
        helper.make_node("Mul", ["y", "y"], ["yy"]),
        helper.make_node("Add", ["yy", "s"], ["z"]),
    ]
    model = _silu("xs", extra)
    fast = ol.GradientOfFunction(model, ["x"], "z", optimize=True)
    assert not any(n.op_type == "Add" and "s" in n.input for n in fast.node)  # no Add(s, y (1 - s))
    rng = np.random.default_rng(2)
    x, dy = rng.uniform(-6, 6, SHAPE), rng.standard_normal(SHAPE)
    np.testing.assert_allclose(_run(fast, x, dy), _torch_grad(x, dy, also_s=True), rtol=1e-12, atol=1e-12)


def test_a_sum_of_other_products_is_left_alone() -> None:
    # dy * s + ((dy * x) * s) * (2 - s): not 1 - s, no rewrite
    nodes = [
        helper.make_node("Sigmoid", ["x"], ["s"]),
        helper.make_node("Constant", [], ["two"], value=helper.make_tensor("two", DOUBLE, [], [2.0])),
        helper.make_node("Sub", ["two", "s"], ["d"]),
        helper.make_node("Mul", ["x", "dy"], ["b"]),
        helper.make_node("Mul", ["b", "s"], ["c"]),
        helper.make_node("Mul", ["c", "d"], ["e"]),
        helper.make_node("Mul", ["dy", "s"], ["a"]),
        helper.make_node("Add", ["a", "e"], ["f"]),
    ]
    fn = helper.make_function("t", "f", ["x", "dy"], ["f"], nodes, [helper.make_opsetid("", 21)])
    out = ol.optimize(fn)
    assert Counter(n.op_type for n in out.node) == Counter(n.op_type for n in nodes)
