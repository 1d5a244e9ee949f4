"""Type strings as the spec writes them (``tensor(float)``, ``seq(tensor(int64))``) for a TypeProto.

The op schemas list the types a constraint allows as such strings; the checker and shape
inference compare a value's :class:`TypeProto` with them through :func:`type_string`.
"""

from __future__ import annotations

from ._proto import TensorProto, TypeProto

__all__ = ["elem_type_name", "type_string"]


def elem_type_name(elem_type: int) -> str:
    """The spec's name of a ``TensorProto.DataType`` (``float``, ``int64``, ``float8e4m3fn``...).

    Raises:
        ValueError: ``elem_type`` is not a known data type.
    """
    return TensorProto.DataType.Name(elem_type).lower()


def type_string(tp: TypeProto) -> str | None:
    """The spec's type string of ``tp``, or None when it is incomplete (no element type)."""
    which = tp.WhichOneof("value")
    try:
        if which == "tensor_type":
            et = tp.tensor_type.elem_type
            return f"tensor({elem_type_name(et)})" if et else None
        if which == "sparse_tensor_type":
            et = tp.sparse_tensor_type.elem_type
            return f"sparse_tensor({elem_type_name(et)})" if et else None
    except ValueError:
        return None
    if which == "sequence_type":
        inner = type_string(tp.sequence_type.elem_type) if tp.sequence_type.HasField("elem_type") else None
        return None if inner is None else f"seq({inner})"
    if which == "optional_type":
        inner = type_string(tp.optional_type.elem_type) if tp.optional_type.HasField("elem_type") else None
        return None if inner is None else f"optional({inner})"
    if which == "map_type":
        value = type_string(tp.map_type.value_type) if tp.map_type.HasField("value_type") else None
        key = tp.map_type.key_type
        if value is None or not key:
            return None
        if value.startswith("tensor(") and value.endswith(")"):
            value = value[len("tensor(") : -1]  # the spec writes map(int64, float)
        try:
            return f"map({elem_type_name(key)}, {value})"
        except ValueError:
            return None
    return None
