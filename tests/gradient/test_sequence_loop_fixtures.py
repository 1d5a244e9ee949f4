"""Torch exports of scripted loops building a Python list, against torch.autograd, without torch.

``make_sequence_loop_fixtures.py`` (run with torch) stored two scripted models exported by
the classic exporter at opsets 14 to 18, whose loop over the rows of x becomes a Loop
carrying a sequence (``list.append`` -> SequenceInsert; ``torch.stack``/``torch.cat`` ->
ConcatFromSequence): one appends and stacks, one starts the list with x and reads its last
element in the loop. Our reverse pass must give torch's ``.grad`` to float32 precision, the
backward graph must pass onnx's full checker and agree with onnxruntime, and forward mode
along a random direction must give <torch's gradient, direction> (``export_check``).
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
from export_check import check_export_gradients, check_export_tangent

import onnx_light as ol
from onnx_light import shape_inference

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
    return model, {"x": ref["x"]}, [*(str(p) for p in ref["params"]), "x"], ref


@pytest.mark.parametrize("case", CASES)
def test_list_loop_gradients_match_torch(case: str) -> None:
    check_export_gradients(case, *_load(case))


@pytest.mark.parametrize("case", CASES)
def test_list_loop_tangent_matches_torch(case: str) -> None:
    check_export_tangent(case, *_load(case))


@pytest.mark.parametrize("case", CASES)
def test_shape_inference_keeps_the_list_a_sequence(case: str) -> None:
    """Our infer_shapes does not declare the Loop's list output a tensor (onnx's checker and
    onnxruntime then reject the model): it is left undeclared, and the model still runs."""
    import onnx
    import onnxruntime as ort

    model, feeds, _, ref = _load(case)
    inferred = onnx.ModelProto.FromString(shape_inference.infer_shapes(model).SerializeToString())
    loop = next(n for n in inferred.graph.node if n.op_type == "Loop")
    declared = {v.name: v.type.WhichOneof("value") for v in inferred.graph.value_info}
    assert declared.get(loop.output[-1]) in (None, "sequence_type"), declared.get(loop.output[-1])
    onnx.checker.check_model(inferred, full_check=True)
    sess = ort.InferenceSession(inferred.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(sess.run(None, feeds)[0], ref["loss"], rtol=1e-5)
