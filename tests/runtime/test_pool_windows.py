"""AveragePool, LpPool and MaxPool in 2-D and 3-D against the spec's definition, window by window.

The oracle below is written from the operator docs alone: the output size (floor or ceil
mode, the ceil-mode rule that a last window must start inside the input or the left pad,
SAME_* totals split with the odd cell at the end or the start, VALID), then each output
cell as a loop over its kernel taps, counting the taps that fall inside the input (and,
with ``count_include_pad``, inside input + pads). Geometries cover windows that hold no
input cell (dilations stepping over X, pads >= kernel), output axes of size 0 (a dilated
window longer than the padded input with a stride that floors to 0) and one negative
output size (an error naming the axis). onnxruntime is no oracle here: with SAME_* and a
dilation it sizes the output from the undilated kernel.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest

import onnx_light as ol
from onnx_light import helper
from onnx_light.runtime import InferenceSession


def _geometry(spatial: tuple[int, ...], a: dict[str, Any]) -> tuple[list[int], list[int]]:
    """(begin pads, output sizes) per the spec."""
    k, s, d = a["kernel_shape"], a["strides"], a["dilations"]
    auto_pad, pads, nd = a.get("auto_pad", "NOTSET"), a.get("pads"), len(spatial)
    begin, out = [], []
    for i, n in enumerate(spatial):
        span = (k[i] - 1) * d[i] + 1
        if auto_pad.startswith("SAME"):
            o = -(-n // s[i])
            total = max((o - 1) * s[i] + span - n, 0)
            b = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
        else:
            b, e = (0, 0) if auto_pad == "VALID" or not pads else (pads[i], pads[nd + i])
            room = (n + b + e - span) / s[i]
            o = (math.ceil(room) if a.get("ceil_mode") else math.floor(room)) + 1
            if a.get("ceil_mode") and (o - 1) * s[i] >= n + b:
                o -= 1
        begin.append(b)
        out.append(o)
    return begin, out


def _pad_end(spatial: tuple[int, ...], a: dict[str, Any], i: int, begin: int, out: int) -> int:
    if a.get("auto_pad", "NOTSET").startswith("SAME"):
        k, s, d, n = a["kernel_shape"][i], a["strides"][i], a["dilations"][i], spatial[i]
        return max((out - 1) * s + (k - 1) * d + 1 - n, 0) - begin
    pads = a.get("pads")
    return 0 if a.get("auto_pad") == "VALID" or not pads else pads[len(spatial) + i]


def oracle(op: str, x: np.ndarray, a: dict[str, Any]) -> np.ndarray | None:
    """The pool of ``x`` in float64, computed tap by tap; None for a negative output size."""
    spatial = x.shape[2:]
    begin, out = _geometry(spatial, a)
    if min(out) < 0:
        return None
    end = [_pad_end(spatial, a, i, begin[i], out[i]) for i in range(len(spatial))]
    k, s, d = a["kernel_shape"], a["strides"], a["dilations"]
    y: np.ndarray = np.zeros(x.shape[:2] + tuple(out))
    for o in itertools.product(*map(range, out)):
        taps, inside, padded = [], 0, 0
        for j in itertools.product(*map(range, k)):
            pos = [o[i] * s[i] + j[i] * d[i] - begin[i] for i in range(len(k))]
            if all(0 <= p < n for p, n in zip(pos, spatial)):
                taps.append(x[(..., *pos)].astype(np.float64))
                inside += 1
            padded += all(-b <= p < n + e for p, n, b, e in zip(pos, spatial, begin, end))
        cell: tuple[Any, ...] = (..., *o)
        if op == "AveragePool":
            div = padded if a.get("count_include_pad") else inside
            y[cell] = sum(taps) / div if div else np.nan  # the mean of no value: 0 / 0
        elif op == "LpPool":
            y[cell] = sum((np.abs(t) ** a["p"] for t in taps), np.zeros(x.shape[:2])) ** (1 / a["p"])
        else:  # MaxPool: pads are -inf, a window of no input cell the dtype's lowest value
            y[cell] = np.max(taps, axis=0) if taps else np.finfo(x.dtype).min
    return y


def _settings(nd: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for k in ([2] * nd, [3] * nd, [1, 3] + [2] * (nd - 2)):
        for dil in ([1] * nd, [2] * nd, [3, 1] + [2] * (nd - 2)):
            for st in ([1] * nd, [2] * nd):
                base: dict[str, Any] = {"kernel_shape": k, "strides": st, "dilations": dil}
                for pads in (
                    [0] * 2 * nd,
                    [1] * 2 * nd,
                    [k[0]] * 2 * nd,
                    [0, 2] + [0] * (nd - 2) + [2, 0] + [1] * (nd - 2),
                ):
                    rows += [{**base, "pads": pads, "ceil_mode": c} for c in (0, 1)]
                rows += [{**base, "auto_pad": ap} for ap in ("SAME_UPPER", "SAME_LOWER", "VALID")]
    return rows


def _cases() -> list[tuple[str, tuple[int, ...], dict[str, Any]]]:
    cases: list[tuple[str, tuple[int, ...], dict[str, Any]]] = []
    for shape in ((1, 2, 3, 4), (1, 1, 2, 5), (1, 1, 3, 2, 4)):
        for a in _settings(len(shape) - 2):
            cases.append(("AveragePool", shape, {**a, "count_include_pad": 0}))
            cases.append(("AveragePool", shape, {**a, "count_include_pad": 1}))
            cases.append(("LpPool", shape, {**a, "p": 2}))
            cases.append(("MaxPool", shape, a))
    return cases


CASES = _cases()


def _empty_or_negative(shape: tuple[int, ...], a: dict[str, Any]) -> bool:
    return min(_geometry(shape[2:], a)[1]) <= 0


#: CI: every case with an empty or negative output axis and every 9th other; the rest is slow
FAST = {i for i, (_, shape, a) in enumerate(CASES) if _empty_or_negative(shape, a) or i % 9 == 0}


def _run(op: str, x: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    node = helper.make_node(op, ["x"], ["y"], **a)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", 1, x.shape)], [helper.make_tensor_value_info("y", 1, None)]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    return InferenceSession(model).run(None, {"x": x})[0]


@pytest.mark.parametrize(
    "index", [pytest.param(i, marks=() if i in FAST else pytest.mark.slow) for i in range(len(CASES))]
)
def test_pool_matches_the_spec_definition(index: int) -> None:
    op, shape, a = CASES[index]
    x = np.random.default_rng(index).standard_normal(shape).astype(np.float32)
    want = oracle(op, x, a)
    if want is None:
        with pytest.raises(ol.OnnxLightError, match="the window spans .* cells on spatial axis"):
            _run(op, x, a)
        return
    got = _run(op, x, a)
    assert got.shape == want.shape, f"{op} {a}: shape {got.shape} != the spec's {want.shape}"
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"{op} {a}")
