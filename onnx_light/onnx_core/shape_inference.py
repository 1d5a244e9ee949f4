"""onnx's shape inference, protobuf-free: ``infer_shapes(model)`` (``onnx.shape_inference``'s names).

Returns a NEW ModelProto whose graph (and each If/Loop/Scan body) has a ``value_info``
entry for every intermediate value whose element type is inferred, and whose outputs gain the type and
dims inference found where they declared none. Dimensions are integers, symbolic names
carried from the inputs (``batch`` stays ``batch`` through the ops that keep it), or
left empty when unknown. The per-op inference is the gradient pass's engine (the
``_infer_*.py`` functions of ``onnx_core.gradient``); it folds small shape computations
(``Shape`` -> ``Gather`` -> ``Concat`` -> ``Reshape``) whatever ``data_prop`` says.
"""

from __future__ import annotations

import copy
import os

from ._check_node import CheckerContext, NodeChecks, ValidationError, node_label, tensor_type_string
from ._errors import OnnxLightError
from ._infer_model import GraphTypes, can_infer, infer_graph, to_type_proto, value_type
from ._io import load, load_from_string, save
from ._proto import AttributeProto, GraphProto, ModelProto, NodeProto, ValueInfoProto
from .gradient._sequences import output_is_sequence
from .gradient._types import ValueType
from .ops import normalise_domain, op_label

__all__ = ["InferenceError", "infer_shapes", "infer_shapes_path"]


class InferenceError(OnnxLightError, ValueError):
    """Inference found a contradiction, or (``strict_mode``) met an op it cannot infer."""


def _merge(declared: ValueType, inferred: ValueType) -> ValueType | None:
    """The declared type refined by the inferred one; None when they contradict."""
    if declared.dtype and inferred.dtype and declared.dtype != inferred.dtype:
        return None
    dtype = declared.dtype or inferred.dtype
    if declared.shape is None or inferred.shape is None:
        return ValueType(dtype, declared.shape if declared.shape is not None else inferred.shape)
    if len(declared.shape) != len(inferred.shape):
        return None
    dims = []
    for a, b in zip(declared.shape, inferred.shape):
        if isinstance(a, int) and isinstance(b, int) and a != b:
            return None
        dims.append(a if isinstance(a, int) or (a is not None and not isinstance(b, int)) else b)
    return ValueType(dtype, tuple(dims))


def _contradiction(graph: GraphProto, name: str, declared: ValueType, inferred: ValueType, where: str) -> str:
    return (
        f"graph {graph.name!r}: {where}value {name!r}: inferred {inferred.dtype}/{inferred.shape} contradicts "
        f"the declared {declared.dtype}/{declared.shape}; fix the declared type or the producing node"
    )


def _check_types(graph: GraphProto, opset: int, types: dict[str, ValueType]) -> None:
    """Every node's known input and output types satisfy its schema's type constraints."""
    ctx = CheckerContext(opset_imports={"": opset})
    strings = {n: s for n, t in types.items() if (s := tensor_type_string(t.dtype)) is not None}
    checks = NodeChecks(ctx, strings.get, lambda _g, _where: None)
    for i, node in enumerate(graph.node):
        if normalise_domain(node.domain) != "":
            continue
        at = f"graph {graph.name!r}: {node_label(node, i)}"
        try:
            schema = checks.schema(node, at)
            if schema is not None:
                checks.type_constraints(node, schema, at)
        except ValidationError as e:
            raise InferenceError(str(e)) from None


def _infer_main_graph(graph: GraphProto, opset: int, check_type: bool, strict_mode: bool) -> None:
    """Adds value_info to ``graph`` (a copy) and completes its outputs, in place."""
    if strict_mode:
        for i, node in enumerate(graph.node):
            if not can_infer(node):
                raise InferenceError(
                    f"graph {graph.name!r}: node {i} {node.name!r} ({op_label(node.domain, node.op_type)}) at "
                    f"opset {opset}: no shape inference for this op; call infer_shapes without strict_mode "
                    "to leave its outputs untyped"
                )
    result = infer_graph(graph, opset)
    if check_type or strict_mode:
        _check_types(graph, opset, result.types)
    _write(graph, result, check_type or strict_mode, opset)
    for sub, sub_result in result.subgraphs:
        _write(sub, sub_result, check_type or strict_mode, opset)


def _is_sequence(node: NodeProto, name: str, opset: int) -> bool:
    """True when ``name``, an output of ``node``, is a sequence (its type is its elements'): so
    typed by the op's schema, or a Loop's carried value / an If's output that is a sequence in
    the body (a list built in a scripted loop)."""
    k = list(node.output).index(name)
    if output_is_sequence(normalise_domain(node.domain), node.op_type, opset, k):
        return True
    if normalise_domain(node.domain) != "" or node.op_type not in ("Loop", "If"):
        return False
    graphs = {a.name: a.g for a in node.attribute if a.type == AttributeProto.GRAPH}
    if node.op_type == "Loop":
        body, slot = graphs.get("body"), k + 1
        if body is None or k >= len(node.input) - 2:  # a scan output: a tensor
            return False
    else:
        body, slot = graphs.get("then_branch"), k
    return body is not None and slot < len(body.output) and _names_sequence(body, body.output[slot].name, opset)


def _names_sequence(graph: GraphProto, name: str, opset: int) -> bool:
    """True when ``name`` is a sequence in ``graph``: declared as one, or so produced."""
    for vi in [*graph.input, *graph.value_info, *graph.output]:
        if vi.name == name and vi.type.WhichOneof("value") is not None:
            return vi.type.WhichOneof("value") == "sequence_type"
    producer = next((n for n in graph.node if name in n.output), None)
    return producer is not None and _is_sequence(producer, name, opset)


def _write(graph: GraphProto, result: GraphTypes, strict: bool, opset: int) -> None:
    """Completes ``graph``'s outputs and value_info from ``result`` (raises on contradictions if ``strict``)."""
    outputs = {v.name for v in graph.output}
    inputs = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    existing = {v.name: v for v in graph.value_info}
    for vi in list(graph.output) + list(graph.value_info):
        got = result.types.get(vi.name)
        if got is None or vi.name not in result.producer:
            continue
        declared = value_type(vi.type) if vi.HasField("type") else ValueType(0, None)
        merged = _merge(declared, got)
        if merged is None:
            if strict:
                raise InferenceError(_contradiction(graph, vi.name, declared, got, ""))
            continue
        if vi.type.WhichOneof("value") in (None, "tensor_type") and merged.dtype:
            vi.type = to_type_proto(merged)
    for node in graph.node:
        for name in node.output:
            if not name or name in outputs or name in inputs or name in existing:
                continue
            t = result.types.get(name)
            if t is None or not t.dtype or _is_sequence(node, name, opset):
                continue
            vi = ValueInfoProto()
            vi.name = name
            vi.type = to_type_proto(t)
            graph.value_info.append(vi)
            existing[name] = vi


def infer_shapes(
    model: ModelProto | bytes,
    check_type: bool = False,
    strict_mode: bool = False,
    data_prop: bool = False,
) -> ModelProto:
    """Infers the type and shape of every value of the main graph, as ``onnx.shape_inference.infer_shapes``.

    Args:
        model: a ModelProto or its serialized bytes (never modified).
        check_type: raise when an inferred element type contradicts a declared one or a
            node's types break its schema's type constraints.
        strict_mode: raise on any contradiction and on an op without inference.
        data_prop: accepted for onnx's signature; small shape computations are always
            propagated.

    Returns:
        A new ModelProto with ``graph.value_info`` for every inferred intermediate.

    Raises:
        InferenceError: (``check_type`` / ``strict_mode``) what contradicts, naming the value
            or the node and its ``domain::op_type``.
    """
    del data_prop
    src = load_from_string(bytes(model)) if isinstance(model, (bytes, bytearray)) else model
    out = copy.deepcopy(src)
    opset = next((o.version for o in out.opset_import if normalise_domain(o.domain) == ""), 0)
    if out.HasField("graph"):
        _infer_main_graph(out.graph, opset, check_type, strict_mode)
    return out


def infer_shapes_path(
    model_path: str | os.PathLike[str],
    output_path: str | os.PathLike[str] = "",
    check_type: bool = False,
    strict_mode: bool = False,
    data_prop: bool = False,
) -> None:
    """:func:`infer_shapes` from a file to a file (``output_path`` defaults to ``model_path``)."""
    inferred = infer_shapes(load(os.fspath(model_path)), check_type, strict_mode, data_prop)
    save(inferred, os.fspath(output_path) if output_path else os.fspath(model_path))
