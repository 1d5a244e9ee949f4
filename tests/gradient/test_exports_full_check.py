"""Every stored torch export with recurrent ops, If, Loop or sequences: the emitted reverse
AND forward graphs pass onnx's full checker, and onnxruntime runs both to our values; the
forward graph's tangent is torch's gradient along the directions.

The fixture tests compare our gradients with torch's in our runtime; this sweep adds the
checker and the second runtime for the exports whose tests do not (the recurrent and
branch/loop exports of ``make_recurrent_fixtures.py``, the CRNN/VAD/split exports of
``tests/models/make_crnn_vad_fixtures.py``), in both directions.
"""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np
import pytest

import onnx_light as ol

HERE = pathlib.Path(__file__).resolve().parent
CRNN_VAD = HERE.parent / "models" / "data" / "crnn_vad"
RECURRENT = sorted((HERE / "data").glob("*_opset*.onnx"))
EXPORTS = [*RECURRENT, *sorted(CRNN_VAD.glob("*_opset*.onnx"))]


def _reference(path: pathlib.Path) -> tuple[list[str], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(xs, feeds, torch's gradient of each x) of an export, from its .npz."""
    name = path.stem.rpartition("_opset")[0].removesuffix("_dynamo")
    ref = dict(np.load(path.parent / f"{name}.npz"))
    if "wrt" in ref:  # tests/models/data/crnn_vad
        feeds = {k[5:]: v for k, v in ref.items() if k.startswith("feed:")}
        xs = [*(str(p) for p in ref["params"]), *(str(w) for w in ref["wrt"])]
    else:
        xs, feeds = [*(str(p) for p in ref["params"]), "x"], {"x": ref["x"]}
    return xs, feeds, {x: ref[f"grad:{x}"] for x in xs}


def _run_both(model: Any, feeds: dict[str, np.ndarray], case: str) -> None:
    """The model passes the full checker and onnxruntime's outputs equal ours."""
    import onnx
    import onnxruntime as ort

    theirs_model = onnx.ModelProto.FromString(model.SerializeToString())
    onnx.checker.check_model(theirs_model, full_check=True)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(theirs_model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    theirs = sess.run(None, {n: feeds[n] for n in names})
    ours = ol.runtime.InferenceSession(model).run(None, {n: feeds[n] for n in names})
    for o, a, b in zip(sess.get_outputs(), ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5, err_msg=f"{case}: {o.name} ours vs onnxruntime")


@pytest.mark.parametrize("path", EXPORTS, ids=lambda p: p.stem)
def test_reverse_graph_full_check_and_onnxruntime(path: pathlib.Path) -> None:
    model = ol.load(path)
    xs, feeds, _ = _reference(path)
    values = {t.name: ol.numpy_helper.to_array(t) for t in model.graph.initializer}
    values.update(feeds, dy=np.ones((), np.float32))
    _run_both(ol.gradient_model(model, xs=xs, y="loss"), values, path.stem)


@pytest.mark.parametrize("path", EXPORTS, ids=lambda p: p.stem)
def test_forward_graph_full_check_onnxruntime_and_torch(path: pathlib.Path) -> None:
    model = ol.load(path)
    xs, feeds, torch_grads = _reference(path)
    values = {t.name: ol.numpy_helper.to_array(t) for t in model.graph.initializer}
    values.update(feeds)
    fwd = ol.TangentOfFunction(model, xs=xs, ys=["loss"])
    rng = np.random.default_rng(9)
    for x in xs:
        values[f"fwd_{x}"] = rng.standard_normal(values[x].shape).astype(values[x].dtype)
    types: dict[str, Any] = {
        n: (ol.helper.np_dtype_to_tensor_dtype(values[n].dtype), list(values[n].shape)) for n in fwd.input
    }
    types["fwd_loss"] = (ol.TensorProto.FLOAT, [])  # the loss is a float32 scalar
    _run_both(ol.function_to_model(fwd, types), values, path.stem)
    # and the tangent is torch's gradient along the directions
    (got,) = ol.runtime.InferenceSession(fwd).run(None, {n: values[n] for n in fwd.input})
    want = sum(float(np.sum(torch_grads[x].astype(np.float64) * values[f"fwd_{x}"])) for x in xs)
    np.testing.assert_allclose(float(got), want, rtol=2e-4, atol=1e-4, err_msg=f"{path.stem}: <torch grad, t>")
