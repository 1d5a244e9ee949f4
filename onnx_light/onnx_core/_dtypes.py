"""Element types of ONNX tensors: numpy dtypes, storage fields, bit-pattern codecs.

onnx-light depends on numpy alone, so element types numpy lacks are held as their
**bit patterns** in the smallest unsigned numpy type that fits:

* ``BFLOAT16`` -> ``uint16``;
* ``FLOAT8E4M3FN``, ``FLOAT8E4M3FNUZ``, ``FLOAT8E5M2``, ``FLOAT8E5M2FNUZ``,
  ``FLOAT8E8M0`` -> ``uint8``;
* ``FLOAT4E2M1``, ``FLOAT6E2M3``, ``FLOAT6E3M2`` -> ``uint8``, one element per byte
  (the code in the low bits);
* ``UINT4`` / ``UINT2`` -> ``uint8`` and ``INT4`` / ``INT2`` -> ``int8``, one element
  per byte: for the integer types the pattern *is* the value, sign-extended.

:func:`encode_float` turns float values into those patterns with onnx's rounding
(round to nearest even, saturating as ``onnx.helper.make_tensor`` does),
:func:`decode_float` turns patterns back into ``float32`` and :func:`wrap_small_int`
wraps integers into the 4- and 2-bit types. They are the one implementation of these
conversions: the runtime's Cast kernels call them too.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ._proto import TensorProto

__all__ = [
    "TENSOR_TYPES",
    "tensor_dtype_to_np_dtype",
    "pattern_np_dtype",
    "ml_dtype",
    "tensor_dtype_to_storage_tensor_dtype",
    "tensor_dtype_to_field",
    "tensor_dtype_to_string",
    "np_dtype_to_tensor_dtype",
    "get_all_tensor_dtypes",
    "encode_float",
    "decode_float",
    "pack_bits",
    "unpack_bits",
    "bits_per_element",
    "wrap_small_int",
    "BIT_PATTERN_TYPES",
    "SMALL_INT_TYPES",
]

T = TensorProto

_INT32 = "int32_data"
_INT64 = "int64_data"
_FLOAT = "float_data"
_DOUBLE = "double_data"
_UINT64 = "uint64_data"
_STRING = "string_data"

#: data_type -> (numpy dtype used by onnx-light, storage data_type, storage field)
TENSOR_TYPES: dict[int, tuple[np.dtype[Any], int, str]] = {
    T.FLOAT: (np.dtype(np.float32), T.FLOAT, _FLOAT),
    T.UINT8: (np.dtype(np.uint8), T.INT32, _INT32),
    T.INT8: (np.dtype(np.int8), T.INT32, _INT32),
    T.UINT16: (np.dtype(np.uint16), T.INT32, _INT32),
    T.INT16: (np.dtype(np.int16), T.INT32, _INT32),
    T.INT32: (np.dtype(np.int32), T.INT32, _INT32),
    T.INT64: (np.dtype(np.int64), T.INT64, _INT64),
    T.BOOL: (np.dtype(np.bool_), T.INT32, _INT32),
    T.FLOAT16: (np.dtype(np.float16), T.INT32, _INT32),
    T.BFLOAT16: (np.dtype(np.uint16), T.INT32, _INT32),
    T.DOUBLE: (np.dtype(np.float64), T.DOUBLE, _DOUBLE),
    T.COMPLEX64: (np.dtype(np.complex64), T.FLOAT, _FLOAT),
    T.COMPLEX128: (np.dtype(np.complex128), T.DOUBLE, _DOUBLE),
    T.UINT32: (np.dtype(np.uint32), T.UINT64, _UINT64),
    T.UINT64: (np.dtype(np.uint64), T.UINT64, _UINT64),
    T.STRING: (np.dtype(object), T.STRING, _STRING),
    T.FLOAT8E4M3FN: (np.dtype(np.uint8), T.INT32, _INT32),
    T.FLOAT8E4M3FNUZ: (np.dtype(np.uint8), T.INT32, _INT32),
    T.FLOAT8E5M2: (np.dtype(np.uint8), T.INT32, _INT32),
    T.FLOAT8E5M2FNUZ: (np.dtype(np.uint8), T.INT32, _INT32),
    T.UINT4: (np.dtype(np.uint8), T.INT32, _INT32),
    T.INT4: (np.dtype(np.int8), T.INT32, _INT32),
    T.FLOAT4E2M1: (np.dtype(np.uint8), T.INT32, _INT32),
    T.FLOAT8E8M0: (np.dtype(np.uint8), T.INT32, _INT32),
    T.UINT2: (np.dtype(np.uint8), T.INT32, _INT32),
    T.INT2: (np.dtype(np.int8), T.INT32, _INT32),
    T.FLOAT6E2M3: (np.dtype(np.uint8), T.INT32, _INT32),
    T.FLOAT6E3M2: (np.dtype(np.uint8), T.INT32, _INT32),
}

#: types whose numpy form is a bit pattern rather than the value itself
BIT_PATTERN_TYPES = frozenset(
    {
        T.BFLOAT16,
        T.FLOAT8E4M3FN,
        T.FLOAT8E4M3FNUZ,
        T.FLOAT8E5M2,
        T.FLOAT8E5M2FNUZ,
        T.FLOAT8E8M0,
        T.FLOAT4E2M1,
        T.FLOAT6E2M3,
        T.FLOAT6E3M2,
    }
)

# integer types narrower than a byte: data_type -> (bits, signed)
_SMALL_INTS = {T.UINT4: (4, False), T.INT4: (4, True), T.UINT2: (2, False), T.INT2: (2, True)}
#: integer types narrower than a byte, held one value per byte
SMALL_INT_TYPES = frozenset(_SMALL_INTS)

_SUB_BYTE = {T.UINT4: 4, T.INT4: 4, T.FLOAT4E2M1: 4, T.UINT2: 2, T.INT2: 2}
_SUB_BYTE.update({T.FLOAT6E2M3: 6, T.FLOAT6E3M2: 6})

# numpy dtypes from ml_dtypes (if the user has it) map by name, so from_array
# accepts them without onnx-light importing ml_dtypes.
_NAMED_DTYPES = {
    "bfloat16": T.BFLOAT16,
    "float8_e4m3fn": T.FLOAT8E4M3FN,
    "float8_e4m3fnuz": T.FLOAT8E4M3FNUZ,
    "float8_e5m2": T.FLOAT8E5M2,
    "float8_e5m2fnuz": T.FLOAT8E5M2FNUZ,
    "float8_e8m0fnu": T.FLOAT8E8M0,
    "float4_e2m1fn": T.FLOAT4E2M1,
    "float6_e2m3fn": T.FLOAT6E2M3,
    "float6_e3m2fn": T.FLOAT6E3M2,
    "uint4": T.UINT4,
    "int4": T.INT4,
    "uint2": T.UINT2,
    "int2": T.INT2,
}

_NATIVE_TO_TENSOR = {
    np.dtype(np.float32): T.FLOAT,
    np.dtype(np.uint8): T.UINT8,
    np.dtype(np.int8): T.INT8,
    np.dtype(np.uint16): T.UINT16,
    np.dtype(np.int16): T.INT16,
    np.dtype(np.int32): T.INT32,
    np.dtype(np.int64): T.INT64,
    np.dtype(np.bool_): T.BOOL,
    np.dtype(np.float16): T.FLOAT16,
    np.dtype(np.float64): T.DOUBLE,
    np.dtype(np.complex64): T.COMPLEX64,
    np.dtype(np.complex128): T.COMPLEX128,
    np.dtype(np.uint32): T.UINT32,
    np.dtype(np.uint64): T.UINT64,
    np.dtype(object): T.STRING,
}


def _entry(tensor_dtype: int) -> tuple[np.dtype[Any], int, str]:
    try:
        return TENSOR_TYPES[tensor_dtype]
    except KeyError:
        raise ValueError(f"unknown TensorProto data_type {tensor_dtype}; known: {sorted(TENSOR_TYPES)}") from None


_ML_DTYPE_NAMES = {tensor_type: name for name, tensor_type in _NAMED_DTYPES.items()}


@functools.cache
def _ml_dtypes_module() -> Any:
    try:
        import ml_dtypes
    except ImportError:
        return None
    return ml_dtypes


def ml_dtype(tensor_dtype: int) -> np.dtype[Any] | None:
    """The ``ml_dtypes`` dtype of a type numpy lacks (``BFLOAT16`` -> ``ml_dtypes.bfloat16``).

    None for the types numpy has, and when ``ml_dtypes`` is not installed.
    """
    name = _ML_DTYPE_NAMES.get(tensor_dtype)
    if name is None:
        return None
    module = _ml_dtypes_module()
    return None if module is None else np.dtype(getattr(module, name))


def tensor_dtype_to_np_dtype(tensor_dtype: int) -> np.dtype[Any]:
    """The numpy dtype of a ``TensorProto`` data type, as ``onnx.helper``'s.

    Types numpy lacks map to the ``ml_dtypes`` types when ``ml_dtypes`` is installed
    (``BFLOAT16`` -> ``bfloat16``, ``FLOAT8E4M3FN`` -> ``float8_e4m3fn``, ``INT4`` ->
    ``int4``, ``FLOAT8E8M0`` -> ``float8_e8m0fnu``, ...); without it they come back as
    the dtype of their bit pattern, :func:`pattern_np_dtype`.

    Args:
        tensor_dtype: a ``TensorProto.DataType`` value.

    Returns:
        The numpy dtype.

    Raises:
        ValueError: ``tensor_dtype`` is not a known data type.
    """
    found = ml_dtype(tensor_dtype)
    return found if found is not None else _entry(tensor_dtype)[0]


def pattern_np_dtype(tensor_dtype: int) -> np.dtype[Any]:
    """The numpy dtype onnx-light computes with: bit patterns for the types numpy lacks.

    ``BFLOAT16`` -> ``uint16``, float8 / float4 / float6 -> ``uint8``, ``INT4`` /
    ``INT2`` -> ``int8``, ``UINT4`` / ``UINT2`` -> ``uint8`` (module docstring).

    Raises:
        ValueError: ``tensor_dtype`` is not a known data type.
    """
    return _entry(tensor_dtype)[0]


def tensor_dtype_to_storage_tensor_dtype(tensor_dtype: int) -> int:
    """The data type whose field stores ``tensor_dtype`` outside ``raw_data``."""
    return _entry(tensor_dtype)[1]


def tensor_dtype_to_field(tensor_dtype: int) -> str:
    """The ``TensorProto`` field (``"int32_data"``, ...) holding values of a data type.

    Args:
        tensor_dtype: a ``TensorProto.DataType`` value.

    Returns:
        The field name.
    """
    return _entry(tensor_dtype)[2]


def tensor_dtype_to_string(tensor_dtype: int) -> str:
    """The name of a data type as onnx prints it, e.g. ``"TensorProto.FLOAT"``."""
    _entry(tensor_dtype)
    return "TensorProto." + TensorProto.DataType.Name(tensor_dtype)


def get_all_tensor_dtypes() -> list[int]:
    """Every known ``TensorProto`` data type."""
    return list(TENSOR_TYPES)


@functools.cache
def np_dtype_to_tensor_dtype(np_dtype: Any) -> int:
    """The ``TensorProto`` data type of a numpy dtype.

    Native numpy types map one to one; ``str`` and ``object`` map to ``STRING``, and
    the extension types of ``ml_dtypes`` (``bfloat16``, ``float8_e4m3fn``, ``int4``,
    ...) map by name when the caller uses them.

    Args:
        np_dtype: a numpy dtype or anything ``np.dtype`` accepts.

    Returns:
        The ``TensorProto.DataType`` value.

    Raises:
        ValueError: the dtype has no ONNX counterpart.
    """
    dt = np.dtype(np_dtype)
    if dt.byteorder == ">":
        dt = dt.newbyteorder("=")
    found = _NATIVE_TO_TENSOR.get(dt)
    if found is not None:
        return found
    if dt.kind in "US":
        return T.STRING
    named = _NAMED_DTYPES.get(dt.name)
    if named is not None:
        return named
    raise ValueError(f"Unable to convert type {dt!r} into TensorProto element type.")


def bits_per_element(tensor_dtype: int) -> int:
    """Bits one element occupies in ``raw_data`` (4 for ``INT4``, 32 for ``FLOAT``)."""
    if tensor_dtype in _SUB_BYTE:
        return _SUB_BYTE[tensor_dtype]
    if tensor_dtype == T.STRING:
        raise ValueError("STRING tensors have no fixed element size")
    return _entry(tensor_dtype)[0].itemsize * 8


# ----------------------------------------------------------------------------
# packing of sub-byte types (element 0 in the lowest bits, LSB first)
# ----------------------------------------------------------------------------
def pack_bits(values: np.ndarray, bits: int) -> np.ndarray:
    """Packs one-code-per-byte ``values`` into a ``uint8`` stream of ``bits``-bit codes.

    Element ``k`` occupies bits ``[k*bits, (k+1)*bits)`` of the little-endian stream;
    the final byte is zero-padded.

    Args:
        values: integer codes, one per element (any shape; flattened in C order).
        bits: 2, 4 or 6.

    Returns:
        A 1-D ``uint8`` array of ``ceil(n * bits / 8)`` bytes.
    """
    flat = np.ascontiguousarray(values).reshape(-1)
    # one-byte element types (ml_dtypes' int4 / float4 included) hold the code in
    # their bits; wider integer arrays hold it as a value
    flat = flat.view(np.uint8) if flat.dtype.itemsize == 1 else flat.astype(np.int64).astype(np.uint8)
    codes = flat & np.uint8((1 << bits) - 1)
    n = codes.size
    per_group = 8 // bits if bits in (2, 4) else 4  # codes per group of whole bytes
    group_bytes = per_group * bits // 8
    groups = -(-n // per_group)
    flat_padded = np.zeros(groups * per_group, dtype=np.uint32)
    flat_padded[:n] = codes
    padded = flat_padded.reshape(groups, per_group)
    word = np.zeros(groups, dtype=np.uint32)
    for k in range(per_group):
        word |= padded[:, k] << np.uint32(k * bits)
    out = word.astype("<u4").view(np.uint8).reshape(groups, 4)[:, :group_bytes].reshape(-1)
    return out[: -(-n * bits // 8)].copy()


def unpack_bits(data: Any, bits: int, count: int) -> np.ndarray:
    """Unpacks ``count`` ``bits``-bit codes from a byte stream, one ``uint8`` each.

    Args:
        data: bytes-like or ``uint8`` array holding the packed stream.
        bits: 2, 4 or 6.
        count: the number of elements to read.

    Returns:
        A 1-D ``uint8`` array of ``count`` codes.

    Raises:
        ValueError: the stream is shorter than ``count`` elements need.
    """
    raw = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data
    raw = raw.reshape(-1).astype(np.uint8, copy=False)
    need = -(-count * bits // 8)
    if raw.size < need:
        raise ValueError(f"packed {bits}-bit data holds {raw.size} bytes but {count} elements need {need}")
    per_group = 8 // bits if bits in (2, 4) else 4
    group_bytes = per_group * bits // 8
    groups = -(-count // per_group)
    buf = np.zeros((groups, 4), dtype=np.uint8)
    flat = raw[: min(raw.size, groups * group_bytes)]
    full = flat.size // group_bytes
    buf[:full, :group_bytes] = flat[: full * group_bytes].reshape(full, group_bytes)
    if full < groups:
        rest = flat[full * group_bytes :]
        buf[full, : rest.size] = rest
    word = buf.view("<u4").reshape(groups).astype(np.uint32)
    mask = np.uint32((1 << bits) - 1)
    out = np.empty((groups, per_group), dtype=np.uint8)
    for k in range(per_group):
        out[:, k] = (word >> np.uint32(k * bits)) & mask
    return out.reshape(-1)[:count]


# ----------------------------------------------------------------------------
# small floats: bit patterns <-> values
# ----------------------------------------------------------------------------
class _Format:
    """A small float format: exponent and mantissa widths, bias, special values."""

    def __init__(self, exp: int, man: int, bias: int, style: str) -> None:
        # style: "ieee" (inf and NaNs at the top exponent), "fn" (only S.1..1.1..1 is
        # NaN), "fnuz" (0x80 is the one NaN, no negative zero), "finite" (no NaN/inf)
        self.exp, self.man, self.bias, self.style = exp, man, bias, style
        self.bits = 1 + exp + man
        self.sign = 1 << (exp + man)
        codes = np.arange(self.sign, dtype=np.int64)
        e = codes >> man
        m = (codes & ((1 << man) - 1)).astype(np.float64)
        scale = np.ldexp(1.0, (np.maximum(e, 1) - bias - man).astype(np.int64))
        mags = np.where(e == 0, m, m + (1 << man)) * scale
        top = (1 << exp) - 1
        if style == "ieee":
            last = (top << man) - 1  # the largest finite code
            self.nan = (top << man) | (1 << (man - 1))
            self.inf: int | None = top << man
        elif style == "fn":
            last = self.sign - 2
            self.nan = self.sign - 1
            self.inf = None
        elif style == "fnuz":
            last = self.sign - 1
            self.nan = self.sign
            self.inf = None
        else:
            last = self.sign - 1
            self.nan = -1
            self.inf = None
        self.last = last
        self.mags = mags[: last + 1]
        self.max = float(self.mags[-1])
        # one virtual step above max: rounding there means overflow
        ulp = float(self.mags[-1] - self.mags[-2])
        self.edges = np.append(self.mags, self.max + ulp)
        table = np.concatenate([mags, -mags]).astype(np.float32)
        if style == "ieee":
            for s in (0, self.sign):
                first = s | (top << man)
                table[first : first + (1 << man)] = np.nan
                table[first] = -np.inf if s else np.inf
        elif style == "fn":
            table[self.sign - 1] = np.nan
            table[2 * self.sign - 1] = np.nan
        elif style == "fnuz":
            table[self.sign] = np.nan
        self.table = table


_FORMATS = {
    T.FLOAT8E4M3FN: _Format(4, 3, 7, "fn"),
    T.FLOAT8E4M3FNUZ: _Format(4, 3, 8, "fnuz"),
    T.FLOAT8E5M2: _Format(5, 2, 15, "ieee"),
    T.FLOAT8E5M2FNUZ: _Format(5, 2, 16, "fnuz"),
    T.FLOAT4E2M1: _Format(2, 1, 1, "finite"),
    T.FLOAT6E2M3: _Format(2, 3, 1, "finite"),
    T.FLOAT6E3M2: _Format(3, 2, 3, "finite"),
}


def _encode_small(x: np.ndarray, fmt: _Format, saturate: bool) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x)
    finite = np.isfinite(a)
    safe = np.where(finite, a, 0.0)
    hi = np.searchsorted(fmt.edges, safe, side="left")
    hi = np.minimum(hi, fmt.edges.size - 1)
    lo = np.maximum(hi - 1, 0)
    d_lo = safe - fmt.edges[lo]
    d_hi = fmt.edges[hi] - safe
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0))
    code = np.where(pick_hi, hi, lo).astype(np.int64)
    overflow = (code > fmt.last) | ~finite
    if saturate or fmt.style == "finite":
        code = np.where(overflow, fmt.last, code)
    elif fmt.inf is not None:
        code = np.where(overflow, fmt.inf, code)
    else:
        code = np.where(overflow, fmt.nan, code)
    neg = np.signbit(x)
    if fmt.style == "fnuz":
        neg &= code != 0  # no negative zero
    code = np.where(neg, code | fmt.sign, code)
    nan = np.isnan(x)
    if fmt.style == "finite":
        # ml_dtypes turns NaN into the sign bit of the *opposite* sign: follow it
        code = np.where(nan, np.where(np.signbit(x), 0, fmt.sign), code)
    elif fmt.style == "fnuz":
        code = np.where(nan, fmt.nan, code)
    else:
        code = np.where(nan, np.where(np.signbit(x), fmt.nan | fmt.sign, fmt.nan), code)
    return code.astype(np.uint8)


def _encode_bfloat16(x: np.ndarray) -> np.ndarray:
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    quiet = ((bits >> 16) & 0x8000) | 0x7FC0
    return np.where(nan, quiet, rounded).astype(np.uint16)


def _encode_e8m0(x: Any, saturate: bool, round_mode: str = "up", cast: bool = False) -> np.ndarray:
    # The exponent of |x| (the sign is ignored), rounded by round_mode: "up" when any
    # mantissa bit is set, "nearest" from half-way up, "down" never. What falls
    # outside the range follows one of two conventions:
    # * onnx.numpy_helper.to_float8e8m0 (make_tensor's): x is first rounded to float32
    #   and that exponent field rounded (a subnormal reads as field 0, ties at field 0
    #   rounding down); zero -> 0x00, inf and NaN -> 0xFF; saturate only keeps the
    #   rounding from carrying 0xFE to 0xFF;
    # * Cast's table (cast=True): exact in float64; zero and values below 2**-127 ->
    #   0x00 saturating, else NaN; inf and values above 2**127 -> 0xFE saturating, else
    #   NaN; NaN -> 0xFF.
    a = np.abs(np.asarray(x, dtype=np.float64 if cast else np.float32)).astype(np.float64)
    with np.errstate(invalid="ignore"):
        mant, exp = np.frexp(a)  # a = mant * 2**exp with mant in [0.5, 1)
    field = exp.astype(np.int64) + 126  # the biased exponent of a, as a normal number
    if not cast:  # a float32 subnormal: field 0, its fraction read as 1.f (as onnx reads the bits)
        tiny = (field < 1) & (a > 0)
        mant = np.where(tiny, 0.5 + np.ldexp(a, 125), mant)
        field = np.where(tiny, 0, field)
    if round_mode == "up":
        field += mant > 0.5
    elif round_mode == "nearest":
        tie_up = True if cast else field > 0  # onnx's tie rule looks at the exponent field
        field += (mant > 0.75) | ((mant == 0.75) & tie_up)
    elif round_mode != "down":
        raise ValueError(f"unknown round_mode {round_mode!r}; expected 'up', 'down' or 'nearest'")
    if cast:
        low, high = (0, 0xFE) if saturate else (0xFF, 0xFF)
        code = np.where(field > 0xFE, high, np.where(field < 0, low, field))
        code = np.where(np.isinf(a), high, np.where(a == 0, low, code))
    else:
        code = np.minimum(field, 0xFE if saturate else 0xFF)
        code = np.where(np.isinf(a), 0xFF, np.where(a == 0, 0, code))
    return np.where(np.isnan(a), 0xFF, code).astype(np.uint8)


def encode_float(
    values: Any, tensor_dtype: int, *, saturate: bool = True, round_mode: str = "up", cast: bool = False
) -> np.ndarray:
    """Bit patterns of ``values`` in a small float type (bfloat16, float8/6/4).

    Rounding is to nearest, ties to even (``FLOAT8E8M0`` rounds by ``round_mode``);
    with ``saturate`` values beyond the range become the largest finite value of the
    same sign, otherwise inf (E5M2) or NaN.

    ``FLOAT8E8M0`` follows ``onnx.numpy_helper.to_float8e8m0`` (what
    ``onnx.helper.make_tensor`` does: values rounded to float32 first, zero to
    ``0x00``, inf to ``0xFF``) unless ``cast`` asks for the Cast operator's table
    (exact in float64; zero, inf and out-of-range values to ``0x00`` / ``0xFE``
    saturating, NaN otherwise).

    Args:
        values: numbers or an array of them.
        tensor_dtype: the target ``TensorProto`` data type.
        saturate: clamp out-of-range values instead of overflowing.
        round_mode: ``FLOAT8E8M0`` only: ``"up"``, ``"down"`` or ``"nearest"``.
        cast: ``FLOAT8E8M0`` only: special values as the Cast operator's table says.

    Returns:
        ``uint16`` patterns for ``BFLOAT16``, ``uint8`` otherwise, shaped as the input.

    Raises:
        ValueError: ``tensor_dtype`` is not a small float type, or ``round_mode`` is
            unknown.
    """
    if tensor_dtype == T.BFLOAT16:
        return _encode_bfloat16(np.asarray(values, dtype=np.float32))
    if tensor_dtype == T.FLOAT8E8M0:
        return _encode_e8m0(values, saturate, round_mode, cast)
    fmt = _FORMATS.get(tensor_dtype)
    if fmt is None:
        raise ValueError(f"{tensor_dtype_to_string(tensor_dtype)} is not a small float type")
    return _encode_small(np.asarray(values), fmt, saturate)


def wrap_small_int(values: Any, tensor_dtype: int) -> np.ndarray:
    """Integers as the value of ``UINT4`` / ``INT4`` / ``UINT2`` / ``INT2``: their low bits.

    Higher bits are discarded and, for the signed types, the low bits read in two's
    complement (``9`` -> ``-7`` in ``INT4``), as Cast wraps out-of-range integers.

    Args:
        values: integers (or one-code-per-byte patterns), any shape.
        tensor_dtype: one of ``SMALL_INT_TYPES``.

    Returns:
        ``int8`` values for the signed types, ``uint8`` for the unsigned, shaped as
        the input.
    """
    width, signed = _SMALL_INTS[tensor_dtype]
    low = np.asarray(values).astype(np.int16) & ((1 << width) - 1)
    if signed:
        low = np.where(low >= 1 << (width - 1), low - (1 << width), low)
    return low.astype(np.int8 if signed else np.uint8)


def decode_float(bits: Any, tensor_dtype: int) -> np.ndarray:
    """The ``float32`` values of bit patterns of a small float type.

    Args:
        bits: patterns as produced by :func:`encode_float` or ``to_array``.
        tensor_dtype: their ``TensorProto`` data type.

    Returns:
        A ``float32`` array shaped like ``bits``.
    """
    b = np.asarray(bits)
    if tensor_dtype == T.BFLOAT16:
        return (b.astype(np.uint32) << np.uint32(16)).view(np.float32)
    if tensor_dtype == T.FLOAT8E8M0:
        e = b.astype(np.int64)
        out = np.ldexp(1.0, np.minimum(e, 254) - 127).astype(np.float32)
        return np.where(e == 0xFF, np.float32(np.nan), out).astype(np.float32)
    fmt = _FORMATS.get(tensor_dtype)
    if fmt is None:
        raise ValueError(f"{tensor_dtype_to_string(tensor_dtype)} is not a small float type")
    return fmt.table[b.astype(np.intp) & (2 * fmt.sign - 1)]
