"""Torch exports of scripted loops building a Python list, against torch.autograd, without torch.

``make_sequence_loop_fixtures.py`` (run with torch) stored two scripted models exported by
the classic exporter at opsets 14 to 18, whose loop over the rows of x becomes a Loop
carrying a sequence (``list.append`` -> SequenceInsert; ``torch.stack``/``torch.cat`` ->
ConcatFromSequence): one appends and stacks, one starts the list with x and reads its last
element in the loop. Our reverse pass must give torch's ``.grad`` to float32 precision, the
backward graph must pass onnx's full checker and agree with onnxruntime, and forward mode
along a random direction must give <torch's gradient, direction>.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import onnx_light as ol

DATA = pathlib.Path(__file__).resolve().parent / "data" / "seqloop"
CASES = sorted(p.stem for p in DATA.glob("*_opset*.onnx"))


def test_fixtures_present() -> None:
    assert len(CASES) == 10, f"expected the sequence-loop torch fixtures in {DATA}; run make_sequence_loop_fixtures.py"


def _load(case: str) -> tuple[ol.ModelProto, dict[str, np.ndarray], list[str], dict[str, np.ndarray]]:
    name, _, _ = case.rpartition("_opset")
    ref = dict(np.load(DATA / f"{name}.npz"))
    model = ol.load(DATA / f"{case}.onnx")
    loops = [n for n in model.graph.node if n.op_type == "Loop"]
    assert loops and any(i.type.HasField("sequence_type") for i in loops[0].attribute[0].g.input), case
    values = {t.name: ol.numpy_helper.to_array(t) for t in model.graph.initializer}
    values["x"] = ref["x"]
    return model, values, [*(str(p) for p in ref["params"]), "x"], ref


@pytest.mark.parametrize("case", CASES)
def test_list_loop_gradients_match_torch(case: str) -> None:
    import onnx
    import onnxruntime as ort

    model, values, xs, ref = _load(case)
    (loss,) = ol.runtime.InferenceSession(model).run(["loss"], {"x": ref["x"]})
    np.testing.assert_allclose(loss, ref["loss"], rtol=1e-5)
    bwd = ol.GradientOfFunction(model, xs=xs, y="loss")
    feeds = {n: values[n] if n in values else np.ones((), np.float32) for n in bwd.input}
    grads = ol.runtime.InferenceSession(bwd).run(None, feeds)
    for x, g in zip(xs, grads):
        want = ref[f"grad:{x}"]
        assert g.shape == want.shape, f"{case}: grad_{x} shape {g.shape} != {want.shape}"
        scale = max(1.0, float(np.max(np.abs(want))))
        np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-5 * scale, err_msg=f"{case}: grad_{x}")
    wrapped = onnx.ModelProto.FromString(ol.gradient_model(model, xs=xs, y="loss").SerializeToString())
    onnx.checker.check_model(wrapped, full_check=True)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(wrapped.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    theirs = dict(
        zip([o.name for o in sess.get_outputs()], sess.run(None, {n: feeds.get(n, values.get(n)) for n in names}))
    )
    for x, g in zip(xs, grads):
        np.testing.assert_allclose(
            theirs[f"grad_{x}"], g, rtol=1e-4, atol=1e-6, err_msg=f"{case}: onnxruntime grad_{x}"
        )


@pytest.mark.parametrize("case", CASES)
def test_list_loop_tangent_matches_torch(case: str) -> None:
    model, values, xs, ref = _load(case)
    fwd = ol.TangentOfFunction(model, xs=xs, ys=["loss"])
    rng = np.random.default_rng(5)
    ts = {x: rng.standard_normal(values[x].shape).astype(np.float32) for x in xs}
    feeds = {n: ts[n[4:]] if n.startswith("fwd_") and n[4:] in ts else values[n] for n in fwd.input}
    (got,) = ol.runtime.InferenceSession(fwd).run(None, feeds)
    want = sum(float(np.sum(ref[f"grad:{x}"].astype(np.float64) * ts[x])) for x in xs)
    np.testing.assert_allclose(float(got), want, rtol=1e-4, atol=1e-4, err_msg=f"{case}: <grad, t>")
