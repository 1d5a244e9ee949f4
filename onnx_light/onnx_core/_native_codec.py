"""The native wire codec (``onnx_light._native``, ``src/codec.cpp``), or None.

The C++ loops decode and encode the same bytes as the pure-Python twin in ``_wire.py``
(same messages, same bytes, same ``DecodeError`` reason, offset and path). They are
used when the extension was built and ``ONNX_LIGHT_PURE_PYTHON`` is not ``1``;
:func:`set_enabled` switches at run time (the tests run the codec both ways).

The extension gets one table per message class, built from the class's field rows:
``(number, kind code, repeated, packed, slot descriptor, name, child class,
sibling slot descriptors)``; it stores values straight into the slots.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

from ._errors import DecodeError
from ._message import MESSAGE, Message, _resolve

__all__ = ["NATIVE", "available", "enabled", "set_enabled", "STREAM_MIN"]

#: bytes values at least this long are separate pieces of ``encode_pieces`` (no copy)
STREAM_MIN = 1 << 16


def _slot_descriptor(cls: type, slot: str) -> Any:
    for klass in cls.__mro__:
        if slot in klass.__dict__:
            return klass.__dict__[slot]
    raise AttributeError(f"{cls.__name__} has no slot {slot!r}")


def _register(cls: Any) -> bool:
    """Hands ``cls``'s field table to the extension; False if it is not a message class."""
    if not (isinstance(cls, type) and issubclass(cls, Message) and cls.FIELDS):
        return False
    from ._wire import _KIND_CODE

    rows = []
    for f in cls._WRITE_ORDER:
        siblings = ()
        if f.oneof:
            siblings = tuple(_slot_descriptor(cls, "_" + o) for o in cls._ONEOFS[f.oneof] if o != f.name)
        child = _resolve(f) if f.kind == MESSAGE else None
        rows.append(
            (f.number, _KIND_CODE[f.kind], f.repeated, f.packed, _slot_descriptor(cls, f.slot), f.name, child, siblings)
        )
    assert NATIVE is not None
    NATIVE.codec_register(cls, cls.__name__, rows)
    return True


def _fallback(msg: Message) -> bytes:
    """The twin's encoding of one message (for values the native loop leaves to Python)."""
    from ._wire import _ENC

    pieces: list[Any] = []
    _ENC[type(msg)](msg, pieces)
    return b"".join(pieces)


def _load() -> ModuleType | None:
    try:
        from .. import _native  # type: ignore[attr-defined]
    except ImportError:
        return None
    if not hasattr(_native, "codec_init"):
        return None
    from ._wire import MAX_DEPTH, ZERO_COPY_MIN

    _native.codec_init(
        DecodeError,
        Message.__dict__["_unknown"],
        Message.__dict__["_implicit"],
        _register,
        _fallback,
        MAX_DEPTH,
        ZERO_COPY_MIN,
    )
    return _native


#: the initialised extension module, or None when it is not built
#: the native codec module once loaded (a nanobind module: its functions are untyped here)
NATIVE: Any = None
_loaded = False
_enabled = os.environ.get("ONNX_LIGHT_PURE_PYTHON", "") != "1"


def available() -> bool:
    """True when the extension with the codec is built."""
    global NATIVE, _loaded
    if not _loaded:
        _loaded = True
        NATIVE = _load()
    return NATIVE is not None


def enabled() -> bool:
    """True when the native codec is built and selected."""
    return _enabled and available()


def set_enabled(flag: bool) -> bool:
    """Selects the native codec (True) or the pure-Python twin (False); returns the old choice."""
    global _enabled
    old = _enabled
    _enabled = bool(flag)
    return old
