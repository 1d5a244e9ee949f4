"""Gradients of torch's nn.LSTM / nn.GRU / nn.RNN exports against torch.autograd, without torch.

``make_recurrent_fixtures.py`` (run with torch) stored each export (classic exporter, opsets
14 and 17: 2-layer bidirectional LSTM with batch_first and learned initial states, 2-layer
bidirectional GRU, RNN with tanh and relu; a scripted model whose Python branch is exported
as If, fed to take each branch, and whose loop over the batch size is exported as Loop)
and torch's loss and gradients. Our pass
differentiates the export with respect to every parameter and the input, and the result
must match torch's ``.grad`` to float32 precision.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import onnx_light as ol

DATA = pathlib.Path(__file__).resolve().parent / "data"
CASES = sorted(p.stem for p in DATA.glob("*_opset*.onnx"))


def test_fixtures_present() -> None:
    assert len(CASES) >= 12, f"expected the recurrent torch fixtures in {DATA}; run make_recurrent_fixtures.py"


@pytest.mark.parametrize("case", CASES)
def test_recurrent_export_gradients_match_torch(case: str) -> None:
    name, _, _ = case.rpartition("_opset")
    ref = np.load(DATA / f"{name}.npz")
    model = ol.load(DATA / f"{case}.onnx")
    xs = [*(str(p) for p in ref["params"]), "x"]
    bwd = ol.GradientOfFunction(model, xs=xs, y="loss")
    values = {t.name: ol.numpy_helper.to_array(t) for t in model.graph.initializer}
    values.update({"x": ref["x"], bwd.input[-1]: np.ones((), np.float32)})
    (loss,) = ol.runtime.InferenceSession(model).run(["loss"], {"x": ref["x"]})
    np.testing.assert_allclose(loss, ref["loss"], rtol=1e-5)
    grads = ol.runtime.InferenceSession(bwd).run(None, {n: values[n] for n in bwd.input})
    for x, g in zip(xs, grads):
        want = ref[f"grad:{x}"]
        assert g.shape == want.shape, f"{case}: grad_{x} shape {g.shape} != {want.shape}"
        scale = max(1.0, float(np.max(np.abs(want))))
        np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-5 * scale, err_msg=f"{case}: grad_{x}")
