"""The native convolution's kernel per geometry (``_native.conv2d_isa_for``, issue 15): on a CPU
with AVX-512 and AVX2 (and no ``ONNX_LIGHT_CONV_ISA``), group-1 convolutions run the AVX-512 tile
(Winograd too) but for 7 x 7 stems and 1 x 1 convolutions of fewer than 32 outputs; depthwise
stays on AVX2. Whichever runs, a session's answer matches a
float64 convolution written here."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from onnx_light import TensorProto, helper, numpy_helper
from onnx_light.runtime import InferenceSession, _native

per_geometry = pytest.mark.skipif(not _native._ISA_PER_GEOMETRY, reason="needs both tiles and no forced ISA")

# id, input shape, weights shape, attributes, the kernel expected on an AVX-512 + AVX2 CPU
_CASES: list[tuple[str, tuple[int, ...], tuple[int, ...], dict[str, Any], str]] = [
    ("pointwise", (1, 64, 20, 20), (64, 64, 1, 1), {}, "avx512"),
    ("pointwise-s2", (1, 64, 28, 28), (128, 64, 1, 1), {"strides": [2, 2]}, "avx512"),
    ("3x3-s2-packed", (1, 32, 40, 40), (64, 32, 3, 3), {"strides": [2, 2], "pads": [1] * 4}, "avx512"),
    ("winograd-14x14", (1, 64, 14, 14), (64, 64, 3, 3), {"pads": [1] * 4}, "avx512"),
    ("winograd-28x28", (1, 64, 28, 28), (64, 64, 3, 3), {"pads": [1] * 4}, "avx512"),
    ("16-outputs-3x3", (1, 16, 40, 40), (16, 16, 3, 3), {"pads": [1] * 4}, "avx512"),
    ("16-outputs-1x1", (1, 16, 40, 40), (16, 16, 1, 1), {}, "avx2"),
    ("16-outputs-3x3-s2", (1, 3, 64, 64), (16, 3, 3, 3), {"strides": [2, 2], "pads": [1] * 4}, "avx512"),
    ("32-outputs-3x3", (1, 16, 40, 40), (32, 16, 3, 3), {"pads": [1] * 4}, "avx512"),
    ("stem-7x7-s2", (1, 3, 64, 64), (16, 3, 7, 7), {"strides": [2, 2], "pads": [3] * 4}, "avx2"),
    ("depthwise-5x5", (1, 48, 14, 14), (48, 1, 5, 5), {"group": 48, "pads": [2] * 4}, "avx2"),
]


def _pads(attrs: dict[str, Any]) -> tuple[list[int], list[int]]:
    pads = attrs.get("pads", [0] * 4)
    return pads[:2], pads[2:]


@per_geometry
@pytest.mark.parametrize("case", _CASES, ids=[c[0] for c in _CASES])
def test_kernel_per_geometry(case: tuple) -> None:
    _, xs, ws, attrs, want = case
    strides = attrs.get("strides", [1, 1])
    begin, end = _pads(attrs)
    oh = (xs[2] + begin[0] + end[0] - ws[2]) // strides[0] + 1
    ow = (xs[3] + begin[1] + end[1] - ws[3]) // strides[1] + 1
    got = _native.conv2d_isa_for(xs, ws, strides, [1, 1], begin, end, attrs.get("group", 1), oh * ow)
    assert got == want


def _conv64(x: np.ndarray, w: np.ndarray, b: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
    """Conv in float64 by loops over the kernel taps (group, strides, pads)."""
    g = attrs.get("group", 1)
    sh, sw = attrs.get("strides", [1, 1])
    (pt, pl), (pb, pr) = _pads(attrs)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    n, c, h, wd = xp.shape
    m, cg, kh, kw = w.shape
    oh, ow = (h - kh) // sh + 1, (wd - kw) // sw + 1
    y = np.zeros((n, m, oh, ow))
    mg = m // g
    for gi in range(g):
        xg = xp[:, gi * cg : (gi + 1) * cg]
        wg = w[gi * mg : (gi + 1) * mg].astype(np.float64)
        for a in range(kh):
            for q in range(kw):
                tap = xg[:, :, a : a + (oh - 1) * sh + 1 : sh, q : q + (ow - 1) * sw + 1 : sw]
                y[:, gi * mg : (gi + 1) * mg] += np.einsum("nchw,mc->nmhw", tap, wg[:, :, a, q])
    return y + b.astype(np.float64)[None, :, None, None]


@pytest.mark.parametrize("case", _CASES, ids=[c[0] for c in _CASES])
def test_session_matches_float64(case: tuple) -> None:
    _, xs, ws, attrs, _ = case
    rng = np.random.default_rng(11)
    x = rng.standard_normal(xs).astype(np.float32)
    w = (rng.standard_normal(ws) / np.sqrt(np.prod(ws[1:]))).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(xs))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = InferenceSession(model)
    want = _conv64(x, w, b, attrs)
    for _ in range(2):  # the plan's prepared step after the first run
        (y,) = sess.run(None, {"x": x})
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
