"""Backward graphs on an empty batch (N = 0): Conv's dW and GridSample's backward.

``Reshape(t, [0, 0, -1])`` of a (0, C, H, W) tensor fits any last dim; the spec leaves it
ambiguous and onnxruntime refuses it. The rules now merge axes with a static product (or a
computed shape). Finite differences are trivial at N = 0: the reference is the shapes and
zeros (no sample contributes to dW), and onnxruntime running the same graph; a batch of two
with the batch symbolic checks the new form against float64 finite differences.
"""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import Case, backward_feeds, check_gradient, check_in_onnxruntime, gradient, run_forward
from onnx import helper as oh

import onnx_light as ol


def _cases(n: int, dynamic: list[str]) -> list[Case]:
    rng = np.random.default_rng(n)
    return [
        Case(
            f"conv_n{n}",
            [oh.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
            {"x": rng.standard_normal((n, 3, 5, 5)), "w": rng.standard_normal((4, 3, 3, 3))},
            ["x", "w"],
            dynamic=dynamic,
            ort_dtype=np.float32,  # onnxruntime has no float64 ConvTranspose
        ),
        Case(
            f"grid_sample_n{n}",
            [oh.make_node("GridSample", ["x", "g"], ["y"], align_corners=0)],
            {"x": rng.standard_normal((n, 2, 4, 5)), "g": rng.uniform(-0.9, 0.9, (n, 3, 3, 2))},
            ["x", "g"],
            dynamic=dynamic,
        ),
    ]


@pytest.mark.parametrize("dynamic", [[], ["x", "g"]], ids=["static", "symbolic"])
@pytest.mark.parametrize("index", [0, 1], ids=["conv", "grid_sample"])
def test_empty_batch_runs_in_both_runtimes(index: int, dynamic: list[str]) -> None:
    case = _cases(0, dynamic)[index]
    check_in_onnxruntime(case)  # onnxruntime refused the old Reshape at N = 0
    model, bwd = gradient(case)
    y = run_forward(model, case.inputs, "y")
    grads = ol.runtime.InferenceSession(bwd).run(None, backward_feeds(bwd, case.inputs, np.zeros_like(y), model))
    for x, g in zip(case.xs, grads):
        assert g.shape == case.inputs[x].shape
        assert not np.any(g)  # dW of no sample is 0


@pytest.mark.parametrize("index", [0, 1], ids=["conv", "grid_sample"])
def test_symbolic_batch_form_matches_finite_differences(index: int) -> None:
    case = _cases(2, ["x", "g"])[index]
    check_gradient(case, ort=False)
    check_in_onnxruntime(case)
