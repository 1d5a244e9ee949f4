"""Scan bodies run their typed generated function: the body's declared input types, the
captured outer values' types from the first run, and equal-but-distinct dtype objects of the
initial state (ConstantOfShape) made builtin. Results must be those of the untyped path."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto, numpy_helper
from onnx import helper as H

import onnx_light
from onnx_light.runtime import InferenceSession
from onnx_light.runtime._plan import Plan, run_plan

F = TensorProto.FLOAT


class _Tagged(np.ndarray):
    pass


def _rnn_session(zero_state: bool) -> InferenceSession:
    """h_t = tanh(h_{t-1} @ W + x_t) * 0.5 - h_{t-1}; W read from the outer graph."""
    body = H.make_graph(
        [
            H.make_node("MatMul", ["h", "W"], ["hw"]),
            H.make_node("Add", ["hw", "xt"], ["a"]),
            H.make_node("Tanh", ["a"], ["t"]),
            H.make_node("Mul", ["t", "half"], ["m"]),
            H.make_node("Sub", ["m", "h"], ["h2"]),
            H.make_node("Identity", ["h2"], ["y"]),
        ],
        "body",
        [H.make_tensor_value_info("h", F, [4, 8]), H.make_tensor_value_info("xt", F, [4, 8])],
        [H.make_tensor_value_info("h2", F, [4, 8]), H.make_tensor_value_info("y", F, [4, 8])],
        [numpy_helper.from_array(np.array(0.5, np.float32), "half")],
    )
    nodes = [H.make_node("Scan", ["h0", "X"], ["hT", "Y"], body=body, num_scan_inputs=1)]
    inputs = [H.make_tensor_value_info("X", F, [5, 4, 8]), H.make_tensor_value_info("W", F, [8, 8])]
    inits = []
    if zero_state:
        shape = numpy_helper.from_array(np.array([4, 8], np.int64), "shape")
        # raw bytes: the folded constant's dtype is an equal copy of float32, not numpy's own
        zero = H.make_tensor("v", F, [1], np.zeros(1, np.float32).tobytes(), raw=True)
        nodes.insert(0, H.make_node("ConstantOfShape", ["shape"], ["h0"], value=zero))
        inits.append(shape)
    else:
        inputs.append(H.make_tensor_value_info("h0", F, [4, 8]))
    outputs = [H.make_tensor_value_info("hT", F, [4, 8]), H.make_tensor_value_info("Y", F, [5, 4, 8])]
    model = H.make_model(H.make_graph(nodes, "g", inputs, outputs, inits), opset_imports=[H.make_opsetid("", 18)])
    return InferenceSession(onnx_light.load_from_string(model.SerializeToString()))


def _reference(h: np.ndarray, xs: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ys = []
    for x in xs:
        h = np.tanh(np.matmul(h, w) + x) * np.float32(0.5) - h
        ys.append(h)
    return h, np.stack(ys)


def _body(sess: InferenceSession) -> Plan:
    (step,) = [s for s in sess._plan.steps if "body" in s.kwargs]
    body: Plan = step.kwargs["body"]
    return body


def _feeds(zero_state: bool) -> dict[str, np.ndarray]:
    r = np.random.default_rng(0)
    feeds = {"X": r.standard_normal((5, 4, 8)).astype(np.float32), "W": r.standard_normal((8, 8)).astype(np.float32)}
    if not zero_state:
        feeds["h0"] = r.standard_normal((4, 8)).astype(np.float32)
    return feeds


def test_a_scan_body_is_typed_by_its_inputs_and_captured_values() -> None:
    sess = _rnn_session(zero_state=False)
    feeds = _feeds(zero_state=False)
    for _ in range(2):
        h, y = sess.run(None, feeds)
        want_h, want_y = _reference(feeds["h0"], feeds["X"], feeds["W"])
        assert np.array_equal(h, want_h) and np.array_equal(y, want_y)
    body = _body(sess)
    assert body.scope_specialised
    captured = body.slot_of[body.captured[0]]
    assert body.input_types[captured] == (np.dtype(np.float32), (8, 8))
    assert len(body.codes) == 1  # every step ran the typed function, never the untyped twin


def test_a_constant_of_shape_initial_state_keeps_the_body_typed() -> None:
    sess = _rnn_session(zero_state=True)
    feeds = _feeds(zero_state=True)
    h, y = sess.run(None, feeds)
    want_h, want_y = _reference(np.zeros((4, 8), np.float32), feeds["X"], feeds["W"])
    assert np.array_equal(h, want_h) and np.array_equal(y, want_y)
    assert len(_body(sess).codes) == 1


def test_a_captured_value_that_breaks_the_promise_runs_the_untyped_twin() -> None:
    sess = _rnn_session(zero_state=False)
    feeds = _feeds(zero_state=False)
    sess.run(None, feeds)
    body = _body(sess)
    h0, x = feeds["h0"], feeds["X"][0]
    w = feeds["W"]
    cases: list[Any] = [w.astype(np.float64), w.view(_Tagged), w[None]]
    for w in cases:
        with np.errstate(all="ignore"):
            got = run_plan(body, [h0, x], {body.captured[0]: w})
        want = np.tanh(np.matmul(h0, w) + x) * 0.5 - h0
        assert got[0].dtype == want.dtype and got[0].shape == want.shape
        assert np.allclose(got[0], want, rtol=1e-6, atol=1e-6)
    assert len(body.codes) == 2
