"""RNN, GRU and LSTM kernels against onnxruntime on random inputs, attribute combinations sampled.

The backend node tests (test_conformance.py) cover the spec's own examples; here every
attribute the kernels read is varied: direction, layout, biases, sequence_lens (with entries
shorter than T, and of length 0), initial states, peepholes, clip, non-default activations with
alpha/beta, linear_before_reset, input_forget, and opsets 7, 14 and 22.
"""

from __future__ import annotations

import itertools
import zlib
from typing import Any

import numpy as np
import pytest
from ort_reference import compare_with_ort

import onnx_light as ol
from onnx_light.runtime import InferenceSession

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
N_OUT = {"RNN": 2, "GRU": 2, "LSTM": 3}
DEFAULT_ACTS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}
#: activations with their alpha and beta (those onnxruntime implements for the recurrent ops)
ACTS_WITH_PARAMS = [
    ("Tanh", 0.0, 0.0),
    ("Sigmoid", 0.0, 0.0),
    ("Relu", 0.0, 0.0),
    ("LeakyRelu", 0.1, 0.0),
    ("HardSigmoid", 0.3, 0.4),
    ("Affine", 0.7, 0.2),
    ("ScaledTanh", 1.3, 0.6),
    ("ThresholdedRelu", 0.2, 0.0),
    ("Elu", 0.9, 0.0),
    ("Softsign", 0.0, 0.0),
    ("Softplus", 0.0, 0.0),
]


def _inputs(
    op: str, cfg: dict[str, Any], r: np.random.Generator, dtype: type = np.float32
) -> tuple[list[np.ndarray | None], dict[str, Any]]:
    t, n, i, h = cfg["T"], cfg["N"], 3, cfg["H"]
    d = 2 if cfg["direction"] == "bidirectional" else 1
    g = GATES[op]
    layout = cfg.get("layout", 0)
    x = r.uniform(-1, 1, (n, t, i) if layout else (t, n, i)).astype(dtype)
    w = r.uniform(-0.7, 0.7, (d, g * h, i)).astype(dtype)
    rr = r.uniform(-0.7, 0.7, (d, g * h, h)).astype(dtype)
    b = r.uniform(-0.5, 0.5, (d, 2 * g * h)).astype(dtype) if cfg.get("B") else None
    lens = None
    if cfg.get("lens"):
        lens = r.integers(0 if cfg.get("zero_len") else 1, t + 1, n).astype(np.int32)
        lens[0] = t
    state = (n, d, h) if layout else (d, n, h)
    h0 = r.uniform(-1, 1, state).astype(dtype) if cfg.get("h0") else None
    ins: list[np.ndarray | None] = [x, w, rr, b, lens, h0]
    if op == "LSTM":
        c0 = r.uniform(-1, 1, state).astype(dtype) if cfg.get("c0") else None
        p = r.uniform(-0.5, 0.5, (d, 3 * h)).astype(dtype) if cfg.get("P") else None
        ins += [c0, p]
    while ins and ins[-1] is None:
        ins.pop()
    attrs: dict[str, Any] = {"hidden_size": h, "direction": cfg["direction"]}
    if layout:
        attrs["layout"] = 1
    if cfg.get("clip"):
        attrs["clip"] = cfg["clip"]
    if cfg.get("acts"):
        chosen = [ACTS_WITH_PARAMS[k % len(ACTS_WITH_PARAMS)] for k in cfg["acts"]][: len(DEFAULT_ACTS[op]) * d]
        attrs["activations"] = [a for a, _, _ in chosen]
        attrs["activation_alpha"] = [al for _, al, _ in chosen]
        attrs["activation_beta"] = [be for _, _, be in chosen]
    if op == "GRU" and cfg.get("lbr"):
        attrs["linear_before_reset"] = 1
    if op == "LSTM" and cfg.get("input_forget"):
        attrs["input_forget"] = 1
    return ins, attrs


def _configs() -> list[Any]:
    """A deterministic sample of the attribute combinations, each op and direction covered."""
    r = np.random.default_rng(7)
    out = []
    for op, direction in itertools.product(GATES, ["forward", "reverse", "bidirectional"]):
        for k in range(6):
            cfg: dict[str, Any] = {
                "T": int(r.integers(1, 6)),
                "N": int(r.integers(1, 4)),
                "H": int(r.integers(1, 5)),
                "direction": direction,
                "B": bool(r.integers(0, 2)),
                "lens": k % 2 == 1,
                "zero_len": k == 5,
                "h0": bool(r.integers(0, 2)),
                "c0": bool(r.integers(0, 2)),
                "P": k >= 3,
                "clip": 0.8 if k == 2 else None,
                "acts": list(r.integers(0, 100, 6)) if k in (1, 4) else None,
                "lbr": k % 2 == 0,
                "input_forget": k == 4,
                "layout": 1 if k in (3, 4) else 0,
                "opset": (7, 14, 22)[k % 3] if k not in (3, 4) else (14, 22)[k % 2],
            }
            out.append(pytest.param(op, cfg, id=f"{op}-{direction}-{k}"))
    return out


@pytest.mark.parametrize(("op", "cfg"), _configs())
def test_matches_onnxruntime(op: str, cfg: dict[str, Any]) -> None:
    if cfg["zero_len"]:
        pytest.skip("onnxruntime rejects sequence_lens of 0; covered by test_zero_length_entry")
    ins, attrs = _inputs(op, cfg, np.random.default_rng(zlib.crc32(repr(sorted(cfg.items())).encode())))
    if attrs.get("layout") == 1:
        _compare_batch_first(op, ins, attrs, cfg["opset"])
    else:
        compare_with_ort(op, ins, attrs, n_out=N_OUT[op], opset=cfg["opset"])


def _compare_batch_first(op: str, ins: list[np.ndarray | None], attrs: dict[str, Any], opset: int) -> None:
    """layout=1 (onnxruntime's CPU kernels refuse it): onnxruntime on the time-major transposes."""
    import onnxruntime as ort
    from ort_reference import make_node_model

    time_major = [None if a is None else np.swapaxes(a, 0, 1) if k in (0, 5, 6) else a for k, a in enumerate(ins)]
    ref_attrs = {k: v for k, v in attrs.items() if k != "layout"}
    model, _ = make_node_model(op, time_major, ref_attrs, N_OUT[op], opset)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, {f"in{k}": a for k, a in enumerate(time_major) if a is not None})
    want = [np.transpose(want[0], (2, 0, 1, 3))] + [np.swapaxes(v, 0, 1) for v in want[1:]]
    names = ["y", "y_h", "y_c"][: N_OUT[op]]
    got = _session_run(op, ins, attrs, names, opset)
    for name, g, e in zip(names, got, want):
        assert g.shape == e.shape, f"{op} layout=1 {name}: shape {g.shape} != {e.shape}"
        np.testing.assert_allclose(g, e, rtol=2e-5, atol=2e-5, err_msg=f"{op} layout=1 {name} {attrs}")


@pytest.mark.parametrize("op", list(GATES))
def test_float64_matches_onnxruntime(op: str) -> None:
    """onnxruntime has float32 kernels only: ours in float64 on the same (float32) values agree to 1e-5."""
    import onnxruntime as ort
    from ort_reference import make_node_model

    cfg = {"T": 4, "N": 2, "H": 3, "direction": "bidirectional", "B": True, "lens": True, "h0": True, "c0": True}
    ins, attrs = _inputs(op, cfg, np.random.default_rng(1))
    model, _ = make_node_model(op, ins, attrs, N_OUT[op], 14)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, {f"in{k}": a for k, a in enumerate(ins) if a is not None})
    wide = [None if a is None else a.astype(np.float64) if a.dtype == np.float32 else a for a in ins]
    got = _session_run(op, wide, attrs, ["y", "y_h", "y_c"][: N_OUT[op]])
    for g, e in zip(got, want):
        assert g.dtype == np.float64
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)


def _session_run(
    op: str, ins: list[np.ndarray | None], attrs: dict[str, Any], outputs: list[str], opset: int = 14
) -> list[Any]:
    h = ol.helper
    names = ["" if a is None else f"in{k}" for k, a in enumerate(ins)]
    node = h.make_node(op, names, outputs, **attrs)
    graph = h.make_graph(
        [node],
        "g",
        [h.make_tensor_value_info(nm, h.np_dtype_to_tensor_dtype(a.dtype), a.shape) for nm, a in zip(names, ins) if nm],
        [h.make_tensor_value_info(o, ol.TensorProto.FLOAT, None) for o in outputs if o],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    feeds = {nm: a for nm, a in zip(names, ins) if nm}
    return InferenceSession(model).run(None, feeds)


def test_zero_length_entry() -> None:
    """An entry with sequence length 0 keeps its initial state and writes zeros to Y."""
    cfg = {"T": 3, "N": 2, "H": 2, "direction": "bidirectional", "h0": True, "c0": True, "B": True}
    ins, attrs = _inputs("LSTM", cfg, np.random.default_rng(3))
    ins[4] = np.array([3, 0], np.int32)
    y, y_h, y_c = _session_run("LSTM", ins, attrs, ["y", "y_h", "y_c"])
    assert np.all(y[:, :, 1] == 0)
    np.testing.assert_array_equal(y_h[:, 1], ins[5][:, 1])
    np.testing.assert_array_equal(y_c[:, 1], ins[6][:, 1])


def test_omitted_outputs() -> None:
    """Only Y_h asked (Y omitted as ""): the same Y_h as with every output."""
    cfg = {"T": 4, "N": 2, "H": 3, "direction": "forward", "B": True}
    ins, attrs = _inputs("GRU", cfg, np.random.default_rng(4))
    (only_h,) = _session_run("GRU", ins, attrs, ["", "y_h"])
    _, full_h = _session_run("GRU", ins, attrs, ["y", "y_h"])
    np.testing.assert_array_equal(only_h, full_h)


def test_against_a_step_by_step_formula() -> None:
    """LSTM forward with peepholes, by the spec's equations written out in float64."""
    r = np.random.default_rng(5)
    t, n, i, hid = 3, 2, 4, 3
    x = r.standard_normal((t, n, i))
    w, rr = r.standard_normal((1, 4 * hid, i)), r.standard_normal((1, 4 * hid, hid))
    b, p = r.standard_normal((1, 8 * hid)), r.standard_normal((1, 3 * hid))
    y, y_h, y_c = _session_run("LSTM", [x, w, rr, b, None, None, None, p], {"hidden_size": hid}, ["y", "y_h", "y_c"])

    def sig(v: np.ndarray) -> np.ndarray:
        return 1 / (1 + np.exp(-v))

    h, c = np.zeros((n, hid)), np.zeros((n, hid))
    wi, wo, wf, wc = np.split(w[0], 4)
    ri, ro, rf, rc = np.split(rr[0], 4)
    bw, br = np.split(b[0], 2)
    bi, bo, bf, bc = np.split(bw + br, 4)
    pi, po, pf = np.split(p[0], 3)
    for k in range(t):
        gi = sig(x[k] @ wi.T + h @ ri.T + pi * c + bi)
        gf = sig(x[k] @ wf.T + h @ rf.T + pf * c + bf)
        cc = np.tanh(x[k] @ wc.T + h @ rc.T + bc)
        c = gf * c + gi * cc
        go = sig(x[k] @ wo.T + h @ ro.T + po * c + bo)
        h = go * np.tanh(c)
        np.testing.assert_allclose(y[k, 0], h, rtol=1e-12)
    np.testing.assert_allclose(y_h[0], h, rtol=1e-12)
    np.testing.assert_allclose(y_c[0], c, rtol=1e-12)


def _twin_configs() -> list[Any]:
    """Sizes that fill several register tiles and panels of the native loop, and leave remainders."""
    out = []
    for op in GATES:
        for k, (t, n, hid, direction) in enumerate(
            [
                (9, 7, 37, "bidirectional"),
                (5, 16, 24, "reverse"),
                (3, 1, 5, "forward"),
                (6, 13, 50, "bidirectional"),
                (4, 1, 40, "bidirectional"),  # batch 1: the GEMM's row against 4 panels at once, then 3 or 2
            ]
        ):
            cfg = {
                "T": t,
                "N": n,
                "H": hid,
                "direction": direction,
                "B": k != 2,
                "lens": k in (0, 3),
                "zero_len": k == 3,
                "h0": k != 1,
                "c0": k in (0, 2),
                "P": k in (0, 3),
                "clip": 0.9 if k == 1 else None,
                # 2: unbounded functions on a short sequence; 3: bounded ones (no chaotic growth on a long one)
                "acts": {2: [2, 7, 5, 3, 10, 0], 3: [6, 9, 4, 1, 0, 8]}.get(k),
                "lbr": k % 2 == 1,
                "input_forget": k == 3,
                "layout": 1 if k == 2 else 0,
            }
            out.append(pytest.param(op, cfg, id=f"{op}-{k}"))
    return out


@pytest.mark.parametrize(("op", "cfg"), _twin_configs())
def test_native_step_loop_matches_twin(op: str, cfg: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """src/recurrent.cpp is as accurate as the numpy step loop in float32 (both against float64), with
    NaN in the same places (one poisoned input entry)."""
    from onnx_light.runtime import _native

    if not _native.RECURRENT:
        pytest.skip("the native step loop is not built or not selected (ONNX_LIGHT_PURE_PYTHON=1)")
    ins, attrs = _inputs(op, cfg, np.random.default_rng(zlib.crc32(repr(sorted(cfg.items())).encode())))
    x = ins[0]
    assert x is not None
    x[-1, -1, 0] = np.nan  # the last entry (layout 1: the last step of entry -1)
    names = ["y", "y_h", "y_c"][: N_OUT[op]]
    calls = []
    ext = _native.NATIVE

    class Counting:
        def recurrent(self, *args: Any) -> Any:
            calls.append(args[0])
            return ext.recurrent(*args)  # type: ignore[union-attr]

    monkeypatch.setattr(_native, "NATIVE", Counting())
    got = _session_run(op, ins, attrs, names)
    assert calls, "the native step loop did not run"
    monkeypatch.setattr(_native, "RECURRENT", False)
    twin = _session_run(op, ins, attrs, names)
    exact = _session_run(
        op, [a if a is None or a.dtype != np.float32 else a.astype(np.float64) for a in ins], attrs, names
    )
    for name, g, t, e in zip(names, got, twin, exact):
        assert g.shape == t.shape and g.dtype == t.dtype == np.float32
        np.testing.assert_array_equal(np.isnan(g), np.isnan(e), err_msg=f"{op} {name}: NaN elsewhere")
        err, twin_err = np.nanmax(np.abs(g - e), initial=0), np.nanmax(np.abs(t - e), initial=0)
        assert err <= 3 * twin_err + 1e-6, f"{op} {name}: native error {err:.3g}, twin's {twin_err:.3g} ({attrs})"


@pytest.mark.parametrize(("m", "i", "cols"), [(1, 3, 20), (37, 5, 24), (130, 17, 100), (70, 64, 1024)])
def test_native_projection_matches_numpy(m: int, i: int, cols: int) -> None:
    """The packed native projection X W^T (constant W, packed once) equals the float64 product;
    a W that may change is never packed (kept) and takes numpy's product."""
    from onnx_light.runtime import _native
    from onnx_light.runtime.kernels import recurrent as rk

    if not _native.RECURRENT or not hasattr(_native.NATIVE, "project"):
        pytest.skip("the native projection is not built or not selected (ONNX_LIGHT_PURE_PYTHON=1)")
    r = np.random.default_rng(m * 1000 + cols)
    x = r.uniform(-1, 1, (m, i)).astype(np.float32)
    w = r.uniform(-1, 1, (1, cols, i)).astype(np.float32)
    want = x.astype(np.float64) @ w.reshape(cols, i).T.astype(np.float64)
    got = rk._projected(x, w, cols)
    assert (id(w), "projection") not in rk._PACKED
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    w.flags.writeable = False
    got = rk._projected(x, w, cols).copy()  # the native result is this thread's reused buffer
    assert got.shape == (m, cols) and got.dtype == np.float32 and (id(w), "projection") in rk._PACKED
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    rk._projected(x[::-1].copy(), w, cols)  # the buffer overwritten by another product
    np.testing.assert_array_equal(rk._projected(x, w, cols), got)  # the kept packing


@pytest.mark.parametrize("hid", [5, 37, 128])
def test_lstm_with_constant_weights_matches_twin(hid: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """W, R, B as initializers (the packed projection and the fused AVX2 step): as the numpy twin,
    within float32 rounding, bidirectional with sequence lengths."""
    from onnx_light.runtime import _native

    if not _native.RECURRENT:
        pytest.skip("the native step loop is not built or not selected (ONNX_LIGHT_PURE_PYTHON=1)")
    r = np.random.default_rng(hid)
    t, n, i = 7, 5, 9
    h = ol.helper
    inits = [
        ol.numpy_helper.from_array(r.uniform(-0.5, 0.5, (2, 4 * hid, i)).astype(np.float32), "W"),
        ol.numpy_helper.from_array(r.uniform(-0.5, 0.5, (2, 4 * hid, hid)).astype(np.float32), "R"),
        ol.numpy_helper.from_array(r.uniform(-0.5, 0.5, (2, 8 * hid)).astype(np.float32), "B"),
    ]
    node = h.make_node("LSTM", ["X", "W", "R", "B", "L"], ["Y", "Yh", "Yc"], hidden_size=hid, direction="bidirectional")
    graph = h.make_graph(
        [node],
        "g",
        [
            h.make_tensor_value_info("X", ol.TensorProto.FLOAT, [t, n, i]),
            h.make_tensor_value_info("L", ol.TensorProto.INT32, [n]),
        ],
        [h.make_tensor_value_info(o, ol.TensorProto.FLOAT, None) for o in ("Y", "Yh", "Yc")],
        inits,
    )
    sess = InferenceSession(h.make_model(graph, opset_imports=[h.make_opsetid("", 14)]))
    feeds = {"X": r.uniform(-1, 1, (t, n, i)).astype(np.float32), "L": np.array([7, 3, 0, 7, 5], np.int32)}
    got = sess.run(None, feeds)
    again = sess.run(None, feeds)  # R^T packed once, kept (pack_recurrent)
    monkeypatch.setattr(_native, "RECURRENT", False)
    twin = sess.run(None, feeds)
    for name, g, a, w in zip(("Y", "Y_h", "Y_c"), got, again, twin):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=2e-6, err_msg=name)
        np.testing.assert_array_equal(a, g, err_msg=name)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_packed_r_is_kept_only_for_a_constant_r(op: str) -> None:
    """R^T packed for the step loop is kept per constant R (a session's initializer) and passed
    to the native loop, with the same results as packing per call (a writeable R); a packing of
    another shape is refused."""
    from onnx_light.runtime import _native
    from onnx_light.runtime.kernels import recurrent as rk

    ext = _native.NATIVE
    if not _native.RECURRENT or not hasattr(ext, "pack_recurrent"):
        pytest.skip("no native packing (not built, or ONNX_LIGHT_PURE_PYTHON=1)")
    r = np.random.default_rng(3)
    g, t, n, i, hid = GATES[op], 4, 2, 3, 30
    x = r.uniform(-1, 1, (t, n, i)).astype(np.float32)
    w = r.uniform(-0.5, 0.5, (2, g * hid, i)).astype(np.float32)
    rr = r.uniform(-0.5, 0.5, (2, g * hid, hid)).astype(np.float32)
    run = getattr(rk, op.lower())
    mutable = run(x, w, rr, hidden_size=hid, direction="bidirectional")
    assert (id(rr), op) not in rk._PACKED
    rr.flags.writeable = False
    kept = run(x, w, rr, hidden_size=hid, direction="bidirectional")
    assert (id(rr), op) in rk._PACKED
    for a, b in zip(kept, mutable):
        np.testing.assert_array_equal(a, b)
    packed = rk._PACKED[(id(rr), op)][1]
    h0 = np.zeros((1, n, hid), np.float32)
    one_dir = (np.zeros((t, n, g * hid), np.float32), np.ascontiguousarray(rr[:1]), h0, h0 if op == "LSTM" else None)
    acts = {"RNN": [1], "GRU": [2, 1], "LSTM": [2, 1, 1]}[op]
    with pytest.raises(ValueError, match="pack_recurrent"):  # two directions' packing for one
        ext.recurrent(
            rk._OPS[op], *one_dir, None, None, None, np.full(n, t), [False], acts, [0.0] * len(acts),
            [0.0] * len(acts), -1.0, False, False, packed,
        )  # fmt: skip
