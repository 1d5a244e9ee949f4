"""Attributes of nodes: building them from Python values and reading them back.

Type inference follows ``onnx.helper.make_attribute``; see :mod:`.helper`.
"""

from __future__ import annotations

import copy
import numbers
from collections.abc import Iterable
from typing import Any

import numpy as np

from ._interop import from_foreign
from ._proto import AttributeProto, GraphProto, NodeProto, SparseTensorProto, TensorProto, TypeProto

__all__ = [
    "make_attribute",
    "make_attribute_ref",
    "get_attribute_value",
    "get_node_attr_value",
]


def _f32(value: Any) -> float:
    # the field is a protobuf ``float``: store what reading it back would give
    if type(value) is float and -_F32_MAX <= value <= _F32_MAX:
        return float(np.float32(value))  # cannot overflow: no errstate needed (NaN goes below)
    with np.errstate(over="ignore"):
        return float(np.float32(value))


_F32_MAX = float(np.finfo(np.float32).max)


def graph_copy(graph: GraphProto) -> GraphProto | None:
    """A deep copy of ``graph`` through the wire format (None when it does not serialise).

    The same message as ``copy.deepcopy(graph)`` (the codec round-trips every field,
    unknown ones included), several times faster: the copy's nodes are decoded by the
    codec when first read instead of by ``MergeFrom``'s walk over every field of every
    message of the body (a recurrent node's backward Scan bodies hold hundreds).
    """
    try:
        return GraphProto.FromString(graph.SerializeToString())
    except Exception:  # a field the codec cannot write: the caller copies the usual way
        return None


def _copy(msg: Any) -> Any:
    converted = from_foreign(msg)  # an onnx message: decoded into a new one of ours
    if converted is not msg:
        return converted
    body = graph_copy(msg) if type(msg) is GraphProto else None
    return body if body is not None else copy.deepcopy(msg)


def _copies(msgs: Iterable[Any] | None) -> list[Any]:
    return [_copy(m) for m in msgs] if msgs else []


def _to_bytes(value: str | bytes) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"{value!r} has type {type(value).__name__}, but expected one of: bytes, str")


# (python type, list attribute type, list field, element check) in onnx's order
_LIST_KINDS: tuple[tuple[Any, int], ...] = (
    (numbers.Integral, AttributeProto.INTS),
    (numbers.Real, AttributeProto.FLOATS),
    ((str, bytes), AttributeProto.STRINGS),
    (TensorProto, AttributeProto.TENSORS),
    (SparseTensorProto, AttributeProto.SPARSE_TENSORS),
    (GraphProto, AttributeProto.GRAPHS),
    (TypeProto, AttributeProto.TYPE_PROTOS),
)
_LIST_FIELD = {
    AttributeProto.INTS: "ints",
    AttributeProto.FLOATS: "floats",
    AttributeProto.STRINGS: "strings",
    AttributeProto.TENSORS: "tensors",
    AttributeProto.SPARSE_TENSORS: "sparse_tensors",
    AttributeProto.GRAPHS: "graphs",
    AttributeProto.TYPE_PROTOS: "type_protos",
}
_MESSAGE_LIST = {
    AttributeProto.TENSORS: TensorProto,
    AttributeProto.SPARSE_TENSORS: SparseTensorProto,
    AttributeProto.GRAPHS: GraphProto,
    AttributeProto.TYPE_PROTOS: TypeProto,
}


def _attr_type_name(attr_type: int) -> str:
    try:
        return AttributeProto.AttributeType.Name(attr_type)
    except ValueError:
        return "UNDEFINED"


def _list_values(attr_type: int, values: list[Any]) -> list[Any]:
    if attr_type == AttributeProto.INTS:
        if not all(isinstance(v, numbers.Integral) for v in values):
            raise TypeError(f"attribute of type INTS takes integers, got {values!r}")
        return [int(v) for v in values]
    if attr_type == AttributeProto.FLOATS:
        if not all(isinstance(v, numbers.Real) for v in values):
            raise TypeError(f"attribute of type FLOATS takes numbers, got {values!r}")
        return [_f32(v) for v in values]
    if attr_type == AttributeProto.STRINGS:
        return [_to_bytes(v) for v in values]
    cls = _MESSAGE_LIST[attr_type]
    values = [from_foreign(v) for v in values]
    for v in values:
        if not isinstance(v, cls):
            raise TypeError(f"attribute of type {_attr_type_name(attr_type)} takes {cls.__name__}")
    return _copies(values)


def make_attribute(
    key: str,
    value: Any,
    doc_string: str | None = None,
    attr_type: int | None = None,
) -> AttributeProto:
    """An AttributeProto whose type is inferred from ``value`` as onnx does.

    Integers (``numbers.Integral``, bools included) give INT, other reals FLOAT,
    ``str``/``bytes`` STRING (UTF-8), TensorProto / SparseTensorProto / GraphProto /
    TypeProto their own type; an iterable gives the list type its elements share
    (ints and floats mixed give FLOATS).

    Args:
        key: the attribute's name.
        value: its value.
        doc_string: documentation; set only when non-empty.
        attr_type: the expected type; required for an empty iterable.

    Returns:
        The AttributeProto.

    Raises:
        ValueError: the type of an iterable cannot be inferred.
        TypeError: ``value`` is not an attribute value or contradicts ``attr_type``.
    """
    value = from_foreign(value)
    attr = AttributeProto(name=key)
    if doc_string:
        attr.doc_string = doc_string
    if not _set_single(attr, value):
        if not isinstance(value, Iterable):
            raise TypeError(f"'{value}' is not an accepted attribute value.")
        _set_list(attr, key, list(value), attr_type)
    if attr_type is not None and attr.type != attr_type:
        raise TypeError(
            f"Inferred attribute type '{_attr_type_name(attr.type)}'({attr.type}) mismatched "
            f"with specified type '{_attr_type_name(attr_type)}'({attr_type})"
        )
    return attr


def _set_single(attr: AttributeProto, value: Any) -> bool:
    """Sets a single value (number, string, message) and its type; False for anything else."""
    kind = type(value)
    # exact built-in types first: the same branches as below, without the ABC checks
    if kind is int:
        attr.i = value
        attr.type = AttributeProto.INT
    elif kind is float:
        attr.f = _f32(value)
        attr.type = AttributeProto.FLOAT
    elif kind is TensorProto:
        attr.t = _copy(value)
        attr.type = AttributeProto.TENSOR
    elif isinstance(value, numbers.Integral):
        attr.i = int(value)
        attr.type = AttributeProto.INT
    elif isinstance(value, numbers.Real):
        attr.f = _f32(value)
        attr.type = AttributeProto.FLOAT
    elif isinstance(value, (str, bytes)):
        attr.s = _to_bytes(value)
        attr.type = AttributeProto.STRING
    elif isinstance(value, TensorProto):
        attr.t = _copy(value)
        attr.type = AttributeProto.TENSOR
    elif isinstance(value, SparseTensorProto):
        attr.sparse_tensor = _copy(value)
        attr.type = AttributeProto.SPARSE_TENSOR
    elif isinstance(value, GraphProto):
        attr.g = _copy(value)
        attr.type = AttributeProto.GRAPH
    elif isinstance(value, TypeProto):
        attr.tp = _copy(value)
        attr.type = AttributeProto.TYPE_PROTO
    else:
        return False
    return True


def _set_list(attr: AttributeProto, key: str, values: list[Any], attr_type: int | None) -> None:
    """Sets a list value and its type: ``attr_type``, or the list type the elements share."""
    if values and hasattr(values[0], "SerializeToString"):
        values = [from_foreign(v) for v in values]
    if not values and attr_type is None:
        raise ValueError(f"Could not infer attribute `{key}` type from empty iterator")
    if attr_type is None:
        kinds = {type(v) for v in values}
        for py_type, list_type in _LIST_KINDS:
            if all(issubclass(k, py_type) for k in kinds):
                attr_type = list_type
                break
        else:
            raise ValueError(
                "Could not infer the attribute type from the elements of the passed "
                f"Iterable value (element types {sorted(k.__name__ for k in kinds)})."
            )
    if attr_type not in _LIST_FIELD:
        raise TypeError(
            f"Inferred attribute type 'list' mismatched with specified type '{_attr_type_name(attr_type)}'({attr_type})"
        )
    setattr(attr, _LIST_FIELD[attr_type], _list_values(attr_type, values))
    attr.type = attr_type


def make_attribute_ref(
    name: str,
    attr_type: int,
    doc_string: str | None = None,
    *,
    ref_attr_name: str | None = None,
) -> AttributeProto:
    """An attribute inside a function body that refers to an attribute of the function.

    Args:
        name: the attribute's name on the node.
        attr_type: its type (``AttributeProto.INT``, ...).
        doc_string: documentation; set only when non-empty.
        ref_attr_name: the function's attribute it takes its value from; defaults to
            ``name``.

    Returns:
        The AttributeProto with ``ref_attr_name`` set and no value.
    """
    if ref_attr_name is None:
        ref_attr_name = name
    if not ref_attr_name:
        raise ValueError("ref_attr_name must be non-empty")
    attr = AttributeProto(name=name, type=attr_type, ref_attr_name=ref_attr_name)
    if doc_string:
        attr.doc_string = doc_string
    return attr


def _plain_bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else bytes(value)


def get_attribute_value(attr: AttributeProto) -> Any:
    """The Python value of an attribute, chosen by its ``type``.

    Args:
        attr: the attribute.

    Returns:
        A float, int, bytes, message, or a list of those; None for UNDEFINED.

    Raises:
        ValueError: the attribute is a reference, or its type is unknown.
    """
    if attr.ref_attr_name:
        raise ValueError(f"Cannot get value of reference attribute: {attr}")
    t = attr.type
    if t == AttributeProto.FLOAT:
        return attr.f
    if t == AttributeProto.INT:
        return attr.i
    if t == AttributeProto.STRING:
        return _plain_bytes(attr.s)
    if t == AttributeProto.TENSOR:
        return attr.t
    if t == AttributeProto.SPARSE_TENSOR:
        return attr.sparse_tensor
    if t == AttributeProto.GRAPH:
        return attr.g
    if t == AttributeProto.TYPE_PROTO:
        return attr.tp
    if t == AttributeProto.STRINGS:
        return [_plain_bytes(s) for s in attr.strings]
    if t in _LIST_FIELD:
        return list(getattr(attr, _LIST_FIELD[t]))
    if t == AttributeProto.UNDEFINED:
        return None
    raise ValueError(f"Unsupported ONNX attribute: {attr}")


def get_node_attr_value(node: NodeProto, attr_name: str) -> Any:
    """The value of the node's attribute ``attr_name`` (see :func:`get_attribute_value`).

    Raises:
        ValueError: the node has no such attribute, or more than one.
    """
    matching = [a for a in node.attribute if a.name == attr_name]
    if len(matching) > 1:
        raise ValueError(f"Node has multiple attributes with name {attr_name}")
    if not matching:
        raise ValueError(f"Node has no attribute with name {attr_name}")
    return get_attribute_value(matching[0])
