"""The data gradient's convolution (runtime/kernels/_conv_backward.py, src/conv_backward.cpp):
ConvTranspose weights as the stride-1 Conv's, native against its twin."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from onnx_light.runtime import _native
from onnx_light.runtime.kernels import _conv_backward

NATIVE = _native.NATIVE is not None and hasattr(_native.NATIVE, "conv_transpose_weights")


@pytest.mark.parametrize(
    "shape, group",
    [((4, 3, 3, 3), 1), ((6, 2, 3, 3), 3), ((40, 24, 1, 1), 1), ((33, 17, 5, 2), 1), ((8, 1, 5, 5), 8)]
    + [((17, 35, 3, 3), 1)],
)
def test_conv_transpose_weights_twin_is_the_flipped_swap(shape: tuple[int, ...], group: int) -> None:
    w = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    got = _conv_backward.conv_transpose_weights_twin(w, group)
    c, mg, kh, kw = shape
    cg = c // group
    assert got.shape == (group * mg, cg, kh, kw)
    for g, m, ci, a, b in itertools.product(range(group), range(mg), range(cg), range(kh), range(kw)):
        if (m + ci + a + b) % 7 == 0:  # a deterministic sample of the cells
            assert got[g * mg + m, ci, a, b] == w[g * cg + ci, m, kh - 1 - a, kw - 1 - b]


@pytest.mark.skipif(not NATIVE, reason="no native conv_transpose_weights (pure-Python twins)")
@pytest.mark.parametrize(
    "shape, group",
    [((4, 3, 3, 3), 1), ((6, 2, 3, 3), 3), ((40, 24, 1, 1), 1), ((33, 17, 5, 2), 1), ((8, 1, 5, 5), 8)]
    + [((64, 96, 3, 3), 2)],
)
def test_conv_transpose_weights_native_equals_twin(shape: tuple[int, ...], group: int) -> None:
    w = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    assert _native.NATIVE is not None
    got = _native.NATIVE.conv_transpose_weights(w, group)
    np.testing.assert_array_equal(got, _conv_backward.conv_transpose_weights_twin(w, group))
    # the dispatcher (into its per-thread scratch), also from a non-contiguous view
    view = w[:, :, ::-1]
    want = _conv_backward.conv_transpose_weights_twin(view, group)
    np.testing.assert_array_equal(_conv_backward.conv_transpose_weights(view, group), want)
    out = np.empty_like(got)
    assert _native.NATIVE.conv_transpose_weights(w, group, out) is out
    np.testing.assert_array_equal(out, got)


def test_conv_transpose_weights_twin_into_out() -> None:
    w = np.random.default_rng(4).standard_normal((6, 4, 3, 2)).astype(np.float32)
    out = np.empty((8, 3, 3, 2), np.float32)
    assert _conv_backward.conv_transpose_weights_twin(w, 2, out) is out
    np.testing.assert_array_equal(out, _conv_backward.conv_transpose_weights_twin(w, 2))


@pytest.mark.skipif(not NATIVE, reason="no native conv_transpose_weights (pure-Python twins)")
def test_conv_transpose_weights_native_refuses_a_bad_group() -> None:
    assert _native.NATIVE is not None
    with pytest.raises(ValueError, match="multiple of group"):
        _native.NATIVE.conv_transpose_weights(np.zeros((5, 2, 3, 3), np.float32), 2)
    w = np.zeros((4, 2, 3, 3), np.float32)
    with pytest.raises(ValueError, match="out is not"):
        _native.NATIVE.conv_transpose_weights(w, 1, np.zeros((2, 4, 3, 2), np.float32))
    with pytest.raises(ValueError, match="overlaps"):
        _native.NATIVE.conv_transpose_weights(w, 1, w.reshape(2, 4, 3, 3))


# depthwise_conv_transpose: a depthwise Conv's data gradient, gathered per output phase
# (strides up to 3 and unequal per axis, dilations, begin crops past the kernel, outputs
# longer than the span (output_padding), odd sizes, a batch, planes narrower than a vector)
_DW_GRID = [
    # (n, c, h, w, kh, kw, strides, dilations, begin, size)
    (1, 3, 7, 7, 5, 5, (1, 1), (1, 1), (2, 2), (7, 7)),
    (2, 5, 14, 13, 3, 3, (2, 2), (1, 1), (1, 1), (27, 25)),
    (2, 4, 5, 9, 3, 5, (2, 3), (2, 1), (0, 3), (12, 26)),
    (1, 6, 4, 3, 5, 3, (3, 2), (1, 2), (4, 0), (9, 12)),
    (1, 2, 6, 6, 3, 3, (2, 2), (1, 1), (0, 0), (15, 14)),  # past the span: cells no tap reaches
    (3, 2, 1, 1, 3, 3, (1, 1), (1, 1), (1, 1), (1, 1)),
    (1, 8, 28, 28, 3, 3, (1, 1), (2, 2), (2, 2), (28, 28)),
    (1, 3, 11, 17, 1, 1, (2, 1), (1, 1), (0, 0), (21, 17)),
    (1, 16, 9, 9, 7, 7, (1, 1), (1, 1), (6, 6), (3, 3)),  # begin crops most of the output
]


@pytest.mark.parametrize("case", _DW_GRID, ids=[f"dw{i}" for i in range(len(_DW_GRID))])
def test_depthwise_conv_transpose_twin_is_the_scatter(case: tuple[Any, ...]) -> None:
    from onnx_light.runtime.kernels.conv import _conv_transpose_scatter

    n, c, h, w, kh, kw, strides, dilations, begin, size = case
    rng = np.random.default_rng(2)
    x = rng.standard_normal((n, c, h, w))
    wt = rng.standard_normal((c, 1, kh, kw))
    want = _conv_transpose_scatter(x, wt, list(strides), list(dilations), c, list(begin), list(size))
    got = _conv_backward.depthwise_conv_transpose_twin(x, wt, strides, dilations, begin, size)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.skipif(not NATIVE, reason="no native depthwise_conv_transpose (pure-Python twins)")
@pytest.mark.parametrize("case", _DW_GRID, ids=[f"dw{i}" for i in range(len(_DW_GRID))])
def test_depthwise_conv_transpose_native_equals_twin(case: tuple[Any, ...]) -> None:
    n, c, h, w, kh, kw, strides, dilations, begin, size = case
    rng = np.random.default_rng(3)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((c, 1, kh, kw)).astype(np.float32)
    want = _conv_backward.depthwise_conv_transpose_twin(
        x.astype(np.float64), wt.astype(np.float64), strides, dilations, begin, size
    )
    got = _conv_backward.depthwise_conv_transpose(x, wt, strides, dilations, begin, size)
    assert got is not None and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    out = np.full((n, c, *size), np.nan, np.float32)
    assert _conv_backward.depthwise_conv_transpose(x, wt, strides, dilations, begin, size, out) is out
    np.testing.assert_array_equal(out, got)


@pytest.mark.skipif(not NATIVE, reason="no native depthwise_conv_transpose (pure-Python twins)")
def test_depthwise_conv_transpose_native_nan_reaches_only_its_taps() -> None:
    """A NaN/inf input reaches exactly the outputs whose taps read it (the vector loop reads
    past a row's end into lanes it drops, which must not leak)."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 2, 7, 7)).astype(np.float32)
    x[0, 0, 3, 6] = np.nan
    x[0, 1, 0, 0] = np.inf
    wt = rng.uniform(0.5, 1.0, (2, 1, 5, 5)).astype(np.float32)
    for strides in ((1, 1), (2, 2)):
        size = [(7 - 1) * strides[0] + 1, (7 - 1) * strides[1] + 1]
        want = _conv_backward.depthwise_conv_transpose_twin(x, wt, strides, (1, 1), (2, 2), size)
        got = _conv_backward.depthwise_conv_transpose(x, wt, strides, (1, 1), (2, 2), size)
        assert got is not None
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
        finite = np.isfinite(want)
        np.testing.assert_allclose(got[finite], want[finite], rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not NATIVE, reason="no native depthwise_conv_transpose (pure-Python twins)")
def test_depthwise_conv_transpose_native_refuses_bad_arguments() -> None:
    assert _native.NATIVE is not None
    x, w = np.zeros((1, 4, 3, 3), np.float32), np.zeros((4, 1, 3, 3), np.float32)
    with pytest.raises(ValueError, match=r"w is not \(C, 1, kh, kw\)"):
        _native.NATIVE.depthwise_conv_transpose(x, np.zeros((3, 1, 3, 3), np.float32), [1, 1], [1, 1], [0, 0], [5, 5])
    with pytest.raises(ValueError, match="strides and dilations"):
        _native.NATIVE.depthwise_conv_transpose(x, w, [0, 1], [1, 1], [0, 0], [5, 5])
    with pytest.raises(ValueError, match="2 values"):
        _native.NATIVE.depthwise_conv_transpose(x, w, [1], [1, 1], [0, 0], [5, 5])
    with pytest.raises(ValueError, match="another shape"):
        _native.NATIVE.depthwise_conv_transpose(
            x, w, [1, 1], [1, 1], [0, 0], [5, 5], np.zeros((1, 4, 5, 4), np.float32)
        )
    # where it does not apply the dispatcher says so (the general path runs)
    assert (
        _conv_backward.depthwise_conv_transpose(
            x.astype(np.float64), w.astype(np.float64), [1, 1], [1, 1], [0, 0], [5, 5]
        )
        is None
    )
    assert (
        _conv_backward.depthwise_conv_transpose(x, np.zeros((4, 2, 3, 3), np.float32), [1, 1], [1, 1], [0, 0], [5, 5])
        is None
    )
