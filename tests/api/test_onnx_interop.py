"""Objects of the ``onnx`` package accepted where ours are, and ``.to_onnx()`` back (issue 14 §1)."""

from __future__ import annotations

import pathlib

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as onh
import pytest

import onnx_light as ol


def _onnx_model() -> onnx.ModelProto:
    w = onh.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "W")
    graph = oh.make_graph(
        [oh.make_node("MatMul", ["X", "W"], ["Y"]), oh.make_node("ReduceSum", ["Y"], ["loss"], keepdims=0)],
        "g",
        [oh.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [1, 2])],
        [oh.make_tensor_value_info("loss", onnx.TensorProto.FLOAT, [])],
        [w],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)


def test_gradient_of_an_onnx_model() -> None:
    model = _onnx_model()
    bwd = ol.GradientOfFunction(model, ["W"], "loss")
    assert list(bwd.output) == ["grad_W"]
    infos = [*model.graph.input, oh.make_tensor_value_info("W", onnx.TensorProto.FLOAT, [2, 3])]
    bwd_nodes = ol.GradientOfNodes(list(model.graph.node), ["W"], "loss", value_info=infos)
    assert list(bwd_nodes.output) == ["grad_W"]
    out = ol.gradient_model(model, ["W"], "loss")
    x = np.array([[1.0, 2.0]], np.float32)
    sess = ol.runtime.InferenceSession(out)
    (dw,) = sess.run(None, {"W": np.zeros((2, 3), np.float32), "X": x})
    np.testing.assert_array_equal(dw, np.repeat(x.T, 3, axis=1))


def test_runtime_takes_onnx_objects() -> None:
    model = _onnx_model()
    x = np.array([[1.0, 2.0]], np.float32)
    for proto in (model, model.graph):
        (loss,) = ol.runtime.InferenceSession(proto).run(None, {"X": x})
        assert float(loss) == pytest.approx(1 * 3 + 2 * 12)


def test_save_and_helpers_take_onnx_objects(tmp_path: pathlib.Path) -> None:
    model = _onnx_model()
    path = tmp_path / "m.onnx"
    ol.save(model, path)
    assert path.read_bytes() == model.SerializeToString()
    assert ol.numpy_helper.to_array(model.graph.initializer[0]).tolist() == [[0, 1, 2], [3, 4, 5]]
    node = oh.make_node("Relu", ["a"], ["b"])
    graph = ol.helper.make_graph([node], "h", [], [], [onh.from_array(np.ones(2, np.float32), "c")])
    assert isinstance(graph.node[0], ol.NodeProto) and isinstance(graph.initializer[0], ol.TensorProto)
    ours = ol.helper.make_model(model.graph)
    assert ours.graph.node[0].op_type == "MatMul"
    attr = ol.helper.make_attribute("t", onh.from_array(np.ones(1, np.float32)))
    assert attr.type == ol.AttributeProto.TENSOR
    attrs = ol.helper.make_attribute("ts", [onh.from_array(np.ones(1, np.float32))])
    assert attrs.type == ol.AttributeProto.TENSORS
    assert "MatMul" in ol.helper.to_text(model)
    assert isinstance(ol.from_onnx(model), ol.ModelProto)
    with pytest.raises(TypeError, match="onnx message"):
        ol.from_onnx(3)


def test_to_onnx_round_trip() -> None:
    model = _onnx_model()
    ours = ol.load_model_from_string(model.SerializeToString())
    back = ours.to_onnx()
    assert isinstance(back, onnx.ModelProto)
    assert back == model
    onnx.checker.check_model(back)
    t = ol.numpy_helper.from_array(np.ones(3, np.float32), "t").to_onnx()
    assert isinstance(t, onnx.TensorProto) and list(onh.to_array(t)) == [1, 1, 1]


def test_forward_mode_family_and_training_take_onnx_objects(tmp_path: pathlib.Path) -> None:
    """TangentOfFunction raised "takes a FunctionProto, GraphProto or ModelProto, not
    ModelProto", family() "CopyFrom expects ModelProto, got ModelProto" and generate_artifacts
    (onnxruntime.training's API, which takes onnx's ModelProto) "expected str, bytes or
    os.PathLike object": an onnx package ModelProto is now converted as GradientOfFunction does."""
    from onnx_light import training as olt

    model = _onnx_model()
    x = np.array([[1.0, 2.0]], np.float32)
    fwd = ol.TangentOfFunction(model, ["W"], ["loss"])
    t = np.ones((2, 3), np.float32)
    (jt,) = ol.runtime.InferenceSession(fwd).run(None, {"X": x, "W": np.zeros((2, 3), np.float32), "fwd_W": t})
    assert float(jt) == pytest.approx(3 * (1 + 2))  # d loss = sum(X @ t)
    assert [p.name for p in ol.family(model, tmp_path / "f.onnx")] == ["f.onnx", "adj_f.onnx", "fwd_adj_f.onnx"]
    olt.generate_artifacts(
        model, loss=None, loss_input_names=["loss"], optimizer="SGD", artifact_directory=tmp_path / "a"
    )
    assert (tmp_path / "a" / "training_model.onnx").exists()
    with pytest.raises(ol.OnnxLightError, match="takes a model path or a ModelProto, not int"):
        olt.generate_artifacts(42, loss="MSELoss", artifact_directory=tmp_path / "b")
