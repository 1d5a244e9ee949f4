"""The one-hot grouped Conv (the Conv gradient's im2col) as strided copies: the same values as
the convolution (the numpy im2col path and onnxruntime), and the convolution whenever the
shortcut does not apply (other weights, non-finite inputs)."""

from __future__ import annotations

import numpy as np
import pytest
from ort_reference import compare_with_ort

from onnx_light.runtime.kernels import conv as k
from onnx_light.runtime.kernels._one_hot_conv import one_hot_offsets


def _one_hot(c: int, kernel: tuple[int, ...], offsets: list[tuple[int, ...]], dtype: type = np.float32) -> np.ndarray:
    w = np.zeros((c, len(offsets), *kernel), dtype)
    for m, off in enumerate(offsets):
        w[(slice(None), m, *off)] = 1
    return w.reshape(c * len(offsets), 1, *kernel)


def _reference(x: np.ndarray, w: np.ndarray, group: int, **attrs: list[int]) -> np.ndarray:
    """The convolution by the numpy im2col path (no shortcut)."""
    nd = x.ndim - 2
    strides, dilations = list(attrs.get("strides", [1] * nd)), list(attrs.get("dilations", [1] * nd))
    begin, end = k.explicit_pads(x.shape[2:], w.shape[2:], strides, dilations, attrs.get("pads"), "NOTSET")
    return k._conv_im2col(x, w, None, strides, dilations, begin, end, group)


FULL_3X3 = [(a, b) for a in range(3) for b in range(3)]
CASES = [
    # (x shape, kernel, offsets, attributes)
    ((2, 3, 9, 11), (3, 3), FULL_3X3, {}),
    ((2, 4, 10, 9), (3, 3), FULL_3X3, {"strides": [2, 1], "pads": [1, 0, 2, 1]}),
    ((1, 2, 12, 13), (3, 3), FULL_3X3, {"dilations": [2, 3], "strides": [1, 2]}),
    ((1, 3, 8, 8), (2, 3), [(1, 2), (0, 0), (1, 0)], {"pads": [1, 1, 1, 1]}),  # not in kernel order
    ((2, 2, 7, 6), (2, 2), [(0, 0), (0, 1), (1, 0), (1, 1)], {}),
    ((2, 3, 15), (5,), [(i,) for i in range(5)], {"pads": [2, 2]}),  # 1-D
    ((1, 2, 5, 6, 7), (2, 2, 2), [(0, 0, 0), (1, 1, 1), (0, 1, 0)], {}),  # 3-D
]


@pytest.mark.parametrize("case", CASES, ids=[str(i) for i in range(len(CASES))])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_one_hot_conv_equals_convolution(case: tuple, dtype: type) -> None:
    shape, kernel, offsets, attrs = case
    x = np.random.default_rng(len(offsets) * shape[1]).standard_normal(shape).astype(dtype)
    w = _one_hot(shape[1], kernel, offsets, dtype)
    assert one_hot_offsets(w, shape[1]) == offsets  # the shortcut runs
    got = k.conv(x, w, group=shape[1], **attrs)
    expected = _reference(x, w, shape[1], **attrs)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)  # a copy: exact, not just close


def test_one_hot_conv_against_onnxruntime() -> None:
    # the geometry of the conv net's second Conv gradient, smaller batch
    x = np.random.default_rng(3).standard_normal((2, 32, 31, 31)).astype(np.float32)
    compare_with_ort("Conv", [x, _one_hot(32, (3, 3), FULL_3X3)], {"group": 32}, opset=17)
    compare_with_ort("Conv", [x[:, :3], _one_hot(3, (3, 3), FULL_3X3)], {"group": 3, "pads": [1, 1, 1, 1]}, opset=17)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_input_keeps_the_convolution(bad: float) -> None:
    # 0 * inf is NaN: every window that reads a NaN or inf is NaN in the convolution
    x = np.random.default_rng(0).standard_normal((1, 2, 6, 6)).astype(np.float32)
    x[0, 1, 2, 3] = bad
    w = _one_hot(2, (3, 3), FULL_3X3)
    with np.errstate(invalid="ignore"):  # as a session runs kernels
        got, expected = k.conv(x, w, group=2), _reference(x, w, 2)
    np.testing.assert_array_equal(got, expected)
    assert np.isnan(got).sum() > 1


def test_float_overflow_of_the_check_keeps_the_convolution() -> None:
    x = np.full((1, 2, 6, 6), 3e38, np.float32)  # finite, but the sum overflows
    w = _one_hot(2, (3, 3), FULL_3X3)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(k.conv(x, w, group=2), _reference(x, w, 2))


def _not_one_hot() -> list[tuple[str, np.ndarray, int]]:
    w = _one_hot(3, (3, 3), FULL_3X3)
    two = w.copy()
    two[4, 0, 1, 1] = 2  # a 2, not a 1
    extra = w.copy()
    extra[5, 0, 0, 0] = 1e-3  # a second non-zero
    swapped = w.copy()
    swapped[9:11] = w[10:8:-1]  # group 1's taps in another order than group 0's
    negative = w.copy()
    negative[0, 0, 0, 0] = -1
    return [("two", two, 3), ("extra", extra, 3), ("swapped", swapped, 3), ("negative", negative, 3)]


@pytest.mark.parametrize("name,w,group", _not_one_hot(), ids=[c[0] for c in _not_one_hot()])
def test_other_weights_are_convolved(name: str, w: np.ndarray, group: int) -> None:
    assert one_hot_offsets(w, group) is None
    x = np.random.default_rng(1).standard_normal((2, 3, 7, 8)).astype(np.float32)
    np.testing.assert_allclose(k.conv(x, w, group=group), _reference(x, w, group), rtol=1e-5, atol=1e-5)


def test_bias_and_relu_keep_the_convolution() -> None:
    x = np.random.default_rng(2).standard_normal((1, 2, 6, 6)).astype(np.float32)
    w = _one_hot(2, (3, 3), FULL_3X3)
    b = np.arange(18, dtype=np.float32)
    expected = _reference(x, w, 2) + b.reshape(-1, 1, 1)
    np.testing.assert_allclose(k.conv(x, w, b, group=2), expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(k.conv_relu(x, w, b, group=2), np.maximum(expected, 0), rtol=1e-6, atol=1e-6)


_NATIVE_CASES = [
    ((1, 64, 7, 7), (3, 3), {"pads": [1, 1, 1, 1]}),  # ResNet-18's deep layers: short rows
    ((2, 4, 10, 9), (3, 3), {"strides": [2, 1], "pads": [1, 0, 2, 1]}),
    ((1, 2, 12, 13), (3, 3), {"dilations": [2, 3], "strides": [1, 2], "pads": [3, 0, 1, 4]}),
    ((1, 3, 5, 4), (5, 5), {"strides": [2, 2], "pads": [4, 4, 4, 4]}),  # rows and columns all pad
    ((2, 2, 7, 6), (2, 2), {}),
]


@pytest.mark.parametrize("case", _NATIVE_CASES, ids=[str(i) for i in range(len(_NATIVE_CASES))])
def test_native_columns_are_the_strided_copy_bit_for_bit(case: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    from onnx_light.runtime import _native

    if _native.NATIVE is None or not hasattr(_native.NATIVE, "im2col_f32"):
        pytest.skip("the native extension is not selected")
    shape, kernel, attrs = case
    x = np.random.default_rng(shape[1]).standard_normal(shape).astype(np.float32)
    x[0, 0, 0, 0] = -0.0
    w = _one_hot(shape[1], kernel, [(a, b) for a in range(kernel[0]) for b in range(kernel[1])])
    calls: list[int] = []
    ext = _native.NATIVE

    class Recorder:
        def __getattr__(self, name: str) -> object:
            return getattr(ext, name)

        def im2col_f32(self, *args: object) -> None:
            calls.append(1)
            ext.im2col_f32(*args)

    monkeypatch.setattr(_native, "NATIVE", Recorder())
    into = np.full(k.conv(x, w, group=shape[1], **attrs).shape, np.nan, np.float32)
    got = k.conv(x, w, group=shape[1], out=into, **attrs)
    assert calls == [1, 1] and got is into
    monkeypatch.setattr(_native, "NATIVE", None)  # the strided view's copy (the twin)
    want = k.conv(x, w, group=shape[1], **attrs)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_offsets_are_checked_once_per_immutable_weights_and_always_for_writeable_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[int] = []
    check = k.one_hot_offsets

    def counting(w: np.ndarray, group: int) -> list[tuple[int, ...]] | None:
        calls.append(group)
        return check(w, group)

    monkeypatch.setattr(k, "one_hot_offsets", counting)
    x = np.random.default_rng(3).standard_normal((1, 2, 6, 6)).astype(np.float32)
    frozen = _one_hot(2, (3, 3), FULL_3X3)
    frozen = np.frombuffer(frozen.tobytes(), np.float32).reshape(frozen.shape)  # read-only, over bytes
    first = k.conv(x, frozen, group=2)
    np.testing.assert_array_equal(k.conv(x, frozen, group=2), first)
    assert calls == [2]
    calls.clear()
    w = _one_hot(2, (3, 3), FULL_3X3)
    k.conv(x, w, group=2)
    w[0, 0, 1, 1] = 2.0  # no longer one-hot: the convolution, not a stale copy
    got = k.conv(x, w, group=2)
    assert calls == [2, 2]
    np.testing.assert_allclose(got[0, 0], x[0, 0, :-2, :-2] + 2.0 * x[0, 0, 1:-1, 1:-1], rtol=1e-6)
