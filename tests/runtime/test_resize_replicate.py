"""Resize's integer nearest upsampling as strided copies (``kernels/resize.py`` ``_replicate``,
issue 15 §1): the same elements as the per-axis gathers, wherever the tables say cell ``i``
reads cell ``i // k``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from onnx_light.runtime.kernels.resize import plan_resize, run_plan

_RNG = np.random.default_rng(3)
_NEAREST = {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}

# id, input shape, scales, attributes, whether the plan replicates
_CASES: list[tuple[str, tuple[int, ...], list[float], dict[str, Any], bool]] = [
    ("2x-hw", (1, 3, 4, 5), [1, 1, 2, 2], _NEAREST, True),
    ("3x-w", (2, 2, 3, 4), [1, 1, 1, 3], _NEAREST, True),
    ("2x-c-4x-w", (1, 2, 3, 2), [1, 2, 1, 4], _NEAREST, True),
    ("2x-h-3d", (2, 5, 3), [1, 2, 1], _NEAREST, True),
    (
        "half-pixel-round",
        (1, 1, 4, 4),
        [1, 1, 2, 2],
        {**_NEAREST, "coordinate_transformation_mode": "half_pixel", "nearest_mode": "round_prefer_floor"},
        True,
    ),
    ("ceil-not", (1, 1, 4, 4), [1, 1, 2, 2], {**_NEAREST, "nearest_mode": "ceil"}, False),
    ("1.5x-not", (1, 1, 4, 4), [1, 1, 1.5, 1.5], _NEAREST, False),
    ("downsample-not", (1, 1, 4, 4), [1, 1, 0.5, 0.5], _NEAREST, False),
    ("linear-not", (1, 1, 4, 4), [1, 1, 2, 2], {**_NEAREST, "mode": "linear"}, False),
]


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.float16])
@pytest.mark.parametrize(
    ("shape", "scales", "attrs", "replicates"), [c[1:] for c in _CASES], ids=[c[0] for c in _CASES]
)
def test_replicated_upsampling_gives_the_gathers_elements(
    shape: Any, scales: Any, attrs: Any, replicates: bool, dtype: Any
) -> None:
    x = (_RNG.standard_normal(shape) * 10).astype(dtype)
    plan = plan_resize(x.shape, None, np.array(scales, np.float32), None, **attrs)
    assert (plan.replicate is not None) == replicates
    got = run_plan(x, plan)
    want = run_plan(x, plan._replace(replicate=None))  # the per-axis gathers
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    assert got.flags.c_contiguous
