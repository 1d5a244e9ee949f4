"""Reduction kernels: the Reduce* family, ArgMax/ArgMin, CumSum, TopK and Einsum.

Reductions keep the input's dtype (numpy would widen integer sums to int64) and give
the spec's identity on an empty set: 0 for sums and norms, 1 for products, the
lowest/highest value of the dtype for Max/Min and ``-inf`` for the log-sums.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from onnx_light.onnx_core.ops import REDUCE_OPS, REDUCE_VERSIONS, axes_input_since
from onnx_light.runtime._registry import kernel
from onnx_light.runtime.kernels._axes import axes_index, axis_index

__all__: list[str] = []


def _extreme(dtype: np.dtype, highest: bool) -> Any:
    """The identity of Min (``highest``) or Max over ``dtype``: the dtype's far end."""
    if dtype.kind == "b":
        return highest
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return info.max if highest else info.min
    return np.inf if highest else -np.inf


def _log_sum_exp(x: np.ndarray, axes: tuple[int, ...] | None, keep: bool) -> np.ndarray:
    if x.dtype.kind != "f":
        x = x.astype(np.float64)
    m = np.max(x, axis=axes, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0).astype(x.dtype)  # empty or all -inf: shift by nothing
    s = np.log(np.sum(np.exp(x - m), axis=axes, keepdims=True)) + m
    return s if keep else np.squeeze(s, axis=axes)


#: np.sum's loop without np.sum's Python wrapper (typed loosely: numpy's stubs overload it on keepdims)
_add_reduce: Callable[..., Any] = np.add.reduce


def _wide(dtype: np.dtype) -> np.dtype:
    """float32 for float16 (the squares of 1000s overflow float16; their norm need not)."""
    return np.dtype(np.float32) if dtype == np.float16 else dtype


def _mean(x: np.ndarray, axes: tuple[int, ...] | None, keep: bool) -> np.ndarray:
    # sum / count rather than np.mean, which warns on empty slices; the mean of nothing is 0/0
    count = math.prod(x.shape) if axes is None else math.prod(x.shape[a] for a in axes)
    acc = x.dtype if x.dtype.kind == "f" and x.dtype.itemsize >= 4 else np.dtype(np.float64)
    total = _add_reduce(x, axis=axes, keepdims=keep, dtype=acc)
    if total.__class__ is np.ndarray and total.ndim and count < 2**24:
        # an exact count: the quotient rounded once in the sum's dtype, in place
        return np.divide(total, acc.type(count), out=total)
    return total / count


# op_type -> f(data, axes, keepdims); axes None means all of them
_REDUCERS: dict[str, Callable[[np.ndarray, tuple[int, ...] | None, bool], np.ndarray]] = {
    "ReduceSum": lambda x, ax, k: _add_reduce(x, axis=ax, keepdims=k, dtype=x.dtype),
    "ReduceProd": lambda x, ax, k: np.prod(x, axis=ax, keepdims=k, dtype=x.dtype),
    "ReduceMean": lambda x, ax, k: _mean(x, ax, k),
    "ReduceMax": lambda x, ax, k: np.max(x, axis=ax, keepdims=k, initial=_extreme(x.dtype, False)),
    "ReduceMin": lambda x, ax, k: np.min(x, axis=ax, keepdims=k, initial=_extreme(x.dtype, True)),
    "ReduceL1": lambda x, ax, k: np.sum(np.abs(x), axis=ax, keepdims=k, dtype=x.dtype),
    "ReduceL2": lambda x, ax, k: np.sqrt(np.sum(np.square(x, dtype=_wide(x.dtype)), axis=ax, keepdims=k)),
    "ReduceSumSquare": lambda x, ax, k: np.sum(np.square(x), axis=ax, keepdims=k, dtype=x.dtype),
    "ReduceLogSum": lambda x, ax, k: np.log(np.sum(x, axis=ax, keepdims=k)),
    "ReduceLogSumExp": _log_sum_exp,
}


def _reduce(op: str, data: np.ndarray, axes: Sequence[int] | np.ndarray | None, keepdims: int, noop: int) -> np.ndarray:
    if axes is None or len(axes) == 0:
        # noop reduces over the empty set of axes: a no-op for the sum, but ReduceL1 still takes
        # the absolute value, ReduceLogSum the log, ...
        axes_t: tuple[int, ...] | None = () if noop else None
    else:
        rank = max(data.ndim, 1)
        listed = axes.ravel().tolist() if isinstance(axes, np.ndarray) else axes
        axes_t = tuple(axes_index(listed, rank))
    with np.errstate(all="ignore"):  # empty means, log(0): nan and -inf are the answers
        out = _REDUCERS[op](data, axes_t, bool(keepdims))
    if out.__class__ is np.ndarray and out.dtype is data.dtype:
        return out
    return np.asarray(out).astype(data.dtype, copy=False)


def _attr_axes_kernel(op: str) -> Callable[..., np.ndarray]:
    def run(data: np.ndarray, *, axes: list[int] | None = None, keepdims: int = 1) -> np.ndarray:
        return _reduce(op, data, axes, keepdims, 0)

    run.__name__ = run.__qualname__ = op
    run.__doc__ = f"ONNX {op} with ``axes`` as an attribute (all axes if absent)."
    return run


def _input_axes_kernel(op: str) -> Callable[..., np.ndarray]:
    def run(
        data: np.ndarray,
        axes: np.ndarray | None = None,
        *,
        keepdims: int = 1,
        noop_with_empty_axes: int = 0,
    ) -> np.ndarray:
        return _reduce(op, data, axes, keepdims, noop_with_empty_axes)

    run.__name__ = run.__qualname__ = op
    run.__doc__ = f"ONNX {op} with ``axes`` as an optional input; empty axes reduce all or none."
    return run


for _op in REDUCE_OPS:
    _since = axes_input_since(_op)
    kernel("", _op, since=tuple(v for v in REDUCE_VERSIONS[_op] if v < _since))(_attr_axes_kernel(_op))
    kernel("", _op, since=tuple(v for v in REDUCE_VERSIONS[_op] if v >= _since))(_input_axes_kernel(_op))


# --- ArgMax / ArgMin -----------------------------------------------------------------------------


def _arg(find: Callable, x: np.ndarray, axis: int, keepdims: int, last: int) -> np.ndarray:
    if last:  # search the reversed axis, whose first hit is the original's last
        n = x.shape[axis]
        idx = n - 1 - find(np.flip(x, axis=axis), axis=axis, keepdims=bool(keepdims))
    else:
        idx = find(x, axis=axis, keepdims=bool(keepdims))
    return np.asarray(idx, dtype=np.int64)


@kernel("", "ArgMax", since=(1, 11, 12, 13))
def arg_max(x: np.ndarray, *, axis: int = 0, keepdims: int = 1, select_last_index: int = 0) -> np.ndarray:
    """ONNX ArgMax: int64 index of the first (or last) maximum along ``axis``."""
    return _arg(np.argmax, x, axis, keepdims, select_last_index)


@kernel("", "ArgMin", since=(1, 11, 12, 13))
def arg_min(x: np.ndarray, *, axis: int = 0, keepdims: int = 1, select_last_index: int = 0) -> np.ndarray:
    """ONNX ArgMin: int64 index of the first (or last) minimum along ``axis``."""
    return _arg(np.argmin, x, axis, keepdims, select_last_index)


# --- CumSum --------------------------------------------------------------------------------------


@kernel("", "CumSum", since=(11, 14))
def cum_sum(x: np.ndarray, axis: np.ndarray, *, exclusive: int = 0, reverse: int = 0) -> np.ndarray:
    """ONNX CumSum along the scalar ``axis``, optionally excluding each element and/or reversed."""
    ax = axis_index(np.asarray(axis).reshape(-1)[0], max(x.ndim, 1))
    y = np.flip(x, axis=ax) if reverse else x
    y = np.cumsum(y, axis=ax, dtype=x.dtype)
    if exclusive:  # shift by one rather than subtract x, which would lose float precision
        zero = np.zeros_like(np.take(y, [0], axis=ax))
        y = np.concatenate([zero, np.delete(y, -1, axis=ax)], axis=ax)
    return np.flip(y, axis=ax) if reverse else y


# --- TopK ----------------------------------------------------------------------------------------


def _top_k(x: np.ndarray, k: int, axis: int, largest: int) -> tuple[np.ndarray, np.ndarray]:
    axis = axis_index(axis, x.ndim)
    n = x.shape[axis]
    if largest:
        # stable ascending order of the reversed axis, read backwards: descending values with
        # the lower original index first among equals
        rev = np.argsort(np.flip(x, axis=axis), axis=axis, kind="stable")
        order = np.flip(n - 1 - rev, axis=axis)
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    idx = np.take(order, np.arange(k), axis=axis).astype(np.int64)
    return np.take_along_axis(x, idx, axis=axis), idx


@kernel("", "TopK", since=1)
def top_k_1(x: np.ndarray, *, k: int, axis: int = -1) -> tuple[np.ndarray, np.ndarray]:
    """ONNX TopK before opset 10: the ``k`` largest along ``axis``, values and int64 indices."""
    return _top_k(x, k, axis, 1)


@kernel("", "TopK", since=10)
def top_k_10(x: np.ndarray, k: np.ndarray, *, axis: int = -1) -> tuple[np.ndarray, np.ndarray]:
    """ONNX TopK at opset 10: ``k`` (a one-element tensor) largest along ``axis``."""
    return _top_k(x, int(np.asarray(k).reshape(-1)[0]), axis, 1)


@kernel("", "TopK", since=(11, 24))
def top_k(
    x: np.ndarray, k: np.ndarray, *, axis: int = -1, largest: int = 1, sorted: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """ONNX TopK: ``k`` largest (or smallest) along ``axis``, ties in index order.

    The result is always sorted; with ``sorted=0`` the spec leaves the order free.
    """
    return _top_k(x, int(np.asarray(k).reshape(-1)[0]), axis, largest)


# --- Einsum --------------------------------------------------------------------------------------


@kernel("", "Einsum", since=(12, 28))
def einsum(*inputs: np.ndarray, equation: str) -> np.ndarray:
    """ONNX Einsum: numpy's ``einsum`` on the equation with blanks removed, in the inputs' dtype."""
    dtype = inputs[0].dtype
    if dtype.kind == "V":  # ml_dtypes' bfloat16 & co. have no einsum loop: compute in float32
        inputs = tuple(i.astype(np.float32) for i in inputs)
    out = np.einsum(equation.replace(" ", ""), *inputs)
    return np.asarray(out).astype(dtype, copy=False)
