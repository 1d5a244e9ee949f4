"""A CRNN text recogniser, a voice-activity LSTM and tensor_split/hstack exported from torch.

``make_crnn_vad_fixtures.py`` (run with torch) stored the classic exporter's graphs at
opsets 14, 16, 17 and 18 (and the dynamo exporter's at 18) and torch's loss and gradients. Here, without torch, our pass
differentiates each export with respect to every parameter, the input and (the VAD) the
LSTM state passed in; the gradients must match torch.autograd to float32 precision, and
in float64 central finite differences (``onnx_light.gradcheck``).
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import onnx_light as ol

DATA = pathlib.Path(__file__).resolve().parent / "data" / "crnn_vad"
CASES = sorted(p.stem for p in DATA.glob("*_opset*.onnx"))


def _model_name(case: str) -> str:
    """``crnn`` for ``crnn_opset14`` and ``crnn_dynamo_opset18``."""
    return case.rpartition("_opset")[0].removesuffix("_dynamo")


def _load(case: str) -> tuple[ol.ModelProto, dict[str, np.ndarray], list[str]]:
    name = _model_name(case)
    ref = dict(np.load(DATA / f"{name}.npz"))
    xs = [*(str(p) for p in ref["params"]), *(str(w) for w in ref["wrt"])]
    return ol.load(DATA / f"{case}.onnx"), ref, xs


#: the ops each export must hold (what the model is meant to cover)
OPS = {
    "crnn": {"Conv", "BatchNormalization", "MaxPool", "LSTM", "LogSoftmax", "NegativeLogLikelihoodLoss"},
    "vad": {"LSTM", "Sigmoid", "Log"},
    "split_hstack": {"SequenceAt", "SequenceConstruct"},  # (classic: SplitToSequence; dynamo: SequenceMap)
}


def test_fixtures_present() -> None:
    assert len(CASES) == 15, (
        f"expected 3 models x (4 classic + 1 dynamo) exports in {DATA}; run make_crnn_vad_fixtures.py"
    )


@pytest.mark.parametrize("case", CASES)
def test_exports_hold_the_ops_they_cover(case: str) -> None:
    model, _, _ = _load(case)
    have = {n.op_type for n in model.graph.node}
    assert OPS[_model_name(case)] <= have, f"{case}: {sorted(have)}"


@pytest.mark.parametrize("case", CASES)
def test_gradients_match_torch(case: str) -> None:
    model, ref, xs = _load(case)
    feeds = {k[5:]: v for k, v in ref.items() if k.startswith("feed:")}
    (loss,) = ol.runtime.InferenceSession(model).run(["loss"], feeds)
    np.testing.assert_allclose(loss, ref["loss"], rtol=1e-5)
    bwd = ol.GradientOfFunction(model, xs=xs, y="loss")
    values = {t.name: ol.numpy_helper.to_array(t) for t in model.graph.initializer}
    values.update(feeds)
    values[bwd.input[-1]] = np.ones((), np.float32)
    grads = ol.runtime.InferenceSession(bwd).run(None, {n: values[n] for n in bwd.input})
    scale = max(float(np.max(np.abs(ref[f"grad:{x}"]))) for x in xs)
    for x, g in zip(xs, grads):
        want = ref[f"grad:{x}"]
        assert g.shape == want.shape and g.dtype == np.float32, f"{case}: grad_{x} is {g.dtype}{g.shape}"
        np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-5 * scale, err_msg=f"{case}: grad_{x}")


@pytest.mark.parametrize("case", ["crnn_opset14", "vad_opset18", "split_hstack_opset16", "split_hstack_dynamo_opset18"])
def test_gradients_match_finite_differences_in_float64(case: str) -> None:
    model, ref, xs = _load(case)
    feeds = {k[5:]: v for k, v in ref.items() if k.startswith("feed:")}
    # the CRNN's MaxPool and ReLU have kinks: the random directions stay small around them
    result = ol.gradcheck(model, xs, "loss", feeds=feeds, directions=1)
    assert result, str(result)
