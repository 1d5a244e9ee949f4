"""Loading and saving: memory-mapped zero-copy reads, atomic writes, external data."""

from __future__ import annotations

import io
import mmap
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import onnx_light.onnx_core as oc
from onnx_light.onnx_core import _io

# every test here runs with the native codec and with the pure-Python twin (conftest.py)
pytestmark = pytest.mark.usefixtures("codec")

H = onnx.helper


def _weights(n: int = 3, size: int = 4096, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {f"w{i}": rng.standard_normal(size).astype(np.float32) for i in range(n)}


def _onnx_model(weights: dict[str, np.ndarray], small: bool = True) -> onnx.ModelProto:
    """A model whose initializers are ``weights`` (+ one tiny tensor under any threshold)."""
    inits = [numpy_helper.from_array(v, k) for k, v in weights.items()]
    if small:
        inits.append(numpy_helper.from_array(np.array([1.0, 2.0], np.float32), "tiny"))
    nodes = [H.make_node("Identity", [k], [k + "_out"]) for k in weights]
    outputs = [H.make_tensor_value_info(k + "_out", onnx.TensorProto.FLOAT, None) for k in weights]
    graph = H.make_graph(nodes, "g", [], outputs, inits)
    return H.make_model(graph, opset_imports=[H.make_opsetid("", 17)])


def _arrays(model: Any) -> dict[str, np.ndarray]:
    """Initializer values of our model, read from raw_data without copying."""
    out = {}
    for t in model.graph.initializer:
        assert t.data_type == oc.TensorProto.FLOAT
        out[t.name] = np.frombuffer(t.raw_data, dtype=np.float32).reshape(tuple(t.dims))
    return out


def _onnx_arrays(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def _assert_same_arrays(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert sorted(a) == sorted(b)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def _listing(folder: Any) -> list[str]:
    return sorted(os.listdir(folder))


@pytest.fixture
def model_file(tmp_path: Any) -> tuple[str, dict[str, np.ndarray], bytes]:
    weights = _weights()
    model = _onnx_model(weights)
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    with open(path, "rb") as f:
        data = f.read()
    return path, weights, data


# ----------------------------------------------------------------------------
# loading
# ----------------------------------------------------------------------------
def test_load_from_path_is_zero_copy(model_file: Any) -> None:
    path, weights, data = model_file
    model = oc.load(path)
    tensor = model.graph.initializer[0]
    raw = tensor.raw_data
    assert isinstance(raw, memoryview)
    assert isinstance(raw.obj, mmap.mmap), "raw_data should be a view of the mapped file"
    assert raw.readonly
    arr = np.frombuffer(raw, dtype=np.float32)
    assert not arr.flags.writeable
    assert not arr.flags.owndata
    with pytest.raises(ValueError):
        arr[0] = 1.0
    _assert_same_arrays(_arrays(model), {**weights, "tiny": np.array([1, 2], np.float32)})
    assert model.SerializeToString() == data


def test_load_accepts_pathlike_and_str(model_file: Any, tmp_path: Any) -> None:
    path, _, data = model_file
    assert oc.load(tmp_path / "m.onnx").SerializeToString() == data
    assert oc.load_model(path).SerializeToString() == data


@pytest.mark.parametrize("opener", ["open", "bytesio"])
def test_load_from_file_object(model_file: Any, opener: str) -> None:
    path, weights, data = model_file
    if opener == "open":
        with open(path, "rb") as f:
            model = oc.load(f)
    else:
        model = oc.load(io.BytesIO(data))
    assert model.SerializeToString() == data
    assert np.array_equal(_arrays(model)["w1"], weights["w1"])


def test_load_from_string_and_tensor(tmp_path: Any) -> None:
    x = np.arange(12, dtype=np.int64).reshape(3, 4)
    t = numpy_helper.from_array(x, "x")
    path = str(tmp_path / "x.pb")
    onnx.save_tensor(t, path)
    ours = oc.load_tensor(path)
    assert ours.name == "x" and list(ours.dims) == [3, 4]
    np.testing.assert_array_equal(np.frombuffer(ours.raw_data, np.int64).reshape(3, 4), x)
    assert oc.load_tensor_from_string(t.SerializeToString()) == ours
    model = _onnx_model(_weights(1))
    assert oc.load_model_from_string(model.SerializeToString()).SerializeToString() == (model.SerializeToString())


def test_load_empty_file(tmp_path: Any) -> None:
    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    assert oc.load(str(path)) == oc.ModelProto()


def test_load_garbage_raises_decode_error(tmp_path: Any) -> None:
    path = tmp_path / "bad.onnx"
    path.write_bytes(b"\x0a\xff\xff\xff\x0f" + b"x" * 10)
    with pytest.raises(oc.DecodeError) as err:
        oc.load(str(path))
    assert err.value.offset == 0
    assert "ModelProto" in str(err.value)


# ----------------------------------------------------------------------------
# saving
# ----------------------------------------------------------------------------
def test_save_matches_onnx_bytes(model_file: Any, tmp_path: Any) -> None:
    path, _, data = model_file
    out = str(tmp_path / "out.onnx")
    oc.save(oc.load(path), out)
    with open(out, "rb") as f:
        assert f.read() == data
    buf = io.BytesIO()
    oc.save_model(oc.load(path), buf)
    assert buf.getvalue() == data
    assert _listing(tmp_path) == ["m.onnx", "out.onnx"]


def test_save_over_the_file_it_was_loaded_from(model_file: Any) -> None:
    # the mapped file is replaced by rename, so the views stay valid while writing
    path, weights, data = model_file
    model = oc.load(path)
    model.producer_name = "again"
    oc.save(model, path)
    again = onnx.load(path)
    assert again.producer_name == "again"
    _assert_same_arrays(_onnx_arrays(again), {**weights, "tiny": np.array([1, 2], np.float32)})


class _Interrupted(Exception):
    pass


def _interrupting(after: int, exc: type[BaseException]) -> Any:
    """An ``encode_pieces`` that yields ``after`` pieces (at most all but the last) and then raises ``exc``.

    The native encoder joins small fields into few pieces, so the cut comes at the
    last piece when there are fewer than ``after``.
    """
    real = _io.encode_pieces

    def fake(msg: Any) -> tuple[Iterator[Any], int]:
        pieces, n = real(msg)
        cut = min(after, len(pieces) - 1)

        def gen() -> Iterator[Any]:
            for i, piece in enumerate(pieces):
                if i == cut:
                    raise exc("power cut")
                yield piece

        return gen(), n

    return fake


@pytest.mark.parametrize("exc", [_Interrupted, KeyboardInterrupt])
def test_interrupted_save_keeps_old_file(model_file: Any, monkeypatch: Any, exc: Any) -> None:
    path, _, data = model_file
    folder = os.path.dirname(path)
    before = _listing(folder)
    model = oc.load(path)
    model.graph.name = "new"
    monkeypatch.setattr(_io, "encode_pieces", _interrupting(3, exc))
    with pytest.raises(exc):
        oc.save(model, path)
    with open(path, "rb") as f:
        assert f.read() == data
    assert _listing(folder) == before, "temporary files were left behind"


def test_interrupted_fsync_keeps_old_file(model_file: Any, monkeypatch: Any) -> None:
    path, _, data = model_file
    folder = os.path.dirname(path)

    def broken_fsync(fd: int) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(_io.os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="disk full"):
        oc.save(oc.ModelProto(ir_version=3), path)
    with open(path, "rb") as f:
        assert f.read() == data
    assert _listing(folder) == ["m.onnx"]


def test_interrupted_external_data_save_keeps_old_files(tmp_path: Any, monkeypatch: Any) -> None:
    weights = _weights()
    path = str(tmp_path / "m.onnx")
    onnx.save(_onnx_model(weights), path, save_as_external_data=True, location="m.data", size_threshold=0)
    before = {name: (tmp_path / name).read_bytes() for name in _listing(tmp_path)}
    model = oc.load(path)
    model.graph.name = "new"
    monkeypatch.setattr(_io, "encode_pieces", _interrupting(2, _Interrupted))
    with pytest.raises(_Interrupted):
        oc.save(model, path, save_as_external_data=True, location="m.data", size_threshold=0)
    assert {name: (tmp_path / name).read_bytes() for name in _listing(tmp_path)} == before


# ----------------------------------------------------------------------------
# external data
# ----------------------------------------------------------------------------
def _external_entries(model: onnx.ModelProto) -> dict[str, dict[str, str]]:
    return {
        t.name: {e.key: e.value for e in t.external_data}
        for t in model.graph.initializer
        if t.data_location == onnx.TensorProto.EXTERNAL
    }


def test_external_one_file_read_by_onnx(tmp_path: Any) -> None:
    weights = _weights()
    model = oc.ModelProto.FromString(_onnx_model(weights).SerializeToString())
    path = str(tmp_path / "m.onnx")
    oc.save(model, path, save_as_external_data=True, location="weights.bin", size_threshold=1024)
    assert _listing(tmp_path) == ["m.onnx", "weights.bin"]
    theirs = onnx.load(path, load_external_data=False)
    entries = _external_entries(theirs)
    assert sorted(entries) == ["w0", "w1", "w2"], "tiny stays inside under size_threshold"
    assert {e["location"] for e in entries.values()} == {"weights.bin"}
    offsets = sorted(int(e["offset"]) for e in entries.values())
    assert all(o % _io.EXTERNAL_ALIGNMENT == 0 for o in offsets)
    onnx.load_external_data_for_model(theirs, str(tmp_path))
    expected = {**weights, "tiny": np.array([1, 2], np.float32)}
    _assert_same_arrays(_onnx_arrays(theirs), expected)
    _assert_same_arrays(_arrays(oc.load(path)), expected)


def test_external_one_file_per_tensor(tmp_path: Any) -> None:
    weights = _weights()
    model = oc.ModelProto.FromString(_onnx_model(weights).SerializeToString())
    path = str(tmp_path / "m.onnx")
    oc.save(model, path, save_as_external_data=True, all_tensors_to_one_file=False, size_threshold=0)
    entries = _external_entries(onnx.load(path, load_external_data=False))
    assert sorted(entries) == ["tiny", "w0", "w1", "w2"], "size_threshold=0 moves every tensor"
    assert len({e["location"] for e in entries.values()}) == 4
    assert _listing(tmp_path) == sorted(["m.onnx", *(e["location"] for e in entries.values())])
    expected = {**weights, "tiny": np.array([1, 2], np.float32)}
    _assert_same_arrays(_onnx_arrays(onnx.load(path)), expected)
    _assert_same_arrays(_arrays(oc.load(path)), expected)


def test_external_default_location(tmp_path: Any) -> None:
    model = oc.ModelProto.FromString(_onnx_model(_weights(1)).SerializeToString())
    oc.save(model, str(tmp_path / "m.onnx"), save_as_external_data=True)
    assert _listing(tmp_path) == ["m.onnx", "m.onnx.data"]


def test_external_size_threshold_keeps_everything_inside(tmp_path: Any) -> None:
    model = oc.ModelProto.FromString(_onnx_model(_weights(2, size=16)).SerializeToString())
    path = str(tmp_path / "m.onnx")
    oc.save(model, path, save_as_external_data=True, size_threshold=1 << 20)
    assert _external_entries(onnx.load(path, load_external_data=False)) == {}
    assert oc.load(path) == model


@pytest.mark.parametrize("one_file", [True, False])
def test_external_written_by_onnx_read_by_us(tmp_path: Any, one_file: bool) -> None:
    weights = _weights()
    path = str(tmp_path / "m.onnx")
    onnx.save_model(
        _onnx_model(weights),
        path,
        save_as_external_data=True,
        all_tensors_to_one_file=one_file,
        location="data.bin" if one_file else None,
        size_threshold=1024,
    )
    ours = oc.load(path)
    assert all(t.data_location == oc.TensorProto.DEFAULT for t in ours.graph.initializer)
    assert all(not t.external_data for t in ours.graph.initializer)
    _assert_same_arrays(_arrays(ours), {**weights, "tiny": np.array([1, 2], np.float32)})
    # without loading: the references are there as onnx wrote them
    refs = oc.load(path, load_external_data=False)
    assert refs.SerializeToString() == onnx.load(path, load_external_data=False).SerializeToString()
    # and after a resave by us, onnx still reads the same values
    out = str(tmp_path / "again.onnx")
    oc.save(ours, out)
    _assert_same_arrays(_onnx_arrays(onnx.load(out)), _onnx_arrays(onnx.load(path)))


def test_save_with_external_data_does_not_mutate_caller_model(tmp_path: Any) -> None:
    model = oc.ModelProto.FromString(_onnx_model(_weights()).SerializeToString())
    before = model.SerializeToString()
    raw_before = [t.raw_data for t in model.graph.initializer]
    oc.save(model, str(tmp_path / "m.onnx"), save_as_external_data=True, size_threshold=0)
    assert model.SerializeToString() == before
    for t, raw in zip(model.graph.initializer, raw_before):
        assert t.raw_data is raw
        assert not t.HasField("data_location") and not t.external_data


@pytest.mark.parametrize("location", ["../outside.bin", "/tmp/abs.bin", "sub/../../x.bin"])
def test_save_rejects_location_outside_folder(tmp_path: Any, location: str) -> None:
    model = oc.ModelProto.FromString(_onnx_model(_weights(1)).SerializeToString())
    folder = tmp_path / "model"
    folder.mkdir()
    with pytest.raises(oc.OnnxLightError, match="location"):
        oc.save(model, str(folder / "m.onnx"), save_as_external_data=True, location=location)
    assert _listing(folder) == []
    assert _listing(tmp_path) == ["model"]


def _model_with_reference(tmp_path: Any, entries: dict[str, str], data: bytes = b"\0" * 64) -> str:
    folder = tmp_path / "model"
    folder.mkdir(exist_ok=True)
    (folder / "data.bin").write_bytes(data)
    (tmp_path / "secret.bin").write_bytes(b"\1" * 64)
    tensor = onnx.TensorProto(name="w", data_type=onnx.TensorProto.FLOAT, dims=[4])
    tensor.data_location = onnx.TensorProto.EXTERNAL
    for k, v in entries.items():
        tensor.external_data.add(key=k, value=v)
    graph = H.make_graph([], "g", [], [], [tensor])
    path = str(folder / "m.onnx")
    with open(path, "wb") as f:
        f.write(H.make_model(graph).SerializeToString())
    return path


@pytest.mark.parametrize("location", ["../secret.bin", "sub/../../secret.bin", "/etc/hostname", ""])
def test_load_rejects_location_outside_folder(tmp_path: Any, location: str) -> None:
    path = _model_with_reference(tmp_path, {"location": location})
    with pytest.raises(oc.OnnxLightError, match="location") as err:
        oc.load(path)
    assert "'w'" in str(err.value), "the error names the tensor"


def test_load_missing_external_file(tmp_path: Any) -> None:
    path = _model_with_reference(tmp_path, {"location": "nope.bin"})
    with pytest.raises(oc.OnnxLightError, match="does not exist"):
        oc.load(path)


@pytest.mark.parametrize(
    "entries",
    [
        {"location": "data.bin", "offset": "60", "length": "16"},
        {"location": "data.bin", "offset": "65"},
        {"location": "data.bin", "offset": "0", "length": "65"},
        {"location": "data.bin", "offset": str(1 << 62), "length": "16"},
        {"location": "data.bin", "offset": "-8", "length": "16"},
    ],
)
def test_load_external_range_past_eof(tmp_path: Any, entries: dict[str, str]) -> None:
    path = _model_with_reference(tmp_path, entries)
    with pytest.raises(oc.DecodeError, match="outside"):
        oc.load(path)


def test_load_external_range_inside(tmp_path: Any) -> None:
    data = np.arange(16, dtype=np.float32).tobytes()
    path = _model_with_reference(tmp_path, {"location": "data.bin", "offset": "16", "length": "16"}, data)
    w = oc.load(path).graph.initializer[0]
    np.testing.assert_array_equal(np.frombuffer(w.raw_data, np.float32), [4, 5, 6, 7])


def test_load_without_external_data_keeps_references(tmp_path: Any) -> None:
    path = _model_with_reference(tmp_path, {"location": "../secret.bin"})
    w = oc.load(path, load_external_data=False).graph.initializer[0]
    assert w.data_location == oc.TensorProto.EXTERNAL
    assert {e.key: e.value for e in w.external_data} == {"location": "../secret.bin"}


# ----------------------------------------------------------------------------
# over 2 GiB (run by hand: pytest -m slow)
# ----------------------------------------------------------------------------
@pytest.mark.slow
def test_external_data_over_2gib(tmp_path: Any) -> None:
    chunk = 720 << 20  # 4 x 720 MiB = 2.8 GiB; the last one starts past 2 GiB
    names = ["a", "b", "c", "d"]
    model = oc.ModelProto(ir_version=8)
    model.opset_import.append(oc.OperatorSetIdProto(domain="", version=17))
    buffers = []
    for i, name in enumerate(names):
        buf = np.full(chunk, i + 1, dtype=np.uint8)
        buf[-1] = 100 + i
        buffers.append(buf)
        t = oc.TensorProto(name=name, data_type=oc.TensorProto.UINT8, dims=[chunk])
        t.raw_data = memoryview(buf)
        model.graph.initializer.append(t)
    path = str(tmp_path / "big.onnx")
    oc.save(model, path, save_as_external_data=True, location="big.data")
    assert os.path.getsize(tmp_path / "big.data") > 2 << 30
    assert _listing(tmp_path) == ["big.data", "big.onnx"]
    assert os.path.getsize(path) < 4096
    del buffers
    loaded = oc.load(path)
    assert [t.name for t in loaded.graph.initializer] == names
    for i, t in enumerate(loaded.graph.initializer):
        assert len(t.raw_data) == chunk
        assert t.raw_data[0] == i + 1 and t.raw_data[-1] == 100 + i
    # the last tensor starts past 2^31: offsets are 64-bit clean
    refs = oc.load(path, load_external_data=False).graph.initializer
    assert int({e.key: e.value for e in refs[3].external_data}["offset"]) > 1 << 31
    # onnx reads the references the same way
    theirs = onnx.load(path, load_external_data=False)
    assert [t.name for t in theirs.graph.initializer] == names
