"""Files that cannot be torn: external data pairs, permissions, stale temporary files (issue 14 §4)."""

from __future__ import annotations

import os
import pathlib
from typing import Any

import numpy as np
import pytest

import onnx_light as ol
from onnx_light import helper, numpy_helper
from onnx_light.onnx_core import _io


def _model(value: float, names: tuple[str, ...] = ("w",)) -> ol.ModelProto:
    inits = [numpy_helper.from_array(np.full((64, 64), value, np.float32), n) for n in names]
    nodes = [helper.make_node("Identity", [n], [f"out_{i}"]) for i, n in enumerate(names)]
    outs = [helper.make_tensor_value_info(f"out_{i}", ol.TensorProto.FLOAT, [64, 64]) for i in range(len(names))]
    graph = helper.make_graph(nodes, "g", [], outs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _weights(path: pathlib.Path) -> dict[str, float]:
    model = ol.load(path)
    return {t.name: float(numpy_helper.to_array(t)[0, 0]) for t in model.graph.initializer}


def _save(model: ol.ModelProto, path: pathlib.Path, **kw: Any) -> None:
    ol.save(model, path, save_as_external_data=True, size_threshold=0, **kw)


def test_a_failed_model_write_keeps_the_old_pair(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.onnx"
    _save(_model(1.0), path)
    before = sorted(os.listdir(tmp_path))
    real_replace = os.replace

    def crash_on_model(src: str, dst: str) -> None:
        if os.path.basename(dst) == "m.onnx":
            raise OSError("killed while replacing the model")
        real_replace(src, dst)

    monkeypatch.setattr(_io.os, "replace", crash_on_model)
    with pytest.raises(OSError, match="killed"):
        _save(_model(2.0), path)
    monkeypatch.undo()
    assert _weights(path) == {"w": 1.0}  # the old model reads its old data, not the new
    assert sorted(os.listdir(tmp_path)) == before  # and nothing new is left behind


def test_a_resave_replaces_the_pair_and_removes_the_old_data(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "m.onnx"
    _save(_model(1.0), path)
    loaded = ol.load(path)  # zero-copy views of the data file being replaced
    _save(loaded, path)
    assert _weights(path) == {"w": 1.0}
    _save(_model(3.0), path)
    assert _weights(path) == {"w": 3.0}
    files = sorted(os.listdir(tmp_path))
    assert len(files) == 2 and "m.onnx" in files, files  # one model, one data file


def test_a_tensor_named_like_the_model_cannot_overwrite_it(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "m.onnx"
    _save(_model(5.0, ("m.onnx", "a/b", "a_b")), path, all_tensors_to_one_file=False)
    assert _weights(path) == {"m.onnx": 5.0, "a/b": 5.0, "a_b": 5.0}  # two names sanitise alike, too
    with pytest.raises(ol.OnnxLightError, match="model file itself"):
        _save(_model(1.0), path, location="m.onnx")


def test_stale_temporary_files_are_not_data(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "m.onnx"
    stale = tmp_path / ".m.onnx.data.k1ll3d.tmp"
    stale.write_bytes(b"half a save")
    _save(_model(4.0), path)
    entries = {e.key: e.value for e in ol.load(path, load_external_data=False).graph.initializer[0].external_data}
    assert entries["location"] == "m.onnx.data" and _weights(path) == {"w": 4.0}
    assert stale.read_bytes() == b"half a save"


def test_permissions_kept_and_umask_honoured(tmp_path: pathlib.Path) -> None:
    old = os.umask(0o027)
    try:
        fresh = tmp_path / "new.onnx"
        ol.save(_model(1.0), fresh)
        assert fresh.stat().st_mode & 0o777 == 0o640  # 0o666 minus the umask, as open() gives
        os.chmod(fresh, 0o604)
        ol.save(_model(2.0), fresh)
        assert fresh.stat().st_mode & 0o777 == 0o604
        _save(_model(1.0), tmp_path / "ext.onnx")
        assert (tmp_path / "ext.onnx.data").stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(old)
