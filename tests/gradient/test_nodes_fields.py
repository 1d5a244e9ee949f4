"""``_fastpath.nodes_fields``: the native slot reads (``slot_rows``) give what the properties give."""

from __future__ import annotations

import pytest

from onnx_light import helper
from onnx_light.onnx_core import _native_codec
from onnx_light.onnx_core._proto import NodeProto
from onnx_light.onnx_core.gradient._fastpath import _FIELD_DEFAULTS, _FIELD_SLOTS, node_fields, nodes_fields


def _nodes() -> list[NodeProto]:
    bare = NodeProto()  # nothing set: every field its default
    return [
        helper.make_node("Mul", ["a", "b"], ["c"]),
        helper.make_node("Custom", ["c", ""], ["d", "e"], domain="my.ops", alpha=0.5),
        helper.make_node("Constant", [], ["k"], value=helper.make_tensor("t", 1, [1], [1.0])),
        bare,
    ]


def _as_properties(n: NodeProto) -> tuple[object, ...]:
    return (n.op_type, n.domain, list(n.input), list(n.output), list(n.attribute))


@pytest.mark.parametrize("native", [True, False])
def test_nodes_fields_match_properties(native: bool) -> None:
    if native and not _native_codec.available():
        pytest.skip("native extension not built")
    nodes = _nodes()
    old = _native_codec.set_enabled(native)
    try:
        rows = nodes_fields(nodes)
    finally:
        _native_codec.set_enabled(old)
    assert [tuple(map(_plain, r)) for r in rows] == [_as_properties(n) for n in nodes]
    assert rows == [node_fields(n) for n in nodes]
    # the lists are the nodes' own (the pass reads them; nothing is copied)
    assert rows[0][2] is nodes[0].input


def _plain(v: object) -> object:
    return list(v) if isinstance(v, list) else v


@pytest.mark.skipif(not _native_codec.available(), reason="native extension not built")
def test_slot_rows_refuses_foreign_objects() -> None:
    native = _native_codec.NATIVE
    node = helper.make_node("Relu", ["x"], ["y"])
    rows = native.slot_rows([node], _FIELD_SLOTS, _FIELD_DEFAULTS)
    assert rows == [("Relu", "", ["x"], ["y"], [])]
    with pytest.raises(TypeError):
        native.slot_rows([node, object()], _FIELD_SLOTS, _FIELD_DEFAULTS)
    with pytest.raises(TypeError):
        native.slot_rows((node,), _FIELD_SLOTS, _FIELD_DEFAULTS)
    with pytest.raises(TypeError):
        native.slot_rows([node], _FIELD_SLOTS, _FIELD_DEFAULTS[:2])
    # a list holding something else falls back to the comprehension's reads
    assert nodes_fields([node, object()])[0] == rows[0]  # type: ignore[list-item]


def test_an_older_extension_is_not_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    # an extension built from older sources (no slot_rows): the comprehension answers
    monkeypatch.setattr(_native_codec, "NATIVE", object())
    monkeypatch.setattr(_native_codec, "_loaded", True)
    monkeypatch.setattr(_native_codec, "_enabled", True)
    nodes = _nodes()
    assert nodes_fields(nodes) == [node_fields(n) for n in nodes]
