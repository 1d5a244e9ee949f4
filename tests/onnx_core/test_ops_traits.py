"""The op-schema layer's traits and family facts, against the spec (onnx's schemas)."""

from __future__ import annotations

import onnx.defs
import pytest

from onnx_light import NodeProto, helper
from onnx_light.onnx_core import ops


@pytest.mark.parametrize(
    ("node", "expected"),
    [
        (helper.make_node("RandomNormal", [], ["y"], shape=[2]), True),
        (helper.make_node("RandomNormal", [], ["y"], shape=[2], seed=1.0), False),
        (helper.make_node("Bernoulli", ["x"], ["y"]), True),
        (helper.make_node("Dropout", ["x"], ["y"]), False),
        (helper.make_node("Dropout", ["x", "r"], ["y"]), False),
        (helper.make_node("Dropout", ["x", "r", ""], ["y"]), False),
        (helper.make_node("Dropout", ["x", "r", "t"], ["y", "m"]), True),
        (helper.make_node("Dropout", ["x", "r", "t"], ["y", "m"], seed=3), False),
        (helper.make_node("RandomNormal", [], ["y"], domain="my.domain"), False),
        (helper.make_node("Relu", ["x"], ["y"]), False),
    ],
    ids=lambda v: v if isinstance(v, bool) else f"{v.domain or 'ai.onnx'}::{v.op_type}/{len(v.input)}",
)
def test_is_random(node: NodeProto, expected: bool) -> None:
    assert ops.is_random(node) is expected


def test_traits_of_undeclared_and_custom_ops_are_empty() -> None:
    assert ops.traits("", "NoSuchOp") == ops.NO_TRAITS
    assert ops.traits("my.domain", "Reshape") == ops.NO_TRAITS
    assert ops.traits("ai.onnx", "Reshape").moves_elements


def test_subgraph_trait_matches_the_spec() -> None:
    """An op has the subgraphs trait exactly when its latest schema has a graph attribute."""
    graph_types = {onnx.defs.OpSchema.AttrType.GRAPH, onnx.defs.OpSchema.AttrType.GRAPHS}
    with_graphs = {
        s.name
        for s in onnx.defs.get_all_schemas()
        if s.domain == "" and any(a.type in graph_types for a in s.attributes.values())
    }
    assert ops.op_types_with("subgraphs") == with_graphs


def test_random_traits_match_the_spec() -> None:
    """The random ops are exactly the default-domain ops whose schema has a ``seed``."""
    seeded = {s.name for s in onnx.defs.get_all_schemas() if s.domain == "" and "seed" in s.attributes}
    assert ops.op_types_with("random") | ops.op_types_with("random_if_input") == seeded


def test_moves_elements_implies_bit_exact() -> None:
    for op in ops.op_types_with("moves_elements"):
        assert ops.traits("", op).bit_exact, op


@pytest.mark.parametrize("op", ops.REDUCE_OPS)
def test_reduce_versions_match_the_spec(op: str) -> None:
    since = sorted({s.since_version for s in onnx.defs.get_all_schemas_with_history() if s.name == op})
    assert ops.REDUCE_VERSIONS[op] == tuple(since)
    schema = onnx.defs.get_schema(op, ops.axes_input_since(op))
    assert "axes" not in schema.attributes and len(schema.inputs) == 2
    older = onnx.defs.get_schema(op, ops.axes_input_since(op) - 1)
    assert "axes" in older.attributes


def test_reduce_ops_are_every_reduce_in_the_spec() -> None:
    spec = {s.name for s in onnx.defs.get_all_schemas() if s.domain == "" and s.name.startswith("Reduce")}
    assert set(ops.REDUCE_OPS) == spec
