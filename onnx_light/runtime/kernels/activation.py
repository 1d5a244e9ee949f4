"""Softmax, LogSoftmax, Hardmax and Dropout.

Before opset 13 the softmax family flattens the input to 2-D at ``axis`` (default 1)
and normalizes each row; from 13 it normalizes along the single ``axis`` (default -1).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from onnx_light.runtime._native import lent, softmax_rows_f32
from onnx_light.runtime._registry import kernel
from onnx_light.runtime.kernels._axes import axis_index

_F32 = np.dtype(np.float32)


def _softmax(x: np.ndarray, axis: int, out: np.ndarray | None = None) -> np.ndarray:
    """``exp(x - max) / sum(exp(x - max))`` along ``axis``; float32 along the last axis of a
    C-contiguous array in one native pass per row (``src/elementwise.cpp``) or its twin, into
    ``out`` (the buffer pool's array) when :func:`lent` takes it."""
    if x.__class__ is np.ndarray and x.dtype == _F32 and x.ndim and x.flags.c_contiguous:
        if axis_index(axis, x.ndim) == x.ndim - 1 and x.shape[-1]:
            y = lent(out, _F32, x.shape, x)
            y = np.empty_like(x) if y is None else y
            softmax_rows_f32(x.reshape(-1, x.shape[-1]), y.reshape(-1, x.shape[-1]))
            return y
    if not x.size:  # numpy's max has no identity along an empty axis
        return np.empty_like(x)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    if not x.size:  # numpy's max has no identity along an empty axis
        return np.empty_like(x)
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


def _hardmax(x: np.ndarray, axis: int) -> np.ndarray:
    """One-hot of the first maximum along ``axis``."""
    if not x.size:  # numpy's argmax has no answer along an empty axis
        return np.zeros_like(x)
    first = np.expand_dims(x.argmax(axis=axis), axis)
    y = np.zeros_like(x)
    np.put_along_axis(y, first, 1, axis=axis)
    return y


def _flattened(fn: Callable[[np.ndarray, int], np.ndarray], x: np.ndarray, axis: int) -> np.ndarray:
    """Applies ``fn`` to the rows of ``x`` seen as ``[prod(shape[:axis]), prod(shape[axis:])]``."""
    axis = axis_index(axis, max(x.ndim, 1))
    rows = int(np.prod(x.shape[:axis]))
    return fn(x.reshape(rows, -1), 1).reshape(x.shape)


@kernel("", "Softmax", since=(1, 11))
def softmax_1(x: np.ndarray, *, axis: int = 1) -> np.ndarray:
    """Opset 1/11: softmax over the rows of the 2-D flattening at ``axis``."""
    return _flattened(_softmax, x, axis)


@kernel("", "Softmax", since=13, writes_out=True)
def softmax(x: np.ndarray, *, axis: int = -1, out: np.ndarray | None = None) -> np.ndarray:
    """Softmax along ``axis`` (``out``: the buffer pool's array, a hint)."""
    return _softmax(x, axis, out)


@kernel("", "LogSoftmax", since=(1, 11))
def log_softmax_1(x: np.ndarray, *, axis: int = 1) -> np.ndarray:
    """Opset 1/11: log-softmax over the rows of the 2-D flattening at ``axis``."""
    return _flattened(_log_softmax, x, axis)


@kernel("", "LogSoftmax", since=13)
def log_softmax(x: np.ndarray, *, axis: int = -1) -> np.ndarray:
    """Log-softmax along ``axis``."""
    return _log_softmax(x, axis)


@kernel("", "Hardmax", since=(1, 11))
def hardmax_1(x: np.ndarray, *, axis: int = 1) -> np.ndarray:
    """Opset 1/11: one-hot of the first maximum of each row of the 2-D flattening."""
    return _flattened(_hardmax, x, axis)


@kernel("", "Hardmax", since=13)
def hardmax(x: np.ndarray, *, axis: int = -1) -> np.ndarray:
    """One-hot of the first maximum along ``axis``."""
    return _hardmax(x, axis)


@kernel("", "Dropout", since=7)
def dropout_7(
    x: np.ndarray, *, ratio: float = 0.5, _num_outputs: int = 1
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Opset 7: inference only, an identity; the mask (of x's type) is all ones."""
    if _num_outputs == 1:
        return x.copy()
    return x.copy(), np.ones_like(x)


@kernel("", "Dropout", since=10)
def dropout_10(
    x: np.ndarray, *, ratio: float = 0.5, _num_outputs: int = 1
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Opset 10: inference only, an identity; the mask is boolean."""
    if _num_outputs == 1:
        return x.copy()
    return x.copy(), np.ones(x.shape, dtype=bool)


@kernel("", "Dropout", since=(12, 13, 22))
def dropout(
    x: np.ndarray,
    ratio: np.ndarray | None = None,
    training_mode: np.ndarray | None = None,
    *,
    seed: int | None = None,
    _num_outputs: int = 1,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Opset 12+: in training mode zeroes each element with probability ``ratio`` and
    scales the rest by ``1 / (1 - ratio)``; otherwise an identity.

    The mask draws from ``numpy.random.RandomState(seed)``, whose stream numpy keeps
    stable across releases, so a given seed always yields the same mask.
    """
    p = 0.5 if ratio is None else float(ratio)
    if training_mode is None or not bool(training_mode) or p == 0.0:
        y, mask = x.copy(), np.ones(x.shape, dtype=bool)
    else:
        mask = np.random.RandomState(seed).random_sample(x.shape) >= p
        y = (x * mask / x.dtype.type(1.0 - p)).astype(x.dtype, copy=False)
    return y if _num_outputs == 1 else (y, mask)
