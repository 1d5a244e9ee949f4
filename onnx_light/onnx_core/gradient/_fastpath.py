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

from typing import Any, cast

import numpy as np

from .. import _native_codec
from .._attributes import get_attribute_value, graph_copy, make_attribute
from .._proto import AttributeProto, GraphProto, NodeProto, TensorProto, ValueInfoProto
from ..numpy_helper import to_array
from ._types import ValueType

__all__ = [
    "new_node",
    "copy_node",
    "attribute",
    "graph_copy",
    "tensor_attribute",
    "raw_view",
    "raw_tensor",
    "tensor_array",
    "attribute_values",
    "node_fields",
    "nodes_fields",
    "has_subgraph",
    "value_type",
]

#: what ``node_fields`` returns: ``(op_type, domain, inputs, outputs, attributes)``;
#: the lists are the node's own (read-only for callers)
Fields = tuple[str, str, list[str], list[str], list[AttributeProto]]

_EMPTY: list[Any] = []
_MISSING = object()
_INT = AttributeProto.INT
_INTS = AttributeProto.INTS
_FLOAT = AttributeProto.FLOAT
_FLOATS = AttributeProto.FLOATS
_TENSOR = AttributeProto.TENSOR
_GRAPH = AttributeProto.GRAPH

#: the byte-sized numeric element types, as numpy dtypes and TensorProto types (``raw_data``
#: of these is the little-endian array as it is, see ``to_array`` and ``from_array``)
_RAW_TYPES: dict[str, int] = {
    "<f4": TensorProto.FLOAT,
    "<f8": TensorProto.DOUBLE,
    "<f2": TensorProto.FLOAT16,
    "<i8": TensorProto.INT64,
    "<i4": TensorProto.INT32,
    "<i2": TensorProto.INT16,
    "|i1": TensorProto.INT8,
    "<u8": TensorProto.UINT64,
    "<u4": TensorProto.UINT32,
    "<u2": TensorProto.UINT16,
    "|u1": TensorProto.UINT8,
    "|b1": TensorProto.BOOL,
}
_RAW_DTYPES: dict[int, np.dtype[Any]] = {t: np.dtype(s) for s, t in _RAW_TYPES.items()}


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
    # nothing to do in __init__ without keywords; Any: the slots behind the fields are written
    node: Any = NodeProto.__new__(NodeProto)
    node._op_type = op_type
    node._input = inputs
    node._output = outputs
    if domain:
        node._domain = domain
    if attributes:
        node._attribute = attributes
    return node


def attribute(name: str, value: Any) -> AttributeProto:
    """``make_attribute(name, value)``, built directly for the emitted nodes' common kinds:
    an exact ``int`` (axis, keepdims, to, ...) and a non-empty list or tuple of exact ints
    (axes, perm, pads, ...). Anything else goes through ``make_attribute``."""
    kind = type(value)
    if kind is int:
        attr: Any = AttributeProto.__new__(AttributeProto)
        attr._name = name
        attr._i = value
        attr._type = _INT
        return attr
    if (kind is list or kind is tuple) and value and all(type(v) is int for v in value):
        attr = AttributeProto.__new__(AttributeProto)
        attr._name = name
        attr._ints = list(value)
        attr._type = _INTS
        return attr
    if kind is GraphProto:  # a body (Scan, Loop, If): copied, as make_attribute does
        body = graph_copy(value)
        if body is not None:
            attr = AttributeProto.__new__(AttributeProto)
            attr._name = name
            attr._g = body
            attr._type = _GRAPH
            return attr
    return make_attribute(name, value)


def copy_node(node: NodeProto, outputs: list[str]) -> NodeProto:
    """A copy of ``node`` with ``outputs`` (owned) as its outputs.

    Serialises as ``CopyFrom`` then ``output[:] = outputs`` does; the copy has lists of
    its own but shares the attribute messages (the pass shares the forward nodes
    themselves with its result already), which spares the deep copy of their tensors.
    """
    copy: Any = NodeProto.__new__(NodeProto)
    for slot in _NODE_SLOTS:
        value = getattr(node, slot, _MISSING)
        if value is not _MISSING:
            setattr(copy, slot, list(value) if type(value) is list else value)
    copy._output = outputs
    return copy


#: a NodeProto's field slots, and the unknown fields it keeps
_NODE_SLOTS = (*NodeProto.__slots__, "_unknown")


def raw_tensor(value: np.ndarray, raw: bytes, dtype_str: str | None = None) -> TensorProto | None:
    """``from_array(value)`` when ``raw`` is ``value.tobytes()`` (which the caller has),
    for the byte-sized numeric dtypes; None for any other dtype (use ``from_array``).
    ``dtype_str``: ``value.dtype.str`` when the caller has it (numpy builds it on each read)."""
    data_type = _RAW_TYPES.get(value.dtype.str if dtype_str is None else dtype_str)
    if data_type is None:
        return None
    tensor: Any = TensorProto.__new__(TensorProto)
    tensor._dims = list(value.shape)
    tensor._data_type = data_type
    tensor._raw_data = raw
    return tensor


def raw_view(tensor: TensorProto) -> tuple[np.dtype[Any], list[int], bytes] | None:
    """``(dtype, dims, raw_data)`` of a tensor held as ``raw_data`` (bytes, in memory) of a
    byte-sized numeric type whose length fits its dims (the form exporters give Constant
    nodes): the array is ``raw_data`` as it is. None for any other tensor."""
    raw = getattr(tensor, "_raw_data", None)
    dtype = _RAW_DTYPES.get(getattr(tensor, "_data_type", 0))
    if (
        type(raw) is not bytes
        or dtype is None
        or getattr(tensor, "_data_location", None)  # EXTERNAL (DEFAULT is 0)
        or getattr(tensor, "_segment", None) is not None
    ):
        return None
    dims = getattr(tensor, "_dims", _EMPTY)
    count = 1
    for d in dims:
        count *= d
    return (dtype, dims, raw) if len(raw) == count * dtype.itemsize else None


def tensor_array(tensor: TensorProto) -> np.ndarray:
    """``to_array(tensor)``: read directly for ``raw_data`` (see :func:`raw_view`);
    everything else goes to ``to_array`` (which raises for a malformed tensor)."""
    view = raw_view(tensor)
    if view is None:
        return to_array(tensor, bit_patterns=True)
    dtype, dims, raw = view
    arr = np.frombuffer(raw, dtype=dtype)  # read-only, as to_array's: a view of bytes
    return arr if len(dims) == 1 else arr.reshape(dims)


def attribute_values(attributes: list[AttributeProto]) -> dict[str, Any]:
    """``_types.attribute_values``: the common kinds (int, ints, float, floats, a set
    tensor) by slot reads, the others through ``get_attribute_value``."""
    out: dict[str, Any] = {}
    for a in attributes:
        kind = getattr(a, "_type", 0)
        if getattr(a, "_ref_attr_name", ""):
            v = get_attribute_value(a)  # raises
        elif kind == _INT:
            v = getattr(a, "_i", 0)
        elif kind == _INTS:
            v = list(getattr(a, "_ints", _EMPTY))
        elif kind == _FLOAT:
            v = getattr(a, "_f", 0.0)
        elif kind == _FLOATS:
            v = list(getattr(a, "_floats", _EMPTY))
        elif kind == _TENSOR and (t := getattr(a, "_t", None)) is not None:
            v = t
        else:
            v = get_attribute_value(a)
            if isinstance(v, bytes):
                v = v.decode("utf-8")
        out[getattr(a, "_name", "")] = v
    return out


def tensor_attribute(name: str, tensor: TensorProto) -> AttributeProto:
    """``make_attribute(name, tensor)`` for a tensor made for it: owned, not copied."""
    attr: Any = AttributeProto.__new__(AttributeProto)
    attr._name = name
    attr._t = tensor
    attr._type = _TENSOR
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


def _native(name: str) -> Any:
    """The native extension's function ``name`` when the native codec is selected (None when
    it is off, or the extension was built from sources older than the function)."""
    return getattr(_native_codec.NATIVE, name, None) if _native_codec.enabled() else None


#: the slots ``node_fields`` reads, and the value of each when unset
_FIELD_SLOTS = tuple(NodeProto.__dict__[s] for s in ("_op_type", "_domain", "_input", "_output", "_attribute"))
_FIELD_DEFAULTS = ("", "", _EMPTY, _EMPTY, _EMPTY)


def nodes_fields(nodes: list[NodeProto]) -> list[Fields]:
    """``[node_fields(n) for n in nodes]``, without a call per node: in one C loop with the
    native extension (``slot_rows``: an unset slot, such as the domain and attributes of most
    nodes, costs no AttributeError there), else a comprehension."""
    rows = _native("slot_rows")
    if rows is not None and type(nodes) is list:
        try:
            return cast("list[Fields]", rows(nodes, _FIELD_SLOTS, _FIELD_DEFAULTS))
        except TypeError:  # not all NodeProtos (a subclass is one): read as below, which tells
            pass
    return [
        (
            getattr(n, "_op_type", ""),
            getattr(n, "_domain", ""),
            getattr(n, "_input", _EMPTY),
            getattr(n, "_output", _EMPTY),
            getattr(n, "_attribute", _EMPTY),
        )
        for n in nodes
    ]


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
    return getattr(sub, "_implicit", False) and sub._is_empty()


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
