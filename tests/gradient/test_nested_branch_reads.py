"""A nested If's branch reads a non-float value its enclosing branch computes.

``Shape(x)`` is read only inside the inner branch (``Cast(shape) * x``); with x's shape known
the inner pass folds it into a Constant, which the seed folding of the branch's VJP dropped
as "fed only the dropped Expands" (it did not look inside the nested If): the backward
function failed, "graph output 'si' is not computed by any node or input".
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from gradcheck import Case, check_gradient, check_tangent
from onnx import TensorProto
from onnx import helper as oh

D = TensorProto.DOUBLE


def _branch(nodes: list[Any], out: str, name: str) -> Any:
    return oh.make_graph(nodes, name, [], [oh.make_tensor_value_info(out, D, [2, 3])])


_INNER_THEN = _branch(
    [
        oh.make_node("Cast", ["si"], ["sf2"], to=D),
        oh.make_node("ReduceSum", ["sf2"], ["k2"], keepdims=0),
        oh.make_node("Mul", ["x", "k2"], ["it2"]),
    ],
    "it2",
    "inner_then",
)
_INNER_ELSE = _branch([oh.make_node("Identity", ["x"], ["ie"])], "ie", "inner_else")
_THEN = _branch(
    [
        oh.make_node("Shape", ["x"], ["si"]),
        oh.make_node("If", ["c2"], ["oc"], then_branch=_INNER_THEN, else_branch=_INNER_ELSE),
    ],
    "oc",
    "then",
)
_ELSE = _branch([oh.make_node("Neg", ["x"], ["ea"])], "ea", "else")
_X = np.random.default_rng(4).standard_normal((2, 3))

CASES = [
    Case(
        f"If_in_If_{c2}",
        [oh.make_node("If", ["c"], ["o"], then_branch=_THEN, else_branch=_ELSE)],
        {"x": _X, "c": np.array(True), "c2": np.array(c2)},
        ["x"],
    )
    for c2 in (True, False)
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_reverse_mode(case: Case) -> None:
    check_gradient(case)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_forward_mode(case: Case) -> None:
    check_tangent(case)
