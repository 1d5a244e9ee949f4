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
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import _dtypes
from ._dtypes import np_dtype_to_tensor_dtype, tensor_dtype_to_field
from ._errors import OnnxLightError
from ._interop import from_foreign
from ._proto import MapProto, OptionalProto, SequenceProto, TensorProto

__all__ = [
    "to_array",
    "from_array",
    "to_list",
    "from_list",
    "to_dict",
    "tobytes_little_endian",
    "to_float8e8m0",
    "saturate_cast",
    "create_random_int",
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


def _pack_4bitx2(array: np.ndarray) -> np.ndarray:
    """Two 4-bit codes per byte, element 0 in the low nibble (onnx's private helper of that name)."""
    return _dtypes.pack_bits(array, 4)


def _pack_2bitx4(array: np.ndarray) -> np.ndarray:
    """Four 2-bit codes per byte, element 0 in the lowest bits."""
    return _dtypes.pack_bits(array, 2)


def _pack_6bit(array: np.ndarray) -> np.ndarray:
    """6-bit codes packed LSB first, four per three bytes."""
    return _dtypes.pack_bits(array, 6)


def to_array(tensor: TensorProto, base_dir: str = "", *, bit_patterns: bool = False) -> np.ndarray:
    """The numpy array of a TensorProto.

    ``raw_data`` (and external data) of byte-sized types is returned as a read-only
    zero-copy view; the typed fields (``float_data``, ``int32_data``, ...) are
    converted. Element types numpy lacks come back, as from ``onnx``, with the
    ``ml_dtypes`` dtype (``bfloat16``, ``float8_e4m3fn``, ``int4``, ...) when
    ``ml_dtypes`` is installed, else as bit patterns (module docstring). Strings
    come back as an ``object`` array of ``str``.

    Args:
        tensor: the tensor (ours or an ``onnx.TensorProto``).
        base_dir: the folder external data locations are relative to.
        bit_patterns: return the bit patterns even when ``ml_dtypes`` is installed
            (the form onnx-light's runtime computes with).

    Returns:
        The array, shaped as ``tensor.dims``.

    Raises:
        ValueError: the tensor has segments, or its data does not fit ``dims``.
        TypeError: the data type is UNDEFINED.
        OnnxLightError: external data cannot be found.
    """
    tensor = from_foreign(tensor)
    arr = _patterns(tensor, base_dir)
    if not bit_patterns and tensor.data_type in _dtypes.BIT_PATTERN_TYPES | _dtypes.SMALL_INT_TYPES:
        ml = _dtypes.ml_dtype(tensor.data_type)
        if ml is not None:
            # the 4- and 2-bit integers are values (sign-extended): converted, not viewed
            out = arr.astype(ml) if tensor.data_type in _dtypes.SMALL_INT_TYPES else arr.view(ml)
            out.flags.writeable = arr.flags.writeable
            return out
    return arr


def _patterns(tensor: TensorProto, base_dir: str) -> np.ndarray:
    """:func:`to_array` with the bit patterns of the types numpy lacks."""
    if tensor.HasField("segment"):
        raise ValueError("Currently not supporting loading segments.")
    data_type = tensor.data_type
    if data_type == T.UNDEFINED:
        raise TypeError("The element type in the input tensor is UNDEFINED.")
    dtype = _dtypes.pattern_np_dtype(data_type)
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
        return _shaped(patterns.view(dtype), dims, tensor)
    if data_type in _SIGNED_SUB_BYTE or data_type in _UNSIGNED_SUB_BYTE:
        packed = np.array(tensor.int32_data, dtype=np.int64).astype(np.uint8)
        if data_type in (T.FLOAT6E2M3, T.FLOAT6E3M2):
            # the typed field holds one 6-bit code per entry, not packed
            return _shaped(packed & np.uint8(0x3F), dims, tensor)
        codes = _dtypes.unpack_bits(packed, _bits_of(data_type), count)
        return _sub_byte(codes, data_type, dims)
    values = getattr(tensor, tensor_dtype_to_field(data_type))
    if data_type in (T.COMPLEX64, T.COMPLEX128):
        real = np.float32 if data_type == T.COMPLEX64 else np.float64
        return _shaped(np.array(values, dtype=real).view(dtype), dims, tensor)
    storage = _dtypes.pattern_np_dtype(_dtypes.tensor_dtype_to_storage_tensor_dtype(data_type))
    return _shaped(np.asarray(values, dtype=storage).astype(dtype), dims, tensor)


def _shaped(values: np.ndarray, dims: list[int], tensor: TensorProto) -> np.ndarray:
    """``values`` reshaped to ``dims``; a size mismatch says what it usually means."""
    if values.size != math.prod(dims):
        raise ValueError(
            f"tensor {tensor.name!r}: {values.size} values do not fill dims {dims}; if these bytes "
            "were decoded as a TensorProto, they are perhaps not actually a TensorProto"
        )
    return values.reshape(dims)


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


def tobytes_little_endian(array: np.ndarray) -> bytes:
    """The bytes of ``array`` in little-endian byte order (what ONNX stores)."""
    arr = np.asarray(array)
    if arr.dtype.byteorder == ">" or (sys.byteorder == "big" and arr.dtype.byteorder == "="):
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    return arr.tobytes()


def to_float8e8m0(x: np.ndarray, saturate: bool = True, round_mode: str = "up") -> np.ndarray:
    """``x`` (cast to float32 first) in FLOAT8E8M0, as ``onnx.numpy_helper.to_float8e8m0``.

    Args:
        x: the values.
        saturate: the largest exponent caps at 0xFE instead of rolling into 0xFF (NaN).
        round_mode: ``"up"``, ``"down"`` or ``"nearest"``.

    Returns:
        An ``ml_dtypes.float8_e8m0fnu`` array when ml_dtypes is installed, else the
        ``uint8`` patterns.

    Raises:
        ValueError: an unknown ``round_mode``.
    """
    if round_mode not in ("up", "down", "nearest"):
        raise ValueError(f"round_mode must be 'up', 'down' or 'nearest', not {round_mode!r}")
    bits = _dtypes.encode_float(np.asarray(x, dtype=np.float32), T.FLOAT8E8M0, saturate=saturate, round_mode=round_mode)
    ml = _dtypes.ml_dtype(T.FLOAT8E8M0)
    return bits.view(ml) if ml is not None else bits


def saturate_cast(x: np.ndarray, dtype: Any) -> np.ndarray:
    """``x`` cast to ``dtype`` with out-of-range values clamped to its min / max (integers rounded).

    ``dtype`` is a numpy or ``ml_dtypes`` dtype (the latter needs ml_dtypes).
    """
    dt = np.dtype(dtype)
    x = np.asarray(x)
    if dt.kind in "iu" or dt.name in ("int4", "uint4", "int2", "uint2"):
        info: Any = np.iinfo(dt) if dt.kind in "iu" else _dtypes._ml_dtypes_module().iinfo(dt)
        x = np.round(x)
    else:
        info = np.finfo(dt) if dt.kind == "f" else _dtypes._ml_dtypes_module().finfo(dt)
    return np.clip(x, info.min, info.max).astype(dt)


def create_random_int(input_shape: tuple[int, ...], dtype: Any, seed: int = 1) -> np.ndarray:
    """Random integers of ``dtype`` (within the int32 range), as onnx's backend test cases make them.

    Uses a ``np.random.RandomState(seed)`` of its own: the global numpy seed is left alone.

    Raises:
        TypeError: ``dtype`` is not an integer type.
    """
    dt = np.dtype(dtype)
    if dt.kind not in "iu" or dt.itemsize > 8:
        raise TypeError(f"{dtype} is not supported by create_random_int.")
    end = min(np.iinfo(dt).max, np.iinfo(np.int32).max)
    start = max(np.iinfo(dt).min, np.iinfo(np.int32).min)
    return np.random.RandomState(seed).randint(start, end, size=input_shape).astype(dt)


# ----------------------------------------------------------------------------
# sequences, maps, optionals
# ----------------------------------------------------------------------------
def to_list(sequence: SequenceProto) -> list[Any]:
    """The Python list of a SequenceProto (tensors become arrays).

    Raises:
        TypeError: the element type is not supported.
    """
    sequence = from_foreign(sequence)
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
    if dtype is None:  # an empty list is a sequence of tensors, as in onnx
        first = lst[0] if lst else None
        if isinstance(first, dict):
            dtype = SequenceProto.MAP
        elif isinstance(first, list):
            dtype = SequenceProto.SEQUENCE
        else:
            dtype = SequenceProto.TENSOR
    if lst and not all(isinstance(v, type(lst[0])) for v in lst):
        raise TypeError(
            "The element type in the input list is not the same for all elements "
            "and therefore is not supported as a sequence."
        )
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
    """The Python dict of a MapProto (string keys as ``bytes``, as onnx; values as :func:`to_list`).

    Raises:
        IndexError: the map has more keys than values or the reverse.
    """
    map_proto = from_foreign(map_proto)
    if map_proto.key_type == T.STRING:
        keys: list[Any] = [bytes(k) for k in map_proto.string_keys]
    else:
        keys = list(map_proto.keys)
    values = to_list(map_proto.values)
    if len(keys) != len(values):
        raise IndexError(
            f"Length of keys and values for MapProto (map name: {map_proto.name}) are not the same "
            f"({len(keys)} keys, {len(values)} values)."
        )
    return dict(zip(keys, values))


_MAP_INT_KEYS = frozenset({T.INT8, T.INT16, T.INT32, T.INT64, T.UINT8, T.UINT16, T.UINT32, T.UINT64})


def _key_kind(key: Any) -> Any:
    return "string" if isinstance(key, (str, bytes)) else np.result_type(key)


def from_dict(dict_: dict[Any, Any], name: str | None = None) -> MapProto:
    """A MapProto from a dict with string (str or bytes) or integer keys and array values.

    Raises:
        ValueError: the dict is empty, or two keys encode to the same bytes.
        TypeError: the keys (or the values) are not all of one type, or the key type
            is neither a string nor an integer.
    """
    if not dict_:
        raise ValueError("Cannot convert an empty dictionary to MapProto.")
    keys = list(dict_)
    kind = _key_kind(keys[0])
    if not all(_key_kind(k) == kind for k in keys):
        raise TypeError(
            "The key type in the input dictionary is not the same for all keys and therefore is not valid as a map."
        )
    values = list(dict_.values())
    value_kind = np.result_type(values[0])
    if not all(np.result_type(v) == value_kind for v in values):
        raise TypeError(
            "The value type in the input dictionary is not the same for all values and therefore is not valid as a map."
        )
    proto = MapProto()
    if name:
        proto.name = name
    if kind == "string":
        encoded = [k.encode("utf-8") if isinstance(k, str) else bytes(k) for k in keys]
        if len(set(encoded)) != len(encoded):
            raise ValueError("The string keys of the dictionary are not unique once encoded as UTF-8 bytes.")
        proto.key_type = T.STRING
        proto.string_keys = encoded
    else:
        key_type = np_dtype_to_tensor_dtype(kind)
        if key_type not in _MAP_INT_KEYS:
            raise TypeError(f"Unsupported map key type: {key_type}")
        proto.key_type = key_type
        proto.keys = [int(k) for k in keys]
    proto.values = from_list(values)
    return proto


_OPTIONAL_FIELDS = {
    OptionalProto.TENSOR: "tensor_value",
    OptionalProto.SPARSE_TENSOR: "sparse_tensor_value",
    OptionalProto.SEQUENCE: "sequence_value",
    OptionalProto.MAP: "map_value",
    OptionalProto.OPTIONAL: "optional_value",
}


def to_optional(optional: OptionalProto) -> Any | None:
    """The value of an OptionalProto, or None when it holds nothing."""
    optional = from_foreign(optional)
    et = optional.elem_type
    if et == OptionalProto.UNDEFINED or (et in _OPTIONAL_FIELDS and not optional.HasField(_OPTIONAL_FIELDS[et])):
        return None  # no value (a typed empty optional)
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
    if dtype is not None and dtype not in OptionalProto.DataType.values():
        raise TypeError(f"{dtype} must be a valid OptionalProto.DataType.")
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
