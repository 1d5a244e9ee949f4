"""Every native function agrees with its pure-Python twin (DESIGN §6)."""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest

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
    oh = (height + 2 - (k - 1) * d - 1) // s + 1
    ow = (width + 1 - (k - 1) * d - 1) // s + 1
    args = (k, k, s, s, d, d, oh, ow, top, left, height, width, order, True)
    y1, i1 = _native.EXTENSION.max_pool2d(xp, *args)  # type: ignore[union-attr]
    y2, i2 = _native.max_pool2d_twin(xp, *args)
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_array_equal(i1, i2)


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
