"""Architectures built on the image ops, against torch.autograd and float64 finite
differences, without torch installed.

``make_image_fixtures.py`` (run with torch) stored a U-Net/FPN decoder (Resize by scales
and by sizes from Shape), a YOLO-style head (Resize + Concat), two spatial transformers
(AffineGrid + GridSample bilinear; a MatMul grid + GridSample bicubic with border padding)
and a RoiAlign box head, exported at opsets 11-20 with symbolic axes, and torch's loss
and gradients at two input sizes. The pass runs ONCE per export; its backward function
runs at both sizes in our runtime and must match torch's ``.grad`` to float32 precision.
``gradcheck`` then checks the same export in float64 against finite differences.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import onnx_light as ol

DATA = pathlib.Path(__file__).resolve().parent / "data" / "image"
CASES = sorted(p.stem for p in DATA.glob("*_opset*.onnx"))
#: the inputs of each model besides the image (never differentiated)
OTHER_FEEDS = {"roi_head": ["rois", "batch", "target"]}
#: the image ops each architecture exists for
OPS = {
    "unet": {"Resize", "Concat"},
    "yolo": {"Resize", "Concat"},
    "stn": {"AffineGrid", "GridSample"},
    "stn_matmul": {"GridSample"},
    "roi_head": {"RoiAlign"},
}
#: the models exported with symbolic spatial dims (stn_matmul builds its base grid for one size)
SYMBOLIC_SPATIAL = ("unet", "yolo", "stn", "roi_head")


def test_fixtures_present() -> None:
    assert len(CASES) >= 14, f"expected the image-op torch fixtures in {DATA}; run make_image_fixtures.py"


def _feeds(ref: np.lib.npyio.NpzFile, name: str, k: int) -> dict[str, np.ndarray]:
    return {n: ref[f"{k}:feed:{n}"] for n in ["x", *OTHER_FEEDS.get(name, ["target"])]}


@pytest.mark.parametrize("case", CASES)
def test_backward_graph_matches_torch_at_two_sizes(case: str) -> None:
    name, _, opset = case.rpartition("_opset")
    ref = np.load(DATA / f"{name}.npz")
    model = ol.load(DATA / f"{case}.onnx")
    assert next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) == int(opset)
    assert OPS[name] <= {n.op_type for n in model.graph.node}, f"{case}: lacks {OPS[name]}"
    dims = [d.dim_param or d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert isinstance(dims[0], str) and dims[0], f"{case}: batch not symbolic ({dims})"
    if name in SYMBOLIC_SPATIAL:
        assert all(isinstance(d, str) and d for d in dims[2:]), f"{case}: spatial dims not symbolic ({dims})"
    xs = [*(str(p) for p in ref["params"]), "x"]
    bwd = ol.GradientOfFunction(model, xs=xs, y="loss")
    weights = {t.name: ol.numpy_helper.to_array(t) for t in model.graph.initializer}
    forward = ol.runtime.InferenceSession(model)
    backward = ol.runtime.InferenceSession(bwd)
    for k in (0, 1):
        feeds = _feeds(ref, name, k)
        (loss,) = forward.run(["loss"], feeds)
        np.testing.assert_allclose(loss, ref[f"{k}:loss"], rtol=1e-5, err_msg=f"{case} size {k}: loss")
        values = {**weights, **feeds, "dy": np.ones((), np.float32)}
        grads = backward.run(None, {n: values[n] for n in bwd.input})
        scale = max(float(np.max(np.abs(ref[f"{k}:grad:{x}"]))) for x in xs)
        for x, g in zip(xs, grads):
            want = ref[f"{k}:grad:{x}"]
            assert g.shape == want.shape and g.dtype == np.float32, f"{case} size {k}: grad_{x} is {g.dtype}{g.shape}"
            np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-5 * scale, err_msg=f"{case} size {k}: grad_{x}")


@pytest.mark.parametrize("case", [c for c in CASES if c.endswith(("opset17", "opset20", "opset16"))])
def test_float64_finite_differences(case: str) -> None:
    name = case.rpartition("_opset")[0]
    ref = np.load(DATA / f"{name}.npz")
    model = ol.load(DATA / f"{case}.onnx")
    xs = ["x", *[str(p) for p in ref["params"]][:2]]
    result = ol.gradcheck(model, xs, "loss", feeds=_feeds(ref, name, 1), directions=1, seed=5)
    assert result, str(result)
