"""Real PyTorch exports, differentiated by our pass and compared with ``torch.autograd``.

Each model of ``torch_models.SPECS`` (loss inside ``forward``) is exported by the
TorchScript exporter (``dynamo=False``: the dynamo exporter needs ``onnxscript``,
which is not a dependency) at opsets 17 and 18, with the parameters as
initializers named after them. The bytes are read with OUR codec and
``GradientOfFunction(model, xs=[every parameter] + ["x"], y="loss")`` is run in our
runtime with ``dy = 1``; then:

* every gradient matches the parameter's ``.grad`` (and ``x.grad``) from torch with
  ``np.testing.assert_allclose(rtol=1e-4, atol=1e-5 * scale)``, where ``scale`` is the
  largest magnitude over ALL of that model's torch gradients (a gradient that is
  analytically zero, such as a conv bias followed by training-mode BatchNorm, is
  then compared to float32 noise of the model's gradient scale, not to itself);
* the same backward FunctionProto, wrapped as a model, runs in onnxruntime and
  agrees with our runtime to the same tolerance;
* one export with a dynamic batch axis gives one backward function that matches
  torch at two batch sizes.

torch is an optional extra (``pip install '.[torch]'``). Without it every test here
is reported as xfail with that reason rather than silently skipped.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import onnx_light as ol

try:
    import torch  # noqa: F401
except ImportError:  # pragma: no cover - depends on the environment
    _HAVE_TORCH = False
else:
    _HAVE_TORCH = True

pytestmark = [
    pytest.mark.torch,
    pytest.mark.xfail(not _HAVE_TORCH, reason="torch extra not installed (pip install '.[torch]')", run=False),
]

if _HAVE_TORCH:
    import torch_models as tm

    SPEC_NAMES = list(tm.SPECS)
else:  # pragma: no cover
    tm = None
    SPEC_NAMES = ["mlp_mse", "mlp_ce", "mlp_nll", "cnn_bn_eval", "cnn_bn_train", "depthwise", "transformer"]

OPSETS = [17, 18]
RTOL = 1e-4
ATOL_SCALE = 1e-5


def _gradcheck() -> Any:
    """``tests/gradient/gradcheck.py`` (for ``backward_model``), importable however pytest was started."""
    folder = str(Path(__file__).resolve().parents[1] / "gradient")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    import gradcheck

    return gradcheck


@functools.cache
def _export(name: str, opset: int, dynamic_batch: bool = False) -> Any:
    """Our ModelProto of the export (each model is exported once per module run)."""
    return ol.load_from_string(tm.export(tm.SPECS[name], opset, dynamic_batch))


@functools.cache
def _backward(name: str, opset: int, dynamic_batch: bool = False) -> tuple[Any, Any, list[str]]:
    """(forward model, backward FunctionProto, xs)."""
    model = _export(name, opset, dynamic_batch)
    params = tm.parameter_names(tm.SPECS[name])
    inits = {t.name for t in model.graph.initializer}
    missing = [p for p in params if p not in inits]
    assert not missing, f"{name}: parameters not exported as initializers under their names: {missing}"
    xs = [*params, "x"]
    return model, ol.GradientOfFunction(model, xs=xs, y="loss"), xs


def _feeds(model: Any, bwd: Any, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The backward function's feeds: initializers, the model inputs, and ``dy = 1``."""
    values = {t.name: ol.numpy_helper.to_array(t) for t in model.graph.initializer}
    values.update(feeds)
    values["dy"] = np.ones((), np.float32)
    unknown = [n for n in bwd.input if n not in values]
    assert not unknown, f"backward function inputs with no value: {unknown}"
    return {n: values[n] for n in bwd.input}


def _compare(name: str, xs: list[str], ours: list[np.ndarray], ref: dict[str, np.ndarray], what: str) -> None:
    scale = max(float(np.max(np.abs(g))) for g in ref.values())
    for x, g in zip(xs, ours):
        assert g.shape == ref[x].shape and g.dtype == np.float32, f"{name}: grad_{x} is {g.dtype}{g.shape}"
        np.testing.assert_allclose(g, ref[x], rtol=RTOL, atol=ATOL_SCALE * scale, err_msg=f"{name}: grad_{x} {what}")


def _run_onnxruntime(bwd: Any, bfeeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The backward function wrapped as a model (``gradcheck.backward_model``), checked and run in onnxruntime."""
    import onnx
    import onnxruntime as ort

    wrapped = _gradcheck().backward_model(bwd, bfeeds)
    onnx.checker.check_model(wrapped, full_check=True)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(wrapped.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, bfeeds)


def _attr(node: Any, name: str) -> Any:
    return next((a for a in node.attribute if a.name == name), None)


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("name", SPEC_NAMES)
def test_export_covers(name: str, opset: int) -> None:
    """The export holds the ops the case is meant to cover (guards against exporter changes)."""
    spec = tm.SPECS[name]
    model = _export(name, opset)
    assert [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] == [opset]
    ops = {n.op_type for n in model.graph.node}
    assert spec.ops <= ops, f"{name}: export lacks {sorted(spec.ops - ops)}; has {sorted(ops)}"
    for node in model.graph.node:
        if node.op_type == "BatchNormalization":
            mode = _attr(node, "training_mode")
            assert (mode.i if mode is not None else 0) == int(spec.train), f"{name}: {node.name} training_mode"
    if name == "depthwise":
        groups = [_attr(n, "group") for n in model.graph.node if n.op_type == "Conv"]
        assert any(g is not None and g.i == 6 for g in groups), f"{name}: no grouped (depthwise) Conv"


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("name", SPEC_NAMES)
def test_gradients_match_torch(name: str, opset: int) -> None:
    model, bwd, xs = _backward(name, opset)
    assert list(bwd.input[: len(xs)]) == xs and bwd.input[-1] == "dy"
    assert list(bwd.output) == [f"grad_{x}" for x in xs]
    feeds, loss, ref = tm.reference(tm.SPECS[name])

    forward = ol.runtime.InferenceSession(model)
    model_inputs = {i.name for i in forward.get_inputs()}
    (our_loss,) = forward.run(["loss"], {k: v for k, v in feeds.items() if k in model_inputs})
    np.testing.assert_allclose(our_loss, loss, rtol=1e-5, err_msg=f"{name}: forward loss")

    grads = ol.runtime.InferenceSession(bwd).run(None, _feeds(model, bwd, feeds))
    _compare(name, xs, grads, ref, "ours vs torch.autograd")


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("name", SPEC_NAMES)
def test_onnxruntime_agrees(name: str, opset: int) -> None:
    model, bwd, xs = _backward(name, opset)
    feeds, _, ref = tm.reference(tm.SPECS[name])
    bfeeds = _feeds(model, bwd, feeds)
    theirs = _run_onnxruntime(bwd, bfeeds)
    ours = ol.runtime.InferenceSession(bwd).run(None, bfeeds)
    _compare(name, xs, theirs, ref, "onnxruntime vs torch.autograd")
    _compare(name, xs, theirs, dict(zip(xs, ours)), "onnxruntime vs ours")


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("name", SPEC_NAMES)
def test_dynamic_batch(name: str, opset: int) -> None:
    """One backward function of an export with a symbolic batch axis, run at two batch sizes.

    Ours matches torch at both sizes; onnxruntime runs the same function at the second size.
    """
    spec = tm.SPECS[name]
    model, bwd, xs = _backward(name, opset, dynamic_batch=True)
    dims = [d.dim_param or d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert dims[0] == "N", f"{name}: batch axis not symbolic in the export: {dims}"
    sess = ol.runtime.InferenceSession(bwd)
    for batch in (spec.x_shape[0], spec.x_shape[0] + 3):
        feeds, _, ref = tm.reference(spec, batch)
        bfeeds = _feeds(model, bwd, feeds)
        grads = sess.run(None, bfeeds)
        _compare(f"{name}[N={batch}]", xs, grads, ref, "ours vs torch.autograd")
    _compare(f"{name}[N={batch}]", xs, _run_onnxruntime(bwd, bfeeds), ref, "onnxruntime vs torch.autograd")
