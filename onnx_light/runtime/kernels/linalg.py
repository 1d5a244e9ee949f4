"""Matrix products: MatMul and Gemm."""

from __future__ import annotations

import numpy as np

from onnx_light.runtime._registry import kernel


@kernel("", "MatMul", since=(1, 9, 13))
def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """numpy.matmul semantics: 1-D operands are promoted and the batch dims broadcast."""
    return np.matmul(a, b)


@kernel("", "Gemm", since=(7, 9, 11, 13))
def gemm(
    a: np.ndarray,
    b: np.ndarray,
    c: np.ndarray | None = None,
    *,
    alpha: float = 1.0,
    beta: float = 1.0,
    transA: int = 0,
    transB: int = 0,
) -> np.ndarray:
    """``alpha * A' @ B' + beta * C``; C broadcasts unidirectionally and is optional from 11."""
    a = a.T if transA else a
    b = b.T if transB else b
    y = a @ b
    if alpha != 1.0:
        y = y * alpha
    if c is not None and beta != 0.0:
        y = y + (c * beta if beta != 1.0 else c)
    return y.astype(a.dtype, copy=False)
