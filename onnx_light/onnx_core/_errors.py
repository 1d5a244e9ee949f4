"""The error hierarchy shared by every part of onnx-light."""

from __future__ import annotations

__all__ = [
    "OnnxLightError",
    "DecodeError",
    "GradientError",
    "RuntimeFailure",
    "InvalidFeed",
    "NotImplementedOp",
]


class OnnxLightError(Exception):
    """Base class of every error onnx-light raises on purpose."""


class DecodeError(OnnxLightError, ValueError):
    """Malformed protobuf bytes.

    Attributes:
        offset: byte offset in the input where decoding failed.
        path: path into the message, e.g. ``ModelProto.graph.node[12].attribute[3]``.
        reason: what was wrong.
    """

    def __init__(self, reason: str, offset: int, path: str = "") -> None:
        self.reason = reason
        self.offset = offset
        self.path = path
        super().__init__(self._text())

    def _text(self) -> str:
        where = f" at {self.path}" if self.path else ""
        return f"{self.reason} (byte offset {self.offset}){where}"

    def with_prefix(self, prefix: str) -> DecodeError:
        """Returns the same error with ``prefix`` prepended to its path."""
        self.path = prefix + self.path
        self.args = (self._text(),)
        return self


class GradientError(OnnxLightError):
    """The gradient pass cannot differentiate what it was given."""


class NotImplementedOp(OnnxLightError, NotImplementedError):
    """An operator (or operator version) has no kernel or no gradient rule."""


class RuntimeFailure(OnnxLightError, RuntimeError):
    """A node failed while the runtime executed it."""


class InvalidFeed(OnnxLightError, ValueError):
    """A feed given to ``InferenceSession.run`` does not match the model's inputs."""
