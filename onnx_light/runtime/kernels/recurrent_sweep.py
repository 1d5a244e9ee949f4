"""The reverse sweep of the direct LSTM backward, run in one call instead of a Scan body per step.

``onnx_extensions/gradient/_recurrent_direct.py`` emits the LSTM backward as a reverse Scan whose
body (``_lstm_step``) is the step's element-wise derivatives and one GEMM against R. The Scan
kernel asks :func:`run` first: when the body is exactly that pattern (checked node by node:
op types, operands, attributes; then the run's dtypes, shapes and constants) the whole sweep runs
here, natively for float32 (``src/recurrent.cpp``'s ``lstm_sweep``: R packed once, the per-step
products fused in cache) or in the numpy twin (the element-wise work of all steps batched, the
recurrence step by step). Anything else returns None and runs the generic Scan, so the emitted
graph stays standard ONNX: onnxruntime runs the same body step by step.

The body, with state dh, dc, scanned [dY_s], s = σ(i, o, f), g = tanh(c gate), c_s, c_{s-1}
(ONNX gate order i, o, f, c), all [D, N, *]:
    dh_s = dh + dY_s;  tc = tanh c_s;  i, o, f = split(s)
    dc_s = dc + dh_s (o (1 - tc²))
    dpre = [([dc_s, dh_s, dc_s] [g, tc, c_{s-1}]) (s (1 - s)),  (dc_s i)(1 - g²)]
    outputs: dpre R, dc_s f, dpre (scanned)
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from .. import _native

__all__ = ["run", "sweep_twin", "cell_states_twin", "ENABLED"]

#: the fast path on (benchmarks switch it off to time the generic Scan in the same process)
ENABLED = True

# (op type, operands, results) in the emitted order; operands name body inputs, earlier
# results, or constants ("$one": 1, "$split": [H, H, H]; "$R": the captured weight)
_WITH_DY = (("Add", ("dh", "dy"), ("dht",)),)
_BODY = (
    ("Tanh", ("c",), ("tc",)),
    ("Split", ("s", "$split"), ("i", "o", "f")),
    ("Mul", ("tc", "tc"), ("tc2",)),
    ("Sub", ("$one", "tc2"), ("u",)),
    ("Mul", ("o", "u"), ("a",)),
    ("Mul", ("dht", "a"), ("dha",)),
    ("Add", ("dc", "dha"), ("dct",)),
    ("Concat", ("dct", "dht", "dct"), ("e1",)),
    ("Concat", ("g", "tc", "cp"), ("q",)),
    ("Mul", ("e1", "q"), ("e",)),
    ("Sub", ("$one", "s"), ("s1",)),
    ("Mul", ("s", "s1"), ("sl",)),
    ("Mul", ("e", "sl"), ("dpiof",)),
    ("Mul", ("dct", "i"), ("di",)),
    ("Mul", ("g", "g"), ("g2",)),
    ("Sub", ("$one", "g2"), ("kg",)),
    ("Mul", ("di", "kg"), ("dpg",)),
    ("Concat", ("dpiof", "dpg"), ("dpre",)),
    ("MatMul", ("dpre", "$R"), ("dh_out",)),
    ("Mul", ("dct", "f"), ("dc_out",)),
)
_AXIS_OPS = ("Split", "Concat")
_OUTPUTS = ("dh_out", "dc_out", "dpre")


# the cell state's forward Scan: state c, scanned f, i g; out c_s, c_s and c_{s-1} scanned
_CELL = (
    ("Mul", ("f", "c"), ("m",)),
    ("Add", ("m", "ig"), ("cn",)),
    ("Identity", ("cn",), ("o1",)),
    ("Identity", ("c",), ("o2",)),
)


def _bind(body: Any, pattern: tuple[Any, ...], sym: dict[str, int], outputs: tuple[str, ...]) -> dict[str, int] | None:
    """Walks ``body``'s steps along ``pattern`` (``sym``: the symbols bound so far, its inputs);
    the constants' slots by symbol when every step and the outputs are the pattern's, else None."""
    if len(body.steps) != len(pattern) or len(set(body.input_slots)) != len(body.input_slots):
        return None
    consts: dict[str, int] = {}
    for step, (op, operands, results) in zip(body.steps, pattern):
        node = step.node
        if node.op_type != op or node.domain or step.fused or len(step.outputs) != len(results):
            return None
        if (op in _AXIS_OPS and step.kwargs.get("axis") not in (-1, 2)) or len(step.inputs) != len(operands):
            return None
        for slot, name in zip(step.inputs, operands):
            if name.startswith("$"):
                if consts.setdefault(name, slot) != slot or slot in sym.values():
                    return None
            elif sym.get(name) != slot:
                return None
        for slot, name in zip(step.outputs, results):
            if slot in sym.values() or slot in consts.values():
                return None
            sym[name] = slot
    if list(body.output_slots) != [sym[n] for n in outputs]:
        return None
    return consts


def _match(body: Any) -> tuple[str, dict[str, int]] | None:
    """(which body: "dy", "no_dy" or "cell"; constant symbol -> slot) when ``body`` is one of
    the patterns, else None."""
    n_in = len(body.input_slots)
    if n_in == 3:
        consts = _bind(body, _CELL, dict(zip(("c", "f", "ig"), body.input_slots)), ("cn", "o1", "o2"))
        return None if consts is None else ("cell", consts)
    if n_in not in (6, 7):
        return None
    with_dy = n_in == 7
    names = ("dh", "dc", "dy", "s", "g", "c", "cp") if with_dy else ("dh", "dc", "s", "g", "c", "cp")
    sym = dict(zip(names, body.input_slots))
    if not with_dy:
        sym["dht"] = sym["dh"]
    consts = _bind(body, (_WITH_DY + _BODY) if with_dy else _BODY, sym, _OUTPUTS)
    return None if consts is None else ("dy" if with_dy else "no_dy", consts)


def _constant(body: Any, slot: int, scope: dict[str, Any]) -> Any:
    if slot in body.constants:
        return body.constants[slot]
    for name in body.captured:
        if body.slot_of[name] == slot:
            return scope.get(name)
    return None


def _operands(body: Any, consts: dict[str, int], scope: dict[str, Any], dtype: np.dtype, hid: int) -> Any:
    """R when the run's constants are those of the pattern (1, [H, H, H], R [D, 4H, H]), else None."""
    one, split, r = (_constant(body, consts[k], scope) for k in ("$one", "$split", "$R"))
    if not all(v.__class__ is np.ndarray for v in (one, split, r)):
        return None
    if one.dtype != dtype or one.size != 1 or one.reshape(-1)[0] != 1 or r.dtype != dtype or r.ndim != 3:
        return None
    if split.dtype.kind != "i" or split.tolist() != [hid] * 3:
        return None
    return r


def run(body: Any, state: list[Any], xs: list[Any], scope: dict[str, Any], layout: tuple[Any, ...]) -> Any:
    """The Scan's results when ``body`` is the direct LSTM backward's reverse step (dh, dc, dpre)
    or its cell state's forward Scan (c_T, c_s, c_{s-1}), else None.

    ``layout``: the node's (scan_input_axes, scan_input_directions, scan_output_axes,
    scan_output_directions) as given (None: the defaults).
    """
    if not ENABLED:
        return None
    if not hasattr(body, "lstm_sweep"):
        body.lstm_sweep = _match(body)
    found: tuple[str, dict[str, int]] | None = body.lstm_sweep
    if found is None:
        return None
    kind, consts = found
    arrays = [*state, *xs]
    if any(a.__class__ is not np.ndarray for a in arrays) or arrays[0].dtype.kind != "f":
        return None
    if any(a.dtype != arrays[0].dtype for a in arrays) or arrays[0].ndim != 3:
        return None
    n_x = len(xs)
    if kind == "cell":
        if len(state) != 1 or layout != ([1, 1], [0, 0], [1, 1], [0, 0]):
            return None
        return _cell(body, *arrays)
    if len(state) != 2 or layout != ([1] * n_x, [1] * n_x, [1], [1]):
        return None
    return _reverse(body, kind, consts, arrays, scope)


def _buffer(body: Any, key: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An uninitialised array for scan output ``key``: the one this body returned last time when
    nothing else references it any more (nor a view of it: views hold a reference), else a new
    one. Fresh pages of a megabyte cost ~0.5-1 ms of page faults per run on this machine."""
    kept = body.__dict__.setdefault("lstm_sweep_buffers", {}).pop(key, None)  # one taker at a time
    # 2 references: ``kept`` and getrefcount's argument, so no one else holds it
    if kept is not None and sys.getrefcount(kept) == 2 and kept.shape == shape and kept.dtype == dtype:
        return kept
    return np.empty(shape, dtype=dtype)


def _kept(body: Any, key: str, value: np.ndarray) -> np.ndarray:
    """``value``, remembered as the buffer of ``key`` for the next run (see :func:`_buffer`)."""
    body.__dict__["lstm_sweep_buffers"][key] = value
    return value


def _cell(body: Any, c: np.ndarray, f: np.ndarray, ig: np.ndarray) -> tuple[np.ndarray, ...] | None:
    """c_s = f_s c_{s-1} + (i g)_s for every step, as the body computes it."""
    if f.ndim != 4 or f.shape[1] == 0 or ig.shape != f.shape or c.shape != (f.shape[0], *f.shape[2:]):
        return None
    cs, cps = _buffer(body, "c", f.shape, c.dtype), _buffer(body, "c_prev", f.shape, c.dtype)
    native = _native.NATIVE
    if c.dtype == np.float32 and native is not None and hasattr(native, "lstm_cell_states"):
        # one call: the numpy loop below costs two ufunc calls a step (~0.3 ms for crnn's 40 steps)
        flat = [np.ascontiguousarray(v) for v in (c, f, ig)]
        last = native.lstm_cell_states(*flat, cs, cps)
    else:
        last = cell_states_twin(c, f, ig, cs, cps)
    return last, _kept(body, "c", cs), _kept(body, "c_prev", cps)


def cell_states_twin(c: np.ndarray, f: np.ndarray, ig: np.ndarray, cs: np.ndarray, cps: np.ndarray) -> np.ndarray:
    """The numpy twin of ``lstm_cell_states``: cs[:, s] = f_s c_{s-1} + ig_s, cps[:, s] = c_{s-1};
    returns the last c."""
    cps[:, 0] = c
    for t in range(f.shape[1]):
        out = cs[:, t]
        np.multiply(f[:, t], c, out=out)
        np.add(out, ig[:, t], out=out)
        c = out
    cps[:, 1:] = cs[:, :-1]
    return c.copy()


def _reverse(body: Any, kind: str, consts: dict[str, int], arrays: list[np.ndarray], scope: dict[str, Any]) -> Any:
    """The reverse sweep's (dh, dc, dpre), natively for float32, else by the numpy twin."""
    dh, dc, *seq = arrays
    dy = seq.pop(0) if kind == "dy" else None
    s, g, c, cp = seq
    if c.ndim != 4 or c.shape[1] == 0:
        return None
    d, t, n, hid = c.shape
    if dh.shape != (d, n, hid) or dc.shape != dh.shape or s.shape != (d, t, n, 3 * hid):
        return None
    if any(v.shape != c.shape for v in (g, cp) + ((dy,) if dy is not None else ())):
        return None
    r = _operands(body, consts, scope, c.dtype, hid)
    if r is None or r.shape != (d, 4 * hid, hid):
        return None
    native = _native.NATIVE
    if c.dtype == np.float32 and native is not None and hasattr(native, "lstm_sweep"):
        flat = [None if v is None else np.ascontiguousarray(v) for v in (dh, dc, dy, s, g, c, cp, r)]
        dpre = _buffer(body, "dpre", (d, t, n, 4 * hid), c.dtype)
        dh, dc, _ = native.lstm_sweep(*flat, out=dpre)
        return dh, dc, _kept(body, "dpre", dpre)
    return sweep_twin(dh, dc, dy, s, g, c, cp, r)


def sweep_twin(
    dh: np.ndarray,
    dc: np.ndarray,
    dy: np.ndarray | None,
    s: np.ndarray,
    g: np.ndarray,
    c: np.ndarray,
    cp: np.ndarray,
    r: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The numpy twin of ``lstm_sweep``: the body's products in its order, those that do not
    depend on the recurrence computed for all steps at once."""
    hid = c.shape[-1]
    one = np.array(1, dtype=c.dtype)
    tc = np.tanh(c)
    a = s[..., hid : 2 * hid] * (one - tc * tc)
    q = np.concatenate([g, tc, cp], axis=-1)
    sl = s * (one - s)
    kg = one - g * g
    i, f = s[..., :hid], s[..., 2 * hid :]
    dpre = np.empty((*c.shape[:-1], 4 * hid), dtype=c.dtype)
    for t in range(c.shape[1] - 1, -1, -1):
        dht = dh + dy[:, t] if dy is not None else dh
        dct = dc + dht * a[:, t]
        step = np.concatenate(
            [(np.concatenate([dct, dht, dct], axis=-1) * q[:, t]) * sl[:, t], (dct * i[:, t]) * kg[:, t]], axis=-1
        )
        dh = np.matmul(step, r)
        dc = dct * f[:, t]
        dpre[:, t] = step
    return dh, dc, dpre
