"""Closure of the control-flow rules: what they emit (Scan, Loop, If, SequenceMap and the
sequence ops, at any depth of nesting) has rules, and an LSTM's backward graph is
differentiated again, reverse over reverse and forward over reverse, into Hessian-vector
products that match central finite differences of the gradient in float64."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from gradcheck import Case, build_model, gradient, to_ours
from onnx import helper as oh
from test_rules_control_flow import CONSTANT_IF_CASES, CONTROL_FLOW_CASES, LOOP_CASES, LOOP_IF_SCAN_CASES, NESTED_CASES
from test_rules_recurrent import RECURRENT_CASES
from test_rules_sequence import SEQUENCE_CASES

import onnx_light as ol

REGISTRY = ol.DefaultGradRegistry()
ROWS = [*CONTROL_FLOW_CASES, *LOOP_CASES, *NESTED_CASES, *LOOP_IF_SCAN_CASES, *CONSTANT_IF_CASES, *SEQUENCE_CASES]
ROWS += [c for c in RECURRENT_CASES if c.name in ("LSTM", "GRU", "RNN")]


def _all_nodes(nodes: Any) -> Iterator[Any]:
    """The nodes, and those of their subgraphs at any depth."""
    for n in nodes:
        yield n
        for a in n.attribute:
            for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                yield from _all_nodes(g.node)


@pytest.mark.parametrize("case", ROWS, ids=lambda c: c.name)
def test_emitted_ops_have_rules_at_every_depth(case: Case) -> None:
    _, bwd = gradient(case)
    for node in _all_nodes(bwd.node):
        rule = REGISTRY.lookup(node.domain, node.op_type, 21)
        assert rule is not None, f"{case.name}: the backward graph uses {node.op_type}, which has no rule"


_rng = np.random.default_rng(21)
T, B, I, H = 4, 2, 3, 3


def _lstm_model() -> tuple[Any, dict[str, np.ndarray]]:
    """A bidirectional LSTM whose loss reads Y and Y_c non-linearly, as our ModelProto (float64)."""
    feeds = {
        "X": _rng.standard_normal((T, B, I)) * 0.7,
        "W": _rng.standard_normal((2, 4 * H, I)) * 0.5,
        "R": _rng.standard_normal((2, 4 * H, H)) * 0.5,
        "Bias": _rng.standard_normal((2, 8 * H)) * 0.5,
    }
    nodes = [
        oh.make_node("LSTM", ["X", "W", "R", "Bias"], ["Y", "", "Y_c"], hidden_size=H, direction="bidirectional"),
        oh.make_node("Sin", ["Y"], ["ys"]),
        oh.make_node("Mul", ["ys", "Y"], ["y2"]),
        oh.make_node("ReduceSum", ["y2"], ["s1"], keepdims=0),
        oh.make_node("Mul", ["Y_c", "Y_c"], ["c2"]),
        oh.make_node("ReduceSum", ["c2"], ["s2"], keepdims=0),
        oh.make_node("Add", ["s1", "s2"], ["loss"]),
    ]
    case = Case("lstm_hvp", nodes, feeds, ["W", "R", "X"])
    return to_ours(build_model(case, np.float64), ol.ModelProto), feeds


def _gradient_fd(bwd: Any, feeds: dict[str, np.ndarray], x: str, v: np.ndarray, h: float = 1e-5) -> np.ndarray:
    """(grad_x(x + h v) - grad_x(x - h v)) / 2h: H v by central differences of the gradient."""
    sess = ol.runtime.InferenceSession(bwd)
    dy = np.ones((), np.float64)

    def at(t: float) -> np.ndarray:
        moved = {**feeds, x: feeds[x] + t * v, bwd.input[-1]: dy}
        return sess.run([f"grad_{x}"], {n: moved[n] for n in bwd.input})[0]

    return (at(h) - at(-h)) / (2 * h)


def test_lstm_hessian_vector_product_reverse_over_reverse() -> None:
    model, feeds = _lstm_model()
    bwd = ol.GradientOfFunction(model, ["W", "R", "X"], "loss")
    v = _rng.standard_normal(feeds["W"].shape)
    second = ol.GradientOfFunction(bwd, ["W"], "grad_W")  # <grad_W, v> differentiated: H v
    run = {**feeds, bwd.input[-1]: np.ones((), np.float64), second.input[-1]: v}
    (hv,) = ol.runtime.InferenceSession(second).run(None, {n: run[n] for n in second.input})
    np.testing.assert_allclose(hv, _gradient_fd(bwd, feeds, "W", v), rtol=1e-6, atol=1e-8)


def test_lstm_hessian_vector_product_forward_over_reverse() -> None:
    rule = REGISTRY.lookup("", "Scan", 21)
    if rule is None or rule.jvp is None:
        pytest.skip("the forward rule of Scan (what the LSTM's backward graph holds) is not on this branch")
    model, feeds = _lstm_model()
    bwd = ol.GradientOfFunction(model, ["W", "R", "X"], "loss")
    v = _rng.standard_normal(feeds["R"].shape)
    fwd = ol.TangentOfFunction(bwd, ["R"], ["grad_R"])  # J_{grad_R} v = H v
    run = {**feeds, bwd.input[-1]: np.ones((), np.float64), fwd.input[-1]: v}
    (hv,) = ol.runtime.InferenceSession(fwd).run(None, {n: run[n] for n in fwd.input})
    np.testing.assert_allclose(hv, _gradient_fd(bwd, feeds, "R", v), rtol=1e-6, atol=1e-8)
