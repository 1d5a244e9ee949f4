"""Random generators: RandomNormal(Like), RandomUniform(Like), Bernoulli, Multinomial.

A ``seed`` attribute makes the values reproducible (the same seed gives the same
values on every run); without it each run draws fresh values. The values are
numpy's generator's, not onnxruntime's: the spec fixes distributions, not streams.
"""

from __future__ import annotations

import numpy as np

from onnx_light.runtime._registry import kernel
from onnx_light.runtime.kernels._dtypes import BIT_PATTERN_TYPES, encode, np_dtype, onnx_type_of


def _generator(seed: float | None) -> np.random.Generator:
    """numpy's generator, seeded from the float ``seed`` attribute when it is set."""
    if seed is None:
        return np.random.default_rng()
    return np.random.default_rng(np.frombuffer(np.float64(seed).tobytes(), np.uint64))


def _as_type(values: np.ndarray, onnx_type: int) -> np.ndarray:
    """float64 samples in the element type ``onnx_type``."""
    if onnx_type in BIT_PATTERN_TYPES:
        return encode(values, onnx_type)
    return values.astype(np_dtype(onnx_type))


def _like_type(x: np.ndarray, dtype: int | None) -> int:
    return int(dtype) if dtype is not None else onnx_type_of(x)


@kernel("", "RandomNormal", since=(1, 22))
def random_normal(
    *, shape: list[int], dtype: int = 1, mean: float = 0.0, scale: float = 1.0, seed: float | None = None
) -> np.ndarray:
    """Samples of N(mean, scale**2) of ``shape``."""
    return _as_type(_generator(seed).normal(mean, scale, tuple(shape)), dtype)


@kernel("", "RandomNormalLike", since=(1, 22))
def random_normal_like(
    x: np.ndarray, *, dtype: int | None = None, mean: float = 0.0, scale: float = 1.0, seed: float | None = None
) -> np.ndarray:
    """Samples of N(mean, scale**2) shaped like ``x``, in ``dtype`` or ``x``'s type."""
    return _as_type(_generator(seed).normal(mean, scale, x.shape), _like_type(x, dtype))


@kernel("", "RandomUniform", since=(1, 22))
def random_uniform(
    *, shape: list[int], dtype: int = 1, low: float = 0.0, high: float = 1.0, seed: float | None = None
) -> np.ndarray:
    """Samples of U[low, high) of ``shape``."""
    return _as_type(_generator(seed).uniform(low, high, tuple(shape)), dtype)


@kernel("", "RandomUniformLike", since=(1, 22))
def random_uniform_like(
    x: np.ndarray, *, dtype: int | None = None, low: float = 0.0, high: float = 1.0, seed: float | None = None
) -> np.ndarray:
    """Samples of U[low, high) shaped like ``x``, in ``dtype`` or ``x``'s type."""
    return _as_type(_generator(seed).uniform(low, high, x.shape), _like_type(x, dtype))


@kernel("", "Bernoulli", since=(15, 22))
def bernoulli(x: np.ndarray, *, dtype: int | None = None, seed: float | None = None) -> np.ndarray:
    """1 with probability ``x`` (elementwise), else 0; in ``dtype`` or ``x``'s type."""
    draws = _generator(seed).uniform(0.0, 1.0, x.shape) < x.astype(np.float64)
    return _as_type(draws.astype(np.float64), _like_type(x, dtype))


@kernel("", "Multinomial", since=(7, 22))
def multinomial(x: np.ndarray, *, dtype: int = 6, sample_size: int = 1, seed: float | None = None) -> np.ndarray:
    """``sample_size`` class indices per row of the unnormalised log-probabilities ``x`` (batch, classes)."""
    if x.ndim != 2:
        raise ValueError(f"Multinomial takes a 2-D input (batch_size, class_size), got shape {x.shape}")
    logits = x.astype(np.float64)
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    cdf = np.cumsum(p / p.sum(axis=1, keepdims=True), axis=1)
    u = _generator(seed).uniform(0.0, 1.0, (x.shape[0], sample_size))
    idx = np.stack([np.searchsorted(cdf[i], u[i], side="right") for i in range(x.shape[0])]) if x.shape[0] else u
    return np.minimum(idx, x.shape[1] - 1).astype(np_dtype(dtype))
