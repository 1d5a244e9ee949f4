"""Logical, comparison, bitwise and selection kernels.

Comparisons and logical ops return ``bool`` arrays; bitwise ops keep the integer dtype.
Kernels are registered once per opset version where the op's signature or semantics
changed, from the version in force at opset 7 onwards.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from onnx_light.runtime._native import where_f32
from onnx_light.runtime._registry import kernel

__all__: list[str] = []


def _named(fn: Callable, name: str, arity: int) -> Callable:
    def run(*inputs: np.ndarray) -> np.ndarray:
        return np.asarray(fn(*inputs))

    run.__name__ = run.__qualname__ = name
    run.__doc__ = f"ONNX {name}, element-wise" + (" with broadcasting." if arity == 2 else ".")
    return run


def _equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # string tensors arrive as object arrays, where np.equal would answer with objects
    return np.asarray(np.equal(a, b), dtype=bool)


# op_type -> (numpy function, number of inputs, since versions from opset 7 on)
_TABLE: dict[str, tuple[Callable, int, tuple[int, ...]]] = {
    "And": (np.logical_and, 2, (7,)),
    "Or": (np.logical_or, 2, (7,)),
    "Xor": (np.logical_xor, 2, (7,)),
    "Not": (np.logical_not, 1, (1,)),
    "Equal": (_equal, 2, (7, 11, 13, 19)),
    "Greater": (np.greater, 2, (7, 9, 13)),
    "GreaterOrEqual": (np.greater_equal, 2, (12, 16)),
    "Less": (np.less, 2, (7, 9, 13)),
    "LessOrEqual": (np.less_equal, 2, (12, 16)),
    "IsNaN": (np.isnan, 1, (9, 13, 20)),
    "BitwiseAnd": (np.bitwise_and, 2, (18,)),
    "BitwiseOr": (np.bitwise_or, 2, (18,)),
    "BitwiseXor": (np.bitwise_xor, 2, (18,)),
    "BitwiseNot": (np.invert, 1, (18,)),
}

for _op, (_fn, _arity, _versions) in _TABLE.items():
    kernel("", _op, since=_versions)(_named(_fn, _op, _arity))


@kernel("", "IsInf", since=(10, 20))
def is_inf(x: np.ndarray, *, detect_negative: int = 1, detect_positive: int = 1) -> np.ndarray:
    """ONNX IsInf: true at infinities of the selected signs."""
    return np.isinf(x) & (((x < 0) & bool(detect_negative)) | ((x > 0) & bool(detect_positive)))


_F32 = np.dtype(np.float32)
_ND = np.ndarray


def _full_or_single(v: np.ndarray, shape: tuple[int, ...]) -> bool:
    """Whether ``v`` is a C-contiguous float32 array of exactly ``shape``, or one value of no higher rank."""
    # (a constant loaded from a model may hold an equal float32 dtype that is not numpy's own)
    if v.__class__ is not _ND or not (v.dtype is _F32 or v.dtype == _F32) or not v.flags.c_contiguous:
        return False
    return v.shape == shape or (v.size == 1 and v.ndim <= len(shape))


@kernel("", "Where", since=(9, 16), writes_out=True)
def where(condition: np.ndarray, x: np.ndarray, y: np.ndarray, *, out: np.ndarray | None = None) -> np.ndarray:
    """ONNX Where: ``x`` where ``condition`` holds, else ``y``, all three broadcast.

    A float32 selection by a C-contiguous condition of the result's shape, each branch that
    shape or one value (a ReLU mask's ``Where(x > 0, dy, 0)``), is one native pass
    (``where_f32``, into ``out`` when the buffer pool lends one of that shape); numpy's ``where``
    with a broadcast operand is ~6x slower."""
    shape = condition.shape
    if (
        condition.__class__ is _ND
        and condition.dtype == np.bool_
        and condition.ndim
        and condition.flags.c_contiguous
        and _full_or_single(x, shape)
        and _full_or_single(y, shape)
    ):
        if out is None or out.dtype is not _F32 or out.shape != shape or not out.flags.c_contiguous:
            out = np.empty(shape, _F32)
        return where_f32(condition, x, y, out)
    return np.where(condition, x, y).astype(x.dtype, copy=False)
