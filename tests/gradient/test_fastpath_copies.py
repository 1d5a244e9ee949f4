"""The pass's shortcuts give what the general functions give: graph attributes, expandable ops."""

from __future__ import annotations

import copy

import numpy as np

from onnx_light import GraphProto, TensorProto, helper, numpy_helper
from onnx_light.onnx_core.gradient._fastpath import attribute
from onnx_light.onnx_core.ops import EXPANSIONS, expandable_op_types
from onnx_light.onnx_core.ops._signature import _attribute_type


def _body() -> GraphProto:
    inner = helper.make_graph(
        [helper.make_node("Neg", ["a"], ["b"])],
        "inner",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])],
    )
    const = numpy_helper.from_array(np.arange(3, dtype=np.float32), "c")
    return helper.make_graph(
        [
            helper.make_node("Constant", [], ["k"], value=const),
            helper.make_node("If", ["cond"], ["o"], then_branch=inner, else_branch=inner, doc_string="d"),
        ],
        "body",
        [helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("o", TensorProto.FLOAT, [2, "n"])],
        [const],
    )


def test_graph_attribute_is_make_attributes_copy() -> None:
    body = _body()
    before = body.SerializeToString()
    attr = attribute("body", body)
    assert attr.SerializeToString() == helper.make_attribute("body", body).SerializeToString()
    assert attr.g.SerializeToString() == copy.deepcopy(body).SerializeToString() == before
    assert attr.g is not body
    attr.g.node[1].attribute[0].g.node[0].op_type = "Abs"  # the copy is deep: the source keeps its body
    attr.g.initializer[0].name = "other"
    assert body.SerializeToString() == before
    made = helper.make_attribute("body", body)
    made.g.node[0].output[0] = "changed"  # make_attribute copies too
    assert body.SerializeToString() == before


def test_attribute_type_of_messages_without_a_copy() -> None:
    tensor = numpy_helper.from_array(np.zeros(2, np.float32))
    assert _attribute_type(_body()) == helper.make_attribute("g", _body()).type == 5
    assert _attribute_type(tensor) == helper.make_attribute("t", tensor).type == 4


def test_expandable_op_types_follows_the_table() -> None:
    assert "Foo_h_xform" not in expandable_op_types()
    EXPANSIONS.register("x.h_xform", "Foo_h_xform", lambda *a: None)
    try:
        assert "Foo_h_xform" in expandable_op_types()
    finally:
        EXPANSIONS.remove("x.h_xform", "Foo_h_xform")
    assert "Foo_h_xform" not in expandable_op_types()
