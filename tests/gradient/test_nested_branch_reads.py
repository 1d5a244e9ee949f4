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


# A branch holding an If on a condition its inner pass folds (Size(x) == 6): the pass inlines
# that If, renaming the inlined values (cb); the copy of the inner If(cb), which computes a
# value of the source (ko, then mo), sorted before the node computing cb (a renamed name sorts
# as a tangent node), so the outer If read cb from outside: forward mode failed, "graph output
# 'cb_..' is not computed by any node or input" (silero_vad.onnx's LSTM branch).
_KT = _branch(
    [
        oh.make_node("ReduceSum", ["x"], ["r"], keepdims=0),
        oh.make_node("Constant", [], ["hundred"], value=oh.make_tensor("h", D, [], [100.0])),
        oh.make_node("Less", ["r", "hundred"], ["cb"]),
        oh.make_node(
            "If",
            ["cb"],
            ["ko"],
            then_branch=_branch([oh.make_node("Mul", ["x", "x"], ["kt"])], "kt", "kt"),
            else_branch=_branch([oh.make_node("Sin", ["x"], ["ke"])], "ke", "ke"),
        ),
    ],
    "ko",
    "folded_then",
)
_FE = _branch([oh.make_node("Cos", ["x"], ["fe"])], "fe", "fe")
_FOLDED = _branch(
    [
        oh.make_node("Size", ["x"], ["n"]),
        oh.make_node("Constant", [], ["six"], value=oh.make_tensor("six", TensorProto.INT64, [], [6])),
        oh.make_node("Equal", ["n", "six"], ["k"]),
        oh.make_node(
            "If", ["k"], ["mo"], then_branch=_KT, else_branch=_branch([oh.make_node("Cos", ["x"], ["fe"])], "fe", "fe")
        ),
        oh.make_node("Mul", ["mo", "mo"], ["mm"]),
    ],
    "mm",
    "folded",
)
FOLDED_CASE = Case(
    "If_with_folded_If",
    [oh.make_node("If", ["c"], ["o"], then_branch=_FOLDED, else_branch=_ELSE), oh.make_node("Mul", ["o", "o"], ["y"])],
    {"x": _X, "c": np.array(True)},
    ["x"],
)


def test_folded_inner_if_forward_mode() -> None:
    check_tangent(FOLDED_CASE)
    check_gradient(FOLDED_CASE)
