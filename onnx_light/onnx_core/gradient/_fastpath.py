"""The gradient pass's direct access to message slots: building and reading nodes.

The pass builds tens of thousands of NodeProtos and reads the fields of every forward
node several times. Through the properties each access costs a Python call (an unset
scalar field reads as its default through an ``AttributeError``), which on a
10,000-node graph is a large part of the run. These functions read and fill the
private slots directly, as the wire codec does (``_message.py``: field ``f`` lives in
slot ``_f``), and are the only place in the pass that does: the results are the same
messages the public constructors and properties give, byte for byte.
"""

from __future__ import annotations

from typing import Any

from .._attributes import make_attribute
from .._proto import AttributeProto, NodeProto, TensorProto, ValueInfoProto
from ._types import ValueType

__all__ = ["new_node", "attribute", "tensor_attribute", "node_fields", "has_subgraph", "value_type"]

#: what ``node_fields`` returns: ``(op_type, domain, inputs, outputs, attributes)``;
#: the lists are the node's own (read-only for callers)
Fields = tuple[str, str, list[str], list[str], list[AttributeProto]]

_EMPTY: list[Any] = []
_MISSING = object()
_INT = AttributeProto.INT
_INTS = AttributeProto.INTS
_TENSOR = AttributeProto.TENSOR


def new_node(
    op_type: str,
    inputs: list[str],
    outputs: list[str],
    domain: str = "",
    attributes: list[AttributeProto] | None = None,
) -> NodeProto:
    """A NodeProto that owns ``inputs``, ``outputs`` and ``attributes`` (not copied).

    The same message as ``NodeProto(op_type=..., input=..., output=..., domain=...,
    attribute=...)`` with the empty domain and attribute list left unset.
    """
    node = NodeProto.__new__(NodeProto)  # nothing to do in __init__ without keywords
    node._op_type = op_type  # type: ignore[attr-defined]
    node._input = inputs  # type: ignore[attr-defined]
    node._output = outputs  # type: ignore[attr-defined]
    if domain:
        node._domain = domain  # type: ignore[attr-defined]
    if attributes:
        node._attribute = attributes  # type: ignore[attr-defined]
    return node


def attribute(name: str, value: Any) -> AttributeProto:
    """``make_attribute(name, value)``, built directly for the emitted nodes' common kinds:
    an exact ``int`` (axis, keepdims, to, ...) and a non-empty list or tuple of exact ints
    (axes, perm, pads, ...). Anything else goes through ``make_attribute``."""
    kind = type(value)
    if kind is int:
        attr = AttributeProto.__new__(AttributeProto)
        attr._name = name  # type: ignore[attr-defined]
        attr._i = value  # type: ignore[attr-defined]
        attr._type = _INT  # type: ignore[attr-defined]
        return attr
    if (kind is list or kind is tuple) and value and all(type(v) is int for v in value):
        attr = AttributeProto.__new__(AttributeProto)
        attr._name = name  # type: ignore[attr-defined]
        attr._ints = list(value)  # type: ignore[attr-defined]
        attr._type = _INTS  # type: ignore[attr-defined]
        return attr
    return make_attribute(name, value)


def tensor_attribute(name: str, tensor: TensorProto) -> AttributeProto:
    """``make_attribute(name, tensor)`` for a tensor made for it: owned, not copied."""
    attr = AttributeProto.__new__(AttributeProto)
    attr._name = name  # type: ignore[attr-defined]
    attr._t = tensor  # type: ignore[attr-defined]
    attr._type = _TENSOR  # type: ignore[attr-defined]
    return attr


def node_fields(node: NodeProto) -> Fields:
    """``(node.op_type, node.domain, node.input, node.output, node.attribute)`` by slot reads.

    Unlike the properties, reading an unset repeated field does not store an empty list
    in the node (which is not observable: an empty repeated field is absent either way).
    """
    return (
        getattr(node, "_op_type", ""),
        getattr(node, "_domain", ""),
        getattr(node, "_input", _EMPTY),
        getattr(node, "_output", _EMPTY),
        getattr(node, "_attribute", _EMPTY),
    )


def has_subgraph(attributes: list[AttributeProto]) -> bool:
    """True when an attribute holds a graph (``HasField("g")`` or ``graphs``), by slot reads."""
    for a in attributes:
        g = getattr(a, "_g", None)
        if (g is not None and not _absent(g)) or getattr(a, "_graphs", None):
            return True
    return False


def _absent(sub: Any) -> bool:
    """``Message._present``'s rule for a set sub-message slot: one created by merely
    reading an unset field is absent while empty."""
    return getattr(sub, "_implicit", False) and sub._is_empty()  # type: ignore[no-any-return]


def value_type(vi: ValueInfoProto) -> ValueType | None:
    """The tensor type a ValueInfoProto declares (None when it declares none).

    What ``vi.type.HasField("tensor_type")``, ``elem_type`` and the shape's dims give;
    the presence checks (an unset ``_implicit`` slot costs an AttributeError) are made
    only for sub-messages that hold nothing the common case reads.
    """
    tp = getattr(vi, "_type", None)
    if tp is None:
        return None
    tt = getattr(tp, "_tensor_type", None)
    if tt is None:
        return None
    elem_type = getattr(tt, "_elem_type", None)
    if elem_type is None:
        if _absent(tt):
            return None
        elem_type = 0
    shape = None
    shp = getattr(tt, "_shape", None)
    if shp is not None:
        dims = getattr(shp, "_dim", None)
        if dims or not _absent(shp):
            values: list[Any] = []
            for d in dims or ():
                v = getattr(d, "_dim_value", _MISSING)  # the oneof "value": dim_value, then dim_param
                if v is _MISSING:
                    v = getattr(d, "_dim_param", None)
                values.append(v)
            shape = tuple(values)
    return ValueType(elem_type, shape)
