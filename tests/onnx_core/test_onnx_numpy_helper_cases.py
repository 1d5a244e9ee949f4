"""The cases of onnx's own numpy_helper unit tests, restated against onnx_light (issue 14 §1).

Each test checks one behaviour onnx's test suite checks for ``onnx.numpy_helper``
(round trips per element type, map / sequence / optional errors, float8e8m0
rounding, payload size checks); cases that need ``onnx.reference`` use a Cast made
by hand instead.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.numpy_helper as onnx_nh
import pytest

from onnx_light import MapProto, OptionalProto, SequenceProto, TensorProto, helper, numpy_helper

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.complex64, np.complex128])
def test_float_types_round_trip(dtype: type) -> None:
    a = RNG.random((13, 37)).astype(dtype)
    t = numpy_helper.from_array(a, "test")
    assert t.name == "test"
    np.testing.assert_equal(numpy_helper.to_array(t), a)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int16, np.int32, np.int64])
def test_int_types_round_trip(dtype: type) -> None:
    info = np.iinfo(dtype)
    a = RNG.integers(info.min, info.max, size=(13, 37), dtype=dtype)
    np.testing.assert_equal(numpy_helper.to_array(numpy_helper.from_array(a, "t")), a)


def test_string_and_bool_round_trip() -> None:
    s = np.array(["Amy", "Billy", "Cindy"]).astype(object)
    np.testing.assert_equal(numpy_helper.to_array(numpy_helper.from_array(s, "t")), s)
    b = RNG.integers(0, 2, size=(4, 5)).astype(bool)
    np.testing.assert_equal(numpy_helper.to_array(numpy_helper.from_array(b, "t")), b)


def test_from_dict_values_and_keys() -> None:
    m = numpy_helper.from_dict({0: np.array(0.1), 1: np.array(0.9)})
    assert isinstance(m, MapProto)
    assert numpy_helper.to_array(m.values.tensor_values[1]) == np.array(0.9)
    m = numpy_helper.from_dict({0: np.array([1, 2]), 1: np.array([9, 10])})
    assert list(numpy_helper.to_array(m.values.tensor_values[1])) == [9, 10]
    m = numpy_helper.from_dict({"a": np.array([0.1]), "bb": np.array([0.9])})
    assert m.key_type == TensorProto.STRING and list(m.string_keys) == [b"a", b"bb"] and not m.keys
    back = numpy_helper.to_dict(m)
    np.testing.assert_equal(back, {b"a": np.array([0.1]), b"bb": np.array([0.9])})
    assert numpy_helper.from_dict(back) == m


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        ({0: np.array(0.1), 1.1: np.array(0.9)}, TypeError, None),  # differing key types
        ({"a": np.array(0.1), 1: np.array(0.9)}, TypeError, None),
        ({0: np.array(1), 1: np.array(0.9)}, TypeError, None),  # differing value types
        ({"a": np.array(0.1), b"a": np.array(0.9)}, ValueError, "not unique"),
        ({}, ValueError, None),
        ({1.5: np.array(1), 2.5: np.array(2)}, TypeError, "Unsupported map key type"),
    ],
)
def test_from_dict_refuses_like_onnx(value: dict, error: type, match: str | None) -> None:
    with pytest.raises(error, match=match):
        numpy_helper.from_dict(value)


def test_to_dict_mismatched_lengths() -> None:
    m = numpy_helper.from_dict({1: np.array(1.0), 2: np.array(2.0)})
    m.keys.append(3)
    with pytest.raises(IndexError, match="not the same"):
        numpy_helper.to_dict(m)


def test_from_list_dtype() -> None:
    assert numpy_helper.from_list([], dtype=SequenceProto.MAP).elem_type == SequenceProto.MAP
    assert numpy_helper.from_list([]).elem_type == SequenceProto.TENSOR


@pytest.mark.parametrize("dtype", list(OptionalProto.DataType.values()))
def test_optional_none_round_trip(dtype: int) -> None:
    optional = numpy_helper.from_optional(None, dtype=dtype)
    assert optional.elem_type == dtype and numpy_helper.to_optional(optional) is None


@pytest.mark.parametrize(
    "value",
    [np.array([], np.float32), np.array(0, np.int64), [], [np.array([1], np.float32)], {0: np.array([1], np.float32)}],
    ids=["empty", "scalar", "empty-list", "list", "dict"],
)
def test_optional_value_round_trip(value: object) -> None:
    back = numpy_helper.to_optional(numpy_helper.from_optional(value))
    assert back is not None
    np.testing.assert_equal(back, value)


def test_optional_nested_map_and_unsupported() -> None:
    empty = helper.make_map("m", TensorProto.INT64, [], numpy_helper.from_list([]))
    assert numpy_helper.to_optional(helper.make_optional("o", OptionalProto.MAP, empty)) == {}
    inner = numpy_helper.from_optional(np.array([1], np.float32))
    nested = helper.make_optional("outer", OptionalProto.OPTIONAL, inner)
    np.testing.assert_equal(numpy_helper.to_optional(nested), np.array([1], np.float32))
    with pytest.raises(TypeError, match="not supported"):
        numpy_helper.to_optional(OptionalProto(elem_type=999))


def test_from_array_object_of_int_is_refused() -> None:
    with pytest.raises(NotImplementedError, match="int"):
        numpy_helper.from_array(np.array([42], dtype=object))


ALL_TYPES = [t for t in onnx.TensorProto.DataType.values() if t not in (0, onnx.TensorProto.STRING)]


@pytest.mark.parametrize("data_type", ALL_TYPES, ids=lambda t: onnx.TensorProto.DataType.Name(t))
def test_to_array_from_array_round_trip_per_type(data_type: int) -> None:
    """onnx casts [0, 1, -2, 3] with its reference evaluator; make_tensor rounds the same way."""
    name = onnx.TensorProto.DataType.Name(data_type)
    values = [0, 1, 2, 3] if "UINT" in name else [0, 1, -2, 3]
    start = numpy_helper.to_array(helper.make_tensor("check", data_type, [4], values))
    tp = numpy_helper.from_array(start, name="check")
    assert tp.data_type == data_type
    back = numpy_helper.to_array(tp)
    assert back.shape == start.shape and back.dtype == start.dtype
    again = numpy_helper.from_array(back, name="check")
    assert again.SerializeToString() == tp.SerializeToString()
    assert tp.data_type == helper.np_dtype_to_tensor_dtype(back.dtype)


def test_to_float8e8m0_round_modes() -> None:
    x = np.array([1.0, 1.125, 1.25, 1.375, 1.5, 1.75], dtype=np.float32)
    up = numpy_helper.to_float8e8m0(x, round_mode="up").view(np.uint8)
    np.testing.assert_array_equal(up, [127, 128, 128, 128, 128, 128])
    down = numpy_helper.to_float8e8m0(x, round_mode="down").view(np.uint8)
    np.testing.assert_array_equal(down, [127] * 6)
    nearest = numpy_helper.to_float8e8m0(x, round_mode="nearest").view(np.uint8)
    np.testing.assert_array_equal(nearest, [127, 127, 127, 127, 128, 128])
    with pytest.raises(ValueError):
        numpy_helper.to_float8e8m0(np.array([1.0], np.float32), round_mode="bogus")


def test_to_float8e8m0_extremes() -> None:
    special = np.array([np.nan, np.inf, -np.inf], np.float32)
    for mode in ("up", "down", "nearest"):
        for saturate in (True, False):
            out = numpy_helper.to_float8e8m0(special, saturate=saturate, round_mode=mode).view(np.uint8)
            np.testing.assert_array_equal(out, [0xFF] * 3, err_msg=f"{mode} {saturate}")
    near_max = np.array([1.5 * 2.0**127], np.float32)
    assert numpy_helper.to_float8e8m0(near_max, saturate=True, round_mode="up").view(np.uint8)[0] == 0xFE
    assert numpy_helper.to_float8e8m0(near_max, saturate=False, round_mode="up").view(np.uint8)[0] == 0xFF


def test_to_float8e8m0_subnormals_and_float64() -> None:
    # later onnx releases changed subnormal and float64 inputs; onnx 1.23 (installed) is the reference
    sub = np.array([0x00400000, 0x00080000, 0x00400001], np.uint32).view(np.float32)
    for mode in ("up", "down", "nearest"):
        ours = numpy_helper.to_float8e8m0(sub, round_mode=mode).view(np.uint8)
        np.testing.assert_array_equal(ours, onnx_nh.to_float8e8m0(sub, round_mode=mode).view(np.uint8))
    below = np.array([0x380FFFFFFFFFFFFF], np.uint64).view(np.float64)
    for x in (below, below.astype(">f8"), np.array([1e39])):
        ours = numpy_helper.to_float8e8m0(x, round_mode="down").view(np.uint8)
        np.testing.assert_array_equal(ours, onnx_nh.to_float8e8m0(x, round_mode="down").view(np.uint8))


def test_tobytes_little_endian_and_random_int() -> None:
    assert numpy_helper.tobytes_little_endian(np.arange(3, dtype=">i4")) == np.arange(3, dtype="<i4").tobytes()
    state = np.random.get_state()[1].copy()
    a = numpy_helper.create_random_int((3, 4), np.int16, seed=3)
    np.testing.assert_array_equal(a, onnx_nh.create_random_int((3, 4), np.int16, seed=3))
    np.random.seed(int(state[0]))  # onnx's seeds the global generator; ours must not need this
    assert a.dtype == np.int16
    with pytest.raises(TypeError):
        numpy_helper.create_random_int((2,), np.float32)
    np.testing.assert_array_equal(numpy_helper.saturate_cast(np.array([300.4, -300.0]), np.int8), [127, -128])


@pytest.mark.parametrize(
    "data_type", [TensorProto.UINT4, TensorProto.INT4, TensorProto.FLOAT4E2M1, TensorProto.UINT2, TensorProto.INT2]
)
@pytest.mark.parametrize("field", ["raw_data", "int32_data"])
def test_sub_byte_payload_too_small(data_type: int, field: str) -> None:
    t = TensorProto(data_type=data_type, dims=[1000])
    if field == "raw_data":
        t.raw_data = b"\x00"
    else:
        t.int32_data.append(0)
    with pytest.raises(ValueError):
        numpy_helper.to_array(t)


def test_reshape_mismatch_hints_at_the_wrong_message_type() -> None:
    t = TensorProto(data_type=TensorProto.FLOAT, dims=[111, 112, 116, 95, 105, 110])
    with pytest.raises(ValueError, match="not actually a TensorProto"):
        numpy_helper.to_array(t)
