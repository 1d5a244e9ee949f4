"""The AVX-512 tile's in-place driver (src/conv.cpp run_wrapped: every window of more than one
tap, the input split into phase planes and the tile run over oh x wq virtual pixels, the columns
past ow dropped) and its 16 x 16 tile for small maps against a float64 convolution written here:
strides, dilations, uneven pads, groups, batches, more than one reduction block, row blocks of
fewer than 8 outputs, maps narrower than a panel, the SiLU epilogue with a residual, and 2 threads
giving the same bits as one."""

from __future__ import annotations

import numpy as np
import pytest

from onnx_light.runtime import _native

ext = _native.NATIVE
pytestmark = pytest.mark.skipif(
    ext is None or not ext.conv2d_supported() or ext.conv2d_isa() != "avx512", reason="needs AVX-512F"
)

# input shape, weights shape, strides, dilations, pads (top, left, bottom, right), group
_CASES = [
    ((1, 32, 40, 40), (32, 32, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),
    ((2, 16, 17, 23), (40, 16, 3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 1),
    ((1, 3, 33, 31), (16, 3, 3, 3), (2, 2), (1, 1), (1, 0, 1, 1), 1),
    ((1, 8, 12, 9), (12, 4, 5, 3), (1, 2), (2, 1), (2, 1, 0, 2), 2),
    ((1, 64, 7, 7), (130, 64, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),
    ((1, 3, 30, 30), (8, 3, 7, 7), (2, 2), (1, 1), (3, 3, 3, 3), 1),
    ((1, 600, 5, 5), (9, 600, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),
    ((3, 5, 10, 10), (7, 5, 2, 2), (3, 3), (1, 1), (0, 0, 0, 0), 1),
    ((1, 4, 3, 50), (5, 4, 3, 3), (1, 3), (1, 2), (1, 2, 1, 2), 1),
    # small maps: the 16 x 16 tile (tile_16x16) over packed panels
    ((1, 40, 10, 10), (20, 40, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),
    ((2, 300, 10, 10), (17, 300, 1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 1),
    ((1, 24, 20, 19), (33, 24, 3, 3), (2, 2), (1, 1), (1, 1, 1, 0), 1),
]


def _conv64(x: np.ndarray, w: np.ndarray, b: np.ndarray, st, dl, pads, g: int) -> np.ndarray:
    """Conv in float64 by loops over the kernel taps."""
    pt, pl, pb, pr = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    m, cg, kh, kw = w.shape
    oh = (xp.shape[2] - (kh - 1) * dl[0] - 1) // st[0] + 1
    ow = (xp.shape[3] - (kw - 1) * dl[1] - 1) // st[1] + 1
    y = np.zeros((x.shape[0], m, oh, ow))
    mg = m // g
    for gi in range(g):
        xg, wg = xp[:, gi * cg : (gi + 1) * cg], w[gi * mg : (gi + 1) * mg].astype(np.float64)
        for a in range(kh):
            for q in range(kw):
                r0, c0 = a * dl[0], q * dl[1]
                tap = xg[:, :, r0 : r0 + (oh - 1) * st[0] + 1 : st[0], c0 : c0 + (ow - 1) * st[1] + 1 : st[1]]
                y[:, gi * mg : (gi + 1) * mg] += np.einsum("nchw,mc->nmhw", tap, wg[:, :, a, q])
    return y + b.astype(np.float64)[None, :, None, None]


@pytest.mark.parametrize("case", _CASES, ids=[f"{c[0]}x{c[1]}/{c[2]}" for c in _CASES])
def test_wrapped_matches_float64(case: tuple) -> None:
    xs, ws, st, dl, pads, g = case
    rng = np.random.default_rng(5)
    x = rng.standard_normal(xs).astype(np.float32)
    w = (rng.standard_normal(ws) / np.sqrt(np.prod(ws[1:]))).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32)
    want = _conv64(x, w, b, st, dl, pads, g)
    res = rng.standard_normal(want.shape).astype(np.float32)
    silu = (want + res) / (1 + np.exp(-(want + res)))
    for act, residual, expect in ((0, None, want), (_native.ACT_SILU, res, silu)):
        one = ext.conv2d(x, w, b, *st, *dl, *pads, g, False, "avx512", act, 0.0, 0.0, residual, threads=1)
        two = ext.conv2d(x, w, b, *st, *dl, *pads, g, False, "avx512", act, 0.0, 0.0, residual, threads=2)
        np.testing.assert_allclose(one, expect, rtol=1e-5, atol=1e-5)
        assert np.array_equal(one, two)
    relu = ext.conv2d(x, w, b, *st, *dl, *pads, g, True, "avx512")
    np.testing.assert_allclose(relu, np.maximum(want, 0), rtol=1e-5, atol=1e-5)
