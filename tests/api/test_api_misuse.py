"""API misuse the hunt found answered wrongly: each is now right or a clear error."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import onnx_light as ol
from onnx_light import TensorProto, helper, numpy_helper
from onnx_light.training import generate_artifacts


def _model() -> ol.ModelProto:
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W"], ["h"]),
            helper.make_node("Tanh", ["h"], ["t"]),
            helper.make_node("ReduceSum", ["t"], ["loss"], keepdims=0),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [
            helper.make_tensor_value_info("loss", TensorProto.FLOAT, []),
            helper.make_tensor_value_info("t", TensorProto.FLOAT, [2, 4]),
        ],
        [numpy_helper.from_array(np.ones((3, 4), np.float32), "W")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def test_tangent_of_one_output_named_by_a_string() -> None:
    # it was split into characters: "y='l' is not produced by any node"
    fwd = ol.TangentOfFunction(_model(), xs="W", ys="loss")
    assert list(fwd.output) == ["fwd_loss"] and list(fwd.input)[0] == "W"


def test_tangent_of_a_repeated_output_is_an_error() -> None:
    # it gave a function with two outputs named fwd_loss (invalid ONNX)
    with pytest.raises(ol.GradientError, match=r"ys has repeated names"):
        ol.TangentOfFunction(_model(), xs=["W"], ys=["loss", "loss"])


def test_artifacts_loss_on_an_unknown_output_is_an_error(tmp_path: pathlib.Path) -> None:
    # it silently put the loss on the first output instead
    with pytest.raises(ol.OnnxLightError, match=r"loss_input_names names 'nope', which is not an output"):
        generate_artifacts(_model(), loss="MSELoss", loss_input_names=["nope"], artifact_directory=str(tmp_path / "a"))


def test_save_onto_a_folder_names_the_folder(tmp_path: pathlib.Path) -> None:
    # os.replace's error named the temporary file, not the folder
    with pytest.raises(IsADirectoryError, match=r"is a folder; give a file name: '" + str(tmp_path)):
        ol.save(_model(), str(tmp_path))
    with pytest.raises(IsADirectoryError, match=r"is a folder"):
        ol.family(_model(), str(tmp_path))
    assert list(tmp_path.iterdir()) == []
