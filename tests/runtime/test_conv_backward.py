"""The data gradient's convolution (runtime/kernels/_conv_backward.py, src/conv_backward.cpp):
ConvTranspose weights as the stride-1 Conv's, native against its twin."""

from __future__ import annotations

import itertools

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
