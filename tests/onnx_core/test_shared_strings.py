"""Decoding gives one string object per distinct name (both codecs): a value's producer
output, its readers' inputs and its value_info share it, so the name-keyed dictionaries of
the passes compare names by identity (15% of the reverse transform on a 30,000-node chain)
and the decoded model holds each name once."""

from __future__ import annotations

import pytest

import onnx_light as ol
from onnx_light import helper

pytestmark = pytest.mark.usefixtures("codec")

FLOAT = ol.TensorProto.FLOAT


def _decoded() -> ol.ModelProto:
    nodes = [
        helper.make_node("Relu", ["input_x"], ["hidden"]),
        helper.make_node("Mul", ["hidden", "hidden"], ["output_y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("input_x", FLOAT, [2])],
        [helper.make_tensor_value_info("output_y", FLOAT, [2])],
        value_info=[helper.make_tensor_value_info("hidden", FLOAT, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    return ol.ModelProto.FromString(model.SerializeToString())


def test_equal_names_are_one_object() -> None:
    g = _decoded().graph
    relu, mul = g.node
    assert relu.output[0] is mul.input[0] is mul.input[1] is g.value_info[0].name
    assert relu.input[0] is g.input[0].name
    assert mul.output[0] is g.output[0].name


def test_long_strings_are_not_shared_and_values_are_unchanged() -> None:
    long = "n" * 300
    node = helper.make_node("Relu", [long], [long + "_out"], doc_string=long)
    decoded = ol.NodeProto.FromString(node.SerializeToString())
    assert decoded.input[0] == long and decoded.doc_string == long
    assert decoded.input[0] is not decoded.doc_string  # past the limit: decoded each time


def test_decodes_do_not_share_with_each_other() -> None:
    a, b = _decoded(), _decoded()
    assert a.graph.node[0].output[0] == b.graph.node[0].output[0]
    assert a.graph.node[0].output[0] is not b.graph.node[0].output[0]
