"""Bodies that return an outer-scope value directly, with no node between.

ONNX allows a branch or loop body output to name a value of an enclosing graph. The pass
read only the names its nodes consume, so such a value was not seen as read: a Loop whose
body returned the outer ``x`` got a silently wrong gradient (finite differences 0.0356 vs
0.0375), and an If returning ``x`` was "x does not reach y". Each row runs reverse mode
against finite differences and onnxruntime (the emitted body returns it through an
Identity, which onnxruntime requires), and forward mode against reverse mode.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from gradcheck import Case, check_gradient, check_tangent
from onnx import TensorProto
from onnx import helper as oh

D, B, I64 = TensorProto.DOUBLE, TensorProto.BOOL, TensorProto.INT64
_rng = np.random.default_rng(21)
_X = _rng.standard_normal((2, 3))
_W = _rng.standard_normal((2, 3))


def vi(name: str, shape: list[int], dtype: int = D) -> Any:
    return oh.make_tensor_value_info(name, dtype, shape)


def node(op: str, inputs: list[str], outputs: list[str], **attrs: Any) -> Any:
    return oh.make_node(op, inputs, outputs, **attrs)


_ELSE = oh.make_graph([node("Neg", ["w"], ["e"])], "e", [], [vi("e", [2, 3])])


def _if(name: str, returned: str, flag: bool, pre: list[Any]) -> Case:
    then = oh.make_graph([], "t", [], [vi(returned, [2, 3])])  # no node: the outer value itself
    return Case(
        name,
        [*pre, node("If", ["c"], ["o"], then_branch=then, else_branch=_ELSE), node("Mul", ["o", "w"], ["y"])],
        {"x": _X, "w": _W, "c": np.array(flag)},
        ["x", "w"],
    )


def _loop(name: str, returned: str, pre: list[Any]) -> Case:
    # v0 = x * w; each iteration scans v * v out and carries the outer value on
    body = oh.make_graph(
        [node("Identity", ["cond"], ["cond_out"]), node("Mul", ["v", "v"], ["sq"])],
        "body",
        [vi("i", [], I64), vi("cond", [], B), vi("v", [2, 3])],
        [vi("cond_out", [], B), vi(returned, [2, 3]), vi("sq", [2, 3])],
    )
    return Case(
        name,
        [
            node("Constant", [], ["m"], value=oh.make_tensor("m", I64, [], [3])),
            node("Constant", [], ["t"], value=oh.make_tensor("t", B, [], [1])),
            node("Mul", ["x", "w"], ["v0"]),
            *pre,
            node("Loop", ["m", "t", "v0"], ["vf", "sqs"], body=body),
            node("ReduceSum", ["sqs"], ["r1"], keepdims=0),
            node("ReduceSum", ["vf"], ["r2"], keepdims=0),
            node("Add", ["r1", "r2"], ["y"]),
        ],
        {"x": _X, "w": _W},
        ["x", "w"],
    )


_SCAN_BODY = oh.make_graph(
    [node("Add", ["h", "xt"], ["h2"])], "sb", [vi("h", [3]), vi("xt", [3])], [vi("h2", [3]), vi("w0", [3])]
)

CASES = [
    _if("If_returns_input_then", "x", True, []),
    _if("If_returns_input_else", "x", False, []),
    _if("If_returns_outer_node_value", "nx", True, [node("Neg", ["x"], ["nx"])]),
    _loop("Loop_returns_input", "x", []),
    _loop("Loop_returns_outer_node_value", "nx", [node("Sin", ["x"], ["nx"])]),
    Case(
        "Scan_returns_input",
        [
            node("Sin", ["x"], ["sx"]),
            node("Scan", ["h0", "sx"], ["hf", "ys"], body=_SCAN_BODY, num_scan_inputs=1),
            node("Mul", ["ys", "ys"], ["y2"]),
            node("ReduceSum", ["y2"], ["r1"], keepdims=0),
            node("ReduceSum", ["hf"], ["r2"], keepdims=0),
            node("Add", ["r1", "r2"], ["y"]),
        ],
        {"h0": _rng.standard_normal(3), "x": _rng.standard_normal((4, 3)), "w0": _rng.standard_normal(3)},
        ["h0", "x", "w0"],
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_reverse_mode(case: Case) -> None:
    check_gradient(case)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_forward_mode(case: Case) -> None:
    check_tangent(case)
