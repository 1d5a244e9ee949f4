"""``save`` of a FunctionProto and ``load_function`` (issue 14 §1)."""

from __future__ import annotations

import pathlib

import numpy as np
import onnx
import pytest

import onnx_light as ol
from onnx_light import helper


def _function() -> ol.FunctionProto:
    nodes = [helper.make_node("Add", ["a", "a"], ["c"])]
    return helper.make_function("my.domain", "twice", ["a"], ["c"], nodes, [helper.make_opsetid("", 21)])


def test_saved_function_reads_back(tmp_path: pathlib.Path) -> None:
    fn = _function()
    path = tmp_path / "twice.onnxfn"
    ol.save(fn, path)
    back = ol.load_function(path)
    assert back == fn
    assert ol.load_function_from_string(path.read_bytes()) == fn
    theirs = onnx.FunctionProto.FromString(path.read_bytes())  # the documented format: protobuf FunctionProto
    assert theirs.name == "twice" and [n.op_type for n in theirs.node] == ["Add"]


def test_loading_a_function_file_as_a_model_says_what_to_do(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "twice.onnx"
    ol.save(_function(), path)
    with pytest.raises(ol.DecodeError, match="FunctionProto.*load_function"):
        ol.load(path)


def test_saved_function_runs_as_a_model(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "twice.onnx"
    ol.save(_function(), path)
    model = ol.function_to_model(ol.load_function(path), {"a": (ol.TensorProto.FLOAT, [2])})
    sess = ol.runtime.InferenceSession(model)
    np.testing.assert_array_equal(sess.run(None, {"a": np.ones(2, np.float32)})[0], [2.0, 2.0])
