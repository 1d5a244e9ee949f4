"""Forward mode and forward over reverse on torch exports against torch's own (stored) values.

For the MLP, the CNN with BatchNorm, the pre-LN transformer block and the 2-layer
bidirectional LSTM, at the fixture's x: ``fwd_loss`` = d loss[t] equals
``torch.func.jvp``, and the tangent of ``grad_x`` along v (TangentOfFunction over
GradientOfFunction) equals ``torch.autograd.functional.hvp`` (values written by
``make_forward_fixtures.py``; torch is not needed here).
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import onnx_light as ol

HERE = pathlib.Path(__file__).resolve().parent
MODELS = HERE.parent / "models" / "data"

#: fixture -> (model file, feeds npz, the feeds' keys in it)
CASES = {
    "mlp_mse": (MODELS / "mlp_mse_opset18.onnx", MODELS / "mlp_mse.npz", {"x": "feed:x", "target": "feed:target"}),
    "cnn_bn_eval": (
        MODELS / "cnn_bn_eval_opset18.onnx",
        MODELS / "cnn_bn_eval.npz",
        {"x": "feed:x", "target": "feed:target"},
    ),
    "transformer": (
        MODELS / "transformer_opset18.onnx",
        MODELS / "transformer.npz",
        {"x": "feed:x", "target": "feed:target"},
    ),
    "lstm2_bidir_batch_first": (
        HERE / "data" / "lstm2_bidir_batch_first_opset17.onnx",
        HERE / "data" / "lstm2_bidir_batch_first.npz",
        {"x": "x"},
    ),
}


def _values(name: str) -> tuple[ol.ModelProto, dict[str, np.ndarray], dict[str, np.ndarray]]:
    path, feeds_path, keys = CASES[name]
    model = ol.load(path)
    ref = np.load(feeds_path)
    values = {t.name: ol.numpy_helper.to_array(t) for t in model.graph.initializer}
    values.update({k: ref[v] for k, v in keys.items()})
    return model, values, dict(np.load(HERE / "data" / f"forward_{name}.npz"))


def _run(fn: ol.FunctionProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ol.runtime.InferenceSession(fn).run(None, {n: feeds[n] for n in fn.input})


@pytest.mark.parametrize("name", list(CASES))
def test_jvp_matches_torch_func_jvp(name: str) -> None:
    model, values, torch_values = _values(name)
    fwd = ol.TangentOfFunction(model, ["x"], ["loss"])
    (jvp,) = _run(fwd, {**values, "fwd_x": torch_values["t"]})
    want = float(torch_values["jvp"])
    assert abs(float(jvp) - want) <= 1e-4 * max(1e-2, abs(want)), f"{name}: fwd_loss {float(jvp)} vs torch {want}"


@pytest.mark.parametrize("name", list(CASES))
def test_forward_over_reverse_matches_torch_hvp(name: str) -> None:
    model, values, torch_values = _values(name)
    bwd = ol.GradientOfFunction(model, ["x"], "loss")
    hvp = ol.TangentOfFunction(bwd, ["x"], ["grad_x"])
    (hv,) = _run(hvp, {**values, "dy": np.ones((), np.float32), "fwd_x": torch_values["v"]})
    want = torch_values["hvp"]
    scale = float(np.max(np.abs(want)))
    np.testing.assert_allclose(hv, want, rtol=2e-3, atol=2e-4 * scale, err_msg=f"{name}: H v vs torch's hvp")
