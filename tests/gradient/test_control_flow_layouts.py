"""Scan layouts (every scan_input_axes / directions x scan_output_axes / directions) in both
modes, and a Loop whose carried value changes shape per iteration.

Such a Loop runs, but its gradient and tangent graphs tape the carried value as a scan
output, which must keep one shape: the run stops with a message that says so (it was numpy's
"all input arrays must have the same shape").
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from gradcheck import Case, check_gradient, check_tangent
from onnx import TensorProto
from onnx import helper as oh

import onnx_light as ol
from onnx_light.runtime import InferenceSession

D = TensorProto.DOUBLE
vi = oh.make_tensor_value_info


def _scan_case(in_axis: int, in_dir: int, out_axis: int, out_dir: int) -> Case:
    body = oh.make_graph(
        [
            oh.make_node("Mul", ["s", "e"], ["se"]),
            oh.make_node("Add", ["se", "w"], ["s_out"]),
            oh.make_node("Sin", ["se"], ["o"]),
        ],
        "body",
        [vi("s", D, None), vi("e", D, None)],
        [vi("s_out", D, None), vi("o", D, None)],
    )
    layout: dict[str, Any] = {
        "scan_input_axes": [in_axis],
        "scan_input_directions": [in_dir],
        "scan_output_axes": [out_axis],
        "scan_output_directions": [out_dir],
    }
    nodes = [
        oh.make_node("Scan", ["s0", "e"], ["last", "each"], body=body, num_scan_inputs=1, **layout),
        oh.make_node("Mul", ["each", "u"], ["weighted"]),
        oh.make_node("ReduceSum", ["weighted"], ["y1"], keepdims=0),
        oh.make_node("ReduceSum", ["last"], ["y0"], keepdims=0),
        oh.make_node("Add", ["y0", "y1"], ["y"]),
    ]
    rng = np.random.default_rng(in_axis + 2 * in_dir + 4 * (out_axis % 3) + 16 * out_dir)
    e = rng.standard_normal((4, 3)) * 0.7
    inputs = {
        "s0": np.array([0.5, -0.2, 0.3]),
        "e": e if in_axis == 0 else e.T.copy(),
        "w": np.array([1.1, 0.9, -0.4]),
        "u": rng.standard_normal((4, 3) if out_axis == 0 else (3, 4)),
    }
    name = f"Scan_in{in_axis}{'r' if in_dir else ''}_out{out_axis}{'r' if out_dir else ''}"
    return Case(name, nodes, inputs, ["s0", "e", "w"])


LAYOUTS = list(itertools.product((0, 1), (0, 1), (0, 1, -1), (0, 1)))
FAST = {(1, 1, -1, 1), (0, 1, 1, 0), (1, 0, 0, 1), (0, 0, -1, 0)}


@pytest.mark.parametrize(
    "layout", [pytest.param(lay, marks=() if lay in FAST else pytest.mark.slow) for lay in LAYOUTS], ids=str
)
def test_scan_layouts_both_modes(layout: tuple[int, int, int, int]) -> None:
    case = _scan_case(*layout)
    check_gradient(case)
    check_tangent(case)


def test_loop_carrying_a_growing_value_says_why_its_gradient_cannot_run() -> None:
    body = oh.make_graph(
        [oh.make_node("Concat", ["v", "a"], ["v_out"], axis=0), oh.make_node("Identity", ["c"], ["c_out"])],
        "body",
        [vi("i", TensorProto.INT64, []), vi("c", TensorProto.BOOL, []), vi("v", D, None)],
        [vi("c_out", TensorProto.BOOL, []), vi("v_out", D, None)],
    )
    nodes = [
        oh.make_node("Loop", ["n", "", "x"], ["vf"], body=body),
        oh.make_node("Mul", ["vf", "vf"], ["q"]),
        oh.make_node("ReduceSum", ["q"], ["y"], keepdims=0),
    ]
    graph = oh.make_graph(
        nodes,
        "g",
        [vi("x", D, [3]), vi("a", D, [2]), vi("n", TensorProto.INT64, [])],
        [vi("y", D, [])],
    )
    model = ol.load_model_from_string(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)]).SerializeToString())
    feeds = {"x": np.array([0.3, -0.5, 0.7]), "a": np.array([1.0, 2.0]), "n": np.array(2)}
    (y,) = InferenceSession(model).run(None, feeds)  # the forward runs: 0.83 + 2 * 5
    np.testing.assert_allclose(y, 0.83 + 10.0)
    bwd = ol.GradientOfFunction(model, xs=["x", "a"], y="y")
    with pytest.raises(ol.OnnxLightError, match=r"Loop scan output \d+ has shape \[5\] at iteration 1, \[3\] before"):
        InferenceSession(bwd).run(None, {**feeds, "dy": np.array(1.0)})
