"""Checks a torch export's gradients against torch's, without torch (for the fixture tests).

``check_export_gradients`` differentiates the export with our reverse pass with respect to
the parameters and the input, compares with torch's ``.grad`` to float32 precision, and runs
the same backward model through onnx's full checker and onnxruntime; ``check_export_tangent``
compares forward mode along a random direction with <torch's gradient, direction>.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import onnx_light as ol


def export_values(model: Any, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The model's initializers and the feeds, by name."""
    values = {t.name: ol.numpy_helper.to_array(t) for t in model.graph.initializer}
    values.update(feeds)
    return values


def check_export_gradients(
    case: str, model: Any, feeds: dict[str, np.ndarray], xs: list[str], ref: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Our gradients of ``loss`` match ``ref["grad:<x>"]`` (torch's), in our runtime and onnxruntime."""
    import onnx
    import onnxruntime as ort

    (loss,) = ol.runtime.InferenceSession(model).run(["loss"], feeds)
    np.testing.assert_allclose(loss, ref["loss"], rtol=1e-5, err_msg=f"{case}: loss")
    values = export_values(model, feeds)
    bwd = ol.GradientOfFunction(model, xs=xs, y="loss")
    bfeeds = {n: values[n] if n in values else np.ones((), np.float32) for n in bwd.input}
    grads = dict(zip(xs, ol.runtime.InferenceSession(bwd).run(None, bfeeds)))
    for x, g in grads.items():
        want = ref[f"grad:{x}"]
        assert g.shape == want.shape, f"{case}: grad_{x} shape {g.shape} != {want.shape}"
        scale = max(1.0, float(np.max(np.abs(want))))
        np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-5 * scale, err_msg=f"{case}: grad_{x}")
    wrapped = onnx.ModelProto.FromString(ol.gradient_model(model, xs=xs, y="loss").SerializeToString())
    onnx.checker.check_model(wrapped, full_check=True)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(wrapped.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    ort_feeds = {i.name: bfeeds.get(i.name, values.get(i.name)) for i in sess.get_inputs()}
    theirs = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, ort_feeds)))
    for x, g in grads.items():
        np.testing.assert_allclose(
            theirs[f"grad_{x}"], g, rtol=1e-4, atol=1e-6, err_msg=f"{case}: onnxruntime grad_{x}"
        )
    return grads


def check_export_tangent(
    case: str, model: Any, feeds: dict[str, np.ndarray], xs: list[str], ref: dict[str, np.ndarray]
) -> None:
    """Forward mode along a random direction t gives <torch's gradient, t>."""
    values = export_values(model, feeds)
    fwd = ol.TangentOfFunction(model, xs=xs, ys=["loss"])
    rng = np.random.default_rng(5)
    ts = {x: rng.standard_normal(values[x].shape).astype(np.float32) for x in xs}
    tfeeds = {n: ts[n[4:]] if n.startswith("fwd_") and n[4:] in ts else values[n] for n in fwd.input}
    (got,) = ol.runtime.InferenceSession(fwd).run(None, tfeeds)
    want = sum(float(np.sum(ref[f"grad:{x}"].astype(np.float64) * ts[x])) for x in xs)
    np.testing.assert_allclose(float(got), want, rtol=1e-4, atol=1e-4, err_msg=f"{case}: <grad, t>")
