"""The protobuf wire format, read and written by hand for the IR classes.

Decoding is strict and bounded: every length prefix is checked against the bytes
that remain, varints are at most ten bytes, nesting is limited, and any violation
raises :class:`DecodeError` with the byte offset and the path into the message.
Fields the schema does not know are kept verbatim and written back at the end of
their message. Packed and unpacked repeated scalars are both accepted; writing
follows ``onnx.proto`` (packed only where the schema says so) and field-number
order, which is what protobuf itself writes, so bytes round-trip exactly.

Large ``bytes`` fields (``TensorProto.raw_data``) are returned as zero-copy
``memoryview`` slices of the input.

The functions here are the pure-Python twins (``*_twin``) of the native codec in
``src/codec.cpp``; the public ``encode``, ``encode_pieces``, ``encoded_size`` and
``decode_into`` use the native loops when ``_native_codec.enabled()`` (the extension is
built and ``ONNX_LIGHT_PURE_PYTHON`` is not ``1``). Both give the same results.
"""

from __future__ import annotations

import gc
import math
import struct
import sys
from array import array
from typing import Any

from . import _native_codec, _wire_gen
from ._errors import DecodeError
from ._message import Field, Message

__all__ = [
    "encode",
    "encode_pieces",
    "encoded_size",
    "decode_into",
    "decode",
    "encode_twin",
    "encode_pieces_twin",
    "encoded_size_twin",
    "decode_into_twin",
    "MAX_DEPTH",
]

# Wire types.
WT_VARINT = 0
WT_FIXED64 = 1
WT_LEN = 2
WT_START_GROUP = 3
WT_END_GROUP = 4
WT_FIXED32 = 5

#: deepest nesting of messages accepted (a graph inside an attribute is 3 levels)
MAX_DEPTH = 100
#: bytes fields at least this long stay views of the input instead of copies
ZERO_COPY_MIN = 256
#: largest valid tag: field numbers stop at 2**29 - 1
_MAX_TAG = (1 << 32) - 1
#: nested messages smaller than this are joined into one piece while encoding
_JOIN_BELOW = 1 << 16

_K_INT64, _K_INT32, _K_UINT64, _K_BOOL, _K_ENUM = 0, 1, 2, 3, 4
_K_FLOAT, _K_DOUBLE, _K_STRING, _K_BYTES, _K_MESSAGE = 5, 6, 7, 8, 9
_KIND_CODE = {
    "int64": _K_INT64,
    "int32": _K_INT32,
    "uint64": _K_UINT64,
    "bool": _K_BOOL,
    "enum": _K_ENUM,
    "float": _K_FLOAT,
    "double": _K_DOUBLE,
    "string": _K_STRING,
    "bytes": _K_BYTES,
    "message": _K_MESSAGE,
}
_WIRE_OF = {
    _K_INT64: WT_VARINT,
    _K_INT32: WT_VARINT,
    _K_UINT64: WT_VARINT,
    _K_BOOL: WT_VARINT,
    _K_ENUM: WT_VARINT,
    _K_FLOAT: WT_FIXED32,
    _K_DOUBLE: WT_FIXED64,
    _K_STRING: WT_LEN,
    _K_BYTES: WT_LEN,
    _K_MESSAGE: WT_LEN,
}
_SIGNED = (_K_INT64, _K_INT32, _K_ENUM)
_F32 = struct.Struct("<f")
_U32 = struct.Struct("<I")
_F64 = struct.Struct("<d")
_U64 = struct.Struct("<Q")
_unpack_d = _F64.unpack_from
_pack_d = _F64.pack


# A float field holds a Python float (a double). Widening a float32 NaN quiets it
# (and struct does the same), so NaN payloads are moved bit by bit instead: the
# float32 mantissa goes to the top of the double's, sign and all, and back.
def _nan_from_f32_bits(bits: int) -> float:
    wide = ((bits >> 31) << 63) | (0x7FF << 52) | ((bits & 0x7FFFFF) << 29)
    return float(_F64.unpack(_U64.pack(wide))[0])


def _f32_bits_of_nan(x: float) -> int:
    wide = _U64.unpack(_F64.pack(x))[0]
    mantissa = (wide >> 29) & 0x7FFFFF or 0x400000  # a payload lost to float64 stays a NaN
    return int(((wide >> 63) << 31) | 0x7F800000 | mantissa)


def _unpack_f(view: Any, pos: int) -> tuple[Any, ...]:
    value = _F32.unpack_from(view, pos)
    if value[0] != value[0]:
        return (_nan_from_f32_bits(_U32.unpack_from(view, pos)[0]),)
    return value


def _pack_f(value: float) -> bytes:
    if value != value:
        return _U32.pack(_f32_bits_of_nan(value))
    return _F32.pack(value)


def _f32_list(data: Any) -> list[float]:
    arr = array("f")
    arr.frombytes(data)
    values = arr.tolist()
    if any(map(math.isnan, values)):
        bits = array("I")
        bits.frombytes(data)
        values = [_nan_from_f32_bits(b) if v != v else v for v, b in zip(values, bits)]
    return values


def _f32_bytes(values: Any) -> bytes:
    arr = array("f", values)
    if any(map(math.isnan, arr)):
        return b"".join(_pack_f(v) for v in values)
    return arr.tobytes()


class _Plan:
    """Per-class tables derived once from the class's fields."""

    __slots__ = ("by_number",)

    def __init__(self, cls: type[Message]) -> None:
        # number -> (field, kind code, expected wire type)
        self.by_number: dict[int, tuple[Field, int, int]] = {}
        for f in cls.FIELDS:
            code = _KIND_CODE[f.kind]
            self.by_number[f.number] = (f, code, _WIRE_OF[code])


_PLANS: dict[type, _Plan] = {}


def _plan(cls: type[Message]) -> _Plan:
    plan = _PLANS.get(cls)
    if plan is None:
        plan = _PLANS[cls] = _Plan(cls)
    return plan


# ----------------------------------------------------------------------------
# encoding
# ----------------------------------------------------------------------------
def _varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL_VARINTS = [bytes((i,)) for i in range(128)]


def _scalar_bytes(code: int, value: Any) -> bytes:
    if code <= _K_ENUM:
        v = int(value)
        if 0 <= v < 128:
            return _SMALL_VARINTS[v]
        return _varint(v)
    if code == _K_FLOAT:
        return _pack_f(value)
    if code == _K_DOUBLE:
        return _pack_d(value)
    raise AssertionError(code)


def _encode_into(msg: Message, out: list[Any]) -> int:
    """Appends the pieces of ``msg``'s encoding to ``out``; returns their total size."""
    return _ENC[type(msg)](msg, out)


def _encode_child(child: Message, key: bytes, out: list[Any], force: bool) -> int:
    pieces: list[Any] = []
    n = _ENC[type(child)](child, pieces)
    if n == 0 and not force:
        return 0
    head = key + (_SMALL_VARINTS[n] if n < 128 else _varint(n))
    out.append(head)
    if n < _JOIN_BELOW:
        out.append(b"".join(pieces))
    else:
        out.extend(pieces)
    return len(head) + n


def _scalars(key: bytes, code: int, packed: bool, values: Any) -> bytes:
    """A repeated scalar field's bytes, packed (one LEN field) or one field per value."""
    if not packed:
        return b"".join([key + _scalar_bytes(code, v) for v in values])
    if code == _K_FLOAT:
        data = _f32_bytes(values)
    elif code == _K_DOUBLE:
        data = array("d", values).tobytes()
    else:
        data = b"".join([_scalar_bytes(code, v) for v in values])
    return key + _varint(len(data)) + data


def _nbytes(data: Any) -> int:
    # a memoryview over a wider item type (float32 array) counts items, not bytes
    return memoryview(data).nbytes


def encode_pieces(msg: Message) -> tuple[list[Any], int]:
    """The encoding of ``msg`` as a list of bytes-like pieces and their total size.

    Large tensor payloads stay as the views they are, so a caller can stream them to
    a file without joining everything into one buffer.
    """
    if _native_codec.enabled():
        return _native_codec.NATIVE.encode_pieces(msg, _native_codec.STREAM_MIN)
    return encode_pieces_twin(msg)


def encode_pieces_twin(msg: Message) -> tuple[list[Any], int]:
    """:func:`encode_pieces` in pure Python."""
    pieces: list[Any] = []
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        n = _encode_into(msg, pieces)
    finally:
        if gc_was_enabled:
            gc.enable()
    return pieces, n


def encode(msg: Message) -> bytes:
    """The protobuf wire-format bytes of ``msg``."""
    if _native_codec.enabled():
        return _native_codec.NATIVE.encode(msg)
    return encode_twin(msg)


def encode_twin(msg: Message) -> bytes:
    """:func:`encode` in pure Python."""
    pieces, _ = encode_pieces_twin(msg)
    return b"".join(pieces)


def encoded_size(msg: Message) -> int:
    """The length of ``encode(msg)``."""
    if _native_codec.enabled():
        return _native_codec.NATIVE.encoded_size(msg)
    return encoded_size_twin(msg)


def encoded_size_twin(msg: Message) -> int:
    """:func:`encoded_size` in pure Python."""
    return encode_pieces_twin(msg)[1]


# ----------------------------------------------------------------------------
# decoding
# ----------------------------------------------------------------------------
def _read_varint(buf: Any, pos: int, end: int) -> tuple[int, int]:
    result = 0
    shift = 0
    start = pos
    while True:
        if pos >= end:
            raise DecodeError("truncated varint", start)
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            if result >> 64:
                raise DecodeError("varint longer than 64 bits", start)
            return result, pos
        shift += 7
        if shift >= 70:
            raise DecodeError("varint longer than 10 bytes", start)


def _skip(buf: Any, pos: int, end: int, wt: int, start: int) -> int:
    """Returns the position after a field of wire type ``wt`` whose payload starts at ``pos``."""
    if wt == WT_VARINT:
        return _read_varint(buf, pos, end)[1]
    if wt == WT_FIXED64:
        pos += 8
    elif wt == WT_FIXED32:
        pos += 4
    elif wt == WT_LEN:
        n, pos = _read_varint(buf, pos, end)
        if n > end - pos:
            raise DecodeError(f"length {n} runs past the end of the message", start)
        pos += n
    else:
        raise DecodeError(f"unsupported wire type {wt}", start)
    if pos > end:
        raise DecodeError("truncated field", start)
    return pos


def _decode(msg: Message, buf: Any, view: memoryview, pos: int, end: int, depth: int) -> None:
    _DEC[type(msg)](msg, buf, view, pos, end, depth)


def _decode_field(
    msg: Message, tag: int, buf: Any, view: memoryview, pos: int, end: int, depth: int, start: int
) -> int:
    """Reads one field the generated decoder does not inline; returns the position after it."""
    number = tag >> 3
    wt = tag & 7
    if number == 0:
        raise DecodeError("field number 0", start)
    entry = _plan(type(msg)).by_number.get(number)
    if entry is not None:
        field, code, expected = entry
        if wt == expected:
            return _read_value(msg, field, code, buf, view, pos, end, depth, start)
        if wt == WT_LEN and field.repeated and code <= _K_DOUBLE:
            return _read_packed(msg, field, code, buf, view, pos, end, start)
    pos = _skip(buf, pos, end, wt, start)
    unknown = getattr(msg, "_unknown", None)
    if unknown is None:
        unknown = msg._unknown = []
    unknown.append(bytes(view[start:pos]))
    return pos


def _read_value(
    msg: Message, field: Field, code: int, buf: Any, view: memoryview, pos: int, end: int, depth: int, start: int
) -> int:
    if code <= _K_ENUM:
        b = buf[pos] if pos < end else 0x80
        if b < 0x80 and pos < end:
            value: Any = b
            pos += 1
        else:
            value, pos = _read_varint(buf, pos, end)
            if code in _SIGNED and value >= 1 << 63:
                value -= 1 << 64
            if code == _K_INT32:
                value = ((value + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)
        if code == _K_BOOL:
            value = value != 0
    elif code == _K_FLOAT:
        if pos + 4 > end:
            raise DecodeError("truncated float", start)
        value = _unpack_f(view, pos)[0]
        pos += 4
    elif code == _K_DOUBLE:
        if pos + 8 > end:
            raise DecodeError("truncated double", start)
        value = _unpack_d(view, pos)[0]
        pos += 8
    else:
        n = buf[pos] if pos < end else 0x80
        if n < 0x80 and pos < end:
            pos += 1
        else:
            n, pos = _read_varint(buf, pos, end)
        if n > end - pos:
            raise DecodeError(f"length {n} runs past the end of the message", start)
        stop = pos + n
        if code == _K_STRING:
            try:
                value = str(view[pos:stop], "utf-8")
            except UnicodeDecodeError:
                raise DecodeError("string field is not valid UTF-8", start) from None
            if _wire_gen.interned(field):
                value = sys.intern(value)
        elif code == _K_BYTES:
            value = view[pos:stop] if n >= ZERO_COPY_MIN else bytes(view[pos:stop])
        else:
            cls = field.cls or _resolve_cls(field)
            if field.repeated:
                child = cls()
            else:
                # a repeated occurrence of a singular message merges, as protobuf does
                child = getattr(msg, field.slot, None) or cls()
                child._implicit = False
            try:
                _decode(child, buf, view, pos, stop, depth + 1)
            except DecodeError as err:
                index = f"[{len(getattr(msg, field.slot, ()))}]" if field.repeated else ""
                raise err.with_prefix(f".{field.name}{index}") from None
            value = child
        pos = stop
    if field.repeated:
        try:
            getattr(msg, field.slot).append(value)
        except AttributeError:
            setattr(msg, field.slot, [value])
    else:
        if field.oneof:
            for other in msg._ONEOFS[field.oneof]:
                if other != field.name and hasattr(msg, "_" + other):
                    delattr(msg, "_" + other)
        setattr(msg, field.slot, value)
    return pos


def _read_packed(
    msg: Message, field: Field, code: int, buf: Any, view: memoryview, pos: int, end: int, start: int
) -> int:
    n, pos = _read_varint(buf, pos, end)
    if n > end - pos:
        raise DecodeError(f"packed length {n} runs past the end of the message", start)
    stop = pos + n
    values: list[Any]
    if code == _K_FLOAT or code == _K_DOUBLE:
        width = 4 if code == _K_FLOAT else 8
        if n % width:
            raise DecodeError(f"packed {field.kind} length {n} is not a multiple of {width}", start)
        if code == _K_FLOAT:
            values = _f32_list(view[pos:stop])
        else:
            arr = array("d")
            arr.frombytes(view[pos:stop])
            values = arr.tolist()
    else:
        values = []
        append = values.append
        while pos < stop:
            b = buf[pos]
            if b < 0x80:
                append(b)
                pos += 1
                continue
            v, pos = _read_varint(buf, pos, stop)
            if code in _SIGNED and v >= 1 << 63:
                v -= 1 << 64
            if code == _K_INT32:
                v = ((v + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)
            append(v)
        if code == _K_BOOL:
            values = [v != 0 for v in values]
    try:
        getattr(msg, field.slot).extend(values)
    except AttributeError:
        setattr(msg, field.slot, values)
    return stop


def _resolve_cls(field: Field) -> type[Message]:
    from ._message import _resolve

    return _resolve(field)


def decode_into(msg: Message, data: Any) -> None:
    """Decodes ``data`` (bytes-like, mmap) into ``msg``, merging with what it holds.

    Raises:
        DecodeError: the bytes are not a valid encoding of ``msg``'s type.
    """
    if not _native_codec.enabled():
        decode_into_twin(msg, data)
        return
    view = _byte_view(data)
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        _native_codec.NATIVE.decode_into(msg, view)
    finally:
        if gc_was_enabled:
            gc.enable()


def _byte_view(data: Any) -> memoryview:
    """``data`` as a flat view of bytes; a strided or non-contiguous buffer is copied first.

    Raises:
        DecodeError: ``data`` is not a buffer.
    """
    try:
        view = memoryview(data)
    except TypeError:
        raise DecodeError(f"cannot decode a {type(data).__name__}: pass bytes, bytearray or a buffer", 0) from None
    if not view.c_contiguous or view.nbytes == 0:
        view = memoryview(view.tobytes())
    if view.ndim != 1 or view.itemsize != 1 or view.format != "B":
        view = view.cast("B")
    return view


def decode_into_twin(msg: Message, data: Any) -> None:
    """:func:`decode_into` in pure Python."""
    view = _byte_view(data)
    buf = data if isinstance(data, bytes) else view
    # the decoder only creates objects that live on; the cyclic GC would rescan them
    # over and over (40% of the time on a 50,000-node graph), so it pauses meanwhile
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        _decode(msg, buf, view, 0, len(view), 0)
    except DecodeError as err:
        raise err.with_prefix(type(msg).__name__) from None
    except (IndexError, struct.error, ValueError, TypeError, OverflowError) as err:  # pragma: no cover
        raise DecodeError(f"malformed input ({type(err).__name__}: {err})", 0, type(msg).__name__) from None
    finally:
        if gc_was_enabled:
            gc.enable()


def decode(cls: type[Message], data: Any) -> Any:
    """A new ``cls`` decoded from ``data``."""
    msg = cls()
    decode_into(msg, data)
    return msg


_SHARED: dict[str, Any] = {
    "DecodeError": DecodeError,
    "_intern": sys.intern,
    "MAX_DEPTH": MAX_DEPTH,
    "ZERO_COPY_MIN": ZERO_COPY_MIN,
    "_MAX_TAG": _MAX_TAG,
    "_KIND_CODE": _KIND_CODE,
    "_read_varint": _read_varint,
    "_read_packed": _read_packed,
    "_decode_field": _decode_field,
    "_unpack_f": _unpack_f,
    "_unpack_d": _unpack_d,
    "_pack_f": _pack_f,
    "_pack_d": _pack_d,
    "_varint": _varint,
    "_SMALL": _SMALL_VARINTS,
    "_encode_child": _encode_child,
    "_scalars": _scalars,
    "_nbytes": _nbytes,
}
_DEC = _wire_gen.decoders(_SHARED)
_ENC = _wire_gen.encoders(_SHARED)
