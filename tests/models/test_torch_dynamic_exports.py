"""Live torch exports with symbolic batch and spatial sizes against ``torch.autograd``.

``dynamic_models.SPECS`` (a CNN, an OCR-style recogniser, an FPN-ish detector) are
exported by the TorchScript exporter (``dynamo=False``: the dynamo exporter needs
``onnxscript``, not installed) with ``dynamic_axes`` at opsets 11, 13, 17 and 18. One
``GradientOfFunction`` per export; its backward function then runs at two input sizes,
in our runtime and (after ``onnx.checker`` with ``full_check``) in onnxruntime, and
must match torch's gradients to float32 precision. ``test_dynamic_fixtures.py`` checks
the stored copies of these exports without torch.
"""

from __future__ import annotations

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

NAMES = ["dyn_cnn", "ocr", "detector"]
OPSETS = [11, 13, 17, 18]


def _modules() -> tuple[Any, Any]:
    """``dynamic_models`` and ``tests/gradient/gradcheck.py``, importable however pytest was started."""
    here = Path(__file__).resolve().parent
    for folder in (str(here), str(here.parent / "gradient")):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    import dynamic_models
    import gradcheck

    return dynamic_models, gradcheck


def _onnxruntime(gradcheck: Any, bwd: Any, bfeeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnx
    import onnxruntime as ort

    wrapped = gradcheck.backward_model(bwd, bfeeds)
    onnx.checker.check_model(wrapped, full_check=True)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(wrapped.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(None, bfeeds)


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("name", NAMES)
def test_one_backward_graph_matches_torch_at_two_sizes(name: str, opset: int) -> None:
    dm, gradcheck = _modules()
    spec = dm.SPECS[name]
    model = ol.load_from_string(dm.export(spec, opset))
    xs = [*dm.parameter_names(spec), "x"]
    bwd = ol.GradientOfFunction(model, xs=xs, y="loss")
    weights = {t.name: ol.numpy_helper.to_array(t) for t in model.graph.initializer}
    for shape in dm.SIZES[name]:
        feeds, _, ref = dm.reference(spec, shape)
        values = {**weights, **feeds, "dy": np.ones((), np.float32)}
        bfeeds = {n: values[n] for n in bwd.input}
        scale = max(float(np.max(np.abs(g))) for g in ref.values())
        ours = ol.runtime.InferenceSession(bwd).run(None, bfeeds)
        theirs = _onnxruntime(gradcheck, bwd, bfeeds)
        for x, g, o in zip(xs, ours, theirs):
            what = f"{name} opset {opset} x{shape}: grad_{x}"
            assert g.shape == ref[x].shape, f"{what} shape {g.shape} != {ref[x].shape}"
            np.testing.assert_allclose(g, ref[x], rtol=1e-4, atol=1e-5 * scale, err_msg=f"{what} vs torch")
            np.testing.assert_allclose(o, g, rtol=1e-4, atol=1e-5 * scale, err_msg=f"{what} onnxruntime vs ours")


SUITE = ["mlp_mse", "mlp_ce", "mlp_nll", "cnn_bn_eval", "cnn_bn_train", "depthwise", "transformer"]


def _suite_export(tm: Any, name: str) -> tuple[Any, dict[str, dict[int, str]]]:
    """``torch_models`` export at opset 17 with every batch, spatial or sequence axis symbolic."""
    import io
    import warnings

    import torch

    spec = tm.SPECS[name]
    rank = len(spec.x_shape)
    axes = [0, 2, 3] if rank == 4 else [0, 1] if rank == 3 else [0]
    dynamic = {"x": {a: f"x{a}" for a in axes}, "target": {a: f"x{a}" for a in (axes if rank == 3 else [0])}}
    module = spec.model()
    x, target = spec.inputs()
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            (x, target),
            buf,
            opset_version=17,
            dynamo=False,
            do_constant_folding=False,
            input_names=["x", "target"],
            output_names=["loss"],
            dynamic_axes=dynamic,
            training=torch.onnx.TrainingMode.TRAINING if spec.train else torch.onnx.TrainingMode.EVAL,
        )
    return ol.load_from_string(buf.getvalue()), dynamic


@pytest.mark.parametrize("name", SUITE)
def test_the_fixed_size_suite_with_symbolic_sizes(name: str) -> None:
    """Every model of ``torch_models`` (differentiated at fixed sizes in test_torch_exports)
    exported with symbolic batch and spatial/sequence sizes: one backward graph, torch's
    gradients at the traced size and at a larger, odd one."""
    import torch

    here = Path(__file__).resolve().parent
    if str(here) not in sys.path:
        sys.path.insert(0, str(here))
    import torch_models as tm

    spec = tm.SPECS[name]
    model, dynamic = _suite_export(tm, name)
    xs = [*tm.parameter_names(spec), "x"]
    bwd = ol.GradientOfFunction(model, xs=xs, y="loss")
    weights = {t.name: ol.numpy_helper.to_array(t) for t in model.graph.initializer}
    grown = tuple(d + (3 if a else 1) if a in dynamic["x"] else d for a, d in enumerate(spec.x_shape))
    for shape in (spec.x_shape, grown):
        module = spec.model()
        gen = torch.Generator().manual_seed(5)
        x = torch.randn(shape, generator=gen).requires_grad_(True)
        target = torch.randn(shape, generator=gen) if name == "transformer" else spec.target(gen, shape[0])
        module(x, target).backward()
        ref = {n: p.grad.numpy() for n, p in module.named_parameters()}
        ref["x"] = x.grad.numpy()
        values = {**weights, "x": x.detach().numpy(), "target": target.numpy(), "dy": np.ones((), np.float32)}
        grads = ol.runtime.InferenceSession(bwd).run(None, {n: values[n] for n in bwd.input})
        scale = max(float(np.max(np.abs(g))) for g in ref.values())
        for k, g in zip(xs, grads):
            np.testing.assert_allclose(g, ref[k], rtol=1e-4, atol=1e-5 * scale, err_msg=f"{name} x{shape}: grad_{k}")
