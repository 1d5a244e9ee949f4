"""Every example runs (briefly) and does what it says."""

from __future__ import annotations

import pathlib
import runpy
import sys

import numpy as np
import onnxruntime as ort
import pytest

import onnx_light as ol
from onnx_light.demo import train

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


def test_demo_trains_and_agrees_with_onnxruntime(tmp_path: pathlib.Path) -> None:
    result = train(epochs=300, out_dir=str(tmp_path), quiet=True)
    assert result["accuracy"] > 0.95, result
    assert result["ort_max_diff"] is not None and result["ort_max_diff"] < 1e-4
    # the training model is an ordinary model onnxruntime loads
    sess = ort.InferenceSession(str(tmp_path / "training_model.onnx"), providers=["CPUExecutionProvider"])
    assert [o.name for o in sess.get_outputs()] == ["loss"] + [
        f"{p}_grad" for p in ("W1", "b1", "W2", "b2", "W3", "b3")
    ]


def test_demo_refuses_zero_epochs_and_cleans_up(capsys: pytest.CaptureFixture[str]) -> None:
    import tempfile

    from onnx_light.cli import main

    assert main(["demo", "--epochs", "0"]) == 2
    assert "at least one epoch" in capsys.readouterr().err
    before = set(pathlib.Path(tempfile.gettempdir()).glob("onnx-light-demo-*"))
    assert main(["demo", "--epochs", "5"]) == 1  # too few epochs to separate the spirals
    assert set(pathlib.Path(tempfile.gettempdir()).glob("onnx-light-demo-*")) == before


def test_demo_cli_prints_progress(capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path) -> None:
    from onnx_light.cli import main

    assert main(["demo", "--epochs", "300", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "300/300" in out and "samples/s" in out and "accuracy" in out and "onnxruntime" in out


def test_grad_cli_example(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    sys.argv = ["grad_cli.py", str(tmp_path)]
    with pytest.raises(SystemExit) as done:
        runpy.run_path(str(EXAMPLES / "grad_cli.py"), run_name="__main__")
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "largest relative error" in out and "ok" in out
    backward = ol.load(tmp_path / "regression_backward.onnx")
    sess = ort.InferenceSession(backward.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {
        "W": np.ones((4, 3), np.float32),
        "b": np.zeros(3, np.float32),
        "x": np.ones((2, 4), np.float32),
        "target": np.zeros((2, 3), np.float32),
        "dy": np.ones((), np.float32),
    }
    gw, gb = sess.run(None, {i.name: feeds[i.name] for i in sess.get_inputs()})
    ours = ol.runtime.InferenceSession(backward).run(None, {i.name: feeds[i.name] for i in sess.get_inputs()})
    np.testing.assert_allclose(gw, ours[0], rtol=1e-5)
    np.testing.assert_allclose(gb, ours[1], rtol=1e-5)
