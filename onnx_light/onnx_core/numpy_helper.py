"""numpy arrays <-> TensorProto, as ``onnx.numpy_helper`` with zero-copy reads.

:func:`to_array` returns a **read-only view** of ``raw_data`` (or of the mapped
external data file) whenever the element type allows: no bytes are copied, and the
array shares memory with the loaded model. Call ``.copy()`` to get a writable array.

Element types numpy lacks come back as bit patterns (see ``_dtypes.py``):
``BFLOAT16`` as ``uint16``; float8 (E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ, E8M0), float6 and
FLOAT4E2M1 as ``uint8`` codes; ``INT4`` / ``INT2`` as sign-extended ``int8`` values and
``UINT4`` / ``UINT2`` as ``uint8`` values, one element per byte (the packed pairs are
unpacked, so those are copies). ``_dtypes.decode_float`` turns the float patterns into
``float32``.

Data is read as little-endian, which is what ONNX stores; big-endian hosts are not
supported.
"""

from __future__ import annotations

import math
import mmap
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import _dtypes
from ._dtypes import np_dtype_to_tensor_dtype, tensor_dtype_to_field, tensor_dtype_to_np_dtype
from ._errors import OnnxLightError
from ._proto import MapProto, OptionalProto, SequenceProto, TensorProto

__all__ = [
    "to_array",
    "from_array",
    "to_list",
    "from_list",
    "to_dict",
    "from_dict",
    "to_optional",
    "from_optional",
]

T = TensorProto
_SIGNED_SUB_BYTE = {T.INT4: 4, T.INT2: 2}
_UNSIGNED_SUB_BYTE = {T.UINT4: 4, T.FLOAT4E2M1: 4, T.UINT2: 2, T.FLOAT6E2M3: 6, T.FLOAT6E3M2: 6}
# types whose int32_data entries hold one element each, as a bit pattern
_INT32_PATTERNS = {
    T.FLOAT16: np.uint16,
    T.BFLOAT16: np.uint16,
    T.INT16: np.uint16,
    T.UINT16: np.uint16,
    T.FLOAT8E4M3FN: np.uint8,
    T.FLOAT8E4M3FNUZ: np.uint8,
    T.FLOAT8E5M2: np.uint8,
    T.FLOAT8E5M2FNUZ: np.uint8,
    T.FLOAT8E8M0: np.uint8,
    T.BOOL: np.uint8,
}


def _external_bytes(tensor: TensorProto, base_dir: str) -> memoryview:
    info = {e.key: e.value for e in tensor.external_data}
    location = info.get("location", "")
    base = os.path.realpath(base_dir or ".")
    path = os.path.realpath(os.path.join(base, location))
    if not location or os.path.isabs(location) or os.path.commonpath([base, path]) != base:
        raise OnnxLightError(
            f"tensor {tensor.name!r}: external data location {location!r} is not a file inside "
            f"{base!r}; pass the model's folder as base_dir"
        )
    if not os.path.isfile(path):
        raise OnnxLightError(f"tensor {tensor.name!r}: external data file {path!r} does not exist")
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        data = memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b"")
    offset = int(info.get("offset", "0") or 0)
    length = int(info["length"]) if info.get("length") else len(data) - offset
    if offset < 0 or length < 0 or offset + length > len(data):
        raise OnnxLightError(
            f"tensor {tensor.name!r}: external data [{offset}, {offset + length}) lies outside "
            f"{location!r} ({len(data)} bytes)"
        )
    return data[offset : offset + length]


def _read_only(arr: np.ndarray) -> np.ndarray:
    arr.flags.writeable = False
    return arr


def _sub_byte(codes: np.ndarray, tensor_dtype: int, dims: Sequence[int]) -> np.ndarray:
    if tensor_dtype in _SIGNED_SUB_BYTE:
        codes = _dtypes.wrap_small_int(codes, tensor_dtype)
    return codes.reshape(dims)


def _bits_of(tensor_dtype: int) -> int:
    return _SIGNED_SUB_BYTE.get(tensor_dtype) or _UNSIGNED_SUB_BYTE[tensor_dtype]


def to_array(tensor: TensorProto, base_dir: str = "") -> np.ndarray:
    """The numpy array of a TensorProto.

    ``raw_data`` (and external data) of byte-sized types is returned as a read-only
    zero-copy view; the typed fields (``float_data``, ``int32_data``, ...) are
    converted. Element types numpy lacks come back as bit patterns (module
    docstring). Strings come back as an ``object`` array of ``str``.

    Args:
        tensor: the tensor.
        base_dir: the folder external data locations are relative to.

    Returns:
        The array, shaped as ``tensor.dims``.

    Raises:
        ValueError: the tensor has segments, or its data does not fit ``dims``.
        TypeError: the data type is UNDEFINED.
        OnnxLightError: external data cannot be found.
    """
    if tensor.HasField("segment"):
        raise ValueError("Currently not supporting loading segments.")
    data_type = tensor.data_type
    if data_type == T.UNDEFINED:
        raise TypeError("The element type in the input tensor is UNDEFINED.")
    dtype = tensor_dtype_to_np_dtype(data_type)
    dims = [int(d) for d in tensor.dims]
    count = math.prod(dims)

    if data_type == T.STRING:
        out = np.empty(len(tensor.string_data), dtype=np.object_)
        out[:] = [bytes(s).decode("utf-8") for s in tensor.string_data]
        return out.reshape(dims)

    raw: Any = None
    if tensor.data_location == T.EXTERNAL:
        raw = _external_bytes(tensor, base_dir)
    elif tensor.HasField("raw_data"):
        raw = tensor.raw_data
    if raw is not None:
        if data_type in _SIGNED_SUB_BYTE or data_type in _UNSIGNED_SUB_BYTE:
            codes = _dtypes.unpack_bits(raw, _bits_of(data_type), count)
            return _read_only(_sub_byte(codes, data_type, dims))
        nbytes = memoryview(raw).nbytes
        if nbytes != count * dtype.itemsize:
            raise ValueError(
                f"tensor {tensor.name!r}: raw_data holds {nbytes} bytes but "
                f"{TensorProto.DataType.Name(data_type)}{dims} needs {count * dtype.itemsize}"
            )
        return _read_only(np.frombuffer(raw, dtype=dtype.newbyteorder("<")).reshape(dims))

    if data_type in _INT32_PATTERNS:
        patterns = np.array(tensor.int32_data, dtype=np.int64).astype(_INT32_PATTERNS[data_type])
        return patterns.view(dtype).reshape(dims)
    if data_type in _SIGNED_SUB_BYTE or data_type in _UNSIGNED_SUB_BYTE:
        packed = np.array(tensor.int32_data, dtype=np.int64).astype(np.uint8)
        if data_type in (T.FLOAT6E2M3, T.FLOAT6E3M2):
            # the typed field holds one 6-bit code per entry, not packed
            return (packed & np.uint8(0x3F)).reshape(dims)
        codes = _dtypes.unpack_bits(packed, _bits_of(data_type), count)
        return _sub_byte(codes, data_type, dims)
    values = getattr(tensor, tensor_dtype_to_field(data_type))
    if data_type in (T.COMPLEX64, T.COMPLEX128):
        real = np.float32 if data_type == T.COMPLEX64 else np.float64
        return np.array(values, dtype=real).view(dtype).reshape(dims)
    storage = tensor_dtype_to_np_dtype(_dtypes.tensor_dtype_to_storage_tensor_dtype(data_type))
    return np.asarray(values, dtype=storage).astype(dtype).reshape(dims)


def from_array(array: np.ndarray, /, name: str | None = None) -> TensorProto:
    """A TensorProto holding ``array``, laid out as onnx does.

    Numeric arrays go to ``raw_data`` (little-endian; 4-bit and 2-bit types packed);
    ``str`` / ``bytes`` / ``object`` arrays go to ``string_data`` (UTF-8). Arrays of
    ``ml_dtypes`` types (``bfloat16``, ``float8_e4m3fn``, ``int4``, ...) are
    recognised by dtype name. Bit-pattern arrays (``uint16`` for bfloat16, ...)
    carry no type information, so build those with ``helper.make_tensor(...,
    raw=True)``.

    Args:
        array: the array (anything ``np.asarray`` accepts).
        name: the tensor's name; set only when non-empty.

    Returns:
        The TensorProto.

    Raises:
        ValueError: the dtype has no ONNX counterpart.
        NotImplementedError: an object array holds something other than str/bytes.
    """
    array = np.asarray(array)
    tensor = TensorProto(dims=list(array.shape))
    if name:
        tensor.name = name
    if array.dtype == object or array.dtype.kind in "US":
        tensor.data_type = T.STRING
        strings = []
        for item in array.reshape(-1):
            if isinstance(item, str):
                strings.append(item.encode("utf-8"))
            elif isinstance(item, bytes):
                strings.append(item)
            else:
                raise NotImplementedError(
                    f"Unrecognized object in the object array, expect a string, or array of bytes: {type(item)}"
                )
        tensor.string_data = strings
        return tensor
    data_type = np_dtype_to_tensor_dtype(array.dtype)
    tensor.data_type = data_type
    bits = _dtypes.bits_per_element(data_type)
    if bits < 8:
        tensor.raw_data = _dtypes.pack_bits(array, bits).tobytes()
        return tensor
    arr = np.ascontiguousarray(array)
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    tensor.raw_data = arr.tobytes()
    return tensor


# ----------------------------------------------------------------------------
# sequences, maps, optionals
# ----------------------------------------------------------------------------
def to_list(sequence: SequenceProto) -> list[Any]:
    """The Python list of a SequenceProto (tensors become arrays).

    Raises:
        TypeError: the element type is not supported.
    """
    et = sequence.elem_type
    if et == SequenceProto.TENSOR:
        return [to_array(t) for t in sequence.tensor_values]
    if et == SequenceProto.SPARSE_TENSOR:
        return [to_array(t.values) for t in sequence.sparse_tensor_values]
    if et == SequenceProto.SEQUENCE:
        return [to_list(s) for s in sequence.sequence_values]
    if et == SequenceProto.MAP:
        return [to_dict(m) for m in sequence.map_values]
    if et == SequenceProto.OPTIONAL:
        return [to_optional(o) for o in sequence.optional_values]
    raise TypeError("The element type in the input sequence is not supported.")


def from_list(lst: list[Any], name: str | None = None, dtype: int | None = None) -> SequenceProto:
    """A SequenceProto from a list of arrays, lists, dicts or optionals.

    Args:
        lst: the elements, all of one kind.
        name: the sequence's name.
        dtype: ``SequenceProto.TENSOR`` etc.; inferred from the elements when None.

    Returns:
        The SequenceProto.
    """
    seq = SequenceProto()
    if name:
        seq.name = name
    if dtype is None:
        if not lst:
            raise TypeError("Cannot infer the element type of an empty list; pass dtype")
        first = lst[0]
        if isinstance(first, dict):
            dtype = SequenceProto.MAP
        elif isinstance(first, list):
            dtype = SequenceProto.SEQUENCE
        else:
            dtype = SequenceProto.TENSOR
    seq.elem_type = dtype
    if dtype == SequenceProto.TENSOR:
        seq.tensor_values = [from_array(np.asarray(v)) for v in lst]
    elif dtype == SequenceProto.SEQUENCE:
        seq.sequence_values = [from_list(v) for v in lst]
    elif dtype == SequenceProto.MAP:
        seq.map_values = [from_dict(v) for v in lst]
    elif dtype == SequenceProto.OPTIONAL:
        seq.optional_values = [from_optional(v) for v in lst]
    else:
        raise TypeError("The element type in the input is not a tensor, sequence, or map type.")
    return seq


def to_dict(map_proto: MapProto) -> dict[Any, Any]:
    """The Python dict of a MapProto (string keys decoded, values as :func:`to_list`)."""
    if map_proto.key_type == T.STRING:
        keys: list[Any] = [bytes(k).decode("utf-8") for k in map_proto.string_keys]
    else:
        keys = list(map_proto.keys)
    values = to_list(map_proto.values)
    if len(keys) != len(values):
        raise IndexError(f"map {map_proto.name!r} has {len(keys)} keys but {len(values)} values")
    return dict(zip(keys, values))


def from_dict(dict_: dict[Any, Any], name: str | None = None) -> MapProto:
    """A MapProto from a dict with str or int keys and array-like values."""
    proto = MapProto()
    if name:
        proto.name = name
    keys = list(dict_)
    key_type = np_dtype_to_tensor_dtype(np.asarray(keys).dtype) if keys else T.STRING
    proto.key_type = key_type
    if key_type == T.STRING:
        proto.string_keys = [k.encode("utf-8") if isinstance(k, str) else k for k in keys]
    else:
        proto.keys = [int(k) for k in keys]
    proto.values = from_list(list(dict_.values()))
    return proto


def to_optional(optional: OptionalProto) -> Any | None:
    """The value of an OptionalProto, or None when it holds nothing."""
    et = optional.elem_type
    if et == OptionalProto.UNDEFINED:
        return None
    if et == OptionalProto.TENSOR:
        return to_array(optional.tensor_value)
    if et == OptionalProto.SPARSE_TENSOR:
        return to_array(optional.sparse_tensor_value.values)
    if et == OptionalProto.SEQUENCE:
        return to_list(optional.sequence_value)
    if et == OptionalProto.MAP:
        return to_dict(optional.map_value)
    if et == OptionalProto.OPTIONAL:
        return to_optional(optional.optional_value)
    raise TypeError("The element type in the input optional is not supported.")


def from_optional(opt: Any | None, name: str | None = None, dtype: int | None = None) -> OptionalProto:
    """An OptionalProto holding ``opt`` (None gives an empty optional)."""
    proto = OptionalProto()
    if name:
        proto.name = name
    if opt is None:
        proto.elem_type = OptionalProto.UNDEFINED if dtype is None else dtype
        return proto
    if dtype is None:
        if isinstance(opt, dict):
            dtype = OptionalProto.MAP
        elif isinstance(opt, list):
            dtype = OptionalProto.SEQUENCE
        else:
            dtype = OptionalProto.TENSOR
    proto.elem_type = dtype
    if dtype == OptionalProto.TENSOR:
        proto.tensor_value = from_array(np.asarray(opt))
    elif dtype == OptionalProto.SEQUENCE:
        proto.sequence_value = from_list(opt)
    elif dtype == OptionalProto.MAP:
        proto.map_value = from_dict(opt)
    else:
        raise TypeError("The element type in the input is not a tensor, sequence, or map type.")
    return proto
