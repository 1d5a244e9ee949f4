"""Linear algebra and math of issue 11: Det, CumProd, Swish, SwiGLU, BitCast, BitShift."""

from __future__ import annotations

import numpy as np

from onnx_light.onnx_core import dtypes as core
from onnx_light.runtime._registry import kernel
from onnx_light.runtime.kernels._dtypes import BIT_PATTERN_TYPES, SMALL_INT_TYPES, encode, np_dtype, onnx_type_of


@kernel("", "Det", since=(11, 22))
def det(x: np.ndarray) -> np.ndarray:
    """Determinant of each square matrix of the last two axes of ``x``, in ``x``'s dtype."""
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise ValueError(f"Det takes square matrices in the last two axes, got shape {x.shape}")
    compute = np.float64 if x.dtype == np.float64 else np.float32
    return np.asarray(np.linalg.det(x.astype(compute))).astype(x.dtype)


@kernel("", "CumProd", since=26)
def cum_prod(x: np.ndarray, axis: np.ndarray, *, exclusive: int = 0, reverse: int = 0) -> np.ndarray:
    """ONNX CumProd along the scalar ``axis``; ``exclusive`` starts from 1, ``reverse`` from the end."""
    ax = int(np.asarray(axis).reshape(-1)[0])
    if not -max(x.ndim, 1) <= ax < max(x.ndim, 1):
        raise ValueError(f"axis {ax} is out of range for an input of rank {x.ndim}")
    ax %= max(x.ndim, 1)
    y = np.flip(x, axis=ax) if reverse else x
    y = np.cumprod(y, axis=ax, dtype=x.dtype)
    if exclusive:  # shift by one rather than divide by x, which fails at zeros
        one = np.ones_like(np.take(y, [0], axis=ax))
        y = np.concatenate([one, np.delete(y, -1, axis=ax)], axis=ax)
    return np.flip(y, axis=ax) if reverse else y


def _swish(a: np.ndarray, alpha: float) -> np.ndarray:
    z = (a * np.asarray(alpha, a.dtype)).astype(a.dtype)
    return a / (np.ones((), a.dtype) + np.exp(-z))


@kernel("", "Swish", since=24)
def swish(x: np.ndarray, *, alpha: float = 1.0) -> np.ndarray:
    """``x * Sigmoid(alpha * x)``."""
    return _swish(x, alpha).astype(x.dtype)


@kernel("", "SwiGLU", since=28)
def swiglu(a: np.ndarray, b: np.ndarray, *, alpha: float = 1.0) -> np.ndarray:
    """``Swish_alpha(A) * B``; A and B have one shape (no broadcasting)."""
    if a.shape != b.shape:
        raise ValueError(f"SwiGLU takes A and B of one shape, got {a.shape} and {b.shape}")
    return (_swish(a, alpha) * b).astype(a.dtype)


def _bits(x: np.ndarray) -> tuple[np.ndarray, int]:
    """The raw bits of every element as an unsigned integer array, and their width."""
    onnx_type = onnx_type_of(x)
    width = core.bits_per_element(onnx_type)
    if onnx_type in SMALL_INT_TYPES:
        return np.asarray(x).view(np.uint8) & np.uint8((1 << width) - 1), width
    raw = np.ascontiguousarray(x).reshape(np.shape(x))
    return raw.view(np.dtype(f"<u{raw.dtype.itemsize}")), width


@kernel("", "BitCast", since=26)
def bit_cast(x: np.ndarray, *, to: int) -> np.ndarray:
    """The same bits read as the type ``to`` (of the same bit width); the shape is kept."""
    bits, width = _bits(x)
    if core.bits_per_element(to) != width:
        raise ValueError(
            f"BitCast needs types of one bit width: input is {width}-bit, to={to} is {core.bits_per_element(to)}-bit"
        )
    if to in SMALL_INT_TYPES:
        return encode(bits.astype(np.int64), to)
    target = np_dtype(to)
    out = bits.astype(np.dtype(f"<u{target.itemsize}")).view(target.base if to in BIT_PATTERN_TYPES else target)
    return out.astype(target) if to in BIT_PATTERN_TYPES else out


@kernel("", "BitShift", since=(11, 28))
def bit_shift(x: np.ndarray, y: np.ndarray, *, direction: str) -> np.ndarray:
    """Unsigned integers shifted ``LEFT`` or ``RIGHT`` by ``y`` bits (broadcast); bits shifted out are lost."""
    if direction not in ("LEFT", "RIGHT"):
        raise ValueError(f"direction must be 'LEFT' or 'RIGHT', got {direction!r}")
    shift = np.left_shift if direction == "LEFT" else np.right_shift
    return shift(x, y.astype(x.dtype)).astype(x.dtype)
