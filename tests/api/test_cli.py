"""The ``onnx-light`` command: one-line errors, exit code 2, no traceback (issue 14 §3)."""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import onnx_light as ol
from onnx_light import TensorProto, helper, numpy_helper
from onnx_light.cli import _parser, main

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture()
def model_path(tmp_path: pathlib.Path) -> str:
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("MatMul", ["x", "fc1_w"], ["h"]),
        helper.make_node("Add", ["h", "fc1_b"], ["z"]),
        helper.make_node("Tanh", ["z"], ["t"]),
        helper.make_node("ReduceSum", ["t"], ["loss"], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "m",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        [
            numpy_helper.from_array(rng.standard_normal((3, 4)).astype(np.float32), "fc1_w"),
            numpy_helper.from_array(np.zeros(4, np.float32), "fc1_b"),
            numpy_helper.from_array(np.zeros(4, np.float32), "unused_w"),
        ],
    )
    path = tmp_path / "m.onnx"
    ol.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), path)
    return str(path)


def _error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("onnx-light: error: "), err
    assert "Traceback" not in err
    return err


def test_bad_files_are_one_line_errors(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert "no such file" in _error(capsys, ["print", str(tmp_path / "missing.onnx")])
    assert "is a folder" in _error(capsys, ["print", str(tmp_path)])
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    assert "not an ONNX model" in _error(capsys, ["print", str(empty)])
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\xff\xff\xff\xff not protobuf at all")
    assert "not an ONNX model" in _error(capsys, ["grad", str(junk), "--wrt", "x", "--of", "y", "-o", "o.onnx"])
    text = tmp_path / "notes.txt"
    text.write_text("hello, this is text\n")
    assert "not an ONNX model" in _error(capsys, ["check-grad", str(text), "--wrt", "x", "--of", "y"])


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_file(model_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    os.chmod(model_path, 0)
    assert "permission denied" in _error(capsys, ["print", model_path])


def test_bad_options(model_path: str, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = str(tmp_path / "no" / "such" / "folder" / "b.onnx")
    assert "does not exist" in _error(capsys, ["grad", model_path, "--wrt", "fc1_w", "--of", "loss", "-o", out])
    assert "must be positive" in _error(
        capsys, ["check-grad", model_path, "--wrt", "fc1_w", "--of", "loss", "--eps", "0"]
    )
    assert "required" in _error(capsys, ["grad", model_path])
    assert "invalid choice" in _error(capsys, ["frobnicate"])
    err = _error(capsys, ["check-grad", model_path, "--wrt", "fc1_ww", "--of", "loss"])
    assert "did you mean" in err and "fc1_w" in err
    assert "'los'" in _error(capsys, ["check-grad", model_path, "--wrt", "fc1_w", "--of", "los"])
    assert "does not reach" in _error(capsys, ["check-grad", model_path, "--wrt", "unused_w", "--of", "loss"])


def test_wrt_globs_params_and_allow_unused(
    model_path: str, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "b.onnx"
    assert main(["grad", model_path, "--wrt", "fc1_*", "--of", "loss", "-o", str(out)]) == 0
    assert [o.name for o in ol.load(out).graph.output] == ["grad_fc1_w", "grad_fc1_b"]
    args = ["grad", model_path, "--wrt", "@params", "--of", "loss", "-o", str(out), "--allow-unused"]
    assert main(args) == 0
    assert [o.name for o in ol.load(out).graph.output] == ["grad_fc1_w", "grad_fc1_b", "grad_unused_w"]
    capsys.readouterr()
    assert main(["check-grad", model_path, "--wrt", "@params", "--of", "loss", "--allow-unused"]) == 0
    report = capsys.readouterr().out
    assert "gradcheck ok in float64" in report and "unused_w" in report


def test_version_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and ol.__version__ in capsys.readouterr().out
    parser = _parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in subparsers.choices.items():
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
                continue
            assert action.help, f"{name} {action.dest} has no help text"
        if name in ("grad", "check-grad"):
            assert "--allow-unused" in sub.format_help()
    help_text = subparsers.choices["check-grad"].format_help()
    assert "default: 3" in help_text and "default: float64" in help_text and "1e-06" in help_text


def test_broken_pipe_is_quiet(model_path: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = "import sys; from onnx_light.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "ops"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader goes away before the command writes
    err = proc.stderr.read().decode()
    assert proc.wait() in (0, 2) and "Traceback" not in err, err


def test_ops_write_rewrites_the_readme_block(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    from onnx_light.cli import ops_markdown

    page = tmp_path / "README.md"
    page.write_text("top\n<!-- ops:begin -->\nold\n<!-- ops:end -->\n")
    assert main(["ops", "--write", str(page)]) == 0
    assert "rewritten" in capsys.readouterr().out
    assert page.read_text() == "top\n<!-- ops:begin -->\n" + ops_markdown() + "<!-- ops:end -->\n"
    assert main(["ops", "--write", str(page)]) == 0
    assert "up to date" in capsys.readouterr().out


def test_misuse_found_by_the_hunt_is_one_line(
    tmp_path: pathlib.Path, model_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Three inputs that ended in 'internal error, please report it' (IndexError, ValueError)."""
    out = str(tmp_path / "o.onnx")
    err = _error(capsys, ["jvp", model_path, "--wrt", "fc1_w", "--of", "loss", "--seeds", "abc", "-o", out])
    assert "--seeds" in err and "positive int or 'dynamic'" in err
    # the model's only output is a scalar: no logits for a cross entropy
    err = _error(capsys, ["artifacts", model_path, "--loss", "cross_entropy", "-o", str(tmp_path / "art")])
    assert "CrossEntropyLoss takes logits of shape [N, C, ...]" in err
    assert not (tmp_path / "art").exists()
    # a ModelProto with no graph outputs (an empty file decodes to one)
    no_outputs = tmp_path / "no_outputs.onnx"
    no_outputs.write_bytes(b"")
    data = tmp_path / "d.npz"
    np.savez(data, x=np.ones((2, 3), np.float32))
    err = _error(capsys, ["train", str(no_outputs), "--loss", "mse", "--data", str(data), "-o", out])
    assert "no outputs" in err
    assert not os.path.exists(out)


def test_an_output_naming_the_input_model_is_refused(
    model_path: str, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``grad m.onnx -o m.onnx`` replaced the user's model by its backward graph (and
    ``family`` its siblings adj_/fwd_adj_<name>, ``train`` the model by the trained one):
    now a one-line error, the model's bytes untouched."""
    before = pathlib.Path(model_path).read_bytes()
    alias = str(tmp_path / "." / "m.onnx")  # the same file by another spelling
    assert "overwrite the input model" in _error(
        capsys, ["grad", model_path, "--wrt", "fc1_w", "--of", "loss", "-o", alias]
    )
    assert "overwrite the input model" in _error(
        capsys, ["jvp", model_path, "--wrt", "fc1_w", "--of", "loss", "-o", model_path]
    )
    sibling = tmp_path / "adj_m.onnx"
    sibling.write_bytes(before)
    err = _error(capsys, ["family", str(sibling), "-o", model_path])
    assert "overwrite the input model" in err
    data = tmp_path / "d.npz"
    np.savez(data, x=np.ones((4, 2, 3), np.float32))
    assert "overwrite the input model" in _error(capsys, ["train", model_path, "--data", str(data), "-o", model_path])
    assert pathlib.Path(model_path).read_bytes() == before and sibling.read_bytes() == before
