"""Gradients of real torch exports against torch.autograd, without torch installed.

``make_fixtures.py`` (run with torch) stored each export (opsets 17 and 18) and
torch's loss and gradients; here our codec reads the export, our pass differentiates
it with respect to every parameter and the input, our runtime runs the backward
function with ``dy = 1``, and the result must match torch's ``.grad`` to 1e-4
relative (absolute floor 1e-5 of the model's largest gradient, as in
``test_torch_exports.py``).
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import onnx_light as ol

DATA = pathlib.Path(__file__).resolve().parent / "data"
CASES = sorted(p.stem for p in DATA.glob("*_opset*.onnx"))


def test_fixtures_present() -> None:
    assert len(CASES) >= 14, f"expected the torch fixtures in {DATA}; regenerate with make_fixtures.py"


@pytest.mark.parametrize("case", CASES)
def test_gradients_match_torch(case: str) -> None:
    name, _, opset = case.rpartition("_opset")
    ref = np.load(DATA / f"{name}.npz")
    model = ol.load(DATA / f"{case}.onnx")
    assert next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) == int(opset)
    params = [str(p) for p in ref["params"]]
    xs = [*params, "x"]
    bwd = ol.GradientOfFunction(model, xs=xs, y="loss")
    values = {t.name: ol.numpy_helper.to_array(t) for t in model.graph.initializer}
    values.update({"x": ref["feed:x"], "target": ref["feed:target"], "dy": np.ones((), np.float32)})
    feeds = {n: values[n] for n in bwd.input}
    forward = ol.runtime.InferenceSession(model)
    (loss,) = forward.run(["loss"], {"x": ref["feed:x"], "target": ref["feed:target"]})
    np.testing.assert_allclose(loss, ref["loss"], rtol=1e-5)
    grads = ol.runtime.InferenceSession(bwd).run(None, feeds)
    scale = max(float(np.max(np.abs(ref[f"grad:{x}"]))) for x in xs)
    for x, g in zip(xs, grads):
        want = ref[f"grad:{x}"]
        assert g.shape == want.shape and g.dtype == np.float32, f"{case}: grad_{x} is {g.dtype}{g.shape}"
        np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-5 * scale, err_msg=f"{case}: grad_{x}")
