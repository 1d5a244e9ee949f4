"""Gradients of torch exports with symbolic batch and spatial sizes, without torch installed.

``make_dynamic_fixtures.py`` (run with torch) stored a CNN, an OCR-style recogniser and
an FPN-ish detector exported with ``dynamic_axes`` at opsets 11, 13, 17 and 18, and
torch.autograd's loss and gradients at two input sizes. Here the pass runs ONCE per
export; its backward function then runs at both sizes in our runtime and must match
torch's ``.grad`` to float32 precision (1e-4 relative, absolute floor 1e-5 of the
model's largest gradient, as in ``test_exported_fixtures.py``).
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import onnx_light as ol

DATA = pathlib.Path(__file__).resolve().parent / "data" / "dynamic"
CASES = sorted(p.stem for p in DATA.glob("*_opset*.onnx"))


def test_fixtures_present() -> None:
    assert len(CASES) >= 12, f"expected the symbolic-size torch fixtures in {DATA}; run make_dynamic_fixtures.py"


@pytest.mark.parametrize("case", CASES)
def test_one_backward_graph_matches_torch_at_two_sizes(case: str) -> None:
    name, _, opset = case.rpartition("_opset")
    ref = np.load(DATA / f"{name}.npz")
    model = ol.load(DATA / f"{case}.onnx")
    assert next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) == int(opset)
    x_dims = [d.dim_param or d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert any(isinstance(d, str) and d for d in x_dims[2:]), f"{case}: spatial dims not symbolic ({x_dims})"
    xs = [*(str(p) for p in ref["params"]), "x"]
    bwd = ol.GradientOfFunction(model, xs=xs, y="loss")
    weights = {t.name: ol.numpy_helper.to_array(t) for t in model.graph.initializer}
    forward = ol.runtime.InferenceSession(model)
    backward = ol.runtime.InferenceSession(bwd)
    for k in (0, 1):
        feeds = {"x": ref[f"{k}:feed:x"], "target": ref[f"{k}:feed:target"]}
        (loss,) = forward.run(["loss"], feeds)
        np.testing.assert_allclose(loss, ref[f"{k}:loss"], rtol=1e-5, err_msg=f"{case} size {k}: loss")
        values = {**weights, **feeds, "dy": np.ones((), np.float32)}
        grads = backward.run(None, {n: values[n] for n in bwd.input})
        scale = max(float(np.max(np.abs(ref[f"{k}:grad:{x}"]))) for x in xs)
        for x, g in zip(xs, grads):
            want = ref[f"{k}:grad:{x}"]
            assert g.shape == want.shape and g.dtype == np.float32, f"{case} size {k}: grad_{x} is {g.dtype}{g.shape}"
            np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-5 * scale, err_msg=f"{case} size {k}: grad_{x}")
