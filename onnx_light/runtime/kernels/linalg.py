"""Matrix products: MatMul and Gemm."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from onnx_light.runtime._registry import kernel
from onnx_light.runtime._split import matmul_rows

_Shape = tuple[int | None, ...]


def _matmul_shape(a: _Shape, b: _Shape) -> _Shape | None:
    """MatMul's result shape for operands of rank >= 2 whose batch dims are one operand's
    (the other is a matrix) or equal and known; None otherwise (vectors, broadcast batches)."""
    if len(a) < 2 or len(b) < 2:
        return None
    if len(b) == 2 or a[:-2] == b[:-2] and None not in a[:-2]:
        batch = a[:-2]
    elif len(a) == 2:
        batch = b[:-2]
    else:
        return None
    return (*batch, a[-2], b[-1])


def _gemm_shape(
    a: _Shape, b: _Shape, c: _Shape | None = None, *, transA: int = 0, transB: int = 0, **_: Any
) -> _Shape | None:
    """Gemm's result shape ``(M, N)``."""
    if len(a) != 2 or len(b) != 2:
        return None
    return (a[1] if transA else a[0], b[0] if transB else b[1])


_FLOAT_PRODUCTS = (np.dtype(np.float32), np.dtype(np.float64))


def _lent(out: np.ndarray | None, a: np.ndarray, b: np.ndarray, shape: tuple[int, ...]) -> np.ndarray | None:
    """``out`` when the pool's buffer can take the float product of ``a`` and ``b`` of ``shape``."""
    if out is None or out.shape != shape or not (out.dtype == a.dtype == b.dtype) or a.dtype not in _FLOAT_PRODUCTS:
        return None
    return out if out.flags.c_contiguous and not a.dtype.metadata else None


@kernel(
    "",
    "MatMul",
    since=(1, 9, 13),
    returns_one=True,
    fresh_output=True,
    float_shape=_matmul_shape,
    writes_out=True,
)
def matmul(a: np.ndarray, b: np.ndarray, *, out: np.ndarray | None = None) -> np.ndarray:
    """numpy.matmul semantics: 1-D operands are promoted and the batch dims broadcast.

    A stacked ``a`` times one matrix is one 2-D product over the stacked rows (numpy
    would call BLAS once per matrix of the stack: ~20% slower at (2, 32, 256) x (256, 1024)).
    A strided ``a`` (a Transpose's view) is copied first: the copy reads ``a`` once, while
    numpy would call BLAS once per row block of the view (2.1x slower at (64, 8, 256) x (256, 768)).
    ``out``: a buffer of the plan's pool, written when it has the product's dtype and shape.
    """
    if b.ndim == 2 and a.ndim > 2 and a.dtype == b.dtype:
        a = np.ascontiguousarray(a)
        rows = math.prod(a.shape[:-1])  # not -1: numpy cannot infer it beside a 0-size dim
        into = _lent(out, a, b, (*a.shape[:-1], b.shape[-1]))
        if into is not None:
            np.matmul(a.reshape(rows, a.shape[-1]), b, out=into.reshape(rows, b.shape[-1]))
            return into
        return np.matmul(a.reshape(rows, a.shape[-1]), b).reshape(*a.shape[:-1], b.shape[-1])
    if out is not None and a.ndim >= 2 and b.ndim >= 2:
        shape = (*np.broadcast_shapes(a.shape[:-2], b.shape[:-2]), a.shape[-2], b.shape[-1])
        into = _lent(out, a, b, shape)
        if into is not None:
            return np.matmul(a, b, out=into)
    return np.matmul(a, b)


def _gemm_absorb(
    b: np.ndarray,
    c: np.ndarray | None,
    scale: np.ndarray,
    shift: np.ndarray,
    *,
    alpha: float = 1.0,
    beta: float = 1.0,
    transA: int = 0,
    transB: int = 0,
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]] | None:
    """``Gemm(a, b, c) * scale + shift`` per column: B's columns scaled, ``c' = beta c scale + shift``."""
    if b.ndim != 2 or b.dtype.kind != "f" or (c is not None and (c.dtype != b.dtype or c.ndim > 2)):
        return None
    m = b.shape[0] if transB else b.shape[1]
    if scale.shape != (m,):
        return None
    b2 = (b * (scale[:, None] if transB else scale[None, :])).astype(b.dtype)
    c2 = ((0.0 if c is None else beta * c.astype(np.float64)) * scale + shift).astype(b.dtype)
    return b2, c2, {"alpha": alpha, "beta": 1.0, "transA": transA, "transB": transB}


@kernel(
    "",
    "Gemm",
    since=(7, 9, 11, 13),
    returns_one=True,
    fresh_output=True,
    absorb_affine=_gemm_absorb,
    float_shape=_gemm_shape,
    writes_out=True,
)
def gemm(
    a: np.ndarray,
    b: np.ndarray,
    c: np.ndarray | None = None,
    *,
    alpha: float = 1.0,
    beta: float = 1.0,
    transA: int = 0,
    transB: int = 0,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """``alpha * A' @ B' + beta * C``; C broadcasts unidirectionally and is optional from 11.
    ``out``: a buffer of the plan's pool, written when it has the result's dtype and shape."""
    a = a.T if transA else a
    b = b.T if transB else b
    into = None if out is None or a.ndim != 2 or b.ndim != 2 else _lent(out, a, b, (a.shape[0], b.shape[1]))
    if a.ndim == 2 == b.ndim and a.shape[1] == 1 == b.shape[0] and a.dtype == b.dtype and a.dtype.kind == "f":
        # an outer product (a batch-1 weight gradient): the same products, 3-5x faster than BLAS with K = 1
        y = np.multiply(a, b) if into is None else np.multiply(a, b, out=into)
    else:
        y = matmul_rows(a, b, into)  # row bands on the session's threads (None: not worth it)
        if y is None:
            y = a @ b if into is None else np.matmul(a, b, out=into)
    in_place = y.dtype.kind == "f"  # a new float array: scaled and shifted where it is
    if alpha != 1.0:
        y = np.multiply(y, alpha, out=y if in_place else None)
    if c is not None and beta != 0.0:
        c = c * beta if beta != 1.0 else c
        y = np.add(y, c, out=y if in_place and c.dtype == y.dtype and c.ndim <= 2 else None)
    return y.astype(a.dtype, copy=False)
