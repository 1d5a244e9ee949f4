"""Per-class encoders and decoders for the wire codec, generated once from the field tables.

A generic loop pays a table lookup, a tuple unpack and a function call per field; the
generated code instead tests the tag against the class's own keys and reads or writes
each field inline, which makes the pure-Python codec several times faster on
graph-heavy models. Only the expected wire type of each known field is inlined;
everything else (a packed encoding of an unpacked field or the reverse, unknown
fields, field number 0) goes to the generic path in ``_wire``, so behaviour is the
same. The generated source is plain Python built from the schema's field rows.
"""

from __future__ import annotations

import textwrap
from typing import Any

from ._message import Field, Message, _resolve


def interned(f: Field) -> bool:
    """Whether the codec interns ``f``'s values: ``op_type`` and ``domain``, a few distinct
    strings repeated on every node, which the passes look up in dictionaries and compare with
    literals (then by identity)."""
    return f.kind == "string" and not f.repeated and f.name in ("op_type", "domain")


__all__ = ["decoders", "encoders"]

_VARINT_KINDS = ("int64", "int32", "uint64", "bool", "enum")
_SIGNED_KINDS = ("int64", "int32", "enum")


def _key(number: int, wire_type: int) -> int:
    return (number << 3) | wire_type


# ----------------------------------------------------------------------------
# decoders
# ----------------------------------------------------------------------------
_READ_LEN = """\
            if pos < end and buf[pos] < 0x80:
                n = buf[pos]
                pos += 1
            else:
                n, pos = _read_varint(buf, pos, end)
            if n > end - pos:
                raise DecodeError(f"length {n} runs past the end of the message", start)
            stop = pos + n
"""


def _decode_body(i: int, f: Field, ns: dict[str, Any]) -> tuple[int, str]:
    """The tag the field is inlined for and the statements that read it into ``value``."""
    if f.kind in _VARINT_KINDS:
        tag, code = _key(f.number, 0), _read_varint_code(f)
    elif f.kind in ("float", "double"):
        width, tag = (4, _key(f.number, 5)) if f.kind == "float" else (8, _key(f.number, 1))
        unpack = "_unpack_f" if f.kind == "float" else "_unpack_d"
        code = f"""\
            if pos + {width} > end:
                raise DecodeError("truncated {f.kind}", start)
            value = {unpack}(view, pos)[0]
            pos += {width}
"""
    elif f.kind == "string":
        tag = _key(f.number, 2)
        code = (
            _READ_LEN
            + """\
            try:
                value = str(view[pos:stop], "utf-8")
            except UnicodeDecodeError:
                raise DecodeError("string field is not valid UTF-8", start) from None
            pos = stop
"""
        )
        if interned(f):  # (as src/codec.cpp does: its Field's intern flag)
            code += "            value = _intern(value)\n"
    elif f.kind == "bytes":
        tag = _key(f.number, 2)
        code = (
            _READ_LEN
            + """\
            value = view[pos:stop] if n >= ZERO_COPY_MIN else bytes(view[pos:stop])
            pos = stop
"""
        )
    else:
        tag, code = _key(f.number, 2), _read_message_code(i, f, ns)
    return tag, code + _store_code(i, f, ns)


def _read_varint_code(f: Field) -> str:
    """The statements reading a varint field into ``value`` (sign, int32 wrap, bool)."""
    code = """\
            if pos < end and buf[pos] < 0x80:
                value = buf[pos]
                pos += 1
            else:
                value, pos = _read_varint(buf, pos, end)
"""
    if f.kind in _SIGNED_KINDS:
        code += "                if value >= 0x8000000000000000:\n"
        code += "                    value -= 0x10000000000000000\n"
    if f.kind == "int32":
        code += "                value = ((value + 0x80000000) & 0xFFFFFFFF) - 0x80000000\n"
    if f.kind == "bool":
        code += "            value = value != 0\n"
    return code


def _read_message_code(i: int, f: Field, ns: dict[str, Any]) -> str:
    """The statements decoding a sub-message field into ``value`` (errors get the field's path)."""
    slot = f.slot
    ns[f"C{i}"] = _resolve(f)
    if f.repeated:
        make = f"            value = _new(C{i})\n"
        where = f"f\".{f.name}[{{len(getattr(msg, '{slot}', ()))}}]\""
    else:
        make = f"""\
            value = getattr(msg, "{slot}", None)
            if value is None:
                value = _new(C{i})
            else:
                value._implicit = False
"""
        where = f'".{f.name}"'
    return (
        _READ_LEN
        + make
        + f"""\
            try:
                _DEC[C{i}](value, buf, view, pos, stop, depth + 1)
            except DecodeError as err:
                raise err.with_prefix({where}) from None
            pos = stop
"""
    )


def _store_code(i: int, f: Field, ns: dict[str, Any]) -> str:
    """The statements storing ``value``: appended to the list, or set (clearing oneof siblings)."""
    slot = f.slot
    if f.repeated:
        return f"""\
            if l{i} is None:
                l{i} = getattr(msg, "{slot}", None)
                if l{i} is None:
                    l{i} = msg.{slot} = []
            l{i}.append(value)
"""
    code = ""
    for other in msg_oneof_siblings(f, ns["_CLS"]):
        code += f'            if hasattr(msg, "{other}"):\n                del msg.{other}\n'
    return code + f"            msg.{slot} = value\n"


def msg_oneof_siblings(f: Field, cls: type[Message]) -> list[str]:
    if not f.oneof:
        return []
    return ["_" + name for name in cls._ONEOFS[f.oneof] if name != f.name]


def _make_decoder(cls: type[Message], shared: dict[str, Any]) -> Any:
    ns = dict(shared, _CLS=cls)
    lines = [
        "def decode(msg, buf, view, pos, end, depth):",
        "    if depth > MAX_DEPTH:",
        '        raise DecodeError(f"messages nested deeper than {MAX_DEPTH} levels", pos)',
    ]
    fields = cls._WRITE_ORDER
    lines += [f"    l{i} = None" for i, f in enumerate(fields) if f.repeated]
    lines += [
        "    while pos < end:",
        "        start = pos",
        "        tag = buf[pos]",
        "        pos += 1",
        "        if tag >= 0x80:",
        "            tag, pos = _read_varint(buf, start, end)",
        "            if tag > _MAX_TAG:",
        '                raise DecodeError(f"field number {tag >> 3} is above the protobuf maximum", start)',
    ]
    first = True
    for i, f in enumerate(fields):
        if f.packed:
            lines.append(f"        {'if' if first else 'elif'} tag == {_key(f.number, 2)}:")
            lines.append(f"            pos = _read_packed(msg, F{i}, K{i}, buf, view, pos, end, start)")
            ns[f"F{i}"] = f
            ns[f"K{i}"] = shared["_KIND_CODE"][f.kind]
            first = False
            continue
        tag, code = _decode_body(i, f, ns)
        lines.append(f"        {'if' if first else 'elif'} tag == {tag}:")
        lines.append(code.rstrip("\n"))
        first = False
    lines.append("        else:" if not first else "        if True:")
    lines.append("            pos = _decode_field(msg, tag, buf, view, pos, end, depth, start)")
    lines += [
        "    if pos != end:",
        '        raise DecodeError("field runs past the end of the message", end)',
    ]
    exec(compile("\n".join(lines) + "\n", f"<decode {cls.__name__}>", "exec"), ns)  # noqa: S102
    return ns["decode"]


class _Table(dict):
    """class -> generated function, built on first use of a class."""

    def __init__(self, factory: Any, shared: dict[str, Any]) -> None:
        super().__init__()
        self._factory = factory
        self._shared = shared

    def __missing__(self, cls: type[Message]) -> Any:
        fn = self[cls] = self._factory(cls, self._shared)
        return fn


def decoders(shared: dict[str, Any]) -> dict[type, Any]:
    """The table of generated decoders; ``shared`` holds the names the code refers to."""
    table = _Table(_make_decoder, shared)
    shared["_DEC"] = table
    shared["_new"] = object.__new__
    return table


# ----------------------------------------------------------------------------
# encoders
# ----------------------------------------------------------------------------
def _encode_body(i: int, f: Field) -> str:
    """Statements appending field ``f`` (present, value ``v``) to ``out`` and ``size``."""
    if f.kind == "message":
        if f.repeated:
            return f"        for item in v:\n            size += _encode_child(item, K{i}, out, True)\n"
        return f'        size += _encode_child(v, K{i}, out, not getattr(v, "_implicit", False))\n'
    if f.kind in ("string", "bytes"):
        to_bytes = 'data = item.encode("utf-8")' if f.kind == "string" else "data = item"
        length = "len(data)" if f.kind == "string" else "len(data) if type(data) is bytes else _nbytes(data)"
        one = f"""\
{to_bytes}
n = {length}
head = K{i} + (_SMALL[n] if n < 128 else _varint(n))
out.append(head)
out.append(data)
size += len(head) + n
"""
        if f.repeated:
            return "        for item in v:\n" + textwrap.indent(one, " " * 12)
        return "        item = v\n" + textwrap.indent(one, " " * 8)
    if f.repeated:
        return f"""\
        data = _scalars(K{i}, {shared_kind(f)}, {f.packed}, v)
        out.append(data)
        size += len(data)
"""
    if f.kind in _VARINT_KINDS:
        return f"""\
        data = K{i} + (_SMALL[v] if type(v) is int and 0 <= v < 128 else _varint(int(v)))
        out.append(data)
        size += len(data)
"""
    pack = "_pack_f" if f.kind == "float" else "_pack_d"
    return f"""\
        data = K{i} + {pack}(v)
        out.append(data)
        size += len(data)
"""


def shared_kind(f: Field) -> str:
    return f"_KIND_CODE[{f.kind!r}]"


def _make_encoder(cls: type[Message], shared: dict[str, Any]) -> Any:
    ns = dict(shared)
    lines = ["def encode(msg, out):", "    size = 0"]
    for i, f in enumerate(cls._WRITE_ORDER):
        packed_len = f.packed or f.kind in ("string", "bytes", "message")
        wire = 2 if packed_len else (5 if f.kind == "float" else 1 if f.kind == "double" else 0)
        if f.repeated and not f.packed and f.kind not in ("string", "bytes", "message"):
            wire = 5 if f.kind == "float" else 1 if f.kind == "double" else 0
        ns[f"K{i}"] = shared["_varint"](_key(f.number, wire))
        if f.repeated:
            lines.append(f'    v = getattr(msg, "{f.slot}", ())')
            cond = "v"
        else:
            lines.append(f'    v = getattr(msg, "{f.slot}", _MISSING)')
            cond = "v is not _MISSING"
        lines.append(f"    if {cond}:")
        lines.append(_encode_body(i, f).rstrip("\n"))
    lines += [
        '    unknown = getattr(msg, "_unknown", None)',
        "    if unknown:",
        "        for raw in unknown:",
        "            out.append(raw)",
        "            size += len(raw)",
        "    return size",
    ]
    exec(compile("\n".join(lines) + "\n", f"<encode {cls.__name__}>", "exec"), ns)  # noqa: S102
    return ns["encode"]


def encoders(shared: dict[str, Any]) -> dict[type, Any]:
    """The table of generated encoders; ``shared`` holds the names the code refers to."""
    table = _Table(_make_encoder, shared)
    shared["_ENC"] = table
    shared["_MISSING"] = object()
    return table
