"""A subgraph whose node redefines a value of an enclosing scope (not SSA: the onnx checker and
onnxruntime refuse such a model; our runtime reads the body's own value after its definition).

Reverse mode used to differentiate the body's value as if it were the outer one and added
its gradient to the outer value's: ``If(then: h = Sin(x); h + x)`` with an outer ``h = x * x``
gave ``cos(x) + 1 + 2x`` for ``cos(x) + 1``, silently. Now it is an error naming the node and
the name. A Loop or Scan body that redefines an outer name differentiates right (its body
values are renamed) in both modes; those rows hold that.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto
from onnx import helper as oh

import onnx_light as ol
from onnx_light.runtime import InferenceSession

D = TensorProto.DOUBLE
X = np.array([0.3, 0.5, 0.7])


def _model(nodes: list, inputs: list) -> ol.ModelProto:
    graph = oh.make_graph(nodes, "g", inputs, [oh.make_tensor_value_info("y", D, [])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)])
    return ol.load_model_from_string(model.SerializeToString())


def _if_model(then_nodes: list) -> ol.ModelProto:
    then = oh.make_graph(then_nodes, "then", [], [oh.make_tensor_value_info("t_out", D, None)])
    other = oh.make_graph(
        [oh.make_node("Identity", ["h"], ["e_out"])], "else", [], [oh.make_tensor_value_info("e_out", D, None)]
    )
    nodes = [
        oh.make_node("Mul", ["x", "x"], ["h"]),
        oh.make_node("If", ["c"], ["r"], then_branch=then, else_branch=other),
        oh.make_node("ReduceSum", ["r"], ["y"], keepdims=0),
    ]
    return _model(nodes, [oh.make_tensor_value_info("x", D, [3]), oh.make_tensor_value_info("c", TensorProto.BOOL, [])])


@pytest.mark.parametrize("read_first", [False, True], ids=["defines-then-reads", "reads-then-defines"])
def test_if_branch_redefining_an_outer_value_is_an_error(read_first: bool) -> None:
    then = [oh.make_node("Sin", ["x"], ["h"]), oh.make_node("Add", ["h", "x"], ["t_out"])]
    model = _if_model(then[::-1] if read_first else then)
    with pytest.raises(ol.GradientError, match=r"If.*redefines \['h'\].*SSA"):
        ol.GradientOfFunction(model, xs=["x"], y="y")


def _check_both_modes(model: ol.ModelProto, feeds: dict, want: np.ndarray) -> None:
    bwd = ol.GradientOfFunction(model, xs=["x"], y="y")
    (got,) = InferenceSession(bwd).run(None, {**feeds, "dy": np.array(1.0)})
    np.testing.assert_allclose(got, want, rtol=1e-12)
    fwd = ol.TangentOfFunction(model, xs=["x"], ys=["y"])
    (jvp,) = InferenceSession(fwd).run(None, {**feeds, "fwd_x": np.ones(3)})
    np.testing.assert_allclose(jvp, want.sum(), rtol=1e-12)


def test_loop_body_redefining_an_outer_value() -> None:
    vi = oh.make_tensor_value_info
    body = oh.make_graph(
        [
            oh.make_node("Sin", ["v"], ["h"]),
            oh.make_node("Add", ["v", "h"], ["v_out"]),
            oh.make_node("Identity", ["k"], ["k_out"]),
        ],
        "body",
        [vi("i", TensorProto.INT64, []), vi("k", TensorProto.BOOL, []), vi("v", D, None)],
        [vi("k_out", TensorProto.BOOL, []), vi("v_out", D, None)],
    )
    nodes = [
        oh.make_node("Mul", ["x", "x"], ["h"]),
        oh.make_node("Loop", ["n", "", "h"], ["r"], body=body),
        oh.make_node("ReduceSum", ["r"], ["y"], keepdims=0),
    ]
    model = _model(nodes, [vi("x", D, [3]), vi("n", TensorProto.INT64, [])])
    # one iteration: y = sum(h + sin(h)) with h = x^2
    _check_both_modes(model, {"x": X, "n": np.array(1)}, (1 + np.cos(X * X)) * 2 * X)


def test_scan_body_redefining_an_outer_value() -> None:
    vi = oh.make_tensor_value_info
    body = oh.make_graph(
        [
            oh.make_node("Mul", ["s", "e"], ["h"]),
            oh.make_node("Add", ["h", "x"], ["s_out"]),
            oh.make_node("Identity", ["h"], ["o"]),
        ],
        "body",
        [vi("s", D, None), vi("e", D, None)],
        [vi("s_out", D, None), vi("o", D, None)],
    )
    nodes = [
        oh.make_node("Mul", ["x", "x"], ["h"]),
        oh.make_node("Scan", ["h", "xs"], ["last", "each"], body=body, num_scan_inputs=1),
        oh.make_node("ReduceSum", ["last"], ["y"], keepdims=0),
    ]
    model = _model(nodes, [vi("x", D, [3]), vi("xs", D, [2, 3])])
    xs = np.array([[1.0, 2, 3], [0.5, 0.5, 2]])
    # s1 = x^2 e0 + x, s2 = s1 e1 + x: ds2/dx = (2 x e0 + 1) e1 + 1
    _check_both_modes(model, {"x": X, "xs": xs}, (2 * X * xs[0] + 1) * xs[1] + 1)
