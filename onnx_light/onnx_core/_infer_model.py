"""Type and shape inference of a whole graph, on the gradient pass's inference engine.

The engine (``gradient._types.infer_types`` with the per-op functions of ``_infer_*.py``)
types node lists; this module feeds it a graph (inputs, initializers, declared
value_info) and converts between :class:`TypeProto` and its :class:`ValueType`. The
checker (``full_check``) and :mod:`onnx_light.onnx_core.shape_inference` share it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ._proto import GraphProto, NodeProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto
from .gradient._types import INFER, UNKNOWN, ValueType, infer_types
from .numpy_helper import to_array
from .ops import normalise_domain

__all__ = ["GraphTypes", "infer_graph", "value_type", "to_type_proto", "can_infer", "FOLD_ELEMENTS"]

#: initializers up to this many elements are given to the engine as known values
FOLD_ELEMENTS = 4096


@dataclass
class GraphTypes:
    """The result of :func:`infer_graph`.

    Attributes:
        types: every value's inferred type (graph inputs and initializers included).
        declared: the types the graph declares (inputs, outputs, value_info).
        producer: the node (and its index) producing each node output.
    """

    types: dict[str, ValueType]
    declared: dict[str, ValueType]
    producer: dict[str, tuple[int, NodeProto]]
    #: the subgraphs of control-flow nodes with their own results, innermost included
    subgraphs: list[tuple[GraphProto, GraphTypes]] = field(default_factory=list)


def value_type(tp: TypeProto) -> ValueType:
    """The :class:`ValueType` of a tensor TypeProto (unknown for other kinds of type)."""
    if tp.WhichOneof("value") != "tensor_type":
        return UNKNOWN
    tt = tp.tensor_type
    if not tt.HasField("shape"):
        return ValueType(tt.elem_type, None)
    dims: list[int | str | None] = []
    for d in tt.shape.dim:
        which = d.WhichOneof("value")
        dims.append(d.dim_value if which == "dim_value" else (d.dim_param if which == "dim_param" else None))
    return ValueType(tt.elem_type, tuple(dims))


def to_type_proto(t: ValueType) -> TypeProto:
    """A tensor TypeProto for ``t`` (symbolic dims as dim_param, unknown dims empty)."""
    tp = TypeProto()
    tp.tensor_type.elem_type = t.dtype
    if t.shape is not None:
        shape = TensorShapeProto()
        for d in t.shape:
            dim = TensorShapeProto.Dimension()
            if isinstance(d, int):
                dim.dim_value = d
            elif isinstance(d, str):
                dim.dim_param = d
            shape.dim.append(dim)
        tp.tensor_type.shape = shape
    return tp


def can_infer(node: NodeProto) -> bool:
    """True when the engine has an inference function for the node's op."""
    return normalise_domain(node.domain) == "" and (node.op_type in INFER or node.op_type in CONTROL_FLOW)


def _initializer_value(t: TensorProto) -> np.ndarray | None:
    if t.data_location == TensorProto.EXTERNAL or t.data_type == TensorProto.STRING:
        return None
    try:
        arr = to_array(t)
    except Exception:  # an unreadable initializer: its type is still known
        return None
    return arr if arr.size <= FOLD_ELEMENTS else None


def _declared(values: list[ValueInfoProto]) -> dict[str, ValueType]:
    return {v.name: value_type(v.type) for v in values if v.name and v.HasField("type")}


def infer_graph(
    graph: GraphProto,
    opset: int,
    outer: dict[str, ValueType] | None = None,
    inputs: list[ValueType] | None = None,
    outer_constants: dict[str, np.ndarray] | None = None,
) -> GraphTypes:
    """Infers the type of every value of ``graph`` at default-domain ``opset``.

    Args:
        graph: the graph (its nodes in topological order).
        opset: the default-domain opset the graph imports.
        outer: types of the values visible from an enclosing graph.
        inputs: types of the graph's inputs where it declares none (a body's, from its node).
        outer_constants: values known in the enclosing graph.

    Returns:
        The inferred and the declared types.
    """
    declared = _declared(list(graph.input))
    declared.update(_declared(list(graph.value_info)))
    declared.update(_declared(list(graph.output)))
    known: dict[str, ValueType] = dict(outer or {})
    constants: dict[str, np.ndarray] = dict(outer_constants or {})
    for init in graph.initializer:
        known[init.name] = ValueType(init.data_type, tuple(int(d) for d in init.dims))
        arr = _initializer_value(init)
        if arr is not None:
            constants[init.name] = arr
    inits = {t.name for t in graph.initializer}
    for k, vi in enumerate(graph.input):
        t = declared.get(vi.name)
        given = inputs[k] if inputs is not None and k < len(inputs) else None
        if given is not None and (t is None or not t.dtype or t.shape is None):
            t = (
                given
                if t is None
                else ValueType(t.dtype or given.dtype, t.shape if t.shape is not None else given.shape)
            )
        if vi.name not in inits:
            constants.pop(vi.name, None)  # an input shadows an outer value
            if t is not None:
                known[vi.name] = t
            else:
                known.pop(vi.name, None)
    subgraphs: list[tuple[GraphProto, GraphTypes]] = []
    nodes = list(graph.node)
    types, consts = known, constants
    start = 0
    for i, node in enumerate(nodes):
        if normalise_domain(node.domain) == "" and node.op_type in CONTROL_FLOW:
            # the engine types node lists; a control-flow node's outputs come from its bodies
            types, consts = infer_types(nodes[start:i], types, consts, opset, declared=declared.get)
            outs = CONTROL_FLOW[node.op_type](node, types, consts, opset, subgraphs)
            for name, t in zip(node.output, outs):
                if name:
                    given = declared.get(name)
                    types[name] = t if given is None or (t.dtype and t.shape is not None) else given
            start = i + 1
    types, _ = infer_types(nodes[start:], types, consts, opset, declared=declared.get)
    producer = {o: (i, n) for i, n in enumerate(nodes) for o in n.output if o}
    return GraphTypes(types, declared, producer, subgraphs)


#: op_type -> fn(node, types and values visible, opset, subgraph results to extend) -> one type per output
ControlFn = Callable[
    [NodeProto, dict[str, ValueType], dict[str, np.ndarray], int, list[tuple[GraphProto, GraphTypes]]],
    list[ValueType],
]
CONTROL_FLOW: dict[str, ControlFn] = {}

from . import _infer_control  # noqa: E402, F401  (registers If, Loop, Scan)
