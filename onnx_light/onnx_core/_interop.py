"""Objects of the ``onnx`` package (protobuf messages) in and out, through their bytes.

Nothing here imports ``onnx`` unless a caller asks for an ``onnx`` object with
:func:`to_onnx`: a foreign message is recognised by its class name and its
``SerializeToString`` method, and decoded by our codec.
"""

from __future__ import annotations

import importlib
from typing import Any, TypeVar

from . import _proto
from ._errors import OnnxLightError
from ._message import Message

__all__ = ["from_foreign", "from_onnx", "as_message", "to_onnx"]

M = TypeVar("M", bound=Message)

#: our top-level message classes by name (the names onnx's classes share)
_BY_NAME: dict[str, type[Message]] = {
    name: cls for name in _proto.__all__ if isinstance(cls := getattr(_proto, name), type) and issubclass(cls, Message)
}


def _foreign_class(obj: Any) -> type[Message] | None:
    """Our class of the same message type, if ``obj`` is a protobuf message of another library."""
    if isinstance(obj, Message) or not hasattr(obj, "SerializeToString"):
        return None
    descriptor = getattr(obj, "DESCRIPTOR", None)
    full_name = getattr(descriptor, "full_name", "")
    name = full_name.rsplit(".", 1)[-1] if full_name.count(".") <= 1 else ""
    return _BY_NAME.get(name or type(obj).__name__)


def from_foreign(obj: Any) -> Any:
    """``obj`` as our message when it is an ``onnx`` (protobuf) message; else ``obj`` itself.

    The result is a new object decoded from ``obj.SerializeToString()``.
    """
    cls = _foreign_class(obj)
    if cls is None:
        return obj
    from ._wire import decode

    return decode(cls, obj.SerializeToString())


def from_onnx(obj: Any) -> Any:
    """An ``onnx`` package object (ModelProto, TensorProto, ...) as onnx-light's; ours unchanged.

    Args:
        obj: a message of ``onnx`` (converted through ``SerializeToString``) or of ours.

    Raises:
        TypeError: ``obj`` is not a message either library knows.
    """
    if isinstance(obj, Message):
        return obj
    out = from_foreign(obj)
    if out is obj:
        raise TypeError(f"from_onnx takes an onnx message (ModelProto, TensorProto, ...), not {type(obj).__name__}")
    return out


def as_message(obj: Any, cls: type[M]) -> M | Any:
    """``obj`` itself when it is a ``cls``; converted when it is ``onnx``'s ``cls``; else unchanged."""
    if isinstance(obj, cls):
        return obj
    if _foreign_class(obj) is cls:
        return from_foreign(obj)
    return obj


def to_onnx(msg: Message) -> Any:
    """The same message as an object of the ``onnx`` package.

    Raises:
        OnnxLightError: ``onnx`` is not installed, or has no class of this name.
    """
    try:
        onnx = importlib.import_module("onnx")
    except ImportError as err:
        raise OnnxLightError("to_onnx() needs the onnx package: pip install onnx") from err
    cls = getattr(onnx, type(msg).__name__, None)
    if cls is None:
        raise OnnxLightError(f"the onnx package has no {type(msg).__name__}")
    return cls.FromString(msg.SerializeToString())
