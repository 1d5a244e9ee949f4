"""Builders for ONNX protos: ``onnx.helper``'s calls, signatures and output.

Every ``make_*`` function takes the arguments of its ``onnx`` 1.23 namesake and
returns a message whose ``SerializeToString()`` is byte-identical to what ``onnx``
produces for the same call. Messages passed in are copied, as protobuf does.

Element types numpy lacks (``BFLOAT16``, the float8 / float6 / float4 types) are
handled as **bit patterns**: :func:`tensor_dtype_to_np_dtype` returns ``uint16`` for
``BFLOAT16`` and ``uint8`` for the others, ``int8`` / ``uint8`` for ``INT4`` / ``UINT4``
(and the 2-bit types). :func:`make_tensor` with ``raw=False`` takes *values* and
rounds them like onnx (float8 saturating); with ``raw=True`` it takes the bytes or an
array of bit patterns. See ``_dtypes.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._attributes import (
    _attr_type_name,
    _copies,
    _copy,
    get_attribute_value,
    get_node_attr_value,
    make_attribute,
    make_attribute_ref,
)
from ._dtypes import (
    get_all_tensor_dtypes,
    np_dtype_to_tensor_dtype,
    tensor_dtype_to_field,
    tensor_dtype_to_np_dtype,
    tensor_dtype_to_storage_tensor_dtype,
    tensor_dtype_to_string,
)
from ._printer import (
    printable_attribute,
    printable_dim,
    printable_graph,
    printable_node,
    printable_tensor_proto,
    printable_type,
    printable_value_info,
    to_text,
)
from ._proto import (
    AttributeProto,
    FunctionProto,
    GraphProto,
    ModelProto,
    NodeProto,
    OperatorSetIdProto,
    SparseTensorProto,
    StringStringEntryProto,
    TensorProto,
    TrainingInfoProto,
    ValueInfoProto,
)
from ._values import (
    make_empty_tensor_value_info,
    make_map,
    make_map_type_proto,
    make_optional,
    make_optional_type_proto,
    make_sequence,
    make_sequence_type_proto,
    make_sparse_tensor,
    make_sparse_tensor_type_proto,
    make_sparse_tensor_value_info,
    make_tensor,
    make_tensor_sequence_value_info,
    make_tensor_type_proto,
    make_tensor_value_info,
    make_value_info,
)

__all__ = [
    "IR_VERSION",
    "OPSET_VERSION",
    "VERSION_TABLE",
    "find_min_ir_version_for",
    "make_node",
    "make_attribute",
    "make_attribute_ref",
    "get_attribute_value",
    "get_node_attr_value",
    "make_graph",
    "make_function",
    "make_model",
    "make_model_gen_version",
    "make_opsetid",
    "make_operatorsetid",
    "make_training_info",
    "set_metadata_props",
    "set_model_props",
    "make_tensor",
    "make_sparse_tensor",
    "make_sequence",
    "make_map",
    "make_optional",
    "make_tensor_type_proto",
    "make_sparse_tensor_type_proto",
    "make_sequence_type_proto",
    "make_optional_type_proto",
    "make_map_type_proto",
    "make_value_info",
    "make_tensor_value_info",
    "make_sparse_tensor_value_info",
    "make_empty_tensor_value_info",
    "make_tensor_sequence_value_info",
    "strip_doc_string",
    "tensor_dtype_to_np_dtype",
    "tensor_dtype_to_storage_tensor_dtype",
    "tensor_dtype_to_string",
    "tensor_dtype_to_field",
    "np_dtype_to_tensor_dtype",
    "get_all_tensor_dtypes",
    "printable_attribute",
    "printable_dim",
    "printable_type",
    "printable_value_info",
    "printable_tensor_proto",
    "printable_node",
    "printable_graph",
    "to_text",
]

#: the IR version onnx 1.23 writes
IR_VERSION = 14
#: the newest ai.onnx opset of onnx 1.23, imported by default by :func:`make_model`
OPSET_VERSION = 28

#: (release, IR version, ai.onnx, ai.onnx.ml[, ai.onnx.training]) per onnx release
VERSION_TABLE: list[tuple[Any, ...]] = [
    ("1.0", 3, 1, 1),
    ("1.1", 3, 5, 1),
    ("1.1.2", 3, 6, 1),
    ("1.2", 3, 7, 1),
    ("1.3", 3, 8, 1),
    ("1.4.1", 4, 9, 1),
    ("1.5.0", 5, 10, 1),
    ("1.6.0", 6, 11, 2),
    ("1.7.0", 7, 12, 2, 1),
    ("1.8.0", 7, 13, 2, 1),
    ("1.9.0", 7, 14, 2, 1),
    ("1.10.0", 8, 15, 2, 1),
    ("1.11.0", 8, 16, 3, 1),
    ("1.12.0", 8, 17, 3, 1),
    ("1.13.0", 8, 18, 3, 1),
    ("1.14.0", 9, 19, 3, 1),
    ("1.15.0", 9, 20, 4, 1),
    ("1.16.0", 10, 21, 5, 1),
    ("1.17.0", 10, 22, 5, 1),
    ("1.18.0", 11, 23, 5, 1),
    ("1.19.0", 12, 24, 5, 1),
    ("1.20.0", 13, 25, 5, 1),
    ("1.21.0", 13, 26, 5, 1),
    ("1.22.0", 13, 27, 5, 1),
    ("1.23.0", 14, 28, 5, 1),
]

#: onnx's private name for the attribute type's name (its helper tests use it)
_attr_type_to_str = _attr_type_name


def _min_ir_versions() -> dict[tuple[str, int], int]:
    table: dict[tuple[str, int], int] = {}
    aliases = {"ai.onnx": "ai.onnx.preview", "ai.onnx.training": "ai.onnx.preview.training"}
    for row in VERSION_TABLE:
        ir = row[1]
        for domain, version in zip(("ai.onnx", "ai.onnx.ml", "ai.onnx.training"), row[2:]):
            if (domain, version) not in table:
                table[domain, version] = ir
                if domain in aliases:
                    table[aliases[domain], version] = ir
    return table


_MIN_IR = _min_ir_versions()


def find_min_ir_version_for(opsetidlist: Sequence[OperatorSetIdProto], ignore_unknown: bool = False) -> int:
    """The lowest IR version that supports every opset in ``opsetidlist``.

    Args:
        opsetidlist: the opset imports.
        ignore_unknown: count an unknown (domain, version) as IR 3 instead of failing.

    Returns:
        The IR version (3 when the list is empty).

    Raises:
        ValueError: an opset is unknown and ``ignore_unknown`` is False.
    """
    found = 3
    for opset in opsetidlist:
        key = (opset.domain or "ai.onnx", opset.version)
        if key in _MIN_IR:
            found = max(found, _MIN_IR[key])
        elif not ignore_unknown:
            raise ValueError(
                f"Unsupported opset-version: domain {key[0]!r} version {key[1]} is not in "
                "VERSION_TABLE; pass ir_version explicitly"
            )
    return found


# ----------------------------------------------------------------------------
# nodes and attributes
# ----------------------------------------------------------------------------
def make_node(
    op_type: str,
    inputs: Sequence[str],
    outputs: Sequence[str],
    name: str | None = None,
    doc_string: str | None = None,
    domain: str | None = None,
    overload: str | None = None,
    **kwargs: Any,
) -> NodeProto:
    """A NodeProto; keyword arguments become attributes, sorted by name.

    Args:
        op_type: the operator, e.g. ``"Mul"``.
        inputs: input names (``""`` for an omitted optional input).
        outputs: output names.
        name: the node's name; set only when non-empty.
        doc_string: documentation; set only when non-empty.
        domain: the operator's domain; set whenever not None (``""`` included).
        overload: the overload of a model-local function being called.
        **kwargs: attributes; values as :func:`make_attribute` takes them. None
            values are skipped.

    Returns:
        The NodeProto.
    """
    node = NodeProto(op_type=op_type, input=[str(i) for i in inputs])
    node.output = [str(o) for o in outputs]
    if name:
        node.name = name
    if doc_string:
        node.doc_string = doc_string
    if domain is not None:
        node.domain = domain
    if overload is not None:
        node.overload = overload
    if kwargs:
        node.attribute = [make_attribute(key, value) for key, value in sorted(kwargs.items()) if value is not None]
    return node


# ----------------------------------------------------------------------------
# graphs, functions, models
# ----------------------------------------------------------------------------
def make_graph(
    nodes: Sequence[NodeProto],
    name: str,
    inputs: Sequence[ValueInfoProto],
    outputs: Sequence[ValueInfoProto],
    initializer: Sequence[TensorProto] | None = None,
    doc_string: str | None = None,
    value_info: Sequence[ValueInfoProto] | None = None,
    sparse_initializer: Sequence[SparseTensorProto] | None = None,
) -> GraphProto:
    """A GraphProto holding copies of the given messages.

    Args:
        nodes: the nodes, in topological order.
        name: the graph's name.
        inputs: the graph inputs.
        outputs: the graph outputs.
        initializer: constant tensors.
        doc_string: documentation; set only when non-empty.
        value_info: types of intermediate values.
        sparse_initializer: sparse constant tensors.

    Returns:
        The GraphProto.
    """
    graph = GraphProto(name=name)
    graph.node = _copies(nodes)
    graph.input = _copies(inputs)
    graph.output = _copies(outputs)
    graph.initializer = _copies(initializer)
    graph.sparse_initializer = _copies(sparse_initializer)
    graph.value_info = _copies(value_info)
    if doc_string:
        graph.doc_string = doc_string
    return graph


def make_opsetid(domain: str, version: int) -> OperatorSetIdProto:
    """An OperatorSetIdProto (``domain`` ``""`` is ai.onnx).

    Args:
        domain: the operator set's domain.
        version: its version.

    Returns:
        The OperatorSetIdProto.
    """
    return OperatorSetIdProto(domain=domain, version=version)


make_operatorsetid = make_opsetid


def make_function(
    domain: str,
    fname: str,
    inputs: Sequence[str],
    outputs: Sequence[str],
    nodes: Sequence[NodeProto],
    opset_imports: Sequence[OperatorSetIdProto],
    attributes: Sequence[str] | None = None,
    attribute_protos: Sequence[AttributeProto] | None = None,
    doc_string: str | None = None,
    overload: str | None = None,
    value_info: Sequence[ValueInfoProto] | None = None,
) -> FunctionProto:
    """A FunctionProto (a model-local function).

    Args:
        domain: the function's domain.
        fname: its name (the op_type that calls it).
        inputs: input names.
        outputs: output names.
        nodes: the body.
        opset_imports: the opsets the body uses.
        attributes: names of attributes without defaults.
        attribute_protos: attributes with default values.
        doc_string: documentation; set only when non-empty.
        overload: the overload name; set whenever not None.
        value_info: types of values in the body.

    Returns:
        The FunctionProto.
    """
    f = FunctionProto(domain=domain, name=fname)
    f.input = list(inputs)
    f.output = list(outputs)
    f.node = _copies(nodes)
    f.opset_import = _copies(opset_imports)
    f.attribute = list(attributes or [])
    f.attribute_proto = _copies(attribute_protos)
    if doc_string:
        f.doc_string = doc_string
    if overload is not None:
        f.overload = overload
    f.value_info = _copies(value_info)
    return f


def make_model(graph: GraphProto, **kwargs: Any) -> ModelProto:
    """A ModelProto around a copy of ``graph``.

    Args:
        graph: the main graph.
        **kwargs: ``opset_imports`` (default: ai.onnx at :data:`OPSET_VERSION`),
            ``functions``, and any ModelProto field (``ir_version`` defaults to
            :data:`IR_VERSION`, ``producer_name``, ...).

    Returns:
        The ModelProto.
    """
    model = ModelProto(ir_version=IR_VERSION)
    model.graph = _copy(graph)
    opset_imports = kwargs.pop("opset_imports", None)
    if opset_imports is not None:
        model.opset_import = _copies(opset_imports)
    else:
        model.opset_import = [OperatorSetIdProto(version=OPSET_VERSION)]
    functions = kwargs.pop("functions", None)
    if functions is not None:
        model.functions = _copies(functions)
    for key, value in kwargs.items():
        if key not in ModelProto._BY_NAME:
            raise AttributeError(f"ModelProto has no field {key!r}")
        setattr(model, key, value)
    return model


def make_model_gen_version(graph: GraphProto, **kwargs: Any) -> ModelProto:
    """:func:`make_model` with ``ir_version`` the lowest that supports the opset imports."""
    if "ir_version" not in kwargs:
        kwargs["ir_version"] = find_min_ir_version_for(kwargs.get("opset_imports", []))
    return make_model(graph, **kwargs)


def set_metadata_props(proto: Any, dict_value: dict[str, str]) -> None:
    """Replaces ``proto.metadata_props`` by the entries of ``dict_value``.

    Args:
        proto: a message with ``metadata_props`` (model, graph, node, tensor, ...).
        dict_value: the key/value pairs, kept in order.
    """
    proto.metadata_props = [StringStringEntryProto(key=k, value=v) for k, v in dict_value.items()]


def set_model_props(model: ModelProto, dict_value: dict[str, str]) -> None:
    """Replaces the model's ``metadata_props`` (see :func:`set_metadata_props`)."""
    set_metadata_props(model, dict_value)


def make_training_info(
    algorithm: GraphProto,
    algorithm_bindings: Sequence[tuple[str, str]],
    initialization: GraphProto | None,
    initialization_bindings: Sequence[tuple[str, str]] | None,
) -> TrainingInfoProto:
    """A TrainingInfoProto.

    Args:
        algorithm: the training step graph.
        algorithm_bindings: (initializer, output) pairs updated by each step.
        initialization: the graph that initialises the state, if any.
        initialization_bindings: (initializer, output) pairs it sets.

    Returns:
        The TrainingInfoProto.
    """
    info = TrainingInfoProto(algorithm=_copy(algorithm))
    info.update_binding = [StringStringEntryProto(key=k, value=v) for k, v in algorithm_bindings]
    if initialization:
        info.initialization = _copy(initialization)
    if initialization_bindings:
        info.initialization_binding = [StringStringEntryProto(key=k, value=v) for k, v in initialization_bindings]
    return info


def strip_doc_string(proto: Any) -> None:
    """Clears ``doc_string`` in ``proto`` and every message nested in it."""
    for field in proto.FIELDS:
        if field.name == "doc_string":
            proto.ClearField("doc_string")
        elif field.kind == "message":
            if field.repeated:
                for item in getattr(proto, field.name):
                    strip_doc_string(item)
            elif proto.HasField(field.name):
                strip_doc_string(getattr(proto, field.name))
