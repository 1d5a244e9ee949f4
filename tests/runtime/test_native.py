"""Every native function agrees with its pure-Python twin (DESIGN §6)."""

from __future__ import annotations

import itertools
import os
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onnx_light.runtime import _native


def _require_native() -> None:
    if _native.EXTENSION is None:
        if os.environ.get("CI"):
            pytest.fail("onnx_light._native was not built: the CI install must build the extension")
        pytest.xfail("onnx_light._native is not built in this environment")


@pytest.mark.parametrize(
    "k,s,d,order,dtype",
    list(itertools.product([1, 2, 3], [1, 2], [1, 2], [0, 1], [np.float32, np.float64])),
)
def test_max_pool2d_matches_twin(k: int, s: int, d: int, order: int, dtype: type) -> None:
    _require_native()
    rng = np.random.default_rng(k * 100 + s * 10 + d)
    height, width, top, left = 9, 7, 1, 0
    xp = rng.standard_normal((2, 3, height + 2, width + 1)).astype(dtype)
    xp[..., :top, :] = -np.inf
    xp[1, 2, 4, 3] = np.nan  # the window's maximum is NaN, its index the largest number before it
    oh = (height + 2 - (k - 1) * d - 1) // s + 1
    ow = (width + 1 - (k - 1) * d - 1) // s + 1
    args = (k, k, s, s, d, d, oh, ow, top, left, height, width, order, True)
    y1, i1 = _native.EXTENSION.max_pool2d(xp, *args)  # type: ignore[union-attr]
    y2, i2 = _native.max_pool2d_twin(xp, *args)
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_array_equal(i1, i2)
    y3, i3 = _native.EXTENSION.max_pool2d(xp, *args[:-1], False)  # type: ignore[union-attr]
    assert i3 is None
    np.testing.assert_array_equal(y3, y2)


@pytest.mark.parametrize("kh,sh,dh", [(2, 2, 1), (1, 1, 1), (3, 2, 2), (2, 1, 1)])
@pytest.mark.parametrize("width", [2, 9, 32, 45, 64, 70])
def test_max_pool2d_two_wide_windows_match_twin(kh: int, sh: int, dh: int, width: int) -> None:
    # the vectorised float32 path: windows 2 columns wide at column stride 2, no indices
    _require_native()
    xp = np.random.default_rng(width).standard_normal((2, 3, 11, width)).astype(np.float32)
    xp[0, 0, 0, :3] = np.inf
    xp[1, 2, 1, :] = np.nan
    oh, ow = (11 - (kh - 1) * dh - 1) // sh + 1, width // 2
    args = (kh, 2, sh, 2, dh, 1, oh, ow, 0, 0, 11, width, 0, False)
    y1, i1 = _native.EXTENSION.max_pool2d(xp, *args)  # type: ignore[union-attr]
    y2, _ = _native.max_pool2d_twin(xp, *args)
    assert i1 is None
    np.testing.assert_array_equal(y1, y2)


@pytest.mark.parametrize("kh,kw", [(2, 2), (2, 3), (3, 1), (1, 2)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_max_pool2d_indices_of_ties_match_twin(kh: int, kw: int, dtype: type) -> None:
    # a ReLU's output (ties at 0 in most windows) and NaNs, through the 2x2 and the general indexed loop
    _require_native()
    xp = np.maximum(np.random.default_rng(kh * 10 + kw).standard_normal((2, 3, 13, 12)), 0).astype(dtype)
    xp[1, 0, 3, 2] = np.nan
    xp[0, 2, 5:7, 4:7] = 2.0
    for order in (0, 1):
        args = (kh, kw, 2, 1, 1, 1, (13 - kh) // 2 + 1, 12 - kw + 1, 0, 0, 13, 12, order, True)
        y1, i1 = _native.EXTENSION.max_pool2d(xp, *args)  # type: ignore[union-attr]
        y2, i2 = _native.max_pool2d_twin(xp, *args)
        np.testing.assert_array_equal(y1, y2)
        np.testing.assert_array_equal(i1, i2)


@pytest.mark.parametrize("width", [16, 17, 23, 35, 62])
@pytest.mark.parametrize("order", [0, 1])
def test_max_pool2d_indexed_2x2_stride_2_matches_twin(width: int, order: int) -> None:
    # the vectorised float32 2x2/2 indexed loop (8 outputs a step, the last 8 overlapping when
    # 8 does not divide the width): ReLU ties, NaN, inf and -0 against the numpy twin
    _require_native()
    rng = np.random.default_rng(width * 2 + order)
    xp = np.maximum(rng.standard_normal((2, 3, 13, width)), 0).astype(np.float32)
    flat = xp.reshape(-1)
    flat[::97], flat[5::89], flat[7::53] = np.nan, np.inf, -0.0
    xp[1, 1, 4:6] = 1.5  # whole windows of ties
    args = (2, 2, 2, 2, 1, 1, 6, width // 2, 0, 0, 13, width, order, True)
    y1, i1 = _native.EXTENSION.max_pool2d(xp, *args)  # type: ignore[union-attr]
    y2, i2 = _native.max_pool2d_twin(xp, *args)
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_array_equal(i1, i2)


@pytest.mark.parametrize(
    "kh,kw,sh,dh,pads,height,width",
    [
        (3, 3, 2, 1, (1, 1, 1, 1), 112, 112),  # ResNet-18's stem pool
        (3, 3, 2, 1, (1, 1, 1, 1), 17, 40),
        (3, 3, 2, 1, (0, 0, 0, 0), 9, 35),  # no pads: every window inside
        (5, 5, 2, 1, (2, 2, 2, 2), 12, 53),
        (3, 2, 1, 2, (2, 0, 1, 3), 11, 38),  # 2 columns wide, odd row dilation, right pads
        (1, 4, 3, 1, (0, 3, 0, 3), 7, 29),
        (3, 3, 2, 1, (1, 1, 2, 2), 7, 7),  # ceil mode: windows past the end, no whole vector
    ],
)
@pytest.mark.parametrize("order", [0, 1])
def test_max_pool2d_indexed_column_stride_2_matches_twin(
    kh: int, kw: int, sh: int, dh: int, pads: tuple, height: int, width: int, order: int
) -> None:
    # the vectorised float32 column-stride-2 indexed loop on the windows inside the input (8 a
    # step), the padded loop on the border: ReLU ties, NaN, inf and -0 against the numpy twin;
    # the pads hold +inf and NaN, which no window may read
    _require_native()
    top, left, bottom, right = pads
    rng = np.random.default_rng(height * width + order)
    xp = np.maximum(rng.standard_normal((2, 3, height + top + bottom, width + left + right)), 0).astype(np.float32)
    flat = xp.reshape(-1)
    flat[::97], flat[5::89], flat[7::53] = np.nan, np.inf, -0.0
    xp[1, 1, 4:7] = 1.5  # whole windows of ties
    xp[..., :top, :], xp[..., :, :left] = np.inf, np.nan
    xp[..., top + height :, :], xp[..., :, left + width :] = np.nan, np.inf
    oh = (height + top + bottom - (kh - 1) * dh - 1) // sh + 1
    ow = (width + left + right - kw) // 2 + 1
    args = (kh, kw, sh, 2, dh, 1, oh, ow, top, left, height, width, order, True)
    y1, i1 = _native.EXTENSION.max_pool2d(xp, *args)  # type: ignore[union-attr]
    y2, i2 = _native.max_pool2d_twin(xp, *args)
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_array_equal(i1, i2)


@pytest.mark.parametrize("size", [0, 1, 9, 5000])
def test_max_unpool_f32_matches_twin(size: int) -> None:
    # zeros, then each value at its flat index (a repeated index keeps the last); an index out of
    # range is refused (False) by both
    _require_native()
    rng = np.random.default_rng(size)
    x = rng.standard_normal(size).astype(np.float32)
    x[::7] = np.nan
    idx = rng.integers(0, 3 * size + 1, size).astype(np.int64)
    got, want = np.full(3 * size + 1, 5.0, np.float32), np.full(3 * size + 1, 5.0, np.float32)
    assert _native.EXTENSION.max_unpool_f32(x, idx, got)  # type: ignore[union-attr]
    assert _native.max_unpool_f32_twin(x, idx, want)
    np.testing.assert_array_equal(got, want)
    if size:
        for bad in (-1, got.size):
            idx[size // 2] = bad
            assert not _native.EXTENSION.max_unpool_f32(x, idx, got)  # type: ignore[union-attr]
            assert not _native.max_unpool_f32_twin(x, idx, want)


def test_max_pool2d_ties_pick_first() -> None:
    _require_native()
    xp = np.zeros((1, 1, 2, 2), np.float32)
    for fn in (_native.EXTENSION.max_pool2d, _native.max_pool2d_twin):  # type: ignore[union-attr]
        y, idx = fn(xp, 2, 2, 1, 1, 1, 1, 1, 1, 0, 0, 2, 2, 0, True)
        assert idx.ravel().tolist() == [0]


def test_max_pool2d_rejects_bad_geometry() -> None:
    _require_native()
    xp = np.zeros((1, 1, 2, 2), np.float32)
    with pytest.raises(ValueError):
        _native.EXTENSION.max_pool2d(xp, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 2, 2, 0, True)  # type: ignore[union-attr]


def _padded_reference(x: np.ndarray, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int, pads: tuple) -> tuple:
    """The window geometry and the old (padded, kh * kw taps) twin's answer: an independent oracle."""
    top, left, bottom, right = pads
    n, c, h, w = x.shape
    oh = (h + top + bottom - (kh - 1) * dh - 1) // sh + 1
    ow = (w + left + right - (kw - 1) * dw - 1) // sw + 1
    xp = np.full((n, c, h + top + bottom, w + left + right), -np.inf, x.dtype)
    xp[:, :, top : top + h, left : left + w] = x
    y, _ = _native.max_pool2d_twin(xp, kh, kw, sh, sw, dh, dw, oh, ow, top, left, h, w, 0, False)
    return (kh, kw, sh, sw, dh, dw, oh, ow, top, left), y


_SEPARABLE_CASES = [
    # (kh, kw), (sh, sw), (dh, dw), pads (top, left, bottom, right), (h, w)
    ((2, 2), (2, 2), (1, 1), (0, 0, 0, 0), (8, 40)),
    ((2, 1), (2, 1), (1, 1), (0, 0, 0, 0), (8, 21)),
    ((3, 3), (2, 2), (1, 1), (1, 1, 1, 1), (13, 37)),
    ((5, 5), (1, 1), (1, 1), (2, 2, 2, 2), (10, 10)),
    ((3, 3), (1, 1), (2, 2), (2, 1, 0, 3), (9, 19)),
    ((3, 2), (3, 3), (1, 2), (1, 0, 2, 1), (11, 29)),
    ((1, 4), (1, 2), (1, 1), (0, 3, 0, 3), (5, 50)),
    ((3, 3), (2, 2), (1, 1), (1, 1, 2, 2), (7, 7)),  # ceil mode: windows past the end
]


@pytest.mark.parametrize("kernel,strides,dilations,pads,size", _SEPARABLE_CASES)
def test_max_pool2d_f32_matches_padded_pooling(
    kernel: tuple, strides: tuple, dilations: tuple, pads: tuple, size: tuple
) -> None:
    # the separable pool (native and its twin) against the padded kh * kw pool, NaN and inf included
    x = np.random.default_rng(sum(size)).standard_normal((2, 3, *size)).astype(np.float32)
    x[0, 1, 1, :5] = np.nan
    x[1, 0, :, 2] = np.inf
    x[1, 2, 3, 3] = -np.inf
    args, want = _padded_reference(x, *kernel, *strides, *dilations, pads)
    np.testing.assert_array_equal(_native.max_pool2d_f32_twin(x, *args), want)
    if _native.EXTENSION is not None:
        got = _native.EXTENSION.max_pool2d_f32(x, *args)  # type: ignore[union-attr]
        assert got.dtype == np.float32 and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_max_pool2d_f32_rejects_bad_geometry() -> None:
    _require_native()
    x = np.zeros((1, 1, 4, 4), np.float32)
    with pytest.raises(ValueError):
        _native.EXTENSION.max_pool2d_f32(x, 2, 0, 1, 1, 1, 1, 3, 3, 0, 0)  # type: ignore[union-attr]


def _require_conv2d(isa: str) -> None:
    _require_native()
    runs = {"avx512": ("avx512",), "avx2": ("avx512", "avx2")}[isa]
    if _native.EXTENSION.conv2d_isa() not in runs:  # type: ignore[union-attr]
        pytest.skip(f"this CPU has no {isa}: the numpy convolution runs instead")


# (n, c, h, w, m, kernel, strides, dilations, pads (top, left, bottom, right), group): in-place
# reads (stride-1 columns, wide rows) and packed panels (strided, narrow rows), output-row
# tails, M not a multiple of 8, K above one 384-row block, grouped and depthwise weights (two
# output channels per input channel in one case)
CONV_CASES = [
    (2, 3, 20, 64, 32, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),
    (2, 3, 20, 64, 32, (3, 3), (1, 1), (1, 1), (0, 0, 0, 0), 1),
    (1, 4, 9, 40, 5, (3, 2), (2, 1), (2, 3), (0, 2, 3, 1), 1),
    (2, 5, 9, 11, 7, (3, 3), (2, 2), (2, 2), (1, 0, 2, 1), 1),
    (2, 8, 10, 10, 8, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 8),
    (3, 6, 7, 9, 4, (2, 3), (2, 1), (1, 2), (0, 1, 1, 0), 2),
    (1, 50, 6, 33, 20, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),
    (1, 60, 5, 5, 13, (3, 3), (1, 3), (1, 1), (2, 2, 2, 2), 1),
    (2, 4, 1, 70, 9, (1, 5), (1, 1), (1, 1), (0, 2, 0, 2), 1),
    (2, 4, 5, 5, 6, (5, 5), (1, 1), (1, 1), (0, 0, 0, 0), 2),
    (1, 4, 9, 56, 5, (3, 2), (2, 1), (2, 3), (0, 2, 3, 1), 1),
    (1, 50, 6, 64, 20, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),
    (2, 6, 7, 30, 12, (3, 3), (1, 1), (1, 2), (2, 0, 0, 3), 3),
    (1, 3, 20, 75, 9, (7, 7), (2, 2), (1, 1), (3, 3, 2, 4), 1),
    (2, 4, 9, 33, 6, (3, 3), (1, 2), (1, 3), (0, 1, 2, 0), 2),
    (1, 2, 5, 8, 3, (1, 1), (3, 2), (1, 1), (0, 5, 0, 6), 1),
    # depthwise (one input channel per group): column stride 1, 2 (permute), 3 (gather)
    (1, 5, 6, 40, 5, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 5),
    (2, 6, 11, 37, 12, (3, 3), (2, 2), (1, 2), (1, 2, 0, 1), 6),
    (1, 4, 8, 50, 4, (2, 5), (1, 3), (2, 1), (2, 3, 1, 2), 4),
    # depthwise on small maps: several output rows per block (7, 13, 29 and 3 columns; row
    # counts that are no multiple of the block's)
    (1, 6, 7, 7, 6, (5, 5), (1, 1), (1, 1), (2, 2, 2, 2), 6),
    (2, 4, 14, 14, 4, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 4),
    (1, 3, 13, 13, 3, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 3),
    (1, 3, 11, 29, 3, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 3),
    (1, 2, 9, 9, 2, (3, 3), (3, 3), (1, 1), (1, 1, 1, 1), 2),
    # one input channel per group but 9 outputs each (the Conv gradient's one-hot im2col):
    # the register tile, not the depthwise loop
    (2, 3, 9, 20, 27, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 3),
    # the blocked driver: 1x1 stride-1 panels copied from the input rows (odd pixel counts, a
    # K of two blocks and P of several pixel blocks), several K blocks and pixel blocks with a
    # window, stride 2 from the bordered copy with odd sizes, pads and dilations
    (2, 7, 9, 13, 10, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 1),
    (1, 600, 20, 21, 7, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 1),
    (2, 70, 17, 19, 14, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),
    (1, 5, 23, 31, 8, (3, 3), (2, 2), (1, 1), (1, 0, 1, 2), 1),
    (3, 4, 19, 27, 7, (3, 3), (2, 2), (2, 2), (2, 2, 1, 1), 1),
    (1, 3, 40, 45, 13, (7, 7), (2, 2), (1, 1), (3, 3, 3, 3), 1),
]


@pytest.mark.parametrize("case", CONV_CASES, ids=[str(i) for i in range(len(CONV_CASES))])
@pytest.mark.parametrize("bias,relu", [(True, False), (False, True), (True, True)])
@pytest.mark.parametrize("isa", ["avx512", "avx2"])
def test_conv2d_matches_twin(case: tuple, bias: bool, relu: bool, isa: str) -> None:
    _require_conv2d(isa)
    _check_geometry(case, bias, relu, isa, seed=len(case) * case[1] + case[4])


def _check_geometry(case: tuple, bias: bool, relu: bool, isa: str, seed: int) -> None:
    """The native conv2d of one geometry on random data equals the numpy twin's."""
    from onnx_light.runtime.kernels.conv import _conv_im2col

    n, c, h, w, m, k, s, d, p, g = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((m, c // g, *k)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32) if bias else None
    want = _conv_im2col(x, wt, b, list(s), list(d), list(p[:2]), list(p[2:]), g)
    if relu:
        want = np.maximum(want, 0)
    got = _native.EXTENSION.conv2d(x, wt, b, *s, *d, *p, g, relu, isa)  # type: ignore[union-attr]
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.sqrt(wt[0].size))


# act codes of src/conv.h and their numpy formulas (a, b: the activation's two parameters)
EPILOGUES = {
    1: ("relu", lambda v, a, b: np.maximum(v, 0)),
    2: ("clip", lambda v, a, b: np.minimum(np.maximum(v, a), b)),
    3: ("hardswish", lambda v, a, b: v * np.clip(v / 6 + 0.5, 0, 1)),
    4: ("hardsigmoid", lambda v, a, b: np.clip(a * v + b, 0, 1)),
    5: ("silu", lambda v, a, b: v / (1 + np.exp(-v.astype(np.float64)))),
    6: ("sigmoid", lambda v, a, b: 1 / (1 + np.exp(-v.astype(np.float64)))),
}


@pytest.mark.parametrize("case", [0, 4, 12, 16, 19, 21, 22], ids=lambda i: f"case{i}")
@pytest.mark.parametrize("act", sorted(EPILOGUES), ids=lambda a: EPILOGUES[a][0])
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("isa", ["avx512", "avx2"])
def test_conv2d_epilogues_match_numpy(case: int, act: int, residual: bool, isa: str) -> None:
    """act(Conv(x, w, b) + residual) as the tile stores it (register tile and depthwise loop)."""
    from onnx_light.runtime.kernels.conv import _conv_im2col

    _require_conv2d(isa)
    n, c, h, w, m, k, s, d, p, g = CONV_CASES[case]
    rng = np.random.default_rng(case + 10 * act)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = (rng.standard_normal((m, c // g, *k)) * 0.5).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    conv = _conv_im2col(x, wt, b, list(s), list(d), list(p[:2]), list(p[2:]), g)
    res = rng.standard_normal(conv.shape).astype(np.float32) if residual else None
    a, bb = (-0.5, 0.75) if act == 2 else (0.3, 0.45)
    want = EPILOGUES[act][1](conv + (0 if res is None else res), a, bb)
    got = _native.EXTENSION.conv2d(x, wt, b, *s, *d, *p, g, False, isa, act, a, bb, res)  # type: ignore[union-attr]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.sqrt(wt[0].size))
    # a NaN input stays NaN through every activation (numpy's maximum / minimum propagate it)
    x[(0,) * x.ndim] = np.nan
    got = _native.EXTENSION.conv2d(x, wt, b, *s, *d, *p, g, False, isa, act, a, bb, res)  # type: ignore[union-attr]
    conv = _conv_im2col(x, wt, b, list(s), list(d), list(p[:2]), list(p[2:]), g)
    with np.errstate(invalid="ignore"):
        want = EPILOGUES[act][1](conv + (0 if res is None else res), a, bb)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))


def test_conv2d_rejects_bad_arguments() -> None:
    _require_conv2d("avx2")
    conv2d = _native.EXTENSION.conv2d  # type: ignore[union-attr]
    x = np.zeros((1, 4, 5, 5), np.float32)
    with pytest.raises(ValueError, match="group"):
        conv2d(x, np.zeros((6, 3, 3, 3), np.float32), None, 1, 1, 1, 1, 0, 0, 0, 0, 2, False)
    with pytest.raises(ValueError, match="larger"):
        conv2d(x, np.zeros((6, 4, 7, 7), np.float32), None, 1, 1, 1, 1, 0, 0, 0, 0, 1, False)
    with pytest.raises(ValueError, match="bias"):
        conv2d(x, np.zeros((6, 4, 3, 3), np.float32), np.zeros(5, np.float32), 1, 1, 1, 1, 0, 0, 0, 0, 1, False)
    with pytest.raises(ValueError, match="positive"):
        conv2d(x, np.zeros((6, 4, 3, 3), np.float32), None, 0, 1, 1, 1, 0, 0, 0, 0, 1, False)
    with pytest.raises(ValueError, match="isa"):
        conv2d(x, np.zeros((6, 4, 3, 3), np.float32), None, 1, 1, 1, 1, 0, 0, 0, 0, 1, False, "sse9")
    with pytest.raises(ValueError, match="activation"):
        conv2d(x, np.zeros((6, 4, 3, 3), np.float32), None, 1, 1, 1, 1, 0, 0, 0, 0, 1, False, "avx2", 9)
    with pytest.raises(ValueError, match="residual"):
        conv2d(x, np.zeros((6, 4, 3, 3), np.float32), None, 1, 1, 1, 1, 0, 0, 0, 0, 1, False, "avx2", 1, 0, 0, x)


def test_conv2d_default_isa_is_avx2_where_the_cpu_has_it() -> None:
    """The AVX2 kernels (Winograd, packed weights) run by default even on AVX-512 CPUs: on AMD Zen 4
    they were faster on every real model and let small maps run threaded (src/conv.cpp default_isa);
    the runtime's CONV_ISA and conv2d's isa='' follow that default unless ONNX_LIGHT_CONV_ISA says."""
    _require_conv2d("avx2")
    ext: Any = _native.EXTENSION
    assert ext.conv2d_default_isa() == "avx2"
    assert ext.conv2d_isa() in ("avx2", "avx512")  # the widest, still selectable by name
    if not os.environ.get("ONNX_LIGHT_CONV_ISA") and _native.NATIVE is not None:
        assert _native.CONV_ISA == "avx2"
    x = np.random.default_rng(3).standard_normal((1, 64, 14, 14)).astype(np.float32)
    w = np.random.default_rng(4).standard_normal((64, 64, 3, 3)).astype(np.float32)
    assert ext.conv2d_winograd_applies(64, 14, 14, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1)
    named = ext.conv2d(x, w, None, 1, 1, 1, 1, 1, 1, 1, 1, 1, False, "avx2")
    np.testing.assert_array_equal(ext.conv2d(x, w, None, 1, 1, 1, 1, 1, 1, 1, 1, 1, False), named)


@st.composite
def _geometries(draw: st.DrawFn) -> tuple:
    """A small random convolution: strides, dilations, asymmetric pads, groups (depthwise
    included), bias, ReLU; the kernel never larger than the padded input."""
    group = draw(st.sampled_from([1, 1, 2, 3]))
    cg, mg = draw(st.integers(1, 5)), draw(st.integers(1, 10))
    if draw(st.booleans()):
        cg = 1  # depthwise when group > 1
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 5))
    sh, sw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    dh, dw = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    pads = tuple(draw(st.integers(0, 3)) for _ in range(4))
    h = draw(st.integers(max(1, (kh - 1) * dh + 1 - pads[0] - pads[2]), 12))
    w = draw(st.integers(max(1, (kw - 1) * dw + 1 - pads[1] - pads[3]), 70))
    n = draw(st.integers(1, 2))
    return (n, cg * group, h, w, mg * group, (kh, kw), (sh, sw), (dh, dw), pads, group)


def test_conv2d_matches_twin_on_random_geometries() -> None:
    _require_conv2d("avx2")
    best = _native.EXTENSION.conv2d_isa()  # type: ignore[union-attr]
    _random_geometries_match(["avx512", "avx2"] if best == "avx512" else ["avx2"])


def _random_geometries_match(isas: list[str]) -> None:
    @given(case=_geometries(), bias=st.booleans(), relu=st.booleans(), isa=st.sampled_from(isas))
    @settings(max_examples=300, deadline=None, derandomize=True)
    def check(case: tuple, bias: bool, relu: bool, isa: str) -> None:
        _check_geometry(case, bias, relu, isa, seed=case[2] * 1000 + case[3])

    check()


def _exp_range_values(n: int, seed: int) -> np.ndarray:
    """float32 values across exp's whole range: overflow, underflow into denormals, specials."""
    rng = np.random.default_rng(seed)
    x = np.concatenate(
        [
            rng.uniform(-110, 110, n),
            rng.standard_normal(n) * 3,
            np.linspace(-104, -86, 64),  # exp(x) denormal or zero
            np.linspace(86, 90, 16),  # exp(x) near FLT_MAX or inf
            [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -1e-30],
        ]
    )
    return x.astype(np.float32)


@pytest.mark.parametrize("size", [1, 7, 8, 9, 1023, 5000])
def test_sigmoid_f32_matches_twin(size: int) -> None:
    _require_native()
    x = np.resize(_exp_range_values(2000, size), size).astype(np.float32)
    with np.errstate(all="ignore"):
        want = _native.sigmoid_f32_twin(x, np.empty_like(x))
    got = np.empty_like(x)
    _native.EXTENSION.sigmoid_f32(x, got)  # type: ignore[union-attr]
    np.testing.assert_allclose(got, want, rtol=3e-7, atol=0)  # within ~2 ulp of numpy's exp
    inplace = x.copy()
    _native.EXTENSION.sigmoid_f32(inplace, inplace)  # type: ignore[union-attr]
    np.testing.assert_array_equal(inplace, got)


@pytest.mark.parametrize("size", [1, 7, 8, 9, 1023, 5000])
@pytest.mark.parametrize("branches", ["full-full", "full-single", "single-full", "single-single"])
def test_where_f32_matches_numpy_bitwise(size: int, branches: str) -> None:
    _require_native()
    rng = np.random.default_rng(size)
    cond = rng.random(size) > 0.5
    special = np.array([np.nan, -np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-42], np.float32)
    full = [np.resize(np.concatenate([special, rng.standard_normal(size).astype(np.float32)]), size) for _ in "xy"]
    single = [np.array(v, np.float32) for v in (np.nan, -0.0)]
    x, y = (f if kind == "full" else s for f, s, kind in zip(full, single, branches.split("-")))
    want = np.where(cond, x, y).astype(np.float32)
    for fn in (_native.EXTENSION.where_f32, _native.where_f32_twin):  # type: ignore[union-attr]
        got = np.empty(size, np.float32)
        fn(cond, x, y, got)
        np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32))  # NaN payloads and -0 kept
    with pytest.raises(ValueError):
        _native.EXTENSION.where_f32(cond, np.zeros(size + 1, np.float32), y, np.empty(size, np.float32))  # type: ignore[union-attr]


@pytest.mark.parametrize("width", [1, 7, 8, 9, 64, 130, 1000])
def test_softmax_rows_f32_matches_twin(width: int) -> None:
    _require_native()
    rng = np.random.default_rng(width)
    x = (rng.standard_normal((6, width)) * 20).astype(np.float32)
    x[1, :: max(1, width // 3)] = -np.inf  # some exp(-inf) = 0 terms
    x[2, 0] = np.nan  # a NaN row stays NaN
    x[3] = -np.inf  # all -inf: NaN as in numpy
    x[4, -1] = 80.0  # one large value: the others underflow towards denormals
    with np.errstate(all="ignore"):
        want = _native.softmax_rows_f32_twin(x, np.empty_like(x))
    got = np.empty_like(x)
    _native.EXTENSION.softmax_rows_f32(x, got)  # type: ignore[union-attr]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-30)
    with pytest.raises(ValueError):
        _native.EXTENSION.softmax_rows_f32(x, np.empty((6, width + 1), np.float32))  # type: ignore[union-attr]
