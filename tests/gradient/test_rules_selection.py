"""Gradient rules of Trilu, ReverseSequence, Compress, Unique, Scatter and TensorScatter:
float64 finite differences, onnxruntime agreement, the full checker (``check_gradient``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime  # noqa: F401  (a test extra)
import pytest
from gradcheck import Case, backward_feeds, check_gradient, gradient, run_forward
from onnx import helper as oh

import onnx_light as ol

_rng = np.random.default_rng(2026)


def rnd(*shape: int) -> np.ndarray:
    return _rng.standard_normal(shape)


def i64(*v: Any) -> np.ndarray:
    return np.array(v, np.int64)


def case(name: str, op: str, inputs: dict[str, Any], xs: str = "x", opset: int = 21, **attrs: Any) -> Case:
    """One node over ``inputs`` (in order; None: an omitted optional input) w.r.t. ``xs``."""
    names = [k if v is not None else "" for k, v in inputs.items()]
    feeds = {k: v for k, v in inputs.items() if v is not None}
    node = oh.make_node(op, names, ["y"], **attrs)
    ints = [k for k, v in feeds.items() if v.dtype.kind in "iub"]
    return Case(name, [node], feeds, xs.split(","), initializers=ints, opset=opset)


def unique(name: str, x: np.ndarray, **attrs: Any) -> Case:
    node = oh.make_node("Unique", ["x"], ["y", "first", "inverse", "counts"], **attrs)
    return Case(name, [node], {"x": x}, ["x"], y="y")


# distinct values, away from one another: the order Unique finds stays put under FD steps
DISTINCT = np.array([[0.3, -1.2, 2.5], [1.7, -0.4, 0.9]])
ROWS = np.array([[0.5, 1.0, -1.0], [2.0, -0.5, 0.1], [0.5, 1.0, -1.0], [-1.5, 0.2, 0.7]])

CASES: list[Case] = [
    case("Trilu-lower", "Trilu", {"x": rnd(2, 3, 4)}, upper=0),
    case("Trilu-upper-k", "Trilu", {"x": rnd(3, 4), "k": i64(1)}),
    case("Trilu-lower-negative-k", "Trilu", {"x": rnd(4, 3), "k": i64(-1)}, upper=0),
    case("ReverseSequence", "ReverseSequence", {"x": rnd(4, 3, 2), "lens": i64(4, 2, 1)}),
    case(
        "ReverseSequence-batch-first",
        "ReverseSequence",
        {"x": rnd(2, 5, 3), "lens": i64(3, 5)},
        batch_axis=0,
        time_axis=1,
    ),
    case("Compress-axis", "Compress", {"x": rnd(4, 3), "c": np.array([True, False, True, True])}, axis=0),
    case("Compress-short-condition", "Compress", {"x": rnd(2, 5), "c": np.array([False, True, True])}, axis=1),
    case("Compress-flat", "Compress", {"x": rnd(2, 3), "c": np.array([1, 0, 0, 1, 1, 0], bool)}),
    unique("Unique-sorted", DISTINCT),
    unique("Unique-unsorted", DISTINCT, sorted=0),
    # the duplicated rows move together under the FD direction only if they are one row:
    # axis rows here are distinct; duplicates are checked exactly below
    unique("Unique-axis", ROWS[[0, 1, 3]], axis=0),
    unique("Unique-axis-last-unsorted", DISTINCT, axis=-1, sorted=0),
    case(
        "Scatter-opset10",
        "Scatter",
        {"x": rnd(3, 4), "idx": i64([1, 0], [2, 2]), "u": rnd(2, 2)},
        xs="x,u",
        opset=10,
        axis=0,
    ),
    case(
        "TensorScatter",
        "TensorScatter",
        {"x": rnd(2, 3, 5, 2), "u": rnd(2, 3, 2, 2), "w": i64(1, 3)},
        xs="x,u",
        opset=24,
    ),
    case(
        "TensorScatter-circular",
        "TensorScatter",
        {"x": rnd(2, 4, 3), "u": rnd(2, 2, 3), "w": i64(3, 1)},
        xs="x,u",
        opset=24,
        axis=1,
        mode="circular",
    ),
    case("TensorScatter-no-indices", "TensorScatter", {"x": rnd(2, 5, 2), "u": rnd(2, 3, 2)}, xs="x,u", opset=24),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_rule(case: Case) -> None:
    check_gradient(case)


def _grads(row: Case, dy: np.ndarray) -> list[np.ndarray]:
    model, bwd = gradient(row)
    return ol.runtime.InferenceSession(bwd).run(None, backward_feeds(bwd, row.inputs, dy, model))


def test_unique_duplicates_share_the_gradient() -> None:
    """x = [3, 1, 3]: Y = [1, 3], counts [1, 2]; each 3 gets half of dY[1]."""
    row = unique("dup", np.array([3.0, 1.0, 3.0]))
    assert run_forward(gradient(row)[0], row.inputs, "y").tolist() == [1.0, 3.0]
    (dx,) = _grads(row, np.array([10.0, 4.0]))
    np.testing.assert_allclose(dx, [2.0, 10.0, 2.0])


def test_unique_duplicate_rows_share_the_gradient() -> None:
    row = unique("dup-rows", ROWS, axis=0)  # rows 0 and 2 are equal
    y = run_forward(gradient(row)[0], row.inputs, "y")
    assert y.shape == (3, 3)
    dy = np.arange(9.0).reshape(3, 3)
    (dx,) = _grads(row, dy)
    sorted_rows = [tuple(r) for r in y]
    for i, r in enumerate(ROWS):
        j = sorted_rows.index(tuple(r))
        share = 2.0 if j == sorted_rows.index(tuple(ROWS[0])) else 1.0
        np.testing.assert_allclose(dx[i], dy[j] / share)


def test_tensor_scatter_update_gradient_is_the_written_window() -> None:
    """linear mode, write index 1, two steps: dUpdate = dY[:, 1:3], dPast is dY with that window zeroed."""
    inputs = {"x": np.zeros((1, 4, 1)), "u": np.zeros((1, 2, 1)), "w": i64(1)}
    row = case("ts", "TensorScatter", inputs, "x,u", 24, axis=1)
    dy = np.arange(4.0).reshape(1, 4, 1)
    d_past, d_update = _grads(row, dy)
    np.testing.assert_array_equal(d_update.reshape(-1), [1.0, 2.0])
    np.testing.assert_array_equal(d_past.reshape(-1), [0.0, 0.0, 0.0, 3.0])
