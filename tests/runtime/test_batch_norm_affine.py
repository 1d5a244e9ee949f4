"""Inference BatchNormalization as ``x * s + t`` (runtime/kernels/normalization.py): the same
values as ``(x - mean) * s + bias``, and that form kept where ``t`` would cancel."""

from __future__ import annotations

import numpy as np
import pytest

from onnx_light.runtime.kernels import normalization


def _reference(x: np.ndarray, scale: np.ndarray, bias: np.ndarray, mean: np.ndarray, var: np.ndarray) -> np.ndarray:
    shape = (-1,) + (1,) * (x.ndim - 2)
    x64 = x.astype(np.float64)
    return (x64 - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + 1e-5) * scale.reshape(shape) + bias.reshape(shape)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("shape", [(1, 7, 5, 3), (2, 3, 4), (3, 5)])
def test_inference_batch_norm_matches_the_formula(dtype: type, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(0)
    c = shape[1]
    x = rng.standard_normal(shape).astype(dtype)
    scale, bias = rng.uniform(0.5, 1.5, c), rng.standard_normal(c)
    mean, var = rng.standard_normal(c) * 0.5, rng.uniform(0.5, 2.0, c)
    got = normalization.batch_norm(x, *(p.astype(dtype) for p in (scale, bias, mean, var)))
    assert got.dtype == dtype and got.shape == shape
    tol = {np.float16: 4e-3, np.float32: 2e-6, np.float64: 1e-12}[dtype]
    p = [q.astype(dtype).astype(np.float64) for q in (scale, bias, mean, var)]
    np.testing.assert_allclose(got, _reference(x, *p), rtol=tol, atol=tol)


def test_inference_batch_norm_keeps_precision_when_the_mean_dominates() -> None:
    """|mean| = 10^4 standard deviations: ``x * s + t`` would round away the signal
    (ulp(x * s) ~ 1e-3 of outputs ~ 1), so the centred form runs."""
    rng = np.random.default_rng(1)
    mean, var = np.array([1000.0, -500.0], np.float32), np.array([1e-2, 1e-2], np.float32)
    x = (mean.reshape(1, 2, 1) + 0.1 * rng.standard_normal((1, 2, 64))).astype(np.float32)
    scale, bias = np.ones(2, np.float32), np.zeros(2, np.float32)
    got = normalization.batch_norm(x, scale, bias, mean, var)
    np.testing.assert_allclose(got, _reference(x, scale, bias, mean, var), rtol=1e-5, atol=1e-5)


def test_inference_batch_norm_non_finite_inputs() -> None:
    x = np.array([[[np.nan, np.inf, -np.inf, 1.0]]], np.float32)
    one = np.ones(1, np.float32)
    got = normalization.batch_norm(x, one, one * 0.5, one * 0.25, one)
    np.testing.assert_array_equal(np.isnan(got), [[[True, False, False, False]]])
    assert got[0, 0, 1] == np.inf and got[0, 0, 2] == -np.inf
