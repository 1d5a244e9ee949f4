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


def _op_name_literals(path: str, emitted_ok: bool) -> list[str]:
    """Op names spelt as string literals in a module; with ``emitted_ok`` the first argument
    of ``emit(...)`` / ``new_node(...)`` calls (ops the module builds) is not counted."""
    import ast
    import pathlib

    names = {s.name for s in onnx.defs.get_all_schemas_with_history()}
    tree = ast.parse(pathlib.Path(path).read_text(encoding="utf-8"))
    built: set[int] = set()
    if emitted_ok:
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and node.args:
                func = node.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if called in ("emit", "new_node"):
                    built.add(id(node.args[0]))
    return sorted(
        f"{n.value} (line {n.lineno})"
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and n.value in names and id(n) not in built
    )


@pytest.mark.parametrize(
    ("module", "emitted_ok", "allowed"),
    [
        ("onnx_light/runtime/_plan.py", False, set()),
        ("onnx_light/runtime/_codegen.py", False, set()),
        # the pass builds its own nodes (Constant, Cast, ReduceSum, ...) and accumulates with
        # Add or Sum (DESIGN 3): those are ops it emits, not ops it asks about
        ("onnx_light/onnx_core/gradient/_pass.py", True, {"Add", "Sum"}),
    ],
)
def test_the_pass_and_the_planner_name_no_op(module: str, emitted_ok: bool, allowed: set[str]) -> None:
    """They ask the layer's traits instead (issue 9 §1)."""
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[2]
    found = [f for f in _op_name_literals(str(root / module), emitted_ok) if f.split()[0] not in allowed]
    assert not found, f"{module} names ops: {found}"
