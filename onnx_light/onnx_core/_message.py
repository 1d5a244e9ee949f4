"""The message machinery behind the IR classes: fields, presence, oneofs, equality.

Each IR class lists its fields as :class:`Field` rows (name, protobuf field number,
wire kind, label). A metaclass turns the rows into ``__slots__`` plus one property per
field, so the classes read like ``onnx``'s generated ones:

* a singular field that was never set reads as its default (``0``, ``""``, an empty
  message) and ``HasField`` is False; setting it, even to the default, marks it present;
* a repeated scalar field is a plain ``list``; a repeated message field is a ``list``
  subclass with protobuf's ``add(**fields)`` (:class:`RepeatedComposite`);
* setting one member of a oneof clears the others (``WhichOneof``);
* an empty sub-message created by merely *reading* an unset field is not serialised,
  as in protobuf, but one that was written to is.

The wire codec (``_wire.py``) reads and writes the private slots directly.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

__all__ = ["Field", "Message", "MessageMeta", "RepeatedComposite"]

# Wire kinds of the protobuf scalar types the ONNX schema uses.
DOUBLE = "double"
FLOAT = "float"
INT64 = "int64"
UINT64 = "uint64"
INT32 = "int32"
BOOL = "bool"
STRING = "string"
BYTES = "bytes"
ENUM = "enum"
MESSAGE = "message"

_DEFAULTS: dict[str, Any] = {
    DOUBLE: 0.0,
    FLOAT: 0.0,
    INT64: 0,
    UINT64: 0,
    INT32: 0,
    BOOL: False,
    STRING: "",
    BYTES: b"",
    ENUM: 0,
}


class Field:
    """One field of a message: its name, number, kind and label.

    Attributes:
        name: the field's name as in ``onnx.proto``.
        number: the protobuf field number.
        kind: the scalar kind (``"int64"``, ``"string"``, ...) or ``"message"``.
        repeated: True for ``repeated`` fields.
        packed: True for repeated scalars written packed.
        message: the class name of a message field (resolved lazily).
        oneof: the name of the oneof the field belongs to, if any.
    """

    __slots__ = ("name", "number", "kind", "repeated", "packed", "message", "oneof", "slot", "cls")

    def __init__(
        self,
        name: str,
        number: int,
        kind: str,
        *,
        repeated: bool = False,
        packed: bool = False,
        message: str | None = None,
        oneof: str | None = None,
    ) -> None:
        self.name = name
        self.number = number
        self.kind = kind
        self.repeated = repeated
        self.packed = packed
        self.message = message
        self.oneof = oneof
        self.slot = "_" + name
        self.cls: type[Message] | None = None


_REGISTRY: dict[str, type[Message]] = {}

#: what ``getattr(message, slot, _UNSET)`` returns for a field never set (no slot holds it)
_UNSET: Any = object()


def _resolve(field: Field) -> type[Message]:
    cls = field.cls
    if cls is None:
        assert field.message is not None
        cls = field.cls = _REGISTRY[field.message]
    return cls


class RepeatedComposite(list[Any]):
    """A repeated message field: a ``list`` plus protobuf's ``add()``.

    The codec stores plain lists; the field's getter turns one into this class on the first
    read (a copy of the references, once), so ``graph.node.add(op_type="Relu")`` works as
    with onnx's generated classes.
    """

    __slots__ = ("_field",)

    def __init__(self, field: Field, items: Any = ()) -> None:
        super().__init__(items)
        self._field = field

    def add(self, **kwargs: Any) -> Any:
        """Appends a new element built from ``kwargs`` and returns it."""
        item = _resolve(self._field)(**kwargs)
        self.append(item)
        return item

    def __reduce__(self) -> Any:
        return (list, (list(self),))


def _attach(msg: Message) -> None:
    """Stores a detached sub-message (and its detached ancestors) into their parents.

    Writing into ``t.sequence_type`` while ``t.tensor_type`` is set makes
    ``sequence_type`` the set member, as protobuf does, instead of losing the write.
    Appending to a repeated field of a detached message does not attach it (plain
    lists cannot tell); assign the list or set a scalar to do so.
    """
    link = getattr(msg, "_parent", None)
    while link is not None:
        parent, slot, members = link
        del msg._parent
        if getattr(parent, slot, None) is not msg:
            for other in members:
                if other != slot and hasattr(parent, other):
                    delattr(parent, other)
            setattr(parent, slot, msg)
        msg = parent
        link = getattr(msg, "_parent", None)


def _make_property(cls_name: str, field: Field, oneof_members: tuple[str, ...]) -> property:
    slot = field.slot
    doc = f"{cls_name}.{field.name} (field {field.number})"
    if field.repeated and field.kind == MESSAGE:

        def get_composite(self: Message) -> list[Any]:
            value = getattr(self, slot, _UNSET)
            if type(value) is not RepeatedComposite:
                value = RepeatedComposite(field, () if value is _UNSET else value)
                setattr(self, slot, value)
            return value

        def set_composite(self: Message, value: Any) -> None:
            _attach(self)
            setattr(self, slot, RepeatedComposite(field, value))

        return property(get_composite, set_composite, None, doc)

    if field.repeated:

        def get_repeated(self: Message) -> list[Any]:
            # getattr with a default: an unset slot costs no AttributeError
            value = getattr(self, slot, _UNSET)
            if value is _UNSET:
                value = []
                setattr(self, slot, value)
            return value

        def set_repeated(self: Message, value: Any) -> None:
            _attach(self)
            setattr(self, slot, list(value))

        return property(get_repeated, set_repeated, None, doc)

    if field.kind == MESSAGE:

        def get_message(self: Message) -> Message:
            value = getattr(self, slot, _UNSET)
            if value is not _UNSET:
                return value
            else:
                value = _resolve(field)()
                value._implicit = True
                # reading an unset oneof member leaves a set sibling alone, as protobuf does:
                # the child stays detached, linked to its parent, until something is written
                # into it (see _attach); so do the children of a detached message
                if any(o != slot and hasattr(self, o) for o in oneof_members):
                    value._parent = (self, slot, oneof_members)
                else:
                    setattr(self, slot, value)
                    if getattr(self, "_parent", None) is not None:
                        value._parent = (self, slot, oneof_members)
                return value

        def set_message(self: Message, value: Message) -> None:
            if not isinstance(value, _resolve(field)):
                raise TypeError(f"{doc} takes {field.message}, not {type(value).__name__}")
            _attach(self)
            for other in oneof_members:
                if other != slot and hasattr(self, other):
                    delattr(self, other)
            setattr(self, slot, value)

        return property(get_message, set_message, None, doc)

    default = _DEFAULTS[field.kind]

    def get_scalar(self: Message) -> Any:
        return getattr(self, slot, default)

    def set_scalar(self: Message, value: Any) -> None:
        _attach(self)
        for other in oneof_members:
            if other != slot and hasattr(self, other):
                delattr(self, other)
        setattr(self, slot, value)

    return property(get_scalar, set_scalar, None, doc)


class MessageMeta(type):
    """Builds ``__slots__``, properties and field tables from ``FIELDS``."""

    def __new__(mcs, name: str, bases: tuple[type, ...], ns: dict[str, Any]) -> MessageMeta:
        fields: tuple[Field, ...] = ns.get("FIELDS", ())
        if fields:
            ns["__slots__"] = tuple(f.slot for f in fields)
            oneofs: dict[str, tuple[str, ...]] = {}
            for f in fields:
                if f.oneof:
                    oneofs[f.oneof] = oneofs.get(f.oneof, ()) + (f.slot,)
            for f in fields:
                ns[f.name] = _make_property(name, f, oneofs.get(f.oneof, ()) if f.oneof else ())
                ns[f.name.upper() + "_FIELD_NUMBER"] = f.number
            ns["_ONEOFS"] = {k: tuple(s[1:] for s in v) for k, v in oneofs.items()}
            ns["_BY_NAME"] = {f.name: f for f in fields}
            # protobuf writes fields in field-number order
            ns["_WRITE_ORDER"] = tuple(sorted(fields, key=lambda f: f.number))
            ns["_BY_NUMBER"] = {f.number: f for f in fields}
        elif "__slots__" not in ns:
            ns["__slots__"] = ()
        cls = super().__new__(mcs, name, bases, ns)
        if fields:
            _REGISTRY[ns.get("FULL_NAME", name)] = cls  # type: ignore[assignment]
        return cls


class Message(metaclass=MessageMeta):
    """Base of every IR class: protobuf-like behaviour without protobuf."""

    __slots__ = ("_unknown", "_implicit", "_parent")
    _unknown: list[bytes]
    _implicit: bool
    #: (parent, slot, oneof siblings) of a sub-message not stored in its parent yet
    _parent: tuple[Message, str, tuple[str, ...]]
    FIELDS: ClassVar[tuple[Field, ...]] = ()
    FULL_NAME: ClassVar[str] = ""
    _ONEOFS: ClassVar[dict[str, tuple[str, ...]]]
    _BY_NAME: ClassVar[dict[str, Field]]
    _BY_NUMBER: ClassVar[dict[int, Field]]
    _WRITE_ORDER: ClassVar[tuple[Field, ...]]

    def __init__(self, **kwargs: Any) -> None:
        for key, value in kwargs.items():
            field = self._BY_NAME.get(key)
            if field is None:
                raise TypeError(f"{type(self).__name__} has no field {key!r}")
            if field.repeated:
                setattr(self, field.slot, list(value))
            else:
                setattr(self, key, value)

    # -- presence -----------------------------------------------------------
    def _present(self, field: Field) -> bool:
        value = getattr(self, field.slot, _UNSET)
        if value is _UNSET:
            return False
        if field.repeated:
            return bool(value)
        if field.kind == MESSAGE:
            return not (getattr(value, "_implicit", False) and value._is_empty())
        return True

    def _is_empty(self) -> bool:
        return not any(self._present(f) for f in self.FIELDS) and not getattr(self, "_unknown", None)

    def HasField(self, name: str) -> bool:  # noqa: N802  (protobuf's name)
        """True if the singular field (or a member of the oneof) ``name`` is set."""
        if name in self._ONEOFS:
            return self.WhichOneof(name) is not None
        field = self._BY_NAME.get(name)
        if field is None or field.repeated:
            raise ValueError(f"{type(self).__name__} has no singular field {name!r}")
        return self._present(field)

    def ClearField(self, name: str) -> None:  # noqa: N802
        """Resets field ``name`` (or every member of the oneof ``name``) to unset."""
        names = self._ONEOFS.get(name, (name,))
        for n in names:
            field = self._BY_NAME.get(n)
            if field is None:
                raise ValueError(f"{type(self).__name__} has no field {n!r}")
            if hasattr(self, field.slot):
                delattr(self, field.slot)

    def WhichOneof(self, oneof: str) -> str | None:  # noqa: N802
        """The name of the member of ``oneof`` that is set, or None."""
        members = self._ONEOFS.get(oneof)
        if members is None:
            raise ValueError(f"{type(self).__name__} has no oneof {oneof!r}")
        for n in members:
            if self._present(self._BY_NAME[n]):
                return n
        return None

    def ListFields(self) -> list[tuple[Field, Any]]:  # noqa: N802
        """The fields that are set, in field-number order, with their values."""
        return [(f, getattr(self, f.slot)) for f in self._WRITE_ORDER if self._present(f)]

    def Clear(self) -> None:  # noqa: N802
        """Resets every field."""
        for f in self.FIELDS:
            if hasattr(self, f.slot):
                delattr(self, f.slot)
        if hasattr(self, "_unknown"):
            del self._unknown

    def SetInParent(self) -> None:  # noqa: N802
        """Marks a sub-message obtained by reading an unset field as present."""
        self._implicit = False

    # -- copying --------------------------------------------------------------
    def CopyFrom(self, other: Message) -> None:  # noqa: N802
        """Replaces this message's content by a deep copy of ``other``'s."""
        if type(other) is not type(self):
            raise TypeError(f"CopyFrom expects {type(self).__name__}, got {type(other).__name__}")
        if other is self:
            return
        self.Clear()
        self.MergeFrom(other)

    def MergeFrom(self, other: Message) -> None:  # noqa: N802
        """Merges ``other`` into this message with protobuf's rules."""
        if type(other) is not type(self):
            raise TypeError(f"MergeFrom expects {type(self).__name__}, got {type(other).__name__}")
        for f in other.FIELDS:
            if not other._present(f):
                continue
            value = getattr(other, f.slot)
            if f.repeated:
                target = getattr(self, f.name)
                if f.kind == MESSAGE:
                    target.extend(v.__deepcopy__() for v in value)
                else:
                    target.extend(value)
            elif f.kind == MESSAGE:
                mine = getattr(self, f.name)
                mine.MergeFrom(value)
                mine._implicit = False
                setattr(self, f.name, mine)
            else:
                setattr(self, f.name, value)
        unknown = getattr(other, "_unknown", None)
        if unknown:
            self._unknown = getattr(self, "_unknown", []) + list(unknown)

    def __deepcopy__(self, memo: Any = None) -> Any:
        new = type(self)()
        new.MergeFrom(self)
        return new

    def __copy__(self) -> Any:
        return self.__deepcopy__()

    def __reduce__(self) -> Any:
        return (type(self).FromString, (self.SerializeToString(),))

    def to_onnx(self) -> Any:
        """This message as an object of the ``onnx`` package (converted through its bytes).

        Raises:
            OnnxLightError: ``onnx`` is not installed.
        """
        from ._interop import to_onnx

        return to_onnx(self)

    # -- serialisation (implemented in _wire, attached there) ------------------
    def SerializeToString(self, **_: Any) -> bytes:  # noqa: N802
        """The protobuf wire-format bytes of this message."""
        from . import _wire

        return _wire.encode(self)

    def ByteSize(self) -> int:  # noqa: N802
        """The length of :meth:`SerializeToString`'s result."""
        from . import _wire

        return _wire.encoded_size(self)

    def ParseFromString(self, data: bytes | bytearray | memoryview) -> int:  # noqa: N802
        """Replaces this message's content by the decoded ``data``; returns its length."""
        from . import _wire

        self.Clear()
        _wire.decode_into(self, data)
        return len(data)

    def MergeFromString(self, data: bytes | bytearray | memoryview) -> int:  # noqa: N802
        """Merges decoded ``data`` into this message; returns its length."""
        from . import _wire

        _wire.decode_into(self, data)
        return len(data)

    @classmethod
    def FromString(cls, data: bytes | bytearray | memoryview) -> Any:  # noqa: N802
        """A new message decoded from ``data``."""
        msg = cls()
        msg.ParseFromString(data)
        return msg

    # -- comparison and display -------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, Message)
        for f in self.FIELDS:
            a, b = self._present(f), other._present(f)
            if a != b:
                return False
            if a:
                va, vb = getattr(self, f.slot), getattr(other, f.slot)
                if f.kind == BYTES and not f.repeated:
                    if bytes(va) != bytes(vb):
                        return False
                elif va != vb:
                    return False
        return getattr(self, "_unknown", None) == getattr(other, "_unknown", None) or (
            not getattr(self, "_unknown", None) and not getattr(other, "_unknown", None)
        )

    __hash__ = None  # type: ignore[assignment]

    def _repr_items(self) -> Iterator[str]:
        for f, value in self.ListFields():
            if f.kind == BYTES and not f.repeated and len(value) > 32:
                yield f"{f.name}=<{len(value)} bytes>"
            elif f.repeated and len(value) > 8 and f.kind != MESSAGE:
                yield f"{f.name}=[{', '.join(map(repr, value[:8]))}, ... {len(value)} items]"
            else:
                yield f"{f.name}={value!r}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(self._repr_items())})"

    def __str__(self) -> str:
        return self.__repr__()
