"""The native resampling loops (src/resample.cpp) agree with their numpy twins (DESIGN §6)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from onnx_light.runtime import _native


def _require_resample() -> None:
    if _native.EXTENSION is None or not hasattr(_native.EXTENSION, "resample_axis"):
        if os.environ.get("CI"):
            pytest.fail("onnx_light._native was built without src/resample.cpp: the CI install must build it")
        pytest.xfail("onnx_light._native (with src/resample.cpp) is not built in this environment")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    ("outer", "n_in", "inner", "n_out", "taps"), [(3, 7, 5, 11, 2), (2, 9, 1, 4, 4), (1, 5, 8, 5, 6)]
)
def test_resample_axis_matches_twin(dtype: type, outer: int, n_in: int, inner: int, n_out: int, taps: int) -> None:
    _require_resample()
    r = np.random.default_rng(7)
    x = r.standard_normal((outer, n_in, inner)).astype(dtype)
    index = r.integers(0, n_in, (n_out, taps))
    weight = r.standard_normal((n_out, taps)).astype(dtype)
    weight[:, -1] = 0  # an all-zero tap: the twin skips it, the native loop adds zeros
    got = _native.EXTENSION.resample_axis(x, index, weight)  # type: ignore[union-attr]
    want = _native.resample_axis_twin(x, index, weight)
    assert got.dtype == want.dtype and got.shape == want.shape == (outer, n_out, inner)
    np.testing.assert_allclose(got, want, rtol=1e-6 if dtype == np.float32 else 1e-13, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("batch", "channels", "size", "points", "taps"), [(2, 3, 50, 300, 4), (1, 1, 8, 5, 1)])
def test_gather_points_matches_twin(dtype: type, batch: int, channels: int, size: int, points: int, taps: int) -> None:
    _require_resample()
    r = np.random.default_rng(8)
    x = r.standard_normal((batch, channels, size)).astype(dtype)
    index = r.integers(0, size, (taps, batch, points))
    weight = r.standard_normal((taps, batch, points)).astype(dtype)
    got = _native.EXTENSION.gather_points(x, index, weight)  # type: ignore[union-attr]
    want = _native.gather_points_twin(x, index, weight)
    assert got.dtype == want.dtype and got.shape == want.shape == (batch, channels, points)
    np.testing.assert_allclose(got, want, rtol=1e-6 if dtype == np.float32 else 1e-13, atol=1e-6)


@pytest.mark.parametrize("fn", ["resample_axis", "gather_points"])
def test_out_of_range_index_is_refused(fn: str) -> None:
    _require_resample()
    x = np.zeros((1, 4, 4), np.float32)
    shape = (2, 2) if fn == "resample_axis" else (2, 1, 2)
    index = np.full(shape, 4, np.int64)
    with pytest.raises(ValueError, match="index out of range"):
        getattr(_native.EXTENSION, fn)(x, index, np.ones(shape, np.float32))
