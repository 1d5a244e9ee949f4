"""ONNX element types and numpy dtypes: the one set of conversions that ``helper``,
``numpy_helper`` and the runtime share (bit-pattern floats, sub-byte integers, ml_dtypes
names).
"""

from __future__ import annotations

from collections.abc import Mapping

from ._dtypes import (
    _NAMED_DTYPES,
    BIT_PATTERN_TYPES,
    SMALL_INT_TYPES,
    TENSOR_TYPES,
    bits_per_element,
    decode_float,
    encode_float,
    get_all_tensor_dtypes,
    np_dtype_to_tensor_dtype,
    pack_bits,
    pattern_np_dtype,
    tensor_dtype_to_field,
    tensor_dtype_to_np_dtype,
    tensor_dtype_to_storage_tensor_dtype,
    tensor_dtype_to_string,
    unpack_bits,
    wrap_small_int,
)

__all__ = [
    "TENSOR_TYPES",
    "NAMED_DTYPES",
    "tensor_dtype_to_np_dtype",
    "pattern_np_dtype",
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

#: numpy dtype name (as ml_dtypes spells it) -> TensorProto element type, for the types
#: numpy itself lacks; arrays of them are recognised by name without importing ml_dtypes
NAMED_DTYPES: Mapping[str, int] = _NAMED_DTYPES
