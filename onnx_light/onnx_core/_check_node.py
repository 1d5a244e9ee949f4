"""The checker's per-node part: a node against its op schema, attributes, tensors, type constraints.

:mod:`onnx_light.onnx_core.checker` walks models and graphs and calls these; every
failure is a :class:`ValidationError` whose message starts with where it happened.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ._dtypes import bits_per_element, tensor_dtype_to_field
from ._errors import OnnxLightError
from ._proto import AttributeProto, GraphProto, NodeProto, TensorProto
from ._typestr import elem_type_name
from .ops import VARIADIC, OpSchema, get_schema, has_schema, normalise_domain, op_label

__all__ = ["ValidationError", "CheckerContext", "LexicalScopeContext", "node_label", "NodeChecks"]

#: domains whose ops all have schemas: an op missing there is an error, elsewhere a custom op
KNOWN_DOMAINS = frozenset({"", "ai.onnx.ml", "ai.onnx.preview.training", "ai.onnx.preview", "ai.onnx.training"})

#: the AttributeProto value field of each attribute type
_ATTR_FIELD = {
    AttributeProto.FLOAT: "f",
    AttributeProto.INT: "i",
    AttributeProto.STRING: "s",
    AttributeProto.TENSOR: "t",
    AttributeProto.GRAPH: "g",
    AttributeProto.SPARSE_TENSOR: "sparse_tensor",
    AttributeProto.TYPE_PROTO: "tp",
    AttributeProto.FLOATS: "floats",
    AttributeProto.INTS: "ints",
    AttributeProto.STRINGS: "strings",
    AttributeProto.TENSORS: "tensors",
    AttributeProto.GRAPHS: "graphs",
    AttributeProto.SPARSE_TENSORS: "sparse_tensors",
    AttributeProto.TYPE_PROTOS: "type_protos",
}
_SINGULAR = ("f", "i", "s", "t", "g", "sparse_tensor", "tp")
_REPEATED = ("floats", "ints", "strings", "tensors", "graphs", "sparse_tensors", "type_protos")


class ValidationError(OnnxLightError, ValueError):
    """A model, graph, node or attribute breaks the ONNX spec (onnx's ``checker.ValidationError``)."""


@dataclass
class CheckerContext:
    """What a check needs to know about the model around it (onnx's ``CheckerContext``).

    Attributes:
        ir_version: the model's IR version.
        opset_imports: domain -> imported version (domain ``""`` for the default one).
        is_main_graph: False inside subgraphs and functions (looser value_info rules).
        functions: ``(domain, name)`` of the model-local functions.
        in_function: True while checking a function body (``ref_attr_name`` is allowed there).
    """

    ir_version: int = 10
    opset_imports: dict[str, int] = field(default_factory=lambda: {"": 21})
    is_main_graph: bool = True
    functions: frozenset[tuple[str, str]] = frozenset()
    in_function: bool = False


@dataclass
class LexicalScopeContext:
    """The names visible from outer scopes (onnx's ``LexicalScopeContext``)."""

    names: set[str] = field(default_factory=set)


def node_label(node: NodeProto, index: int | None = None) -> str:
    """``node 3 'conv1' (ai.onnx::Conv)`` as the checker's messages name a node."""
    at = f" {index}" if index is not None else ""
    name = f" {node.name!r}" if node.name else ""
    return f"node{at}{name} ({op_label(node.domain, node.op_type)})"


def fail(where: str, message: str) -> ValidationError:
    """A ValidationError whose text starts with ``where``."""
    return ValidationError(f"{where}: {message}" if where else message)


# ----------------------------------------------------------------------------- tensors
def check_tensor_data(tensor: TensorProto, where: str) -> None:
    """The tensor has a data type and as many stored values as its dims require."""
    label = f"{where}tensor {tensor.name!r}" if tensor.name else f"{where}tensor"
    if tensor.data_type == TensorProto.UNDEFINED:
        raise fail(label, "setting data_type is required (it is UNDEFINED)")
    if tensor.data_location == TensorProto.EXTERNAL or tensor.data_type == TensorProto.STRING:
        return
    try:
        bits = bits_per_element(tensor.data_type)
        store = tensor_dtype_to_field(tensor.data_type)
    except ValueError:
        raise fail(label, f"unknown data_type {tensor.data_type}") from None
    count = math.prod(tensor.dims)
    if tensor.HasField("raw_data"):
        want = (count * bits + 7) // 8
        if len(tensor.raw_data) != want:
            raise fail(label, f"raw_data holds {len(tensor.raw_data)} bytes, the dims {list(tensor.dims)} need {want}")
        return
    stored = len(getattr(tensor, store))
    per = 2 if tensor.data_type in (TensorProto.COMPLEX64, TensorProto.COMPLEX128) else 1
    if bits < 8 and stored < count:
        count = (count * bits + 7) // 8  # sub-byte types: packed, one byte per stored value
    if stored and stored < count * per:
        raise fail(label, f"{store} holds {stored} values, the dims {list(tensor.dims)} need {count * per}")


# -------------------------------------------------------------------------- attributes
def attribute_fields(attr: AttributeProto) -> list[str]:
    """The value fields an attribute sets."""
    used = [f for f in _SINGULAR if attr.HasField(f)]
    used.extend(f for f in _REPEATED if getattr(attr, f))
    return used


def check_attribute_fields(attr: AttributeProto, ctx: CheckerContext, where: str) -> None:
    """An attribute has a name, a type and the one value field of that type."""
    label = f"{where}attribute {attr.name!r}"
    if not attr.name:
        raise fail(where, "field 'name' of an attribute is required to be non-empty")
    if attr.ref_attr_name:
        if not ctx.in_function:
            raise fail(label, f"ref_attr_name {attr.ref_attr_name!r} is only allowed inside a function body")
        return
    if attr.type == AttributeProto.UNDEFINED and ctx.ir_version >= 2:
        raise fail(label, "field 'type' is required but missing; set AttributeProto.type")
    used = attribute_fields(attr)
    if len(used) > 1:
        raise fail(label, f"type field and data field mismatch: it sets {used}, one value field is allowed")
    expected = _ATTR_FIELD.get(attr.type)
    if expected is None and attr.type != AttributeProto.UNDEFINED:
        raise fail(label, f"unknown attribute type {attr.type}")
    if used and expected is not None and used[0] != expected:
        raise fail(
            label,
            f"type field and data field mismatch: type {AttributeProto.AttributeType.Name(attr.type)} "
            f"but the value is in {used[0]!r}",
        )
    if attr.type == AttributeProto.TENSOR and attr.HasField("t"):
        check_tensor_data(attr.t, f"{label}: ")
    for t in attr.tensors:
        check_tensor_data(t, f"{label}: ")


# ------------------------------------------------------------------------------- nodes
@dataclass
class NodeChecks:
    """Checks one node against its schema; ``types`` gives the known type string of a value.

    ``check_graph`` is called for each subgraph attribute with the names visible to it.
    """

    ctx: CheckerContext
    types: Callable[[str], str | None]
    check_graph: Callable[[GraphProto, str], None]

    def schema(self, node: NodeProto, where: str) -> OpSchema | None:
        """The node's schema; None for custom-domain ops and model-local functions."""
        if not node.op_type:
            raise fail(where, "field 'op_type' of a node is required to be non-empty")
        domain = normalise_domain(node.domain)
        opsets = {normalise_domain(d): v for d, v in self.ctx.opset_imports.items()}
        if domain not in opsets:
            raise fail(where, f"no opset import for domain {node.domain or 'ai.onnx'!r}; add it to opset_import")
        version = opsets[domain]
        if (domain, node.op_type) in self.ctx.functions or (node.domain, node.op_type) in self.ctx.functions:
            return None
        if not has_schema(node.op_type, version, domain):
            if domain in KNOWN_DOMAINS:
                raise fail(
                    where,
                    f"no op registered for {op_label(domain, node.op_type)} with domain_version of {version}; "
                    "check the op_type's spelling and the opset_import",
                )
            return None
        schema = get_schema(node.op_type, version, domain)
        if schema.deprecated:
            raise fail(
                where,
                f"op registered for {node.op_type} is deprecated in domain_version of {version}; "
                "convert the model (onnx_light.version_converter) or use the op that replaced it",
            )
        return schema

    def check(self, node: NodeProto, where: str) -> None:
        """Every check of one node: schema, arity, attributes, subgraphs, type constraints."""
        for a in node.attribute:
            check_attribute_fields(a, self.ctx, f"{where}: ")
        schema = self.schema(node, where)
        for a in node.attribute:
            for i, g in enumerate([a.g] if a.type == AttributeProto.GRAPH else list(a.graphs)):
                self.check_graph(g, f"{where}: attribute {a.name!r}" + (f"[{i}]" if a.graphs else ""))
        if schema is None:
            return
        self.arity(node, schema, where)
        self.attributes(node, schema, where)
        self.type_constraints(node, schema, where)

    def arity(self, node: NodeProto, schema: OpSchema, where: str) -> None:
        """Input and output counts within the schema's, and no empty name for a single parameter."""
        at = f"{schema.label}-{schema.since_version}"
        for side, names, formals, lo, hi in (
            ("input", node.input, schema.inputs, schema.min_input, schema.max_input),
            ("output", node.output, schema.outputs, schema.min_output, schema.max_output),
        ):
            n = len(names)
            if n < lo or (hi >= 0 and n > hi):
                bound = "unbounded" if hi < 0 else str(hi)
                raise fail(where, f"{side} size {n} not in range [min={lo}, max={bound}] of {at}")
            for i, name in enumerate(names):
                formal = formals[min(i, len(formals) - 1)] if formals else None
                if not name and formal is not None and formal.option == 0 and i < len(formals):
                    raise fail(where, f"{side} {i} ({formal.name}) is marked single but has an empty name")

    def attributes(self, node: NodeProto, schema: OpSchema, where: str) -> None:
        """Every attribute known to the schema with its type; every required one present."""
        at = f"{schema.label}-{schema.since_version}"
        seen: set[str] = set()
        for a in node.attribute:
            if a.name in seen:
                raise fail(where, f"attribute {a.name!r} is given twice")
            seen.add(a.name)
            spec = schema.attributes.get(a.name)
            if spec is None:
                known = ", ".join(sorted(schema.attributes)) or "none"
                raise fail(where, f"unrecognized attribute {a.name!r} for {at} (it has: {known})")
            if a.ref_attr_name or a.type == AttributeProto.UNDEFINED:
                continue
            if a.type != spec.type:
                type_name = AttributeProto.AttributeType.Name
                raise fail(
                    where,
                    f"mismatched attribute type of {a.name!r}: {at} expects {type_name(spec.type)}, "
                    f"got {type_name(a.type)}",
                )
        for name, spec in schema.attributes.items():
            if spec.required and name not in seen:
                raise fail(where, f"required attribute {name!r} of {at} is missing")

    def type_constraints(self, node: NodeProto, schema: OpSchema, where: str) -> None:
        """The known types of inputs and outputs are allowed, and one type per homogeneous constraint."""
        allowed = {c.type_param_str: c.allowed_type_strs for c in schema.type_constraints}
        bound: dict[str, tuple[str, str]] = {}
        for side, names, formals in (("input", node.input, schema.inputs), ("output", node.output, schema.outputs)):
            for i, name in enumerate(names):
                if not name or not formals:
                    continue
                formal = formals[min(i, len(formals) - 1)]
                if i >= len(formals) and formal.option != VARIADIC:
                    continue
                t = self.types(name)
                if t is None:
                    continue
                ok = allowed.get(formal.type_str, (formal.type_str,))
                if _norm(t) not in {_norm(s) for s in ok}:
                    raise fail(
                        where,
                        f"{side} {i} ({name!r}, parameter {formal.name}) has type {t}, which {schema.label}-"
                        f"{schema.since_version} does not allow for {formal.type_str}: {', '.join(ok)}",
                    )
                if formal.type_str not in allowed or (formal.option == VARIADIC and not formal.homogeneous):
                    continue
                first = bound.setdefault(formal.type_str, (t, name))
                if _norm(first[0]) != _norm(t):
                    raise fail(
                        where,
                        f"{side} {i} ({name!r}) has inconsistent type {t}: {first[1]!r} bound "
                        f"{formal.type_str} to {first[0]}",
                    )


def _norm(type_str: str) -> str:
    return type_str.replace(" ", "")


def tensor_type_string(data_type: int) -> str | None:
    """``tensor(float)`` for a data type (None when unknown)."""
    try:
        return f"tensor({elem_type_name(data_type)})" if data_type else None
    except ValueError:
        return None


def names_of(values: Sequence[object]) -> list[str]:
    """The ``name`` of each value (value_infos, tensors)."""
    return [str(getattr(v, "name", "")) for v in values]
