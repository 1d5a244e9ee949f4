"""The checkpoint file: onnxruntime's format, atomic saves, clear errors on a mismatch."""

from __future__ import annotations

import importlib
import importlib.util
import pathlib
import signal
import subprocess
import sys
import textwrap
import time
from typing import Any

import numpy as np
import pytest

from onnx_light import training as olt

DATA = pathlib.Path(__file__).resolve().parent / "data"
REPO = pathlib.Path(__file__).resolve().parents[2]


def _state() -> olt.CheckpointState:
    s = olt.CheckpointState()
    s.parameters["w"] = olt.Parameter("w", np.arange(6, dtype=np.float32).reshape(2, 3))
    s.parameters["bn.running_mean"] = olt.Parameter("bn.running_mean", np.ones(3, np.float32), requires_grad=False)
    s.optimizer_states["w.exp_avg"] = np.full((2, 3), 0.5, np.float32)
    s.optimizer_states["w.exp_avg_sq"] = np.full((2, 3), 0.25, np.float32)
    s.optimizer_step = 7
    s.learning_rate = 0.125
    s.properties.update({"epoch": 3, "best": 0.5, "note": "hello"})
    return s


def test_round_trip(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "ck"
    olt.CheckpointState.save_checkpoint(_state(), path)
    s = olt.CheckpointState.load_checkpoint(path)
    assert s.parameters["w"].requires_grad and not s.parameters["bn.running_mean"].requires_grad
    np.testing.assert_array_equal(s.parameters["w"].data, np.arange(6, dtype=np.float32).reshape(2, 3))
    np.testing.assert_array_equal(s.optimizer_states["w.exp_avg_sq"], np.full((2, 3), 0.25, np.float32))
    assert (s.optimizer_step, s.learning_rate) == (7, 0.125)
    assert s.properties == {"epoch": 3, "best": 0.5, "note": "hello"}


ODD = {
    "scalar": np.array(3.5, np.float32),  # was read back as shape (1,)
    "empty": np.zeros((0, 3), np.float32),
    "half": np.arange(6, dtype=np.float16).reshape(3, 2),
    "steps": np.arange(5, dtype=np.int64),
    "n" * 300: np.ones(4, np.float32),
    "double/x:0": np.full((2, 2), 0.25),
}


@pytest.mark.parametrize("name", list(ODD), ids=lambda n: n[:12])
def test_odd_tensors_round_trip(tmp_path: pathlib.Path, name: str) -> None:
    s = olt.CheckpointState()
    s.parameters[name] = olt.Parameter(name, ODD[name], requires_grad=ODD[name].dtype.kind == "f")
    s.optimizer_states[f"{name}.exp_avg"] = ODD[name]
    olt.CheckpointState.save_checkpoint(s, tmp_path / "ck")
    back = olt.CheckpointState.load_checkpoint(tmp_path / "ck")
    for got in (back.parameters[name].data, back.optimizer_states[f"{name}.exp_avg"]):
        assert (got.dtype, got.shape) == (ODD[name].dtype, ODD[name].shape)
        np.testing.assert_array_equal(got, ODD[name])


def _ort_bindings(monkeypatch: pytest.MonkeyPatch) -> object:
    """onnxruntime's generated checkpoint bindings, imported without importing onnxruntime."""
    spec = importlib.util.find_spec("onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("onnxruntime is not installed")
    folder = pathlib.Path(list(spec.submodule_search_locations)[0]) / "tools" / "ort_format_model"
    if not (folder / "ort_flatbuffers_py" / "fbs" / "Checkpoint.py").exists():
        pytest.skip("this onnxruntime wheel ships no checkpoint bindings")
    monkeypatch.syspath_prepend(str(folder))  # the bindings import each other as ort_flatbuffers_py.fbs
    return importlib.import_module("ort_flatbuffers_py.fbs.Checkpoint")


def test_onnxruntime_bindings_read_our_file(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """onnxruntime's generated FlatBuffers classes (a reference reader) see our tensors."""
    fbs: Any = _ort_bindings(monkeypatch)
    path = tmp_path / "ck"
    olt.CheckpointState.save_checkpoint(_state(), path)
    buf = path.read_bytes()
    assert fbs.Checkpoint.CheckpointBufferHasIdentifier(buf, 0)
    ck = fbs.Checkpoint.GetRootAs(buf, 0)
    assert ck.Version() == 2
    ms = ck.ModuleState()
    t = ms.RequiresGradParams(0)
    assert t.Name() == b"w" and list(t.DimsAsNumpy()) == [2, 3] and t.DataType() == 1
    np.testing.assert_array_equal(t.RawDataAsNumpy().view(np.float32), np.arange(6, dtype=np.float32))
    assert ms.FrozenParams(0).Name() == b"bn.running_mean"
    group = ck.OptimizerGroups(0)
    assert group.Step() == 7 and group.InitialLearningRate() == 0.125
    st = group.OptimizerStates(0)
    assert st.ParamName() == b"w"
    assert sorted(st.Momentums(j).Name() for j in range(st.MomentumsLength())) == [b"momentum0", b"momentum1"]
    bag = ck.PropertyBag()
    assert bag.Ints(0).Name() == b"epoch" and bag.Ints(0).Value() == 3
    assert bag.Strings(0).Value() == b"hello"


@pytest.mark.parametrize("cut", [0, 3, 8, 40, -9])
def test_truncated_file_is_a_clear_error(tmp_path: pathlib.Path, cut: int) -> None:
    path = tmp_path / "ck"
    olt.CheckpointState.save_checkpoint(_state(), path)
    data = path.read_bytes()
    path.write_bytes(data[:cut] if cut >= 0 else data[:cut])
    with pytest.raises(olt.CheckpointError):
        olt.CheckpointState.load_checkpoint(path)


_SAVER = textwrap.dedent(
    """
    import os, sys, numpy as np
    from onnx_light import training as olt
    s = olt.CheckpointState()
    s.parameters["w"] = olt.Parameter("w", np.full(8_000_000, 2.0, np.float32))
    olt.CheckpointState.save_checkpoint(s, sys.argv[1])
    print("ready", os.path.getsize(sys.argv[1]), flush=True)
    while True:
        olt.CheckpointState.save_checkpoint(s, sys.argv[1])
    """
)


def _kill_mid_write(proc: subprocess.Popen[bytes], folder: pathlib.Path, full: int) -> bool:
    """SIGKILLs ``proc`` the moment some file in ``folder`` is partly written (True if seen)."""
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline:
            for f in folder.iterdir():
                try:
                    size = f.stat().st_size
                except FileNotFoundError:
                    continue
                if 0 < size < full:
                    return True
        return False
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def test_kill_during_save_keeps_the_previous_checkpoint(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "ck"
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen([sys.executable, "-c", _SAVER, str(path)], stdout=subprocess.PIPE, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    assert line[:1] == [b"ready"], line
    assert _kill_mid_write(proc, tmp_path, int(line[1])), "never saw a save in progress"
    s = olt.CheckpointState.load_checkpoint(path)
    assert s.parameters["w"].data.shape == (8_000_000,) and float(s.parameters["w"].data[-1]) == 2.0


def test_checkpoint_of_another_model_names_the_tensor(tmp_path: pathlib.Path) -> None:
    olt.generate_artifacts(DATA / "mlp.onnx", loss="CrossEntropyLoss", artifact_directory=tmp_path / "mlp")
    olt.generate_artifacts(DATA / "cnn.onnx", loss="CrossEntropyLoss", artifact_directory=tmp_path / "cnn")
    state = olt.CheckpointState.load_checkpoint(tmp_path / "mlp" / "checkpoint")
    with pytest.raises(olt.CheckpointError, match=r"'0\.weight'.*another model|no tensor '1\.weight'"):
        olt.Module(tmp_path / "cnn" / "training_model.onnx", state)
    state.parameters["0.weight"].data = np.zeros((3, 3), np.float32)
    with pytest.raises(olt.CheckpointError, match=r"'0\.weight' is float32\[3, 3\] but"):
        olt.Module(tmp_path / "mlp" / "training_model.onnx", state)


def test_corrupted_bytes_never_crash(tmp_path: pathlib.Path) -> None:
    """Random byte flips give a CheckpointError or a checkpoint, never another exception."""
    path = tmp_path / "ck"
    olt.CheckpointState.save_checkpoint(_state(), path)
    good = path.read_bytes()
    rng = np.random.default_rng(0)
    errors = 0
    for _ in range(300):
        data = bytearray(good)
        for at in rng.integers(0, len(data), int(rng.integers(1, 4))):
            data[at] = int(rng.integers(0, 256))
        path.write_bytes(bytes(data))
        try:
            olt.CheckpointState.load_checkpoint(path)
        except olt.CheckpointError:
            errors += 1
    assert errors > 0


def test_the_toolkit_imports_no_reference_package() -> None:
    """onnx, onnxruntime and torch are test references: the package never imports them itself."""
    code = (
        "import sys, onnx_light.training, onnx_light.cli, onnx_light.demo\n"
        "bad = [m for m in ('onnx', 'onnxruntime', 'torch') if m in sys.modules]\n"
        "print(bad)\n"
    )
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.strip() == "[]"


def test_numpy_scalar_properties_are_saved_as_their_python_value(tmp_path: pathlib.Path) -> None:
    """np.float32 (a metric computed with numpy) was a struct.error from the FlatBuffers builder."""
    s = _state()
    s.properties.update({"loss": np.float32(0.25), "seen": np.int64(12), "flag": True})
    olt.CheckpointState.save_checkpoint(s, tmp_path / "ck")
    back = olt.CheckpointState.load_checkpoint(tmp_path / "ck").properties
    assert (back["loss"], back["seen"], back["flag"]) == (0.25, 12, 1)
    assert isinstance(back["loss"], float) and isinstance(back["seen"], int)


@pytest.mark.parametrize(
    "key, value, words",
    [("none", None, "'none' is None"), ("list", [1], "'list' is list"), ("big", 2**70, "int64"), (3, 1, "3")],
)
def test_a_property_the_format_cannot_hold_is_a_clear_error_and_keeps_the_file(
    tmp_path: pathlib.Path, key: Any, value: Any, words: str
) -> None:
    path = tmp_path / "ck"
    olt.CheckpointState.save_checkpoint(_state(), path)
    s = _state()
    s.properties[key] = value
    with pytest.raises(olt.CheckpointError, match="propert") as info:
        olt.CheckpointState.save_checkpoint(s, path)
    assert words in str(info.value)
    assert olt.CheckpointState.load_checkpoint(path).properties == _state().properties
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]  # no temporary file left
