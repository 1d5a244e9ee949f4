"""Forward mode refuses nodes out of topological order, and cycles, as reverse mode does.

Before h-xfwd the tangent sweep ran the nodes in index order: a node read before its
producer got no tangent, and the result took the value as an input of its own (a JVP
with an extra input ``a`` and a zero tangent for ``y``).
"""

from __future__ import annotations

import pytest

import onnx_light as ol
from onnx_light import helper

FLOAT = ol.TensorProto.FLOAT
X = [helper.make_tensor_value_info("x", FLOAT, [3])]


def test_nodes_out_of_order_are_an_error() -> None:
    nodes = [helper.make_node("Relu", ["a"], ["y"]), helper.make_node("Mul", ["x", "x"], ["a"])]
    with pytest.raises(ol.GradientError, match="not in topological order"):
        ol.TangentOfNodes(nodes, ["x"], ["y"], value_info=X)


def test_a_cycle_is_an_error() -> None:
    nodes = [helper.make_node("Add", ["x", "b"], ["a"]), helper.make_node("Relu", ["a"], ["b"])]
    with pytest.raises(ol.GradientError, match="cycle"):
        ol.TangentOfNodes(nodes, ["x"], ["b"], value_info=X)
