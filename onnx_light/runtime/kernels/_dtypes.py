"""ONNX element types as numpy arrays, tagged so that kernels know what bits mean.

The conversions themselves live in ``onnx_core.dtypes`` (one implementation for
``helper``, ``numpy_helper`` and the runtime); this module adds what only the
runtime needs. Types numpy has map to their numpy dtype; the others are held as in
``onnx_core``: bit patterns in ``uint16`` (bfloat16) or ``uint8`` (float8, float6,
float4, E8M0; one element per byte), and UINT4/UINT2 as their value in ``uint8``,
INT4/INT2 in ``int8``. Such a dtype carries the ONNX type in its ``metadata`` under
``"onnx_type"`` (see :func:`np_dtype`), which is how a kernel such as Cast tells a
float8 pattern from a plain ``uint8``; the tag is invisible to dtype comparisons.
Arrays from ``ml_dtypes`` are recognised by dtype name without importing it.
"""

from __future__ import annotations

import numpy as np

from onnx_light.onnx_core import TensorProto as T
from onnx_light.onnx_core import dtypes as core

__all__ = [
    "BIT_PATTERN_TYPES",
    "SMALL_INT_TYPES",
    "decode",
    "encode",
    "encode_like",
    "np_dtype",
    "onnx_type_of",
]

STRING, BFLOAT16 = T.STRING, T.BFLOAT16

SMALL_INT_TYPES = core.SMALL_INT_TYPES
#: types whose arrays get a tagged dtype: bit-pattern floats and sub-byte integers
BIT_PATTERN_TYPES = core.BIT_PATTERN_TYPES | SMALL_INT_TYPES

_ML_DTYPES = core.NAMED_DTYPES


def np_dtype(onnx_type: int) -> np.dtype:
    """The numpy dtype holding ``onnx_type``; bit-pattern types get a tagged dtype."""
    base = core.pattern_np_dtype(onnx_type)
    if onnx_type in BIT_PATTERN_TYPES:
        return np.dtype(base, metadata={"onnx_type": onnx_type})
    return base


def onnx_type_of(x: np.ndarray) -> int:
    """The ONNX element type of an array (tagged, ml_dtypes or plain numpy)."""
    meta = x.dtype.metadata
    if meta and "onnx_type" in meta:
        return int(meta["onnx_type"])
    return core.np_dtype_to_tensor_dtype(x.dtype)


def decode(x: np.ndarray) -> np.ndarray:
    """Values of an array as numpy can compute with them.

    Bit-pattern floats become float32, 4- and 2-bit integers int8/uint8, and every
    other array is returned as is.
    """
    onnx_type = onnx_type_of(x)
    if onnx_type not in BIT_PATTERN_TYPES:
        return x
    if onnx_type in SMALL_INT_TYPES:
        return core.wrap_small_int(x.view(np.uint8), onnx_type)
    return core.decode_float(x.view(np.uint16 if onnx_type == BFLOAT16 else np.uint8), onnx_type)


def encode(x: np.ndarray, onnx_type: int, saturate: bool = True, round_mode: str = "up") -> np.ndarray:
    """Converts numbers to a bit-pattern type, rounding to nearest even.

    Args:
        x: a numeric array (bool, integer or float).
        onnx_type: the target ONNX element type, one of ``BIT_PATTERN_TYPES``.
        saturate: float8 and E8M0 only: clamp out-of-range values to the largest
            finite value instead of producing inf or NaN.
        round_mode: E8M0 only: ``"up"``, ``"down"`` or ``"nearest"``.

    Returns:
        An array of the tagged dtype ``np_dtype(onnx_type)``.
    """
    x = np.asarray(x)
    if onnx_type in SMALL_INT_TYPES:
        ints = x if x.dtype.kind in "iub" else np.trunc(np.nan_to_num(x.astype(np.float64)))
        bits = core.wrap_small_int(ints.astype(np.int64), onnx_type)
    else:
        values = x.astype(np.float32 if onnx_type == BFLOAT16 else np.float64)
        bits = core.encode_float(values, onnx_type, saturate=saturate, round_mode=round_mode, cast=True)
    return np.asarray(bits).astype(np_dtype(onnx_type))


def encode_like(values: np.ndarray, like: np.ndarray) -> np.ndarray:
    """Converts computed ``values`` back to the representation of the array ``like``."""
    onnx_type = onnx_type_of(like)
    if onnx_type in BIT_PATTERN_TYPES and like.dtype.name not in _ML_DTYPES:
        return encode(values, onnx_type)
    return np.asarray(values).astype(like.dtype)
