"""The direct LSTM backward's reverse Scan runs in one call (``kernels/recurrent_sweep.py``):
recognised only when its body is exactly the emitted pattern, and then giving the generic Scan's
results (native float32: up to float rounding; the numpy twin: the body's products in its order)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto
from onnx import helper as H

import onnx_light
from onnx_light.runtime import InferenceSession, _native
from onnx_light.runtime.kernels import recurrent_sweep

NATIVE = _native.EXTENSION is not None and hasattr(_native.EXTENSION, "lstm_sweep")


def _model(dtype: int, loss_y: bool) -> Any:
    """A bidirectional LSTM (T 5, batch 3, hidden 4) and a loss of Y (or Y_h alone)."""
    x = H.make_tensor_value_info
    inputs = [
        x("X", dtype, [5, 3, 2]),
        x("W", dtype, [2, 16, 2]),
        x("R", dtype, [2, 16, 4]),
        x("B", dtype, [2, 32]),
        x("h0", dtype, [2, 3, 4]),
        x("c0", dtype, [2, 3, 4]),
    ]
    nodes = [
        H.make_node(
            "LSTM", ["X", "W", "R", "B", "", "h0", "c0"], ["Y", "Y_h"], hidden_size=4, direction="bidirectional"
        ),
        H.make_node("Mul", ["Y" if loss_y else "Y_h", "Y" if loss_y else "Y_h"], ["sq"]),
        H.make_node("ReduceSum", ["sq"], ["loss"], keepdims=0),
    ]
    graph = H.make_graph(nodes, "lstm", inputs, [x("loss", dtype, [])])
    model = H.make_model(graph, opset_imports=[H.make_opsetid("", 18)])
    fwd = onnx_light.load_from_string(model.SerializeToString())
    return onnx_light.gradient_model(fwd, xs=["X", "W", "R", "B", "h0", "c0"], y="loss")


def _feeds(bwd: Any, dtype: type) -> dict[str, np.ndarray]:
    r = np.random.default_rng(0)
    shapes = {"X": (5, 3, 2), "W": (2, 16, 2), "R": (2, 16, 4), "B": (2, 32), "h0": (2, 3, 4), "c0": (2, 3, 4)}
    feeds: dict[str, np.ndarray] = {k: (0.5 * r.standard_normal(v)).astype(dtype) for k, v in shapes.items()}
    return {i.name: feeds.get(i.name, np.ones((), dtype)) for i in bwd.graph.input}


def _sweep_body(bwd: Any, name: str = "lstm_vjp_step") -> Any:
    """The body GraphProto ``name`` of a Scan in the gradient function."""
    for f in bwd.functions:
        for node in f.node:
            for a in node.attribute:
                if node.op_type == "Scan" and a.g is not None and a.g.name == name:
                    return a.g
    raise AssertionError(f"no {name} Scan")


def _run(sess: InferenceSession, feeds: dict[str, np.ndarray], enabled: bool) -> list[Any]:
    saved, recurrent_sweep.ENABLED = recurrent_sweep.ENABLED, enabled
    try:
        return sess.run(None, feeds)
    finally:
        recurrent_sweep.ENABLED = saved


def _matched(sess: InferenceSession) -> list[Any]:
    return [getattr(s.kwargs["body"], "lstm_sweep", "unset") for s in sess._plan.steps if s.node.op_type == "Scan"]


@pytest.mark.parametrize("loss_y", [True, False], ids=["dY", "no_dY"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_sweep_gives_the_generic_scans_results(loss_y: bool, dtype: type, monkeypatch: pytest.MonkeyPatch) -> None:
    bwd = _model(TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE, loss_y)
    feeds = _feeds(bwd, dtype)
    sess = InferenceSession(bwd)
    want = _run(sess, feeds, False)
    got = _run(sess, feeds, True)
    assert [m and m[0] for m in _matched(sess)] == ["cell", "dy" if loss_y else "no_dy"]
    for a, b in zip(want, got):
        np.testing.assert_allclose(b, a, rtol=2e-5, atol=2e-6 if dtype == np.float32 else 0)
    # the twin (and the numpy forward): the body's products in its order, to float rounding
    monkeypatch.setattr(_native, "NATIVE", None)
    monkeypatch.setattr(_native, "RECURRENT", False)
    for a, b in zip(_run(sess, feeds, False), _run(sess, feeds, True)):
        np.testing.assert_allclose(b, a, rtol=1e-12 if dtype == np.float64 else 1e-6, atol=1e-7)


def _mutations() -> list[tuple[str, Any]]:
    def swap_sub(body: Any) -> None:  # Sub(one, tc²) -> Sub(tc², one)
        node = [n for n in body.node if n.op_type == "Sub"][0]
        a, b = list(node.input)
        del node.input[:]
        node.input.extend([b, a])

    def concat_order(body: Any) -> None:  # [g, tc, c_{s-1}] -> [g, c_{s-1}, tc]
        node = [n for n in body.node if n.op_type == "Concat"][1]
        a, b, c = list(node.input)
        del node.input[:]
        node.input.extend([a, c, b])

    def mul_to_add(body: Any) -> None:  # the last Mul (dc_s f) -> Add
        [n for n in body.node if n.op_type == "Mul"][-1].op_type = "Add"

    def extra_node(body: Any) -> None:  # dc_s f negated after
        last = body.node[-1]
        out = last.output[0]
        last.output[0] = out + "_pre"
        body.node.append(onnx_light.helper.make_node("Neg", [out + "_pre"], [out]))

    return [("swap_sub", swap_sub), ("concat_order", concat_order), ("mul_to_add", mul_to_add), ("extra", extra_node)]


@pytest.mark.parametrize("name,mutate", _mutations(), ids=[n for n, _ in _mutations()])
def test_a_body_off_the_pattern_runs_the_generic_scan(name: str, mutate: Any) -> None:
    bwd = _model(TensorProto.FLOAT, True)
    mutate(_sweep_body(bwd))
    feeds = _feeds(bwd, np.float32)
    sess = InferenceSession(bwd)
    want = _run(sess, feeds, False)
    got = _run(sess, feeds, True)
    assert _matched(sess) == [("cell", {}), None]
    for a, b in zip(want, got):
        np.testing.assert_array_equal(b, a)


def test_a_cell_state_body_off_the_pattern_runs_the_generic_scan() -> None:
    bwd = _model(TensorProto.FLOAT, True)
    body = _sweep_body(bwd, "lstm_cell_state")
    [n for n in body.node if n.op_type == "Add"][0].op_type = "Sub"  # c_s = f c - i g
    feeds = _feeds(bwd, np.float32)
    sess = InferenceSession(bwd)
    want = _run(sess, feeds, False)
    got = _run(sess, feeds, True)
    assert [m and m[0] for m in _matched(sess)] == [None, "dy"]
    for a, b in zip(want, got):
        np.testing.assert_allclose(b, a, rtol=2e-5, atol=2e-6)


@pytest.mark.skipif(not NATIVE, reason="native extension without lstm_sweep")
@pytest.mark.parametrize("dims", [(2, 7, 16, 64), (1, 3, 5, 9), (2, 1, 1, 1), (1, 4, 1, 100), (2, 3, 1, 72)])
@pytest.mark.parametrize("with_dy", [True, False])
def test_native_sweep_matches_its_twin(dims: tuple[int, int, int, int], with_dy: bool) -> None:
    d, t, n, h = dims
    r = np.random.default_rng(1)

    def rand(*shape: int, lo: float = -1.0, hi: float = 1.0) -> np.ndarray:
        return r.uniform(lo, hi, shape).astype(np.float32)

    dh, dc = rand(d, n, h), rand(d, n, h)
    dy = rand(d, t, n, h) if with_dy else None
    s, g = rand(d, t, n, 3 * h, lo=0.0), rand(d, t, n, h)
    c, cp, w = rand(d, t, n, h, lo=-2, hi=2), rand(d, t, n, h, lo=-2, hi=2), rand(d, 4 * h, h)
    assert _native.EXTENSION is not None
    got = _native.EXTENSION.lstm_sweep(dh, dc, dy, s, g, c, cp, w)
    want = recurrent_sweep.sweep_twin(dh, dc, dy, s, g, c, cp, w)
    for a, b in zip(got, want):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not NATIVE, reason="native extension without lstm_sweep")
def test_native_sweep_rejects_inconsistent_shapes() -> None:
    z = np.zeros((1, 2, 3, 4), np.float32)
    assert _native.EXTENSION is not None
    with pytest.raises(ValueError):
        _native.EXTENSION.lstm_sweep(z[0], z[0], None, z, z, z, z, np.zeros((1, 16, 4), np.float32))


@pytest.mark.skipif(not NATIVE, reason="native extension without lstm_sweep")
@pytest.mark.parametrize("dims", [(2, 40, 1, 128), (1, 3, 5, 9), (2, 4, 0, 3)])
def test_native_cell_states_match_their_twin(dims: tuple[int, int, int, int]) -> None:
    """c_s = f_s c_{s-1} + ig_s in one call: the same floats as the numpy loop (product, then sum)."""
    d, t, n, h = dims
    r = np.random.default_rng(2)
    f, ig = r.uniform(0, 1, dims).astype(np.float32), r.standard_normal(dims).astype(np.float32)
    c0 = r.standard_normal((d, n, h)).astype(np.float32)
    got, want = [np.full(dims, np.nan, np.float32) for _ in range(2)], [np.empty(dims, np.float32) for _ in range(2)]
    assert _native.EXTENSION is not None
    last = _native.EXTENSION.lstm_cell_states(c0, f, ig, *got)
    np.testing.assert_array_equal(last, recurrent_sweep.cell_states_twin(c0, f, ig, *want))
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError):
        _native.EXTENSION.lstm_cell_states(c0, f, ig[:, :1].copy(), *got)


@pytest.mark.parametrize("native", [True, False], ids=["native", "twin_and_cell"])
def test_a_buffer_is_reused_only_when_nothing_else_holds_it(native: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sweep writes into the arrays it returned last run only when no one (nor a view) holds them."""
    if not native:
        monkeypatch.setattr(_native, "NATIVE", None)
        monkeypatch.setattr(_native, "RECURRENT", False)
    elif not NATIVE:
        pytest.skip("native extension without lstm_sweep")
    bwd = _model(TensorProto.FLOAT, True)
    feeds = _feeds(bwd, np.float32)
    sess = InferenceSession(bwd)
    seen: list[np.ndarray] = []
    real = recurrent_sweep._kept

    def spy(body: Any, key: str, value: np.ndarray) -> np.ndarray:
        seen.append(value)
        return real(body, key, value)

    monkeypatch.setattr(recurrent_sweep, "_kept", spy)
    want = sess.run(None, feeds)
    first = list(seen)
    copies = [a.copy() for a in first]
    again = sess.run(None, feeds)
    assert first, "nothing went through the sweep's buffers"
    # held (by ``first``): new arrays, the held ones untouched
    assert all(a is not b for a, b in zip(first, seen[len(first) :]))
    for a, b in zip(first, copies):
        np.testing.assert_array_equal(a, b)
    second = seen[len(first) :]
    ids = [id(a) for a in second]
    del first, copies, second, seen[:]
    third = sess.run(None, feeds)
    assert [id(a) for a in seen] == ids  # released: the same buffers again
    for a, b, c in zip(want, again, third):
        np.testing.assert_array_equal(b, a)
        np.testing.assert_array_equal(c, a)
