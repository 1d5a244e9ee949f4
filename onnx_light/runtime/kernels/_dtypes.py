"""ONNX element types as numpy arrays, and the low-precision conversions numpy lacks.

Types numpy has map to their numpy dtype. The others follow ``onnx_core``'s IR:
bfloat16 is held as its bit pattern in ``uint16``; the float8, float6, float4 and
E8M0 formats as their bit patterns in ``uint8`` (one element per byte, the code in
the low bits); UINT4/UINT2 as their value in ``uint8`` and INT4/INT2 as their value
in ``int8``. Such a dtype may carry the ONNX type in its ``metadata`` under
``"onnx_type"`` (see :func:`np_dtype`), which is how a kernel such as Cast tells a
float8 pattern from a plain ``uint8``; the tag is invisible to dtype comparisons.
Arrays from ``ml_dtypes`` are recognised by dtype name without importing it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from onnx_light.runtime._registry import kernel

__all__ = [
    "BIT_PATTERN_TYPES",
    "decode",
    "encode",
    "encode_like",
    "np_dtype",
    "onnx_type_of",
    "versions",
]

FLOAT, UINT8, INT8, UINT16, INT16, INT32, INT64, STRING, BOOL = 1, 2, 3, 4, 5, 6, 7, 8, 9
FLOAT16, DOUBLE, UINT32, UINT64, COMPLEX64, COMPLEX128, BFLOAT16 = 10, 11, 12, 13, 14, 15, 16
FLOAT8E4M3FN, FLOAT8E4M3FNUZ, FLOAT8E5M2, FLOAT8E5M2FNUZ = 17, 18, 19, 20
UINT4, INT4, FLOAT4E2M1, FLOAT8E8M0, UINT2, INT2, FLOAT6E2M3, FLOAT6E3M2 = range(21, 29)

_NUMPY: dict[int, type] = {
    FLOAT: np.float32, UINT8: np.uint8, INT8: np.int8, UINT16: np.uint16, INT16: np.int16,
    INT32: np.int32, INT64: np.int64, STRING: np.object_, BOOL: np.bool_,
    FLOAT16: np.float16, DOUBLE: np.float64, UINT32: np.uint32, UINT64: np.uint64,
    COMPLEX64: np.complex64, COMPLEX128: np.complex128,
}  # fmt: skip
_FROM_NUMPY = {np.dtype(v): k for k, v in _NUMPY.items()}

# Integers narrower than a byte: ONNX type -> (bits, signed).
_SMALL_INTS = {UINT4: (4, False), INT4: (4, True), UINT2: (2, False), INT2: (2, True)}

# Minifloats: ONNX type -> (exponent bits, mantissa bits, bias, special values).
# "ieee": inf and NaNs as in IEEE 754; "fn": no inf, NaN is all ones;
# "fnuz": no inf, no -0, NaN is the -0 pattern; "finite": no inf, no NaN.
_MINIFLOATS = {
    FLOAT8E4M3FN: (4, 3, 7, "fn"),
    FLOAT8E4M3FNUZ: (4, 3, 8, "fnuz"),
    FLOAT8E5M2: (5, 2, 15, "ieee"),
    FLOAT8E5M2FNUZ: (5, 2, 16, "fnuz"),
    FLOAT4E2M1: (2, 1, 1, "finite"),
    FLOAT6E2M3: (2, 3, 1, "finite"),
    FLOAT6E3M2: (3, 2, 3, "finite"),
}

BIT_PATTERN_TYPES = frozenset({BFLOAT16, FLOAT8E8M0, *_SMALL_INTS, *_MINIFLOATS})

_ML_DTYPES = {
    "bfloat16": BFLOAT16, "float8_e4m3fn": FLOAT8E4M3FN, "float8_e4m3fnuz": FLOAT8E4M3FNUZ,
    "float8_e5m2": FLOAT8E5M2, "float8_e5m2fnuz": FLOAT8E5M2FNUZ, "uint4": UINT4, "int4": INT4,
    "float4_e2m1fn": FLOAT4E2M1, "float8_e8m0fnu": FLOAT8E8M0, "uint2": UINT2, "int2": INT2,
    "float6_e2m3fn": FLOAT6E2M3, "float6_e3m2fn": FLOAT6E3M2,
}  # fmt: skip


def versions(op_type: str, *since: int) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Registers one kernel for several schema versions of a default-domain op."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        for s in since:
            kernel("", op_type, since=s)(fn)
        return fn

    return register


def np_dtype(onnx_type: int) -> np.dtype:
    """The numpy dtype holding ``onnx_type``; bit-pattern types get a tagged dtype."""
    if onnx_type in _NUMPY:
        return np.dtype(_NUMPY[onnx_type])
    if onnx_type in BIT_PATTERN_TYPES:
        base = {BFLOAT16: np.uint16, INT4: np.int8, INT2: np.int8}.get(onnx_type, np.uint8)
        return np.dtype(base, metadata={"onnx_type": onnx_type})
    raise ValueError(f"unsupported ONNX element type {onnx_type}")


def onnx_type_of(x: np.ndarray) -> int:
    """The ONNX element type of an array (tagged, ml_dtypes or plain numpy)."""
    meta = x.dtype.metadata
    if meta and "onnx_type" in meta:
        return int(meta["onnx_type"])
    if x.dtype.name in _ML_DTYPES:
        return _ML_DTYPES[x.dtype.name]
    if x.dtype.kind in "OSU":
        return STRING
    return _FROM_NUMPY[x.dtype]


def _bits(x: np.ndarray, onnx_type: int) -> np.ndarray:
    """The bit patterns of a bit-pattern array as plain unsigned integers."""
    raw: np.ndarray = x.view(np.uint16 if onnx_type == BFLOAT16 else np.uint8)
    if onnx_type in _SMALL_INTS:
        return raw & ((1 << _SMALL_INTS[onnx_type][0]) - 1)
    if onnx_type in _MINIFLOATS:
        ebits, mbits, _, _ = _MINIFLOATS[onnx_type]
        return raw & ((2 << (ebits + mbits)) - 1)
    return np.array(raw)


def _small_int(bits: np.ndarray, onnx_type: int) -> np.ndarray:
    """Low bits as the value of a UINT4/INT4/UINT2/INT2 (two's complement if signed)."""
    width, signed = _SMALL_INTS[onnx_type]
    bits = bits.astype(np.int16) & ((1 << width) - 1)
    if signed:
        bits = np.where(bits >= 1 << (width - 1), bits - (1 << width), bits)
    return bits.astype(np.int8 if signed else np.uint8)


def _minifloat_table(onnx_type: int) -> np.ndarray:
    """Float64 value of every code of a minifloat format, NaN where the code is NaN."""
    ebits, mbits, bias, kind = _MINIFLOATS[onnx_type]
    sign = 1 << (ebits + mbits)
    codes = np.arange(2 * sign)
    exp, man = (codes >> mbits) & ((1 << ebits) - 1), codes & ((1 << mbits) - 1)
    normal = (1.0 + man / (1 << mbits)) * np.exp2(exp - bias)
    values = np.where(exp == 0, man * 2.0 ** (1 - bias - mbits), normal)
    values = np.where(codes & sign, -values, values)
    top = exp == (1 << ebits) - 1
    if kind == "ieee":
        values = np.where(top & (man == 0), np.copysign(np.inf, values), values)
        values = np.where(top & (man != 0), np.nan, values)
    elif kind == "fn":
        values = np.where(top & (man == (1 << mbits) - 1), np.nan, values)
    elif kind == "fnuz":
        values[sign] = np.nan
    return values


def decode(x: np.ndarray) -> np.ndarray:
    """Values of an array as numpy can compute with them.

    Bit-pattern floats become float32, 4- and 2-bit integers int8/uint8, and every
    other array is returned as is.
    """
    onnx_type = onnx_type_of(x)
    if onnx_type not in BIT_PATTERN_TYPES:
        return x
    bits = _bits(x, onnx_type)
    if onnx_type == BFLOAT16:
        return (bits.astype(np.uint32) << 16).view(np.float32)
    if onnx_type == FLOAT8E8M0:
        powers = np.ldexp(np.float32(1), np.minimum(bits, 0xFE).astype(np.int32) - 127)
        return np.where(bits == 0xFF, np.float32(np.nan), powers)
    if onnx_type in _SMALL_INTS:
        return _small_int(bits, onnx_type)
    return _minifloat_table(onnx_type).astype(np.float32)[bits]


def _encode_bfloat16(x: np.ndarray) -> np.ndarray:
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    return np.where(nan, (u >> 16) | 0x40, rounded).astype(np.uint16)


def _encode_e8m0(x: np.ndarray, saturate: bool, round_mode: str) -> np.ndarray:
    a = np.abs(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        mant, exp = np.frexp(a)  # a = mant * 2**exp with mant in [0.5, 1)
    exp = exp.astype(np.int64) - 1
    if round_mode == "up":
        exp += mant > 0.5
    elif round_mode == "nearest":
        exp += mant >= 0.75
    elif round_mode != "down":
        raise ValueError(f"Cast: unknown round_mode {round_mode!r}")
    biased = exp + 127
    low, high = (0, 0xFE) if saturate else (0xFF, 0xFF)
    out = np.where(biased > 0xFE, high, np.where(biased < 0, low, biased))
    out = np.where(np.isinf(a), high, out)
    out = np.where(a == 0, low, out)
    return np.where(np.isnan(a), 0xFF, out).astype(np.uint8)


def _encode_minifloat(x: np.ndarray, onnx_type: int, saturate: bool) -> np.ndarray:
    ebits, mbits, _, kind = _MINIFLOATS[onnx_type]
    sign_bit = 1 << (ebits + mbits)
    table = _minifloat_table(onnx_type)[:sign_bit]
    n_finite = int(np.argmax(~np.isfinite(table))) if not np.isfinite(table).all() else sign_bit
    finite = table[:n_finite]
    # A virtual code one step past the largest finite value marks overflow.
    grid = np.append(finite, 2 * finite[-1] - finite[-2])
    a = np.abs(x)
    lo = np.clip(np.searchsorted(grid, a, side="right") - 1, 0, n_finite - 1)
    d_lo, d_hi = a - grid[lo], grid[lo + 1] - a
    code = np.where((d_hi < d_lo) | ((d_hi == d_lo) & (lo % 2 == 1)), lo + 1, lo)
    if saturate or kind == "finite":
        over_code = n_finite - 1
    else:
        over_code = {"ieee": n_finite, "fn": sign_bit - 1, "fnuz": sign_bit}[kind]
    code = np.where(code >= n_finite, over_code, code)
    negative = np.signbit(x) & ~((kind == "fnuz") & ((code == 0) | (code == sign_bit)))
    code = np.where(negative, code | sign_bit, code)
    nan_code = {"ieee": sign_bit - 2, "fn": sign_bit - 1, "fnuz": sign_bit, "finite": sign_bit}
    nan = np.where(np.signbit(x) & (kind in ("ieee", "fn")), sign_bit, 0) | nan_code[kind]
    return np.where(np.isnan(x), nan, code).astype(np.uint8)


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
    if onnx_type in _SMALL_INTS:
        ints = x if x.dtype.kind in "iub" else np.trunc(np.nan_to_num(x.astype(np.float64)))
        bits = _small_int(ints.astype(np.int64), onnx_type)
    elif onnx_type == BFLOAT16:
        bits = _encode_bfloat16(x.astype(np.float32))
    elif onnx_type == FLOAT8E8M0:
        bits = _encode_e8m0(x.astype(np.float64), saturate, round_mode)
    else:
        bits = _encode_minifloat(x.astype(np.float64), onnx_type, saturate)
    return np.asarray(bits).astype(np_dtype(onnx_type))


def encode_like(values: np.ndarray, like: np.ndarray) -> np.ndarray:
    """Converts computed ``values`` back to the representation of the array ``like``."""
    onnx_type = onnx_type_of(like)
    if onnx_type in BIT_PATTERN_TYPES and like.dtype.name not in _ML_DTYPES:
        return encode(values, onnx_type)
    return np.asarray(values).astype(like.dtype)
