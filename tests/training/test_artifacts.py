"""The artifacts: standard ONNX, train_step in plain onnxruntime, frozen parameters, resume, CLI."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from onnx_light import OnnxLightError, load
from onnx_light import training as olt

from .make_fixtures import batches

DATA = pathlib.Path(__file__).resolve().parent / "data"
FILES = ("training_model", "eval_model", "optimizer_model", "train_step")


def _session(
    d: pathlib.Path, state: olt.CheckpointState | None = None
) -> tuple[olt.CheckpointState, olt.Module, olt.Optimizer]:
    state = state or olt.CheckpointState.load_checkpoint(d / "checkpoint")
    module = olt.Module(d / "training_model.onnx", state, d / "eval_model.onnx")
    opt = olt.Optimizer(d / "optimizer_model.onnx", module)
    opt.set_learning_rate(1e-2)
    return state, module, opt


@pytest.mark.parametrize(
    ("kind", "optimizer", "options"),
    [("cnn", "AdamW", {"amsgrad": True, "max_grad_norm": 1.0}), ("mlp", "SGD", {"momentum": 0.9, "nesterov": True})],
)
def test_artifacts_are_standard_onnx(kind: str, optimizer: str, options: dict, tmp_path: pathlib.Path) -> None:
    onnx = pytest.importorskip("onnx")
    olt.generate_artifacts(
        DATA / f"{kind}.onnx", loss="CrossEntropyLoss", optimizer=optimizer, artifact_directory=tmp_path, **options
    )
    for name in FILES:
        model = onnx.load(str(tmp_path / f"{name}.onnx"))
        onnx.checker.check_model(model, full_check=True)
        assert {o.domain for o in model.opset_import} <= {"", "ai.onnx"}, name


def test_artifacts_are_optimized(tmp_path: pathlib.Path) -> None:
    """No Identity copies (the optimizer's ``_next`` outputs are the update's last node) and
    no node computed twice: every artifact went through onnx_light.optimize."""
    olt.generate_artifacts(DATA / "cnn.onnx", loss="CrossEntropyLoss", optimizer="AdamW", artifact_directory=tmp_path)
    for name in FILES:
        nodes = load(tmp_path / f"{name}.onnx").graph.node
        assert [n.output[0] for n in nodes if n.op_type == "Identity"] == [], name
        keys = [(n.op_type, tuple(n.input), tuple((a.name, str(a)) for a in n.attribute)) for n in nodes if n.input]
        assert len(keys) == len(set(keys)), name


def test_train_step_in_onnxruntime_matches_the_module(tmp_path: pathlib.Path) -> None:
    ort = pytest.importorskip("onnxruntime")
    olt.generate_artifacts(DATA / "cnn.onnx", loss="CrossEntropyLoss", optimizer="AdamW", artifact_directory=tmp_path)
    x, y = batches("cnn", "CrossEntropyLoss", 6)
    state, module, opt = _session(tmp_path)
    ours = []
    for i in range(6):
        ours.append(float(module(x[i], y[i])))
        opt.step()
        module.lazy_reset_grad()
    sess = ort.InferenceSession(str(tmp_path / "train_step.onnx"), providers=["CPUExecutionProvider"])
    st0 = olt.CheckpointState.load_checkpoint(tmp_path / "checkpoint")
    values = {k: p.data for k, p in st0.parameters.items()} | dict(st0.optimizer_states)
    outs_names = [o.name for o in sess.get_outputs()]
    assert outs_names[0] == "loss" and all(n.endswith("_next") for n in outs_names[1:])
    assert "1.running_mean_next" in outs_names and "0.weight.exp_avg_next" in outs_names
    theirs = []
    for i in range(6):
        feeds = {"input": x[i], "labels": y[i], "learning_rate": np.array(1e-2, np.float32), "step": np.array(i + 1)}
        feeds |= {n.name: values[n.name] for n in sess.get_inputs() if n.name not in feeds}
        outs = sess.run(None, feeds)
        theirs.append(float(outs[0]))
        values |= {n[: -len("_next")]: v for n, v in zip(outs_names[1:], outs[1:])}
    np.testing.assert_allclose(theirs, ours, rtol=1e-5)
    for k, p in state.parameters.items():
        np.testing.assert_allclose(values[k], p.data, rtol=1e-4, atol=1e-6, err_msg=k)


def test_resume_is_bitwise(tmp_path: pathlib.Path) -> None:
    olt.generate_artifacts(
        DATA / "cnn.onnx", loss="CrossEntropyLoss", optimizer="SGD", momentum=0.9, artifact_directory=tmp_path
    )
    x, y = batches("cnn", "CrossEntropyLoss", 6)

    def run(state: olt.CheckpointState, module: olt.Module, opt: olt.Optimizer, steps: range) -> None:
        for i in steps:
            module(x[i], y[i])
            opt.step()
            module.lazy_reset_grad()

    whole = _session(tmp_path)
    run(*whole, range(6))
    first = _session(tmp_path)
    run(*first, range(3))
    olt.CheckpointState.save_checkpoint(first[0], tmp_path / "mid")
    second = _session(tmp_path, olt.CheckpointState.load_checkpoint(tmp_path / "mid"))
    assert second[0].optimizer_step == 3 and second[0].optimizer_states
    run(*second, range(3, 6))
    for k, p in whole[0].parameters.items():
        assert np.array_equal(second[0].parameters[k].data, p.data), k


def test_frozen_parameters_get_no_gradient_and_no_state(tmp_path: pathlib.Path) -> None:
    olt.generate_artifacts(
        DATA / "mlp.onnx", frozen_params=["0.weight", "0.bias"], loss="CrossEntropyLoss", artifact_directory=tmp_path
    )
    state, module, opt = _session(tmp_path)
    assert not state.parameters["0.weight"].requires_grad
    assert not any(k.startswith("0.") for k in state.optimizer_states)
    before = state.parameters["0.weight"].data.copy()
    x, y = batches("mlp", "CrossEntropyLoss", 2)
    module(x[0], y[0])
    opt.step()
    assert state.parameters["0.weight"].grad is None
    assert np.array_equal(state.parameters["0.weight"].data, before)
    assert not np.array_equal(
        state.parameters["2.weight"].data,
        olt.CheckpointState.load_checkpoint(tmp_path / "checkpoint").parameters["2.weight"].data,
    )


def test_gradients_accumulate_until_lazy_reset(tmp_path: pathlib.Path) -> None:
    olt.generate_artifacts(DATA / "mlp.onnx", loss="CrossEntropyLoss", artifact_directory=tmp_path)
    state, module, _ = _session(tmp_path)
    x, y = batches("mlp", "CrossEntropyLoss", 2)
    module(x[0], y[0])
    g0 = state.parameters["4.weight"].grad.copy()
    module(x[1], y[1])
    g01 = state.parameters["4.weight"].grad.copy()
    module.lazy_reset_grad()
    module(x[1], y[1])
    np.testing.assert_allclose(g01, g0 + state.parameters["4.weight"].grad, rtol=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"loss": "NoSuchLoss"}, "unknown loss 'NoSuchLoss'"),
        ({"loss": "MSELoss", "optimizer": "RMSprop"}, "unknown optimizer 'RMSprop'"),
        ({"loss": "MSELoss", "optimizer": "SGD", "betas": (0.9, 0.9)}, "SGD has no option"),
        ({"loss": "MSELoss", "requires_grad": ["nope"]}, "requires_grad names"),
        ({"loss": None}, "loss_input_names"),
        # torch.optim refuses these (a NaN learning rate silently turned every weight into NaN)
        ({"loss": "MSELoss", "lr": -1.0}, "learning rate"),
        ({"loss": "MSELoss", "lr": float("nan")}, "learning rate"),
        ({"loss": "MSELoss", "optimizer": "Adam", "eps": -1e-8}, "eps"),
        ({"loss": "MSELoss", "optimizer": "SGD", "momentum": -0.5}, "momentum"),
        ({"loss": "MSELoss", "weight_decay": float("nan")}, "weight_decay"),
    ],
)
def test_bad_arguments_are_clear_errors(kwargs: dict, match: str, tmp_path: pathlib.Path) -> None:
    with pytest.raises(OnnxLightError, match=match):
        olt.generate_artifacts(DATA / "reg.onnx", artifact_directory=tmp_path, **kwargs)


def test_schedulers(tmp_path: pathlib.Path) -> None:
    olt.generate_artifacts(DATA / "mlp.onnx", loss="CrossEntropyLoss", artifact_directory=tmp_path)
    _, _, opt = _session(tmp_path)
    lin = olt.LinearLRScheduler(opt, warmup_step_count=2, total_step_count=6, initial_lr=1.0)
    seen = [opt.get_learning_rate()]
    for _ in range(6):
        lin.step()
        seen.append(opt.get_learning_rate())
    np.testing.assert_allclose(seen, [0.0, 0.5, 1.0, 0.75, 0.5, 0.25, 0.0])
    cos = olt.CosineLRScheduler(opt, warmup_step_count=0, total_step_count=4, initial_lr=1.0, min_lr=0.2)
    seen = [opt.get_learning_rate()]
    for _ in range(4):
        cos.step()
        seen.append(opt.get_learning_rate())
    np.testing.assert_allclose(
        seen, [1.0, 0.2 + 0.8 * (1 + np.cos(np.pi / 4)) / 2, 0.6, 0.2 + 0.8 * (1 - np.cos(np.pi / 4)) / 2, 0.2]
    )
    # warmup as long as the schedule: the end is reached at total_step_count (onnxruntime's
    # max(0, (total - t) / max(1, total - warmup)) is 0 there), not initial_lr for one step
    lin = olt.LinearLRScheduler(opt, warmup_step_count=3, total_step_count=3, initial_lr=1.0)
    seen = [opt.get_learning_rate()]
    for _ in range(4):
        lin.step()
        seen.append(opt.get_learning_rate())
    np.testing.assert_allclose(seen, [0.0, 1 / 3, 2 / 3, 0.0, 0.0])
    cos = olt.CosineLRScheduler(opt, warmup_step_count=2, total_step_count=2, initial_lr=1.0, min_lr=0.2)
    cos.step()
    cos.step()
    assert opt.get_learning_rate() == pytest.approx(0.2)


def test_train_cli_resumes_and_exports(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    from onnx_light.cli import main
    from onnx_light.runtime import InferenceSession

    x, y = batches("cnn", "CrossEntropyLoss", 4)
    np.savez(tmp_path / "d.npz", input=x.reshape(-1, 3, 10, 10), labels=y.reshape(-1))
    args = [
        "train",
        str(DATA / "cnn.onnx"),
        "--data",
        str(tmp_path / "d.npz"),
        "--val",
        str(tmp_path / "d.npz"),
        "--optimizer",
        "sgd",
        "--momentum",
        "0.9",
        "--lr",
        "0.01",
        "--batch-size",
        "4",
        "--checkpoint-dir",
        str(tmp_path / "ck"),
    ]
    assert main([*args, "--epochs", "1", "-o", str(tmp_path / "a.onnx")]) == 0
    out = capsys.readouterr().out
    assert "epoch 1/1" in out and "samples/s" in out and "ETA" in out and "val loss" in out
    assert olt.CheckpointState.load_checkpoint(tmp_path / "ck" / "checkpoint").properties["epoch"] == 1
    assert main([*args, "--epochs", "2", "--resume", "-o", str(tmp_path / "b.onnx")]) == 0
    assert "epoch 1/2" not in capsys.readouterr().out  # resumed after epoch 1
    assert main([*args, "--epochs", "2", "-o", str(tmp_path / "c.onnx")]) == 0  # from scratch, 2 epochs
    capsys.readouterr()
    feeds = {"input": x[0]}
    b, c = (InferenceSession(str(tmp_path / f"{n}.onnx")).run(None, feeds)[0] for n in "bc")
    np.testing.assert_array_equal(b, c)
    assert main(["train", str(DATA / "cnn.onnx"), "--data", str(tmp_path / "missing.npz"), "-o", "x.onnx"]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["not_a_zip", "object_array"])
def test_train_on_a_bad_data_file_is_a_one_line_error(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """Not "internal error, please report it" (a ValueError from np.load)."""
    from onnx_light.cli import main

    data = tmp_path / "d.npz"
    if kind == "not_a_zip":
        data.write_bytes(b"not a zip file")
    else:
        np.savez(data, input=np.array([None] * 8, dtype=object), labels=np.zeros(8, np.int64))
    assert main(["train", str(DATA / "mlp.onnx"), "--data", str(data), "-o", str(tmp_path / "x.onnx")]) == 2
    err = capsys.readouterr().err
    assert "is not an .npz of numeric arrays" in err and "internal error" not in err, err


def _dropout_model(ratio: float) -> object:
    from onnx_light import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Constant", [], ["r"], value=numpy_helper.from_array(np.array(ratio, np.float32), "r")),
        helper.make_node("Constant", [], ["t"], value=numpy_helper.from_array(np.array(True), "t")),
        helper.make_node("Dropout", ["X", "r", "t"], ["d", "mask"]),
        helper.make_node("Gemm", ["d", "W"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "dropout",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [400, 50])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [400, 3])],
        [numpy_helper.from_array(rng.standard_normal((50, 3)).astype(np.float32), "W")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_dropout_is_seeded_reproducible_and_drops_its_ratio(tmp_path: pathlib.Path) -> None:
    olt.generate_artifacts(_dropout_model(0.3), loss="MSELoss", artifact_directory=tmp_path)
    state, module, _ = _session(tmp_path)
    x = np.ones((400, 50), np.float32)
    y = np.zeros((400, 3), np.float32)
    first = float(module(x, y))
    assert float(module(x, y)) != first  # the next call draws a new mask
    assert state.properties["dropout_seed"] == 2
    state.properties["dropout_seed"] = 0
    assert float(module(x, y)) == first
    from onnx_light.runtime import InferenceSession

    sess = InferenceSession(str(tmp_path / "training_model.onnx"))
    names = [o.name for o in sess.get_outputs()]
    grad = dict(
        zip(names, sess.run(None, {"X": x, "labels": y, "W": state.parameters["W"].data, "dropout_seed": np.array(5)}))
    )["W_grad"]
    assert grad.shape == (50, 3)
    ort = pytest.importorskip("onnxruntime")
    feeds = {"X": x, "labels": y, "W": state.parameters["W"].data, "dropout_seed": np.array(5)}
    theirs = ort.InferenceSession(str(tmp_path / "training_model.onnx"), providers=["CPUExecutionProvider"]).run(
        None, feeds
    )
    np.testing.assert_allclose(theirs[1], grad, rtol=1e-5)


def test_dropout_mask_fraction(tmp_path: pathlib.Path) -> None:
    """With X = 1, W = 1 and an L1 loss, dL/dW[k] = sum_i keep[i, k] / (1 - p) / numel(y)."""
    from onnx_light.runtime import InferenceSession

    olt.generate_artifacts(_dropout_model(0.3), loss="L1Loss", artifact_directory=tmp_path)
    sess = InferenceSession(str(tmp_path / "training_model.onnx"))
    feeds = {
        "X": np.ones((400, 50), np.float32),
        "labels": np.zeros((400, 3), np.float32),
        "W": np.ones((50, 3), np.float32),
    }
    kept = []
    for seed in range(3):
        grad = sess.run(["W_grad"], {**feeds, "dropout_seed": np.array(seed)})[0]
        kept.append(grad[:, 0] * 1200 * 0.7 / 400)  # fraction kept per input column
    for k in kept:
        assert abs(float(k.mean()) - 0.7) < 0.01
    assert not np.array_equal(kept[0], kept[1])


def test_a_model_with_its_own_loss(tmp_path: pathlib.Path) -> None:
    """loss=None: the model's scalar output named by loss_input_names is the loss."""
    from onnx_light import TensorProto, helper, load, numpy_helper

    w = np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["X", "W"], ["logits"]),
            helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "y"], ["my_loss"], reduction="mean"),
        ],
        "own_loss",
        [
            helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4]),
            helper.make_tensor_value_info("y", TensorProto.INT64, ["N"]),
        ],
        [helper.make_tensor_value_info("my_loss", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(w, "W")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    olt.generate_artifacts(model, loss_input_names=["my_loss"], optimizer="SGD", artifact_directory=tmp_path)
    state, module, opt = _session(tmp_path)
    assert module.user_inputs() == ["X", "y"]
    x = np.eye(4, dtype=np.float32)
    y = np.array([0, 1, 2, 0])
    loss = float(module(x, y))
    logits = x @ w
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    assert abs(loss - float(-np.log(p[np.arange(4), y]).mean())) < 1e-6
    onehot = np.eye(3, dtype=np.float32)[y]
    np.testing.assert_allclose(state.parameters["W"].grad, x.T @ (p - onehot) / 4, rtol=1e-5, atol=1e-7)
    opt.step()
    np.testing.assert_allclose(state.parameters["W"].data, w - 1e-2 * x.T @ (p - onehot) / 4, rtol=1e-5, atol=1e-7)
    # eval: the loss once (the model's output is the loss; it was listed twice, so eval returned [l, l])
    module.eval()
    assert [o.name for o in load(tmp_path / "eval_model.onnx").graph.output] == ["my_loss"]
    logits = x @ state.parameters["W"].data
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    np.testing.assert_allclose(module(x, y), -np.log(p[np.arange(4), y]).mean(), rtol=1e-6)


def test_model_local_functions_travel_with_the_artifacts(tmp_path: pathlib.Path) -> None:
    from onnx_light import TensorProto, helper, numpy_helper
    from onnx_light.runtime import InferenceSession

    body = [helper.make_node("Tanh", ["x"], ["t"]), helper.make_node("Mul", ["t", "x"], ["y"])]
    fn = helper.make_function("custom", "MyAct", ["x"], ["y"], body, [helper.make_opsetid("", 21)])
    w = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["h"]), helper.make_node("MyAct", ["h"], ["logits"], domain="custom")],
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3])],
        [numpy_helper.from_array(w, "W")],
    )
    imports = [helper.make_opsetid("", 21), helper.make_opsetid("custom", 1)]
    model = helper.make_model(graph, opset_imports=imports, functions=[fn], ir_version=10)
    olt.generate_artifacts(model, loss="MSELoss", artifact_directory=tmp_path)
    state, module, _ = _session(tmp_path)
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    y = np.zeros((2, 3), np.float32)
    h = x @ w
    expected = np.tanh(h) * h
    assert abs(float(module(x, y)) - float(np.mean(expected**2))) < 1e-6
    module.eval()
    assert abs(float(module(x, y)[0]) - float(np.mean(expected**2))) < 1e-6
    module.export_model_for_inferencing(tmp_path / "inf.onnx", ["logits"])
    got = InferenceSession(str(tmp_path / "inf.onnx")).run(None, {"X": x})[0]
    np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_initializers_that_set_shapes_are_not_trained_by_default(tmp_path: pathlib.Path) -> None:
    """Resize's float scales and Range's float start/delta (torch exports keep them as
    initializers) are constants: AdamW's weight decay moved them even with a zero gradient,
    and the next step's Resize and Range produced other shapes (seen on YOLOv8n)."""
    from onnx_light import helper as h
    from onnx_light import numpy_helper as nh

    rng = np.random.default_rng(0)
    inits = {
        "w": rng.standard_normal((1, 1, 1, 1)).astype(np.float32),
        "scales": np.array([1.0, 1.0, 2.0, 2.0], np.float32),
        "start": np.array(0.0, np.float32),
        "limit": np.array(8.0, np.float32),
        "delta": np.array(1.0, np.float32),
        "offset": np.array(0.5, np.float32),
    }
    nodes = [
        h.make_node("Conv", ["x", "w"], ["c"]),
        h.make_node("Resize", ["c", "", "scales"], ["r"], mode="nearest"),
        h.make_node("Range", ["start", "limit", "delta"], ["grid"]),
        h.make_node("Add", ["grid", "offset"], ["cells"]),  # a differentiable read: stays trainable
        h.make_node("Mul", ["r", "cells"], ["y"]),
    ]
    graph = h.make_graph(
        nodes,
        "g",
        [h.make_tensor_value_info("x", 1, [1, 1, 4, 4])],
        [h.make_tensor_value_info("y", 1, [1, 1, 8, 8])],
        [nh.from_array(v, k) for k, v in inits.items()],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    olt.generate_artifacts(model, loss="MSELoss", optimizer="AdamW", artifact_directory=tmp_path, weight_decay=0.5)
    state, module, opt = _session(tmp_path)
    assert sorted(n for n, p in state.parameters.items() if p.requires_grad) == ["offset", "w"]
    x = rng.standard_normal((1, 1, 4, 4)).astype(np.float32)
    labels = rng.standard_normal((1, 1, 8, 8)).astype(np.float32)
    for _ in range(3):
        assert np.isfinite(float(module(x, labels)))
        opt.step()
        module.lazy_reset_grad()
    for name in ("scales", "start", "limit", "delta"):
        np.testing.assert_array_equal(state.parameters[name].data, inits[name])
    assert state.parameters["offset"].data != inits["offset"]


def test_weights_in_constant_nodes_are_a_clear_error(tmp_path: pathlib.Path) -> None:
    """paddle2onnx exports (rapidocr's models) keep every weight in a Constant node."""
    from onnx_light import helper as h
    from onnx_light import numpy_helper as nh

    w = nh.from_array(np.ones((1, 1, 1, 1), np.float32), "w")
    graph = h.make_graph(
        [h.make_node("Constant", [], ["w"], value=w), h.make_node("Conv", ["x", "w"], ["y"])],
        "g",
        [h.make_tensor_value_info("x", 1, [1, 1, 2, 2])],
        [h.make_tensor_value_info("y", 1, [1, 1, 2, 2])],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    with pytest.raises(OnnxLightError, match="no float initializers.*Constant nodes"):
        olt.generate_artifacts(model, loss="MSELoss", artifact_directory=tmp_path)


@pytest.mark.parametrize("lr", [-0.1, float("nan"), float("inf")])
def test_set_learning_rate_refuses_what_torch_optim_refuses(lr: float, tmp_path: pathlib.Path) -> None:
    olt.generate_artifacts(DATA / "reg.onnx", loss="MSELoss", artifact_directory=tmp_path)
    state = olt.CheckpointState.load_checkpoint(tmp_path / "checkpoint")
    opt = olt.Optimizer(tmp_path / "optimizer_model.onnx", olt.Module(tmp_path / "training_model.onnx", state))
    with pytest.raises(OnnxLightError, match="learning rate"):
        opt.set_learning_rate(lr)
    assert opt.get_learning_rate() == pytest.approx(1e-3)  # unchanged


def _bn_model(tied: bool) -> object:
    """Conv -> BatchNormalization (inference); ``tied``: its running mean and variance are
    Identity(bias) and Identity(weight), as torch exports a fresh BatchNorm2d."""
    from onnx_light import helper as h
    from onnx_light import numpy_helper as nh

    inits = {"w": np.full((2, 1, 1, 1), 0.7, np.float32), "g": np.ones(2, np.float32), "b": np.zeros(2, np.float32)}
    if not tied:
        inits |= {"mean": np.zeros(2, np.float32), "var": np.ones(2, np.float32)}
    nodes = [h.make_node("Conv", ["x", "w"], ["c"])]
    if tied:
        nodes += [h.make_node("Identity", ["g"], ["var"]), h.make_node("Identity", ["b"], ["mean"])]
    nodes.append(h.make_node("BatchNormalization", ["c", "g", "b", "mean", "var"], ["y"]))
    graph = h.make_graph(
        nodes,
        "g",
        [h.make_tensor_value_info("x", 1, [1, 1, 3, 3])],
        [h.make_tensor_value_info("y", 1, [1, 2, 3, 3])],
        [nh.from_array(v, k) for k, v in inits.items()],
    )
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def test_statistics_tied_to_a_trained_parameter_warn(tmp_path: pathlib.Path) -> None:
    """torch's export of a fresh BatchNorm2d ties running_var to weight (equal initializers
    merged): training then moves the variance, and the run leaves torch's without a word."""
    with pytest.warns(UserWarning, match=r"statistics read trained parameters \('mean' = 'b', 'var' = 'g'"):
        olt.generate_artifacts(_bn_model(True), loss="MSELoss", optimizer="SGD", artifact_directory=tmp_path / "a")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        olt.generate_artifacts(_bn_model(False), loss="MSELoss", optimizer="SGD", artifact_directory=tmp_path / "b")
        olt.generate_artifacts(  # frozen: nothing moves
            _bn_model(True),
            loss="MSELoss",
            optimizer="SGD",
            artifact_directory=tmp_path / "c",
            frozen_params=["g", "b"],
        )


def test_running_statistics_of_an_inference_batch_norm_are_not_trained_by_default(tmp_path: pathlib.Path) -> None:
    """An eval-mode export keeps BatchNormalization in inference mode; its running mean and
    variance have a gradient in that graph, so the default requires_grad trained them
    (SGD moved them), where torch never trains buffers."""
    olt.generate_artifacts(_bn_model(False), loss="MSELoss", optimizer="SGD", artifact_directory=tmp_path, lr=0.5)
    state, module, opt = _session(tmp_path)
    assert sorted(n for n, p in state.parameters.items() if p.requires_grad) == ["b", "g", "w"]
    rng = np.random.default_rng(0)
    for _ in range(2):
        module(
            rng.standard_normal((1, 1, 3, 3)).astype(np.float32), rng.standard_normal((1, 2, 3, 3)).astype(np.float32)
        )
        opt.step()
        module.lazy_reset_grad()
    np.testing.assert_array_equal(state.parameters["mean"].data, np.zeros(2, np.float32))
    np.testing.assert_array_equal(state.parameters["var"].data, np.ones(2, np.float32))
    assert not np.array_equal(state.parameters["g"].data, np.ones(2, np.float32))


def test_a_float64_model_trains_in_float64(tmp_path: pathlib.Path) -> None:
    """The backward's seed dL/dL was a float32 Constant: training_model.onnx failed the onnx
    checker (Div of float and double), our runtime promoted part of the gradients to float32
    and Optimizer.step() refused b_grad. Two SGD steps against torch in float64 (to 1e-8: the
    optimizer model's learning_rate input is float32, as onnxruntime.training's)."""
    import onnx

    from onnx_light import helper as h
    from onnx_light import numpy_helper as nh

    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    w, b = rng.standard_normal((3, 4)), rng.standard_normal(4)
    graph = h.make_graph(
        [h.make_node("MatMul", ["x", "w"], ["m"]), h.make_node("Add", ["m", "b"], ["y"])],
        "g",
        [h.make_tensor_value_info("x", 11, [4, 3])],
        [h.make_tensor_value_info("y", 11, [4, 4])],
        [nh.from_array(w, "w"), nh.from_array(b, "b")],
    )
    olt.generate_artifacts(
        h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]),
        loss="MSELoss",
        optimizer="SGD",
        artifact_directory=tmp_path,
    )
    onnx.checker.check_model(onnx.load(tmp_path / "training_model.onnx"), full_check=True)
    state, module, opt = _session(tmp_path)
    tw, tb = torch.tensor(w, requires_grad=True), torch.tensor(b, requires_grad=True)
    topt = torch.optim.SGD([tw, tb], lr=1e-2)
    for _ in range(2):
        x, labels = rng.standard_normal((4, 3)), rng.standard_normal((4, 4))
        loss = module(x, labels)
        opt.step()
        module.lazy_reset_grad()
        topt.zero_grad()
        expected = torch.nn.functional.mse_loss(torch.tensor(x) @ tw + tb, torch.tensor(labels))
        expected.backward()
        topt.step()
        assert np.asarray(loss).dtype == np.float64 and float(loss) == pytest.approx(expected.item(), rel=1e-8)
    np.testing.assert_allclose(state.parameters["w"].data, tw.detach().numpy(), rtol=1e-8)
    np.testing.assert_allclose(state.parameters["b"].data, tb.detach().numpy(), rtol=1e-8)
    assert state.parameters["b"].data.dtype == np.float64


def test_a_two_head_model_trains_the_head_its_loss_reads(tmp_path: pathlib.Path) -> None:
    """The default requires_grad took every weight reaching any output, so the other head's
    weight had no gradient: GradientError "x='v' does not reach y='loss' ... pass
    allow_unused=True", an option generate_artifacts does not have."""
    from onnx_light import helper as h
    from onnx_light import numpy_helper as nh

    rng = np.random.default_rng(0)
    inits = {"w": rng.standard_normal((3, 4)).astype(np.float32), "v": rng.standard_normal((3, 2)).astype(np.float32)}
    graph = h.make_graph(
        [h.make_node("MatMul", ["x", "w"], ["a"]), h.make_node("MatMul", ["x", "v"], ["b"])],
        "g",
        [h.make_tensor_value_info("x", 1, [2, 3])],
        [h.make_tensor_value_info("a", 1, [2, 4]), h.make_tensor_value_info("b", 1, [2, 2])],
        [nh.from_array(v, k) for k, v in inits.items()],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    for reads, trained in ((None, "w"), (["b"], "v")):
        out = tmp_path / str(reads)
        olt.generate_artifacts(model, loss="MSELoss", optimizer="AdamW", artifact_directory=out, loss_input_names=reads)
        state, module, opt = _session(out)
        assert [n for n, p in state.parameters.items() if p.requires_grad] == [trained]
        labels = np.zeros((2, 4 if trained == "w" else 2), np.float32)
        module(rng.standard_normal((2, 3)).astype(np.float32), labels)
        opt.step()
        other = "v" if trained == "w" else "w"
        np.testing.assert_array_equal(state.parameters[other].data, inits[other])  # not decayed
