"""Torch exports of packed sequences (pack_padded_sequence -> LSTM/GRU -> pad_packed_sequence)
against torch.autograd, without torch.

``make_packed_fixtures.py`` (run with torch) stored a bidirectional LSTM, a 2-layer
batch_first LSTM and a bidirectional GRU over padded batches with unsorted lengths,
exported by the classic exporter at opsets 14 and 17 (the recurrent op gets
``sequence_lens``; its initial_h and initial_c are one zeros tensor). The gradients must be
torch's, the steps beyond each sequence's length exactly zero, the backward model valid
(full checker) and onnxruntime's equal to ours; forward mode gives <torch's gradient, t>.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
from export_check import check_export_gradients, check_export_tangent

import onnx_light as ol

DATA = pathlib.Path(__file__).resolve().parent / "data" / "packed"
CASES = sorted(p.stem for p in DATA.glob("*_opset*.onnx"))


def test_fixtures_present() -> None:
    assert len(CASES) == 6, f"expected the packed-sequence torch fixtures in {DATA}; run make_packed_fixtures.py"


def _load(case: str) -> tuple[ol.ModelProto, dict[str, np.ndarray], list[str], dict[str, np.ndarray]]:
    name, _, _ = case.rpartition("_opset")
    ref = dict(np.load(DATA / f"{name}.npz"))
    model = ol.load(DATA / f"{case}.onnx")
    assert any(n.op_type in ("LSTM", "GRU") and len(n.input) > 4 and n.input[4] for n in model.graph.node), case
    return model, {"x": ref["x"], "lengths": ref["lengths"]}, [*(str(p) for p in ref["params"]), "x"], ref


@pytest.mark.parametrize("case", CASES)
def test_packed_gradients_match_torch(case: str) -> None:
    model, feeds, xs, ref = _load(case)
    grads = check_export_gradients(case, model, feeds, xs, ref)
    batch_first = "batch_first" in case
    for b, length in enumerate(ref["lengths"]):
        padded = grads["x"][b, length:] if batch_first else grads["x"][length:, b]
        assert padded.size == 0 or not np.any(padded), f"{case}: padded steps of sequence {b} get {padded}"


@pytest.mark.parametrize("case", CASES)
def test_packed_tangent_matches_torch(case: str) -> None:
    check_export_tangent(case, *_load(case))
