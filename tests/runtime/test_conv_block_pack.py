"""The AVX2 convolution's panels packed a pixel block at a time (``pack_block`` in
``src/conv_avx2.cpp``) from the input as it is (strided columns, rows narrower than a panel),
and 1 x 1 panels read in place from the input rows (few output channels, ``src/conv.cpp``).
Checked against the numpy twin (im2col + matmul) on the geometries that take it, non-finite values at every
border, and 2 threads against 1 bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from test_native import _require_conv2d

from onnx_light.runtime import _native
from onnx_light.runtime.kernels.conv import _conv_im2col

# (n, c, h, w, m, kernel, strides, dilations, pads (top, left, bottom, right)): stride-2 columns
# with odd sizes, asymmetric pads and dilations (segments that start or end in the padding,
# rows of 1-23 output columns so that panels cross rows); stride (2, 1), (1, 2), 3 (scalar
# copies); stride-1 maps narrower than a panel (2-8 rows, crnn's class); K of several 256-row
# blocks and P of several pixel blocks
CASES = [
    (1, 16, 33, 35, 32, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),
    (2, 3, 41, 47, 16, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),
    (1, 5, 17, 19, 7, (3, 3), (2, 2), (2, 2), (2, 0, 1, 3)),
    (1, 4, 9, 3, 5, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),
    (1, 6, 12, 45, 13, (3, 2), (2, 1), (1, 2), (0, 2, 3, 1)),
    (1, 6, 12, 45, 13, (2, 3), (1, 2), (2, 1), (1, 0, 0, 2)),
    (2, 4, 14, 29, 9, (3, 3), (3, 3), (1, 1), (1, 2, 1, 0)),
    (1, 40, 4, 10, 20, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    (1, 33, 2, 7, 14, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    (1, 64, 8, 13, 70, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    (2, 8, 5, 15, 6, (1, 3), (1, 1), (1, 2), (0, 3, 0, 1)),
    (1, 50, 30, 30, 8, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),
    (1, 2, 70, 90, 4, (3, 3), (2, 2), (1, 1), (0, 1, 1, 0)),
    # 1 x 1 with at most 6 weight row blocks: full panels read in place from the input rows, the
    # last partial one packed (P = 35, 81, 16, 5; K of two blocks; 37 outputs: packed again)
    (2, 300, 5, 7, 16, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0)),
    (1, 20, 9, 9, 36, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0)),
    (1, 8, 4, 4, 5, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0)),
    (1, 3, 1, 5, 2, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0)),
    (1, 20, 9, 9, 37, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0)),
]


def _data(case: tuple, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n, c, h, w, m, k, *_ = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((m, c, *k)).astype(np.float32)
    return x, wt, rng.standard_normal(m).astype(np.float32)


def _native_conv(case: tuple, x: np.ndarray, wt: np.ndarray, b: np.ndarray, act: int = 0, threads: int = 1):
    *_, s, d, p = case
    conv2d = _native.EXTENSION.conv2d  # type: ignore[union-attr]
    return conv2d(x, wt, b, *s, *d, *p, 1, False, "avx2", act, 0.0, 0.0, None, threads=threads)


def _twin(case: tuple, x: np.ndarray, wt: np.ndarray, b: np.ndarray) -> np.ndarray:
    *_, s, d, p = case
    return _conv_im2col(x, wt, b, list(s), list(d), list(p[:2]), list(p[2:]), 1)


@pytest.mark.parametrize("case", CASES, ids=[str(i) for i in range(len(CASES))])
def test_block_packed_panels_match_twin(case: tuple) -> None:
    _require_conv2d("avx2")
    x, wt, b = _data(case, seed=case[1] * 7 + case[3])
    want = _twin(case, x, wt, b)
    got = _native_conv(case, x, wt, b)
    atol = 1e-5 * np.sqrt(wt[0].size)  # float32 sums of wt[0].size products
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=atol)
    # SiLU, the activation of yolo's strided convolutions (slope at most 1.1: the same atol)
    silu = _native_conv(case, x, wt, b, act=5)
    np.testing.assert_allclose(silu, want / (1 + np.exp(-want.astype(np.float64))), rtol=1e-5, atol=atol)


@pytest.mark.parametrize("case", [0, 2, 4, 6, 8, 10, 13, 14], ids=lambda i: f"case{i}")
@pytest.mark.parametrize("where", ["top left", "bottom right", "left column", "right column", "middle"])
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_block_packed_panels_carry_non_finite_values(case: int, where: str, value: float) -> None:
    """An inf or NaN on a border reaches the outputs whose windows read it, and no others
    (a packer that read a neighbour's cell or dropped one would move or lose it)."""
    _require_conv2d("avx2")
    geometry = CASES[case]
    x, wt, b = _data(geometry, seed=case)
    h, w = x.shape[2:]
    cell = {
        "top left": (0, 0),
        "bottom right": (h - 1, w - 1),
        "left column": (h // 2, 0),
        "right column": (h // 2, w - 1),
        "middle": (h // 2, w // 2),
    }[where]
    x[0, x.shape[1] - 1, cell[0], cell[1]] = value
    with np.errstate(invalid="ignore"):
        want = _twin(geometry, x, wt, b)
    got = _native_conv(geometry, x, wt, b)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-5, atol=1e-5 * np.sqrt(wt[0].size))


@pytest.mark.parametrize("case", CASES, ids=[str(i) for i in range(len(CASES))])
def test_block_packed_panels_on_two_threads_give_the_bits_of_one(case: tuple) -> None:
    _require_conv2d("avx2")
    x, wt, b = _data(case, seed=case[4])
    np.testing.assert_array_equal(_native_conv(case, x, wt, b, threads=2), _native_conv(case, x, wt, b))
