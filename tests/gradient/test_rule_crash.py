"""A rule that crashes on an invalid node is a ``GradientError`` naming the node, not a traceback.

``Transpose`` with ``perm=[0, 3]`` on a matrix made the rule's inverse permutation raise
``IndexError`` from inside the pass; ``Gather`` with ``axis=2`` on a matrix raised
``IndexError`` while the rule read the shape. Both are invalid models: the error must be an
``OnnxLightError`` that names the node and its ``domain::op_type``.
"""

from __future__ import annotations

import numpy as np
import pytest

import onnx_light as ol
from onnx_light import GradientError, TensorProto, helper, numpy_helper

F = TensorProto.FLOAT


def _model(node: object, inits: list | None = None) -> object:
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", F, [2, 3])],
        [helper.make_tensor_value_info("y", F, None)],
        initializer=inits or [],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize(
    ("case", "model"),
    [
        ("Transpose perm [0, 3]", _model(helper.make_node("Transpose", ["x"], ["y"], perm=[0, 3], name="t"))),
        (
            "Gather axis 2",
            _model(
                helper.make_node("Gather", ["x", "i"], ["y"], axis=2, name="t"),
                [numpy_helper.from_array(np.zeros(1, np.int64), "i")],
            ),
        ),
    ],
)
def test_rule_failure_names_the_node(case: str, model: object) -> None:
    with pytest.raises(GradientError, match=r"node 't' \(ai\.onnx::\w+ -> \['y'\]\).*failed"):
        ol.GradientOfFunction(model, xs=["x"], y="y")


@pytest.mark.parametrize("mode", ["reverse", "forward"])
def test_an_opset_newer_than_known_is_refused(mode: str) -> None:
    from onnx_light.helper import OPSET_VERSION

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", F, [2])],
        [helper.make_tensor_value_info("y", F, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 99)])
    with pytest.raises(GradientError, match=rf"opset 99, newer than the newest onnx-light knows \({OPSET_VERSION}\)"):
        if mode == "reverse":
            ol.GradientOfFunction(model, xs=["x"], y="y")
        else:
            ol.TangentOfFunction(model, xs=["x"], ys=["y"])
