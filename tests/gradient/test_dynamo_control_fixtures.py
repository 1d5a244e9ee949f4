"""Dynamo-exporter (torch.export) control flow against torch.autograd, without torch.

``make_dynamo_control_fixtures.py`` (run with torch and onnxscript) stored ``torch.cond``
exported as If (fed to take each branch) and ``while_loop`` exported as a Loop whose trip
count is a fed integer (3, and 0: zero iterations), with torch's gradients. Our reverse pass
must give them (``export_check``: float32 precision, full checker, onnxruntime), and forward
mode <torch's gradient, t>.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
from export_check import check_export_gradients, check_export_tangent

import onnx_light as ol

DATA = pathlib.Path(__file__).resolve().parent / "data" / "dynamo_cf"
CASES = sorted(p.stem for p in DATA.glob("*.npz"))
OP = {"cond": "If", "while": "Loop"}


def test_fixtures_present() -> None:
    assert CASES == ["cond_a", "cond_b", "while_n0", "while_n3"], f"run make_dynamo_control_fixtures.py ({CASES})"
    # the two cond feeds take different branches: fc2 is read by one branch only
    taken = [bool(np.any(np.load(DATA / f"{c}.npz")["grad:fc2.weight"])) for c in ("cond_a", "cond_b")]
    assert sorted(taken) == [False, True], taken


def _load(case: str) -> tuple[ol.ModelProto, dict[str, np.ndarray], list[str], dict[str, np.ndarray]]:
    name = case.rpartition("_")[0]
    ref = dict(np.load(DATA / f"{case}.npz"))
    model = ol.load(DATA / f"{name}_dynamo_opset18.onnx")
    assert any(n.op_type == OP[name] for n in model.graph.node), case
    feeds = {k.split(":", 1)[1]: v for k, v in ref.items() if k.startswith("feed:")}
    return model, feeds, [*(str(p) for p in ref["params"]), "x"], ref


@pytest.mark.parametrize("case", CASES)
def test_dynamo_control_flow_gradients_match_torch(case: str) -> None:
    check_export_gradients(case, *_load(case))


@pytest.mark.parametrize("case", CASES)
def test_dynamo_control_flow_tangent_matches_torch(case: str) -> None:
    check_export_tangent(case, *_load(case))
