"""Parts of onnx's API that onnx's own helper tests use (issue 14 §1).

``tools/run_onnx_helper_tests.py`` runs onnx 1.23's helper_test.py and numpy_helper_test.py
against onnx_light (it needs the network for onnx's sdist, so it is not part of CI); these
tests pin what that run needed, each checked against onnx itself where onnx has it.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import onnx_light as ol
from onnx_light import checker, defs, helper, numpy_helper


def test_repeated_message_fields_have_add() -> None:
    graph = helper.make_graph([], "g", [], [])
    model = helper.make_model(graph)
    entry = model.metadata_props.add(key="k", value="v")
    node = model.graph.node.add(op_type="Relu", input=["x"], output=["y"])
    node.attribute.add(name="alpha", type=ol.AttributeProto.FLOAT, f=0.5)
    assert entry is model.metadata_props[0] and node is model.graph.node[0]
    data = model.SerializeToString()
    theirs = onnx.ModelProto.FromString(data)
    assert theirs.metadata_props[0].key == "k"
    assert theirs.graph.node[0].op_type == "Relu"
    assert theirs.graph.node[0].attribute[0].f == 0.5
    again = ol.ModelProto.FromString(data)
    assert again == model
    assert again.graph.node.add().op_type == ""  # a fresh list read from the codec has add() too


def test_repeated_composite_is_a_list() -> None:
    graph = helper.make_graph([], "g", [], [])
    graph.node.append(helper.make_node("Relu", ["x"], ["y"]))
    assert isinstance(graph.node, list) and graph.node == [helper.make_node("Relu", ["x"], ["y"])]
    graph.node = [helper.make_node("Neg", ["y"], ["z"])]  # assigning a plain list keeps add()
    graph.node.add(op_type="Abs")
    assert [n.op_type for n in graph.node] == ["Neg", "Abs"]


def test_duplicate_metadata_keys_are_rejected() -> None:
    model = helper.make_model(helper.make_graph([], "g", [], []))
    helper.set_model_props(model, {"Title": "a"})
    checker.check_model(model)
    model.metadata_props.add(key="Title", value="b")
    with pytest.raises(checker.ValidationError, match="duplicate keys"):
        checker.check_model(model)
    with pytest.raises(onnx.checker.ValidationError):  # onnx agrees
        onnx.checker.check_model(onnx.ModelProto.FromString(model.SerializeToString()))


def _sparse(indices: list[int] | list[list[int]], dims: list[int], nnz: int) -> ol.SparseTensorProto:
    values = numpy_helper.from_array(np.arange(1, nnz + 1, dtype=np.float32), "v")
    idx = numpy_helper.from_array(np.array(indices, dtype=np.int64), "i")
    return helper.make_sparse_tensor(values, idx, dims)


@pytest.mark.parametrize(
    ("indices", "dims", "ok"),
    [
        ([1, 4, 5], [2, 3], True),
        ([[0, 1], [1, 1], [1, 2]], [2, 3], True),
        ([4, 1, 5], [2, 3], False),  # not ascending
        ([1, 1, 5], [2, 3], False),  # repeated
        ([1, 4, 6], [2, 3], False),  # outside the dense tensor
        ([[0, 1], [1, 3], [1, 2]], [2, 3], False),  # outside axis 1
    ],
)
def test_check_sparse_tensor_agrees_with_onnx(indices: list, dims: list[int], ok: bool) -> None:
    sparse = _sparse(indices, dims, len(indices))
    theirs = onnx.SparseTensorProto.FromString(sparse.SerializeToString())
    if ok:
        checker.check_sparse_tensor(sparse)
        onnx.checker.check_sparse_tensor(theirs)
    else:
        with pytest.raises(checker.ValidationError):
            checker.check_sparse_tensor(sparse)
        with pytest.raises(onnx.checker.ValidationError):
            onnx.checker.check_sparse_tensor(theirs)


def test_defs_has_and_get_schema() -> None:
    assert defs.has("Relu") and defs.has("Relu", "") and not defs.has("NoSuchOp")
    assert defs.has("Relu", 6) and not defs.has("Gelu", 19) and defs.has("Gelu", 20)
    assert defs.get_schema("Relu", 13).since_version == onnx.defs.get_schema("Relu", 13).since_version
    assert defs.onnx_opset_version() == onnx.defs.onnx_opset_version()
    with pytest.raises(defs.SchemaError):
        defs.get_schema("Gelu", 19)


def test_attr_type_to_str() -> None:
    for t in (1, 2, 5, 11, 14):
        assert helper._attr_type_to_str(t) == onnx.helper._attr_type_to_str(t)
    assert helper._attr_type_to_str(9999) == "UNDEFINED"


@pytest.mark.parametrize(("fn", "bits"), [("_pack_4bitx2", 4), ("_pack_2bitx4", 2), ("_pack_6bit", 6)])
def test_private_pack_helpers_match_onnx(fn: str, bits: int) -> None:
    codes = np.random.default_rng(0).integers(0, 1 << bits, size=13).astype(np.uint8)
    np.testing.assert_array_equal(getattr(numpy_helper, fn)(codes), getattr(onnx.numpy_helper, fn)(codes))
