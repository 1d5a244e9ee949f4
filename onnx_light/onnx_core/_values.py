"""Tensors, sequences, maps, optionals, types and value infos, as ``onnx.helper`` makes them.

Element types numpy lacks are bit patterns here (see ``_dtypes.py``); the public
entry point is :mod:`.helper`, which re-exports everything below.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import _dtypes
from ._attributes import _copies, _copy, _to_bytes
from ._dtypes import pattern_np_dtype, tensor_dtype_to_field
from ._proto import (
    MapProto,
    OptionalProto,
    SequenceProto,
    SparseTensorProto,
    TensorProto,
    TensorShapeProto,
    TypeProto,
    ValueInfoProto,
)

__all__ = [
    "make_tensor",
    "make_sparse_tensor",
    "make_sequence",
    "make_map",
    "make_optional",
    "make_tensor_type_proto",
    "make_sparse_tensor_type_proto",
    "make_sequence_type_proto",
    "make_optional_type_proto",
    "make_map_type_proto",
    "make_value_info",
    "make_tensor_value_info",
    "make_sparse_tensor_value_info",
    "make_tensor_sequence_value_info",
    "make_empty_tensor_value_info",
]

_FLOAT8 = {
    TensorProto.FLOAT8E4M3FN,
    TensorProto.FLOAT8E4M3FNUZ,
    TensorProto.FLOAT8E5M2,
    TensorProto.FLOAT8E5M2FNUZ,
}
_FLOAT6 = {TensorProto.FLOAT6E2M3, TensorProto.FLOAT6E3M2}
_PACKED_INT = {TensorProto.UINT4: 4, TensorProto.INT4: 4, TensorProto.UINT2: 2, TensorProto.INT2: 2}


def _raw_payload(data_type: int, vals: Any) -> Any:
    if isinstance(vals, np.ndarray):
        bits = _dtypes.bits_per_element(data_type)
        if bits < 8:
            return _dtypes.pack_bits(vals, bits).tobytes()
        arr = np.ascontiguousarray(vals)
        if arr.dtype.byteorder == ">":
            arr = arr.astype(arr.dtype.newbyteorder("<"))
        return arr.tobytes()
    if isinstance(vals, (bytes, bytearray)):
        return bytes(vals)
    if isinstance(vals, memoryview):
        return vals.cast("B") if vals.c_contiguous else vals.tobytes()
    raise TypeError(f"Raw data must be bytes or numpy.ndarray, but got {type(vals)}.")


def _field_values(data_type: int, vals: Any) -> np.ndarray:
    if data_type in _FLOAT8 or data_type == TensorProto.FLOAT8E8M0 or data_type in _FLOAT6:
        return _dtypes.encode_float(np.asarray(vals), data_type, saturate=True).reshape(-1)
    if data_type == TensorProto.BFLOAT16:
        return _dtypes.encode_float(np.asarray(vals), data_type).reshape(-1)
    if data_type == TensorProto.FLOAT4E2M1:
        return _dtypes.encode_float(np.asarray(vals), data_type).reshape(-1)
    if data_type in _PACKED_INT:
        return np.asarray(vals).astype(np.int64).reshape(-1)
    return np.asarray(vals, dtype=pattern_np_dtype(data_type)).reshape(-1)


def make_tensor(
    name: str,
    data_type: int,
    dims: Sequence[int],
    vals: Any,
    raw: bool = False,
) -> TensorProto:
    """A TensorProto, with the values in ``raw_data`` or in the typed field.

    With ``raw=False`` ``vals`` are values: float8 values are rounded to nearest even
    and saturated, bfloat16 rounded to nearest even, 4-bit and 2-bit values packed
    two (four) to an ``int32_data`` entry, float16 / bfloat16 / float8 / bool stored
    as their bit patterns in ``int32_data`` -- all as ``onnx`` does. With ``raw=True``
    ``vals`` is the little-endian payload (bytes-like) or an array of elements (bit
    patterns for the types numpy lacks, one 4-bit element per byte), and is
    checked against ``dims``.

    Args:
        name: the tensor's name.
        data_type: a ``TensorProto.DataType`` value.
        dims: the shape.
        vals: the values (see above).
        raw: store in ``raw_data``.

    Returns:
        The TensorProto.

    Raises:
        TypeError: ``raw`` with STRING, or ``raw`` with something not bytes or array.
        ValueError: the number of values or bytes does not match ``dims``.
    """
    tensor = TensorProto(data_type=data_type, name=name, dims=[int(d) for d in dims])
    if data_type == TensorProto.STRING and raw:
        raise TypeError("Can not use raw_data to store string type.")
    np_dtype = pattern_np_dtype(data_type)
    count = math.prod(tensor.dims)
    if raw:
        payload = _raw_payload(data_type, vals)
        expected = -(-count * _dtypes.bits_per_element(data_type) // 8)
        if len(payload) != expected:
            raise ValueError(
                f"Raw data size does not match tensor's size. Expected {expected} bytes, but got {len(payload)} bytes."
            )
        tensor.raw_data = payload
        return tensor

    if data_type == TensorProto.STRING:
        flat = np.array(vals).reshape(-1)
        values: Any = [_to_bytes(v.item() if isinstance(v, np.generic) else v) for v in flat]
    else:
        values = _field_values(data_type, vals)
    if len(values) != count:
        raise ValueError(
            f"Number of values ({len(values)}) does not match tensor dimensions requiring {count} elements."
        )
    if data_type == TensorProto.STRING:
        tensor.string_data = values
        return tensor
    if data_type in (TensorProto.COMPLEX64, TensorProto.COMPLEX128):
        values = values.view(np_dtype.type(0).real.dtype)
    elif data_type == TensorProto.FLOAT16:
        values = values.view(np.uint16)
    elif data_type == TensorProto.BOOL:
        values = values.astype(np.uint8)
    elif data_type in _PACKED_INT:
        values = _dtypes.pack_bits(values.astype(np.uint8), _PACKED_INT[data_type])
    elif data_type == TensorProto.FLOAT4E2M1:
        values = _dtypes.pack_bits(values, 4)
    setattr(tensor, tensor_dtype_to_field(data_type), values.tolist())
    return tensor


def make_sparse_tensor(values: TensorProto, indices: TensorProto, dims: Sequence[int]) -> SparseTensorProto:
    """A SparseTensorProto from its values, indices (copied) and dense shape."""
    return SparseTensorProto(values=_copy(values), indices=_copy(indices), dims=list(dims))


_SEQUENCE_FIELD = {
    SequenceProto.TENSOR: "tensor_values",
    SequenceProto.SPARSE_TENSOR: "sparse_tensor_values",
    SequenceProto.SEQUENCE: "sequence_values",
    SequenceProto.MAP: "map_values",
    SequenceProto.OPTIONAL: "optional_values",
}
_OPTIONAL_FIELD = {
    OptionalProto.TENSOR: "tensor_value",
    OptionalProto.SPARSE_TENSOR: "sparse_tensor_value",
    OptionalProto.SEQUENCE: "sequence_value",
    OptionalProto.MAP: "map_value",
    OptionalProto.OPTIONAL: "optional_value",
}
_MAP_INT_KEYS = {
    TensorProto.INT8,
    TensorProto.INT16,
    TensorProto.INT32,
    TensorProto.INT64,
    TensorProto.UINT8,
    TensorProto.UINT16,
    TensorProto.UINT32,
    TensorProto.UINT64,
}


def make_sequence(name: str, elem_type: int, values: Sequence[Any]) -> SequenceProto:
    """A SequenceProto of ``elem_type`` (``SequenceProto.TENSOR``, ...) holding ``values``."""
    seq = SequenceProto(name=name, elem_type=elem_type)
    if elem_type == SequenceProto.UNDEFINED:
        return seq
    if elem_type not in _SEQUENCE_FIELD:
        raise TypeError("The element type in the input sequence is not supported.")
    setattr(seq, _SEQUENCE_FIELD[elem_type], _copies(values))
    return seq


def make_map(name: str, key_type: int, keys: list[Any], values: SequenceProto) -> MapProto:
    """A MapProto with string or integer ``keys`` and a sequence of ``values``."""
    proto = MapProto(name=name, key_type=key_type)
    if key_type == TensorProto.STRING:
        proto.string_keys = [_to_bytes(k) for k in keys]
    elif key_type in _MAP_INT_KEYS:
        proto.keys = [int(k) for k in keys]
    proto.values = _copy(values)
    return proto


def make_optional(name: str, elem_type: int, value: Any | None) -> OptionalProto:
    """An OptionalProto of ``elem_type`` holding a copy of ``value``."""
    proto = OptionalProto(name=name, elem_type=elem_type)
    if elem_type == OptionalProto.UNDEFINED:
        return proto
    if elem_type not in _OPTIONAL_FIELD:
        raise TypeError("The element type in the input optional is not supported.")
    if value is None:
        raise ValueError(f"optional {name!r} of element type {elem_type} needs a value")
    setattr(proto, _OPTIONAL_FIELD[elem_type], _copy(value))
    return proto


def _bare(cls: type[Any]) -> Any:
    """``cls()`` for a message class: an empty message (``Message.__init__`` only applies keywords)."""
    return object.__new__(cls)


def _shape_proto(shape: Sequence[str | int | None], shape_denotation: Sequence[str] | None) -> TensorShapeProto:
    # Built by filling the messages' slots directly, as the codec does: value infos are
    # made for every input of a (possibly 10,000-input) gradient function, and the
    # property setters cost several times more than the work.
    if shape_denotation and len(shape_denotation) != len(shape):
        raise ValueError("Invalid shape_denotation. Must be of the same length as shape.")
    dims = []
    dimension = TensorShapeProto.Dimension
    for i, d in enumerate(shape):
        dim = _bare(dimension)
        if d is None:
            pass
        elif type(d) is int or isinstance(d, numbers.Integral):  # exact int: no ABC check
            dim._dim_value = int(d)
        elif isinstance(d, str):
            dim._dim_param = d
        else:
            raise ValueError(f"Invalid item in shape: {d}. Needs to be of int or str.")
        if shape_denotation:
            dim.denotation = shape_denotation[i]
        dims.append(dim)
    proto = _bare(TensorShapeProto)
    proto._dim = dims
    return proto


def make_tensor_type_proto(
    elem_type: int,
    shape: Sequence[str | int | None] | None,
    shape_denotation: list[str] | None = None,
) -> TypeProto:
    """A tensor TypeProto.

    Args:
        elem_type: the element type (``TensorProto.FLOAT``, ...).
        shape: dims as ints (fixed), strings (symbolic) or None (unknown); ``None``
            for an unknown rank, ``[]`` for a scalar.
        shape_denotation: a denotation per dimension.

    Returns:
        The TypeProto.
    """
    tensor = _bare(TypeProto.Tensor)
    tensor._elem_type = elem_type
    if shape is not None:
        tensor._shape = _shape_proto(shape, shape_denotation)
    proto = _bare(TypeProto)
    proto._tensor_type = tensor
    return proto


def make_sparse_tensor_type_proto(
    elem_type: int,
    shape: Sequence[str | int | None] | None,
    shape_denotation: list[str] | None = None,
) -> TypeProto:
    """A sparse tensor TypeProto (arguments as :func:`make_tensor_type_proto`)."""
    sparse = TypeProto.SparseTensor(elem_type=elem_type)
    if shape is not None:
        sparse.shape = _shape_proto(shape, shape_denotation)
    return TypeProto(sparse_tensor_type=sparse)


def make_sequence_type_proto(inner_type_proto: TypeProto) -> TypeProto:
    """A sequence TypeProto whose elements have ``inner_type_proto``."""
    return TypeProto(sequence_type=TypeProto.Sequence(elem_type=_copy(inner_type_proto)))


def make_optional_type_proto(inner_type_proto: TypeProto) -> TypeProto:
    """An optional TypeProto wrapping ``inner_type_proto``."""
    return TypeProto(optional_type=TypeProto.Optional(elem_type=_copy(inner_type_proto)))


def make_map_type_proto(key_type: int, value_type: TypeProto) -> TypeProto:
    """A map TypeProto from ``key_type`` (a TensorProto data type) to ``value_type``."""
    return TypeProto(map_type=TypeProto.Map(key_type=key_type, value_type=_copy(value_type)))


def make_value_info(name: str, type_proto: TypeProto, doc_string: str = "") -> ValueInfoProto:
    """A ValueInfoProto of any type.

    Args:
        name: the value's name.
        type_proto: its type (copied).
        doc_string: documentation; set only when non-empty.

    Returns:
        The ValueInfoProto.
    """
    info = ValueInfoProto(name=name)
    if doc_string:
        info.doc_string = doc_string
    info.type = _copy(type_proto)
    return info


def make_tensor_value_info(
    name: str,
    elem_type: int,
    shape: Sequence[str | int | None] | None,
    doc_string: str = "",
    shape_denotation: list[str] | None = None,
) -> ValueInfoProto:
    """A ValueInfoProto of a tensor (shape as :func:`make_tensor_type_proto`)."""
    # the type is built here, so it is used as is: make_value_info's copy would only cost
    info = _new(ValueInfoProto)
    info._name = name
    if doc_string:
        info.doc_string = doc_string
    if shape_denotation or shape is None:
        info._type = make_tensor_type_proto(elem_type, shape, shape_denotation)
        return info
    # the common case (a gradient function's many inputs), in one frame: five messages
    # filled slot by slot, every dim an exact int (or a str / None, as _shape_proto reads them)
    dims = []
    for d in shape:
        dim = _new(_DIMENSION)
        if type(d) is int:
            dim._dim_value = d
        elif d is not None:
            if not isinstance(d, (str, numbers.Integral)):
                raise ValueError(f"Invalid item in shape: {d}. Needs to be of int or str.")
            if isinstance(d, str):
                dim._dim_param = d
            else:
                dim._dim_value = int(d)
        dims.append(dim)
    shape_proto = _new(TensorShapeProto)
    shape_proto._dim = dims
    tensor = _new(_TENSOR_TYPE)
    tensor._elem_type = elem_type
    tensor._shape = shape_proto
    type_proto = _new(TypeProto)
    type_proto._tensor_type = tensor
    info._type = type_proto
    return info


_new: Any = object.__new__  # (Any: the slots behind the fields are written)
_DIMENSION = TensorShapeProto.Dimension
_TENSOR_TYPE = TypeProto.Tensor


def make_sparse_tensor_value_info(
    name: str,
    elem_type: int,
    shape: Sequence[str | int | None] | None,
    doc_string: str = "",
    shape_denotation: list[str] | None = None,
) -> ValueInfoProto:
    """A ValueInfoProto of a sparse tensor."""
    return make_value_info(name, make_sparse_tensor_type_proto(elem_type, shape, shape_denotation), doc_string)


def make_tensor_sequence_value_info(
    name: str,
    elem_type: int,
    shape: Sequence[str | int | None] | None,
    doc_string: str = "",
    elem_shape_denotation: list[str] | None = None,
) -> ValueInfoProto:
    """A ValueInfoProto of a sequence of tensors of ``elem_type`` and ``shape``."""
    inner = make_tensor_type_proto(elem_type, shape, elem_shape_denotation)
    return make_value_info(name, make_sequence_type_proto(inner), doc_string)


def make_empty_tensor_value_info(name: str) -> ValueInfoProto:
    """A ValueInfoProto with only a name (an omitted optional value)."""
    return ValueInfoProto(name=name)
