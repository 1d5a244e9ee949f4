"""onnx_light.onnx_core.numpy_helper against onnx.numpy_helper.

* ``to_array`` agrees with onnx on every TensorProto shipped in the onnx wheel's
  backend test data (read with OUR codec), element types numpy lacks compared as
  the documented bit patterns;
* ``raw_data`` comes back as a read-only view sharing memory with the tensor;
* ``from_array`` (and the sequence / map / optional helpers) write the same bytes.
"""

from __future__ import annotations

import glob
import os
from typing import Any

import numpy as np
import onnx
import onnx.numpy_helper as onnx_nh  # noqa: E402
import pytest

from onnx_light.onnx_core import _proto, helper, numpy_helper  # noqa: E402
from onnx_light.onnx_core._dtypes import BIT_PATTERN_TYPES as _BIT_PATTERN_TYPES  # noqa: E402
from onnx_light.onnx_core._errors import OnnxLightError  # noqa: E402

T = _proto.TensorProto
DATA = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")


def _tensor_files() -> list[str]:
    """The .pb files of the backend data whose model says they hold a TensorProto."""
    found = []
    for model_path in sorted(glob.glob(os.path.join(DATA, "**", "model.onnx"), recursive=True)):
        folder = os.path.dirname(model_path)
        try:
            graph = onnx.load(model_path, load_external_data=False).graph
        except Exception:  # noqa: BLE001  (a model onnx itself cannot read is not our concern)
            continue
        inits = {t.name for t in graph.initializer}
        kinds = {
            "input": [v.type.WhichOneof("value") for v in graph.input if v.name not in inits],
            "output": [v.type.WhichOneof("value") for v in graph.output],
        }
        for pb in sorted(glob.glob(os.path.join(folder, "test_data_set_*", "*.pb"))):
            stem = os.path.basename(pb)[:-3]
            kind, _, index = stem.partition("_")
            if kind in kinds and index.isdigit() and int(index) < len(kinds[kind]):
                if kinds[kind][int(index)] == "tensor_type":
                    found.append(pb)
    return found


TENSOR_FILES = _tensor_files()


def _as_comparable(theirs: np.ndarray, data_type: int) -> np.ndarray:
    """onnx's array (ml_dtypes for exotic types): ours has the same dtype (ml_dtypes is
    installed in the tests); the bit-pattern form is tested by ``_as_patterns``."""
    return theirs


def _as_patterns(theirs: np.ndarray, data_type: int) -> np.ndarray:
    """onnx's array (ml_dtypes for exotic types) in onnx-light's bit-pattern form."""
    if data_type in (T.INT4, T.INT2):
        return theirs.astype(np.int8)
    if data_type in (T.UINT4, T.UINT2):
        return theirs.astype(np.uint8)
    if data_type == T.BFLOAT16:
        return theirs.view(np.uint16)
    if data_type in _BIT_PATTERN_TYPES:
        return theirs.view(np.uint8)
    return theirs


def _assert_same(ours: np.ndarray, theirs: np.ndarray, data_type: int) -> None:
    expected = _as_comparable(theirs, data_type)
    assert ours.shape == expected.shape
    if data_type == T.STRING:
        assert ours.dtype == object
        assert ours.tolist() == expected.tolist()
        return
    assert ours.dtype == expected.dtype, (ours.dtype, expected.dtype)
    # bitwise, so -0.0 and NaN payloads count
    assert ours.tobytes() == np.ascontiguousarray(expected).tobytes()


def test_backend_data_was_found() -> None:
    # this wheel ships ~330 .pb files under backend/test/data, nearly all TensorProtos
    assert len(TENSOR_FILES) > 300


@pytest.mark.parametrize("path", TENSOR_FILES, ids=[os.path.relpath(p, DATA) for p in TENSOR_FILES])
def test_to_array_matches_onnx_on_backend_data(path: str) -> None:
    with open(path, "rb") as f:
        data = f.read()
    ours_tensor = T.FromString(data)
    theirs_tensor = onnx.TensorProto.FromString(data)
    ours = numpy_helper.to_array(ours_tensor)
    theirs = onnx_nh.to_array(theirs_tensor)
    _assert_same(ours, theirs, ours_tensor.data_type)
    if ours_tensor.HasField("raw_data") and ours.size and ours.dtype.itemsize * 8 == _bits(ours_tensor):
        assert not ours.flags.writeable
        assert np.shares_memory(ours, np.frombuffer(ours_tensor.raw_data, dtype=np.uint8))


def _bits(tensor: Any) -> int:
    from onnx_light.onnx_core import _dtypes

    return _dtypes.bits_per_element(tensor.data_type)


# ----------------------------------------------------------------------------
# zero copy
# ----------------------------------------------------------------------------
def test_to_array_is_a_read_only_view_of_large_raw_data() -> None:
    arr = np.arange(1000, dtype=np.float32).reshape(10, 100)
    data = onnx_nh.from_array(arr, "w").SerializeToString()
    tensor = T.FromString(data)
    assert isinstance(tensor.raw_data, memoryview)  # the codec kept a view of `data`
    out = numpy_helper.to_array(tensor)
    np.testing.assert_array_equal(out, arr)
    assert not out.flags.writeable
    assert np.shares_memory(out, np.frombuffer(data, dtype=np.uint8))
    with pytest.raises(ValueError):
        out[0, 0] = 1.0


def test_to_array_of_writable_buffer_is_still_read_only() -> None:
    buf = bytearray(np.arange(4, dtype=np.int32).tobytes())
    tensor = T(data_type=T.INT32, dims=[4], raw_data=memoryview(buf))
    out = numpy_helper.to_array(tensor)
    assert not out.flags.writeable
    assert np.shares_memory(out, np.frombuffer(buf, dtype=np.uint8))
    buf[0] = 9  # a view: the array sees the change
    assert out[0] == 9


def test_to_array_of_loaded_model_shares_the_mapped_file(tmp_path: Any) -> None:
    from onnx_light.onnx_core import load

    w = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 64])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 64])],
        [onnx_nh.from_array(w, "w")],
    )
    path = str(tmp_path / "m.onnx")
    onnx.save(onnx.helper.make_model(graph), path)
    model = load(path)
    out = numpy_helper.to_array(model.graph.initializer[0])
    np.testing.assert_array_equal(out, w)
    assert not out.flags.writeable
    assert np.shares_memory(out, np.frombuffer(model.graph.initializer[0].raw_data, dtype=np.uint8))


def test_typed_fields_give_fresh_writable_arrays() -> None:
    tensor = helper.make_tensor("t", T.FLOAT, [3], [1.0, 2.0, 3.0])
    out = numpy_helper.to_array(tensor)
    assert out.flags.writeable and out.dtype == np.float32


# ----------------------------------------------------------------------------
# every data type through the typed fields and raw_data
# ----------------------------------------------------------------------------
VALUES: dict[str, list[Any]] = {
    "FLOAT": [1.5, -2.0, 0.1, float("nan")],
    "DOUBLE": [1.5, -2.0, 0.1],
    "FLOAT16": [1.5, -2.0, 0.1, 65504.0],
    "BFLOAT16": [1.5, -2.0, 0.1, 3e38, -0.0],
    "FLOAT8E4M3FN": [1.5, -2.0, 0.1, 500.0, float("nan")],
    "FLOAT8E4M3FNUZ": [1.5, -2.0, 0.1, -0.0],
    "FLOAT8E5M2": [1.5, -2.0, 0.1, 1e6, float("inf")],
    "FLOAT8E5M2FNUZ": [1.5, -2.0, 0.1],
    "FLOAT8E8M0": [1.0, 2.0, 0.3, 1e20],
    "FLOAT4E2M1": [0.5, -1.5, 6.0, 3.1, -0.0],
    "FLOAT6E2M3": [0.5, -1.5, 7.5, 3.1],
    "FLOAT6E3M2": [0.5, -1.5, 28.0, 3.1],
    "INT4": [-8, -1, 0, 7, 3],
    "UINT4": [0, 15, 7],
    "INT2": [-2, -1, 0, 1, 1],
    "UINT2": [0, 3, 2],
    "INT8": [-128, 127, 0],
    "UINT8": [0, 255],
    "INT16": [-32768, 32767, -1],
    "UINT16": [0, 65535],
    "INT32": [-(2**31), 2**31 - 1],
    "INT64": [-(2**63), 2**63 - 1],
    "UINT32": [0, 2**32 - 1],
    "UINT64": [0, 2**64 - 1],
    "BOOL": [True, False, True],
    "COMPLEX64": [1 + 2j, -0.5j],
    "COMPLEX128": [1 + 2j, -0.5j],
    "STRING": ["a", "héllo", ""],
}


@pytest.mark.parametrize("name", sorted(VALUES))
@pytest.mark.parametrize("shape", ["flat", "matrix"])
def test_to_array_of_typed_fields_matches_onnx(name: str, shape: str) -> None:
    vals = VALUES[name]
    dims = [len(vals)] if shape == "flat" else [1, len(vals), 1]
    theirs_tensor = onnx.helper.make_tensor("t", getattr(onnx.TensorProto, name), dims, vals)
    ours_tensor = T.FromString(theirs_tensor.SerializeToString())
    _assert_same(numpy_helper.to_array(ours_tensor), onnx_nh.to_array(theirs_tensor), ours_tensor.data_type)
    if name != "STRING":
        patterns = numpy_helper.to_array(ours_tensor, bit_patterns=True)
        expected = _as_patterns(onnx_nh.to_array(theirs_tensor), ours_tensor.data_type)
        assert patterns.dtype == expected.dtype and patterns.tobytes() == np.ascontiguousarray(expected).tobytes()


@pytest.mark.parametrize("name", sorted(set(VALUES) - {"STRING"}))
def test_to_array_of_raw_data_matches_onnx(name: str) -> None:
    vals = VALUES[name]
    typed = onnx.helper.make_tensor("t", getattr(onnx.TensorProto, name), [len(vals)], vals)
    theirs_tensor = onnx_nh.from_array(onnx_nh.to_array(typed), "t")  # onnx's raw layout
    assert theirs_tensor.HasField("raw_data")
    ours_tensor = T.FromString(theirs_tensor.SerializeToString())
    ours = numpy_helper.to_array(ours_tensor)
    _assert_same(ours, onnx_nh.to_array(theirs_tensor), ours_tensor.data_type)
    assert not ours.flags.writeable


def test_to_array_errors() -> None:
    with pytest.raises(TypeError):
        numpy_helper.to_array(T(dims=[1]))
    with pytest.raises(ValueError, match="segment"):
        numpy_helper.to_array(T(data_type=T.FLOAT, segment=T.Segment(begin=0, end=1)))
    with pytest.raises(ValueError, match="raw_data"):
        numpy_helper.to_array(T(data_type=T.FLOAT, dims=[3], raw_data=b"\x00" * 8))
    with pytest.raises(ValueError):
        numpy_helper.to_array(T(data_type=T.INT4, dims=[5], raw_data=b"\x00"))


# ----------------------------------------------------------------------------
# external data
# ----------------------------------------------------------------------------
def _external(location: str, offset: int | None, length: int | None, dims: list[int]) -> T:
    entries = [_proto.StringStringEntryProto(key="location", value=location)]
    if offset is not None:
        entries.append(_proto.StringStringEntryProto(key="offset", value=str(offset)))
    if length is not None:
        entries.append(_proto.StringStringEntryProto(key="length", value=str(length)))
    return T(name="w", data_type=T.FLOAT, dims=dims, data_location=T.EXTERNAL, external_data=entries)


def test_external_data_read_only_and_matches_onnx(tmp_path: Any) -> None:
    arr = np.arange(12, dtype=np.float32)
    (tmp_path / "weights.bin").write_bytes(b"\xff" * 16 + arr.tobytes() + b"\xee" * 4)
    ours_tensor = _external("weights.bin", 16, 48, [3, 4])
    out = numpy_helper.to_array(ours_tensor, base_dir=str(tmp_path))
    np.testing.assert_array_equal(out, arr.reshape(3, 4))
    assert not out.flags.writeable
    theirs_tensor = onnx.TensorProto.FromString(ours_tensor.SerializeToString())
    np.testing.assert_array_equal(out, onnx_nh.to_array(theirs_tensor, base_dir=str(tmp_path)))
    # the tensor itself is left as it was
    assert ours_tensor.data_location == T.EXTERNAL and not ours_tensor.HasField("raw_data")


def test_external_data_whole_file_and_errors(tmp_path: Any) -> None:
    arr = np.arange(4, dtype=np.float32)
    (tmp_path / "w.bin").write_bytes(arr.tobytes())
    np.testing.assert_array_equal(numpy_helper.to_array(_external("w.bin", None, None, [4]), str(tmp_path)), arr)
    with pytest.raises(OnnxLightError, match="does not exist"):
        numpy_helper.to_array(_external("missing.bin", None, None, [4]), str(tmp_path))
    with pytest.raises(OnnxLightError, match="inside"):
        numpy_helper.to_array(_external("../w.bin", None, None, [4]), str(tmp_path / "sub"))
    with pytest.raises(OnnxLightError, match="outside"):
        numpy_helper.to_array(_external("w.bin", 8, 16, [4]), str(tmp_path))


# ----------------------------------------------------------------------------
# from_array
# ----------------------------------------------------------------------------
def _ml_arrays() -> list[tuple[str, Any]]:
    try:
        import ml_dtypes
    except ImportError:  # pragma: no cover
        return []
    out = []
    for name in ("bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu"):
        out.append((name, np.array([0.5, 1.0, 2.0, 4.0], dtype=np.float32).astype(getattr(ml_dtypes, name))))
    out.append(("int4", np.array([-8, -1, 0, 7, 3], dtype=ml_dtypes.int4)))
    out.append(("uint4", np.array([[0, 15, 7]], dtype=ml_dtypes.uint4)))
    out.append(("float4", np.array([0.5, -1.5, 6.0], np.float32).astype(ml_dtypes.float4_e2m1fn)))
    out.append(("int2", np.array([-2, 1, 0, 1, -1], dtype=ml_dtypes.int2)))
    return out


ARRAYS: list[tuple[str, Any]] = [
    ("float32", np.arange(6, dtype=np.float32).reshape(2, 3)),
    ("float64", np.linspace(0, 1, 5)),
    ("float16", np.array([1.5, -0.0, np.inf], dtype=np.float16)),
    ("int8", np.array([-128, 127], dtype=np.int8)),
    ("uint8", np.array([[1, 2], [3, 4]], dtype=np.uint8)),
    ("int16", np.array([-3, 3], dtype=np.int16)),
    ("uint16", np.array([65535], dtype=np.uint16)),
    ("int32", np.array([-(2**31)], dtype=np.int32)),
    ("int64", np.arange(5, dtype=np.int64)),
    ("uint32", np.array([2**32 - 1], dtype=np.uint32)),
    ("uint64", np.array([2**64 - 1], dtype=np.uint64)),
    ("bool", np.array([True, False])),
    ("complex64", np.array([1 + 2j], dtype=np.complex64)),
    ("complex128", np.array([1 + 2j, 3j], dtype=np.complex128)),
    ("scalar", np.array(3.5, dtype=np.float32)),
    ("empty", np.zeros((0, 4), dtype=np.float32)),
    ("non-contiguous", np.arange(12, dtype=np.int32).reshape(3, 4)[:, ::2]),
    ("fortran", np.asfortranarray(np.arange(6, dtype=np.float64).reshape(2, 3))),
    ("unicode", np.array(["a", "héllo", ""])),
    ("object-str", np.array(["x", "yy"], dtype=object).reshape(2, 1)),
    ("object-bytes", np.array([b"\x00a", b"b"], dtype=object)),
    *_ml_arrays(),
]


@pytest.mark.parametrize("arr", [a for _, a in ARRAYS], ids=[i for i, _ in ARRAYS])
@pytest.mark.parametrize("name", [None, "", "t"])
def test_from_array_bytes_identical_to_onnx(arr: np.ndarray, name: str | None) -> None:
    ours = numpy_helper.from_array(arr, name)
    theirs = onnx_nh.from_array(arr, name)
    assert ours.SerializeToString() == theirs.SerializeToString()
    # and back
    _assert_same(numpy_helper.to_array(ours), onnx_nh.to_array(theirs), ours.data_type)


def test_from_array_big_endian_is_stored_little_endian() -> None:
    ours = numpy_helper.from_array(np.arange(3, dtype=">i4"), "t")
    assert ours.SerializeToString() == onnx_nh.from_array(np.arange(3, dtype="<i4"), "t").SerializeToString()


def test_dict_with_string_keys_round_trips() -> None:
    # onnx 1.23's from_dict fails on str keys; later onnx returns them as bytes, as onnx's to_dict does
    proto = numpy_helper.from_dict({"a": np.arange(2), "b": np.arange(3)}, "d")
    assert proto.key_type == T.STRING and proto.string_keys == [b"a", b"b"]
    back = numpy_helper.to_dict(_proto.MapProto.FromString(proto.SerializeToString()))
    assert list(back) == [b"a", b"b"] and back[b"b"].tolist() == [0, 1, 2]


def test_from_array_rejects_odd_objects() -> None:
    with pytest.raises(NotImplementedError):
        numpy_helper.from_array(np.array([1, "a"], dtype=object))
    with pytest.raises(ValueError):
        numpy_helper.from_array(np.array(["2020-01-01"], dtype="datetime64[D]"))


def test_make_tensor_raw_bit_patterns_match_onnx() -> None:
    import ml_dtypes

    vals = np.array([0.5, -1.0, 3.0, 448.0], dtype=np.float32)
    for dt, mld in ((T.BFLOAT16, ml_dtypes.bfloat16), (T.FLOAT8E4M3FN, ml_dtypes.float8_e4m3fn)):
        theirs = onnx.helper.make_tensor("t", dt, [4], vals.astype(mld), raw=True)
        store = np.uint16 if dt == T.BFLOAT16 else np.uint8
        ours = helper.make_tensor("t", dt, [4], vals.astype(mld).view(store), raw=True)
        assert ours.SerializeToString() == theirs.SerializeToString()
    int4 = np.array([-8, -1, 0, 7, 3], dtype=np.int8)
    theirs = onnx.helper.make_tensor("t", T.INT4, [5], int4.astype(ml_dtypes.int4), raw=True)
    ours = helper.make_tensor("t", T.INT4, [5], int4, raw=True)
    assert ours.SerializeToString() == theirs.SerializeToString()
    wide = helper.make_tensor("t", T.INT4, [5], int4.astype(np.int64), raw=True)
    assert wide.SerializeToString() == theirs.SerializeToString()
    np.testing.assert_array_equal(numpy_helper.to_array(ours), int4)


# ----------------------------------------------------------------------------
# sequences, maps, optionals
# ----------------------------------------------------------------------------
CONTAINERS: list[tuple[str, Any]] = [
    ("list-tensors", lambda nh: nh.from_list([np.arange(3, dtype=np.int64), np.ones((2, 2), np.float32)], "s")),
    ("list-of-lists", lambda nh: nh.from_list([[np.arange(2)], [np.zeros(1)]])),
    ("dict-int", lambda nh: nh.from_dict({1: np.float32(1.0), 2: np.float32(2.0)})),
    ("optional-tensor", lambda nh: nh.from_optional(np.arange(3), "o")),
    ("optional-none", lambda nh: nh.from_optional(None, "o")),
    ("optional-list", lambda nh: nh.from_optional([np.arange(2)])),
]


@pytest.mark.parametrize("call", [c for _, c in CONTAINERS], ids=[i for i, _ in CONTAINERS])
def test_containers_bytes_identical_to_onnx(call: Any) -> None:
    ours, theirs = call(numpy_helper), call(onnx_nh)
    assert ours.SerializeToString() == theirs.SerializeToString()
    back = {
        _proto.SequenceProto: (numpy_helper.to_list, onnx_nh.to_list),
        _proto.MapProto: (numpy_helper.to_dict, onnx_nh.to_dict),
        _proto.OptionalProto: (numpy_helper.to_optional, onnx_nh.to_optional),
    }[type(ours)]
    assert repr(back[0](ours)) == repr(back[1](theirs))
