"""The native codec (src/codec.cpp) against its pure-Python twin (_wire.py), on the corners.

Both must give the same messages, the same bytes, and the same DecodeError (reason,
byte offset, path), or the same exception type for values the encoder refuses.
"""

from __future__ import annotations

import os
import random
import struct
from typing import Any

import numpy as np
import pytest
from wire_bytes import key, varint

import onnx_light.onnx_core as oc
from onnx_light.onnx_core import _native_codec, _wire
from onnx_light.onnx_core._message import Message


@pytest.fixture(autouse=True)
def _require_native() -> None:
    if not _native_codec.available():
        if os.environ.get("CI"):
            pytest.fail("onnx_light._native was not built: the CI install must build the extension")
        pytest.xfail("onnx_light._native is not built in this environment")


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, Message):
        slots = [f.slot for f in a.FIELDS] + ["_unknown", "_implicit"]
        return all(_same(getattr(a, s, None), getattr(b, s, None)) for s in slots)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b)
    if isinstance(a, memoryview):
        return a.format == b.format and bytes(a) == bytes(b)
    return bool(a == b)


def _decode_both(cls: type, data: bytes) -> tuple[Any, Any]:
    """(native result, twin result): a message or the DecodeError's (reason, offset, path)."""
    out = []
    for native in (True, False):
        msg = cls()
        old = _native_codec.set_enabled(native)
        try:
            _wire.decode_into(msg, data)
            out.append(msg)
        except oc.DecodeError as err:
            out.append((err.reason, err.offset, err.path))
        finally:
            _native_codec.set_enabled(old)
    return out[0], out[1]


def _assert_same_decoding(cls: type, data: bytes) -> None:
    nat, twin = _decode_both(cls, data)
    if isinstance(twin, tuple):
        assert nat == twin
        return
    assert _same(nat, twin)
    assert _native_codec.NATIVE.encode(nat) == _wire.encode_twin(twin)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "value",
    [0, 1, 127, 128, (1 << 63) - 1, 1 << 63, (1 << 64) - 1, 1 << 64, (1 << 70) - 1, (1 << 65) + 7, 1 << 69],
)
@pytest.mark.parametrize(
    ("cls", "number"),
    [
        (oc.AttributeProto, 3),  # int64
        (oc.AttributeProto, 20),  # enum
        (oc.TypeProto.Tensor, 1),  # int32
        (oc.TensorProto, 11),  # uint64 (packed)
        (oc.TensorProto, 5),  # int32 (packed)
        (oc.TensorProto, 7),  # int64 (packed)
        (oc.AttributeProto, 8),  # int64 repeated, unpacked
        (oc.NodeDeviceConfigurationProto, 3),  # int32
    ],
)
def test_ten_byte_varints(cls: type, number: int, value: int) -> None:
    single = key(number, 0) + varint(value)
    packed_payload = varint(value) + varint(5)
    packed = key(number, 2) + varint(len(packed_payload)) + packed_payload
    for data in (single, packed, single + packed):
        _assert_same_decoding(cls, data)


@pytest.mark.parametrize(
    "data",
    [
        varint((1 << 29) << 3),
        varint(((1 << 29) - 1) << 3) + b"\x00",
        varint((1 << 69) | 2) + b"\x00",
        varint((1 << 64) - 8),
        b"\xff" * 9 + b"\x7f",
        b"\xff" * 10 + b"\x01",
        b"\x3a" + varint(1 << 66),
        b"\x3a\x80",
        b"\x00",
        b"\x0b",
        b"\x0f",
        b"\x3a\x05\x0a\x03\x42\x01\xff",  # invalid UTF-8 in graph.node[0].input... (truncated)
        b"\x3a\x04\x0a\x02\x0a\x00",
        b"\x3a\x06\x2a\x04\x22\x02\x00\x00",
        b"\x3a\x07\x2a\x05\x3a\x03\xff\xff\xff",
        b"\x3a\x06\x2a\x04\x4a\x7f\x00\x00",
        b"\x3a\x03\x2a\x01\x25",  # fixed32 truncated
        b"\x08\x01" * 3 + b"\x12\x02\xc3\x28",
    ],
)
def test_hostile_inputs_agree(data: bytes) -> None:
    _assert_same_decoding(oc.ModelProto, data)


def test_random_bytes_agree() -> None:
    rng = random.Random(1)
    for _ in range(3000):
        data = rng.randbytes(rng.randint(0, 40))
        for cls in (oc.ModelProto, oc.GraphProto, oc.TensorProto, oc.NodeProto, oc.AttributeProto, oc.TypeProto):
            _assert_same_decoding(cls, data)


def test_merging_into_a_message_and_oneofs() -> None:
    data = key(1, 0) + varint(3) + key(2, 2) + b"\x01N" + key(1, 0) + varint(9)
    for native in (True, False):
        old = _native_codec.set_enabled(native)
        try:
            dim = oc.TensorShapeProto.Dimension(dim_param="x")
            dim.MergeFromString(data)
            assert dim.WhichOneof("value") == "dim_value" and dim.dim_value == 9
            model = oc.ModelProto(producer_name="p")
            model.graph.name = "g"
            model.MergeFromString(oc.ModelProto(graph=oc.GraphProto(doc_string="d")).SerializeToString())
            assert (model.graph.name, model.graph.doc_string, model.producer_name) == ("g", "d", "p")
        finally:
            _native_codec.set_enabled(old)


def test_raw_data_views_and_inputs() -> None:
    payload = np.arange(1000, dtype=np.float32)
    t = oc.TensorProto(name="t", dims=[1000], data_type=1, raw_data=payload.tobytes())
    data = t.SerializeToString()
    for source in (data, bytearray(data), memoryview(data), np.frombuffer(data, np.uint8)):
        nat, twin = _decode_both(oc.TensorProto, source)  # type: ignore[arg-type]
        assert isinstance(nat.raw_data, memoryview) and _same(nat, twin)
    # strided input: the twin handles it
    nat, twin = _decode_both(oc.TensorProto, memoryview(data + data)[::2])  # type: ignore[arg-type]
    assert type(nat) is type(twin)


class _Str(str):
    pass


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("i", True),
        ("i", np.int64(-5)),
        ("i", 1 << 64),
        ("i", -(1 << 63) - 1),
        ("i", -(1 << 64)),
        ("i", -(1 << 64) - 1),
        ("i", 1 << 80),
        ("i", 2.5),
        ("f", 1e300),
        ("f", 3.4028235e38),
        ("f", 3.4028236e38),
        ("f", float("nan")),
        ("f", 7),
        ("f", np.float32(1.25)),
        ("f", "x"),
        ("name", _Str("n")),
        ("name", "\ud800"),
        ("name", b"bytes"),
        ("s", "text"),
        ("s", bytearray(b"ab")),
        ("s", memoryview(b"abcd")[::2]),
        ("s", np.arange(3, dtype=np.float32)),
        ("ints", (1, 2)),
        ("ints", [1, True, np.int32(3)]),
        ("ints", [1 << 70]),
        ("floats", [1e300]),
        ("floats", [1, 2.0]),
        ("strings", [b"a", "b"]),
        ("t", oc.GraphProto(name="g")),
        ("t", None),
        ("g", 5),
        ("t", "x"),
        ("tp", oc.TensorProto(name="wrong class")),
    ],
)
def test_encoder_agrees_on_odd_values(field: str, value: Any) -> None:
    attr = oc.AttributeProto(name="a")
    setattr(attr, "_" + field, value)
    node = oc.NodeProto(op_type="X", attribute=[attr, oc.AttributeProto(name="b", i=1)])
    results = []
    for fn in (
        _native_codec.NATIVE.encode,
        _wire.encode_twin,
        _native_codec.NATIVE.encoded_size,
        _wire.encoded_size_twin,
    ):  # type: ignore[union-attr]
        try:
            results.append(fn(node))
        except Exception as err:  # noqa: BLE001
            results.append(type(err))
    assert results[0] == results[1]
    assert results[2] == results[3]


def test_packed_float_overflow_and_unpacked() -> None:
    t = oc.TensorProto(float_data=[1e300, -1e300, 1.5], double_data=[1e300])
    assert _native_codec.NATIVE.encode(t) == _wire.encode_twin(t)  # type: ignore[union-attr]


def test_encode_pieces_streams_big_values_without_copy() -> None:
    big = memoryview(np.arange(100_000, dtype=np.float32).tobytes())
    model = oc.ModelProto(
        graph=oc.GraphProto(initializer=[oc.TensorProto(name=f"w{i}", raw_data=big) for i in range(3)])
    )
    pieces, n = _native_codec.NATIVE.encode_pieces(model, _native_codec.STREAM_MIN)  # type: ignore[union-attr]
    assert sum(memoryview(p).nbytes for p in pieces) == n
    assert sum(1 for p in pieces if p is big) == 3
    joined = b"".join(pieces)
    assert joined == _wire.encode_twin(model) == _native_codec.NATIVE.encode(model)  # type: ignore[union-attr]
    assert _native_codec.NATIVE.encoded_size(model) == n  # type: ignore[union-attr]


def test_implicit_and_explicit_empty_submessages() -> None:
    m = oc.ModelProto()
    _ = m.graph.name  # implicit, empty: not written
    a = oc.ModelProto()
    a.graph.SetInParent()
    for msg in (m, a):
        assert _native_codec.NATIVE.encode(msg) == _wire.encode_twin(msg)  # type: ignore[union-attr]


def test_unknown_fields_and_subclasses() -> None:
    class MyNode(oc.NodeProto):
        pass

    node = MyNode(op_type="Relu")
    node._unknown = [b"\xf8\x01\x05"]
    graph = oc.GraphProto(node=[node])
    assert _native_codec.NATIVE.encode(graph) == _wire.encode_twin(graph)  # type: ignore[union-attr]
    data = _wire.encode_twin(node)
    nat, twin = _decode_both(MyNode, data)
    assert type(nat) is MyNode and _same(nat, twin)
    node._unknown = [bytearray(b"\xf8\x01\x05")]
    assert _native_codec.NATIVE.encode(graph) == _wire.encode_twin(graph)  # type: ignore[union-attr]


def test_deep_hand_built_tree_does_not_crash() -> None:
    graph = oc.GraphProto(name="leaf")
    for _ in range(3000):
        graph = oc.GraphProto(node=[oc.NodeProto(attribute=[oc.AttributeProto(name="g", g=graph)])])
    with pytest.raises(RecursionError):
        _native_codec.NATIVE.encode(graph)  # type: ignore[union-attr]
