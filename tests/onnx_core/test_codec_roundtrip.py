"""The wire codec against the ``onnx`` package: byte-exact round trips and equal content.

Sources: every ``.onnx`` / ``.pb`` file in the ``onnx`` wheel's backend test data, and
every node test case of ``onnx.backend.test.case.node`` serialised the way the backend
test generator does. Then the protobuf corners one by one: unknown fields, packed and
unpacked repeated scalars, negative integers, empty messages, oneofs, presence.
"""

from __future__ import annotations

import glob
import math
import os
import struct
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from wire_bytes import key, varint

import onnx_light.onnx_core as oc

# every test here runs with the native codec and with the pure-Python twin (conftest.py)
pytestmark = pytest.mark.usefixtures("codec")

DATA_ROOT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
N_CHUNKS = 8


# ----------------------------------------------------------------------------
# comparing our messages with onnx's, field by field, through onnx's descriptors
# ----------------------------------------------------------------------------
def _same_float(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return struct.pack("<d", a) == struct.pack("<d", b)


def _same_scalar(fd: Any, ours: Any, theirs: Any) -> bool:
    if fd.type in (fd.TYPE_FLOAT, fd.TYPE_DOUBLE):
        return _same_float(ours, theirs)
    if fd.type == fd.TYPE_BYTES:
        return bytes(ours) == theirs
    return type(ours) is type(theirs) and ours == theirs


def assert_same_content(ours: Any, theirs: Any, path: str = "") -> None:
    """Fails with the path of the first field where ``ours`` and onnx's ``theirs`` differ."""
    path = path or type(theirs).__name__
    assert type(ours).__name__ == type(theirs).__name__, path
    for fd in theirs.DESCRIPTOR.fields:
        name = fd.name
        where = f"{path}.{name}"
        o, t = getattr(ours, name), getattr(theirs, name)
        if fd.is_repeated:
            assert len(o) == len(t), f"{where}: {len(o)} items, onnx has {len(t)}"
            for i, (oi, ti) in enumerate(zip(o, t)):
                if fd.type == fd.TYPE_MESSAGE:
                    assert_same_content(oi, ti, f"{where}[{i}]")
                else:
                    assert _same_scalar(fd, oi, ti), f"{where}[{i}]: {oi!r} != {ti!r}"
            continue
        assert ours.HasField(name) == theirs.HasField(name), f"{where}: presence differs"
        if fd.type == fd.TYPE_MESSAGE:
            if theirs.HasField(name):
                assert_same_content(o, t, where)
        else:
            assert _same_scalar(fd, o, t), f"{where}: {o!r} != {t!r}"
    for oneof in theirs.DESCRIPTOR.oneofs:
        assert ours.WhichOneof(oneof.name) == theirs.WhichOneof(oneof.name), f"{path}:{oneof.name}"


def check_roundtrip(ours_cls: type, theirs_cls: type, data: bytes, label: str) -> None:
    """Decodes ``data`` with both codecs, compares content and our re-encoding."""
    ours = ours_cls.FromString(data)
    theirs = theirs_cls.FromString(data)
    assert_same_content(ours, theirs, label)
    out = ours.SerializeToString()
    assert out == data, f"{label}: re-encoding differs ({len(out)} vs {len(data)} bytes)"
    assert ours.ByteSize() == len(data), label


# ----------------------------------------------------------------------------
# the files shipped in the wheel
# ----------------------------------------------------------------------------
_KIND_OF_TYPE = {
    "tensor_type": "TensorProto",
    "sequence_type": "SequenceProto",
    "map_type": "MapProto",
    "optional_type": "OptionalProto",
    "sparse_tensor_type": "SparseTensorProto",
}


def _message_of_pb(path: str) -> str:
    """The message type of ``input_3.pb``/``output_0.pb``, read off the sibling model."""
    stem = os.path.splitext(os.path.basename(path))[0]
    side, _, index = stem.partition("_")
    model_path = os.path.join(os.path.dirname(os.path.dirname(path)), "model.onnx")
    if not index.isdigit() or not os.path.exists(model_path):
        return "TensorProto"
    graph = onnx.load(model_path, load_external_data=False).graph
    values = graph.output if side == "output" else graph.input
    # inputs fed by initializers are not part of the data sets
    if side == "input":
        inits = {t.name for t in graph.initializer}
        values = [v for v in values if v.name not in inits]
    kind = values[int(index)].type.WhichOneof("value")
    return _KIND_OF_TYPE.get(kind or "", "TensorProto")


def _data_files() -> list[str]:
    found = glob.glob(os.path.join(DATA_ROOT, "**", "*.onnx"), recursive=True)
    found += glob.glob(os.path.join(DATA_ROOT, "**", "*.pb"), recursive=True)
    return sorted(found)


DATA_FILES = _data_files()


def test_data_tree_is_there() -> None:
    assert len(DATA_FILES) > 100, f"only {len(DATA_FILES)} test files under {DATA_ROOT}"


@pytest.mark.parametrize("chunk", range(N_CHUNKS))
def test_wheel_data_files_roundtrip(chunk: int) -> None:
    failures = []
    for path in DATA_FILES[chunk::N_CHUNKS]:
        name = "ModelProto" if path.endswith(".onnx") else _message_of_pb(path)
        with open(path, "rb") as f:
            data = f.read()
        try:
            check_roundtrip(getattr(oc, name), getattr(onnx, name), data, name)
        except AssertionError as err:
            failures.append(f"{os.path.relpath(path, DATA_ROOT)}: {err}")
    assert not failures, "\n".join(failures[:20])


# ----------------------------------------------------------------------------
# node test cases, serialised the way onnx's backend test generator writes them
# ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def node_cases() -> list[Any]:
    from onnx.backend.test.case.node import collect_testcases

    with np.errstate(all="ignore"):
        cases = collect_testcases()
    assert len(cases) > 1000
    return cases


def _serialise_value(value: Any, info: Any) -> tuple[str, bytes]:
    kind = info.type.WhichOneof("value")
    if kind == "map_type":
        proto: Any = numpy_helper.from_dict(value, info.name)
    elif kind == "sequence_type":
        proto = numpy_helper.from_list(value, info.name)
    elif kind == "optional_type":
        proto = numpy_helper.from_optional(value, info.name)
    elif isinstance(value, onnx.TensorProto):
        proto = value
    else:
        proto = numpy_helper.from_array(np.asarray(value), info.name)
    return type(proto).__name__, proto.SerializeToString()


@pytest.mark.parametrize("chunk", range(N_CHUNKS))
def test_node_testcases_roundtrip(node_cases: list[Any], chunk: int) -> None:
    failures = []
    for case in node_cases[chunk::N_CHUNKS]:
        try:
            model_bytes = case.model.SerializeToString()
            check_roundtrip(oc.ModelProto, onnx.ModelProto, model_bytes, case.name)
            graph = case.model.graph
            for inputs, outputs in case.data_sets or ():
                for values, infos in ((inputs, graph.input), (outputs, graph.output)):
                    for value, info in zip(values, infos):
                        name, data = _serialise_value(value, info)
                        check_roundtrip(getattr(oc, name), getattr(onnx, name), data, info.name)
        except AssertionError as err:
            failures.append(f"{case.name}: {err}")
    assert not failures, "\n".join(failures[:20])


def test_semantic_content_of_a_node_model(node_cases: list[Any]) -> None:
    """Spot check in user terms: names, op types, attributes, tensor values."""
    case = next(c for c in node_cases if c.name == "test_transpose_all_permutations_1")
    ours = oc.ModelProto.FromString(case.model.SerializeToString())
    node = ours.graph.node[0]
    assert node.op_type == "Transpose"
    assert [a.name for a in node.attribute] == ["perm"]
    assert list(node.attribute[0].ints) == list(case.model.graph.node[0].attribute[0].ints)
    x = case.data_sets[0][0][0]
    tensor = oc.TensorProto.FromString(numpy_helper.from_array(x, "x").SerializeToString())
    assert tensor.name == "x" and list(tensor.dims) == list(x.shape)
    assert tensor.data_type == oc.TensorProto.FLOAT
    got = np.frombuffer(tensor.raw_data, dtype=np.float32).reshape(tensor.dims)
    np.testing.assert_array_equal(got, x)


# ----------------------------------------------------------------------------
# wire-format corners
# ----------------------------------------------------------------------------
def _small_model() -> onnx.ModelProto:
    h = onnx.helper
    node = h.make_node("Transpose", ["x"], ["y"], name="t", perm=[1, 0])
    graph = h.make_graph(
        [node],
        "g",
        [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, "N"])],
        [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N", 2])],
        [numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")],
    )
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


UNKNOWN_FIELDS = [
    pytest.param(key(1000, 0) + varint(150), id="varint"),
    pytest.param(key(1001, 0) + varint(-5), id="negative-varint"),
    pytest.param(key(1002, 1) + struct.pack("<d", 2.5), id="fixed64"),
    pytest.param(key(1003, 5) + struct.pack("<f", 1.5), id="fixed32"),
    pytest.param(key(1004, 2) + varint(3) + b"abc", id="len"),
    pytest.param(key(1005, 2) + varint(0), id="empty-len"),
    pytest.param(key(99, 0) + varint(1) + key(98, 2) + varint(1) + b"z", id="two-fields"),
]


@pytest.mark.parametrize("extra", UNKNOWN_FIELDS)
def test_unknown_fields_survive_at_top_level(extra: bytes) -> None:
    data = _small_model().SerializeToString() + extra
    model = oc.ModelProto.FromString(data)
    assert model.graph.node[0].op_type == "Transpose"
    assert model.SerializeToString() == data
    # onnx (protobuf) agrees on the bytes it keeps
    assert onnx.ModelProto.FromString(data).SerializeToString() == data


@pytest.mark.parametrize("extra", UNKNOWN_FIELDS)
def test_unknown_fields_survive_in_nested_message(extra: bytes) -> None:
    node = onnx.helper.make_node("Relu", ["x"], ["y"])
    node_bytes = node.SerializeToString() + extra
    # graph.node (field 1) holding the node with an unknown field
    graph_bytes = key(1, 2) + varint(len(node_bytes)) + node_bytes + key(2, 2) + b"\x01g"
    graph = oc.GraphProto.FromString(graph_bytes)
    assert graph.node[0].op_type == "Relu" and graph.name == "g"
    assert graph.SerializeToString() == graph_bytes
    # the unknown bytes travel with the node when it is re-parented
    model = oc.ModelProto(ir_version=8)
    model.graph.node.append(graph.node[0])
    again = onnx.ModelProto.FromString(model.SerializeToString())
    assert again.graph.node[0].SerializeToString() == node_bytes


def test_unknown_field_with_known_number_but_wrong_wire_type_is_kept() -> None:
    # NodeProto.op_type is field 4 (string); a varint under number 4 is not an op_type
    data = key(4, 2) + b"\x04Relu" + key(4, 0) + varint(7)
    node = oc.NodeProto.FromString(data)
    assert node.op_type == "Relu"
    assert node.SerializeToString() == data


def _tensor_with_dims(dims_bytes: bytes) -> bytes:
    return dims_bytes + key(2, 0) + varint(oc.TensorProto.INT64)


@pytest.mark.parametrize(
    ("encoded", "expected"),
    [
        # TensorProto.dims (field 1) is not declared packed: protobuf writes it unpacked
        pytest.param(b"".join(key(1, 0) + varint(v) for v in (3, 300, -1)), [3, 300, -1], id="unpacked"),
        pytest.param(
            key(1, 2) + varint(len(b := varint(3) + varint(300) + varint(-1))) + b,
            [3, 300, -1],
            id="packed",
        ),
        pytest.param(
            key(1, 0) + varint(1) + key(1, 2) + b"\x02\x02\x03" + key(1, 0) + varint(4),
            [1, 2, 3, 4],
            id="mixed",
        ),
        pytest.param(key(1, 2) + b"\x00", [], id="packed-empty"),
    ],
)
def test_repeated_int64_packed_and_unpacked(encoded: bytes, expected: list[int]) -> None:
    data = _tensor_with_dims(encoded)
    ours = oc.TensorProto.FromString(data)
    theirs = onnx.TensorProto.FromString(data)
    assert list(ours.dims) == list(theirs.dims) == expected
    # we write what protobuf writes
    assert ours.SerializeToString() == theirs.SerializeToString()


def test_packed_fields_accept_unpacked_encoding() -> None:
    # TensorProto.float_data (4) and int64_data (7) are declared packed
    data = (
        key(4, 5) + struct.pack("<f", 1.5) + key(4, 5) + struct.pack("<f", -2.0)
        + key(7, 0) + varint(-9) + key(7, 0) + varint(1 << 40)
        + key(10, 1) + struct.pack("<d", 0.25)
    )  # fmt: skip
    ours = oc.TensorProto.FromString(data)
    theirs = onnx.TensorProto.FromString(data)
    assert list(ours.float_data) == list(theirs.float_data) == [1.5, -2.0]
    assert list(ours.int64_data) == list(theirs.int64_data) == [-9, 1 << 40]
    assert list(ours.double_data) == [0.25]
    assert ours.SerializeToString() == theirs.SerializeToString()


@pytest.mark.parametrize(
    ("field", "values"),
    [
        ("int64_data", [0, -1, -(1 << 63), (1 << 63) - 1, 127, 128]),
        ("int32_data", [0, -1, -(1 << 31), (1 << 31) - 1]),
        ("uint64_data", [0, 1, (1 << 64) - 1]),
        ("dims", [0, -1, -(1 << 63)]),
        ("float_data", [0.0, -0.0, float("inf"), -1.5]),
        ("double_data", [float("-inf"), 1e300, -0.0]),
    ],
)
def test_repeated_scalar_extremes_match_onnx(field: str, values: list[Any]) -> None:
    theirs = onnx.TensorProto(name="t")
    getattr(theirs, field).extend(values)
    data = theirs.SerializeToString()
    ours = oc.TensorProto.FromString(data)
    assert list(getattr(ours, field)) == values
    assert ours.SerializeToString() == data
    built = oc.TensorProto(name="t")
    getattr(built, field).extend(values)
    assert built.SerializeToString() == data


def test_negative_singular_ints_match_onnx() -> None:
    theirs = onnx.AttributeProto(name="a", i=-3, type=onnx.AttributeProto.INT)
    data = theirs.SerializeToString()
    assert len(data) > 10  # negative int64 takes ten bytes on the wire
    ours = oc.AttributeProto.FromString(data)
    assert ours.i == -3
    assert ours.SerializeToString() == data
    assert oc.AttributeProto(name="a", i=-3, type=oc.AttributeProto.INT).SerializeToString() == data
    # int32 negative: sign-extended to ten bytes, like protobuf
    t = onnx.TypeProto.Tensor(elem_type=-2)
    ours_t = oc.TypeProto.Tensor.FromString(t.SerializeToString())
    assert ours_t.elem_type == -2
    assert ours_t.SerializeToString() == t.SerializeToString()


def test_int32_wraps_like_protobuf() -> None:
    # a 64-bit varint in an int32 field keeps its low 32 bits
    data = key(1, 0) + varint((1 << 32) + 5)
    assert oc.TypeProto.Tensor.FromString(data).elem_type == onnx.TypeProto.Tensor.FromString(data).elem_type


@pytest.mark.parametrize("name", ["ModelProto", "GraphProto", "NodeProto", "TensorProto", "TypeProto"])
def test_empty_messages(name: str) -> None:
    ours = getattr(oc, name).FromString(b"")
    assert ours.SerializeToString() == b""
    assert ours.ByteSize() == 0
    assert ours == getattr(oc, name)()


def test_empty_submessage_set_explicitly_is_written() -> None:
    # protobuf writes a present-but-empty sub-message as a zero-length field
    theirs = onnx.ModelProto()
    theirs.graph.SetInParent()
    data = theirs.SerializeToString()
    assert data == b"\x3a\x00"
    ours = oc.ModelProto.FromString(data)
    assert ours.HasField("graph")
    assert ours.SerializeToString() == data
    built = oc.ModelProto()
    built.graph.SetInParent()
    assert built.SerializeToString() == data


def test_reading_an_unset_submessage_does_not_set_it() -> None:
    model = oc.ModelProto()
    assert model.graph.name == ""
    assert not model.HasField("graph")
    assert model.SerializeToString() == b""
    model.graph.name = "g"
    assert model.HasField("graph")
    assert model.SerializeToString() == onnx.ModelProto(graph=onnx.GraphProto(name="g")).SerializeToString()


def test_has_field_for_scalars_set_to_default() -> None:
    theirs = onnx.AttributeProto(name="", i=0)
    data = theirs.SerializeToString()
    ours = oc.AttributeProto.FromString(data)
    assert ours.HasField("i") and ours.HasField("name")
    assert not ours.HasField("f") and not ours.HasField("t")
    assert ours.SerializeToString() == data
    with pytest.raises(ValueError):
        ours.HasField("ints")  # repeated
    with pytest.raises(ValueError):
        ours.HasField("no_such_field")


def test_oneof_last_member_wins_when_decoding() -> None:
    dim_value = key(1, 0) + varint(7)
    dim_param = key(2, 2) + b"\x01N"
    for data, which in ((dim_value + dim_param, "dim_param"), (dim_param + dim_value, "dim_value")):
        ours = oc.TensorShapeProto.Dimension.FromString(data)
        theirs = onnx.TensorShapeProto.Dimension.FromString(data)
        assert ours.WhichOneof("value") == theirs.WhichOneof("value") == which
        assert ours.SerializeToString() == theirs.SerializeToString()


def test_oneof_setting_clears_siblings() -> None:
    dim = oc.TensorShapeProto.Dimension(dim_value=3)
    assert dim.WhichOneof("value") == "dim_value"
    dim.dim_param = "N"
    assert dim.WhichOneof("value") == "dim_param"
    assert not dim.HasField("dim_value") and dim.dim_value == 0
    assert dim.HasField("value")
    dim.ClearField("value")
    assert dim.WhichOneof("value") is None
    t = oc.TypeProto()
    t.tensor_type.elem_type = 1
    assert t.WhichOneof("value") == "tensor_type"
    t.sequence_type = oc.TypeProto.Sequence()
    assert t.WhichOneof("value") == "sequence_type"
    assert not t.HasField("tensor_type")


def test_oneof_writing_into_unset_member_submessage() -> None:
    t = oc.TypeProto()
    t.tensor_type.elem_type = 1
    t.sequence_type.elem_type.tensor_type.elem_type = 1
    theirs = onnx.TypeProto()
    theirs.tensor_type.elem_type = 1
    theirs.sequence_type.elem_type.tensor_type.elem_type = 1
    assert t.WhichOneof("value") == "sequence_type"
    assert t.SerializeToString() == theirs.SerializeToString()
    # reading a member while a sibling is set changes nothing
    u = oc.TypeProto()
    u.tensor_type.elem_type = 1
    assert u.sequence_type.elem_type.tensor_type.elem_type == 0
    assert u.WhichOneof("value") == "tensor_type"
    assert u.SerializeToString() == theirs.__class__(tensor_type=onnx.TypeProto.Tensor(elem_type=1)).SerializeToString()


def test_repeated_singular_message_merges() -> None:
    # two occurrences of ModelProto.graph merge, as protobuf does
    a = onnx.ModelProto(graph=onnx.GraphProto(name="g")).SerializeToString()
    b = onnx.ModelProto(graph=onnx.GraphProto(doc_string="d")).SerializeToString()
    ours = oc.ModelProto.FromString(a + b)
    theirs = onnx.ModelProto.FromString(a + b)
    assert (ours.graph.name, ours.graph.doc_string) == ("g", "d")
    assert ours.SerializeToString() == theirs.SerializeToString()


def test_large_raw_data_is_a_view_and_round_trips() -> None:
    payload = np.arange(10_000, dtype=np.float32)
    data = numpy_helper.from_array(payload, "big").SerializeToString()
    tensor = oc.TensorProto.FromString(data)
    assert isinstance(tensor.raw_data, memoryview)
    np.testing.assert_array_equal(np.frombuffer(tensor.raw_data, np.float32), payload)
    assert tensor.SerializeToString() == data


def test_strings_are_utf8() -> None:
    theirs = onnx.NodeProto(op_type="Relu", name="nœud-✓", doc_string="日本")
    data = theirs.SerializeToString()
    ours = oc.NodeProto.FromString(data)
    assert (ours.name, ours.doc_string) == ("nœud-✓", "日本")
    assert ours.SerializeToString() == data
    with pytest.raises(oc.DecodeError):
        oc.NodeProto.FromString(key(3, 2) + b"\x02\xff\xfe")
