"""onnx's checker, protobuf-free: is a model valid ONNX? (``onnx.checker``'s names and signatures)

``check_model(model, full_check=False)`` checks the structure (IR version, opset imports),
that every name is defined before use (graph inputs, initializers, the outer scope of a
subgraph, earlier nodes: topological order, single assignment), and each node against
its op schema at the imported opset (the op exists and is not deprecated, input and
output counts, attribute names and types, required attributes, the type constraints of
the values whose types are known). ``full_check=True`` adds shape inference and reports
where it disagrees with the declared types. Every failure is a :class:`ValidationError`
naming where it happened: ``graph 'g': node 3 'conv1' (ai.onnx::Conv): ...``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable

import numpy as np

from ._check_node import (
    CheckerContext,
    LexicalScopeContext,
    NodeChecks,
    ValidationError,
    check_attribute_fields,
    check_tensor_data,
    fail,
    node_label,
    tensor_type_string,
)
from ._infer_model import GraphTypes, infer_graph
from ._io import load, load_from_string
from ._proto import (
    AttributeProto,
    FunctionProto,
    GraphProto,
    ModelProto,
    NodeProto,
    SparseTensorProto,
    TensorProto,
    ValueInfoProto,
)
from ._typestr import type_string
from .gradient._sequences import output_is_sequence
from .gradient._types import ValueType
from .ops import normalise_domain

__all__ = [
    "ValidationError",
    "CheckerContext",
    "LexicalScopeContext",
    "DEFAULT_CONTEXT",
    "LEXICAL_SCOPE_CONTEXT",
    "MAXIMUM_IR_VERSION",
    "check_model",
    "check_graph",
    "check_node",
    "check_function",
    "check_attribute",
    "check_value_info",
    "check_tensor",
    "check_sparse_tensor",
]

#: the newest IR version this checker knows (onnx 1.23's)
MAXIMUM_IR_VERSION = 14
#: the context the checks use when none is given: the newest IR and default opset
DEFAULT_CONTEXT = CheckerContext(ir_version=MAXIMUM_IR_VERSION, opset_imports={"": 25})
#: an empty outer scope
LEXICAL_SCOPE_CONTEXT = LexicalScopeContext()


class _GraphWalk:
    """Checks one graph: names, then every node in order (subgraphs recursively)."""

    def __init__(self, ctx: CheckerContext, types: dict[str, str]) -> None:
        self.ctx = ctx
        self.types = types

    def graph(self, graph: GraphProto, scope: set[str], where: str) -> None:
        here = f"{where}graph {graph.name!r}" if graph.name else f"{where}graph"
        if not graph.name:
            raise fail(here, "field 'name' of a graph is required to be non-empty")
        for vi in graph.input:
            check_value_info(vi, self.ctx, where=f"{here}: input")
        for vi in graph.output:
            check_value_info(vi, self.ctx, where=f"{here}: output")
        for vi in graph.value_info:
            if not vi.name:
                raise fail(here, "field 'name' of a value_info is required to be non-empty")
        local = self._declare_inputs(graph, here)
        defined = scope | local
        self._note_types(graph)
        sub = CheckerContext(
            self.ctx.ir_version, self.ctx.opset_imports, False, self.ctx.functions, self.ctx.in_function
        )
        for i, node in enumerate(graph.node):
            at = f"{here}: {node_label(node, i)}"
            for name in node.input:
                if name and name not in defined:
                    raise fail(
                        at,
                        f"nodes must be topologically sorted, but input {name!r} is not an output of any "
                        "previous node, a graph input or an initializer",
                    )
            checks = NodeChecks(self.ctx, self.types.get, self._subgraph(sub, defined, at))
            checks.check(node, at)
            for name in node.output:
                if not name:
                    continue
                if name in defined:
                    raise fail(
                        at, f"graph must be in single static assignment (SSA) form, but {name!r} is assigned twice"
                    )
                defined.add(name)
                local.add(name)
        for vi in graph.output:
            if vi.name not in local:
                raise fail(
                    here, f"graph output {vi.name!r} is not an output of any node, input or initializer in the graph"
                )

    def _subgraph(self, sub: CheckerContext, defined: set[str], where: str) -> Callable[[GraphProto, str], None]:
        def check(g: GraphProto, label: str) -> None:
            _GraphWalk(sub, dict(self.types)).graph(g, set(defined), f"{label}: ")

        return check

    def _declare_inputs(self, graph: GraphProto, here: str) -> set[str]:
        local: set[str] = set()
        for vi in graph.input:
            if vi.name in local:
                raise fail(here, f"graph must be in SSA form, but {vi.name!r} is used as graph input name twice")
            local.add(vi.name)
        inputs = set(local)
        inits: set[str] = set()
        for t in list(graph.initializer) + [s.values for s in graph.sparse_initializer]:
            check_tensor(t, self.ctx, where=f"{here}: initializer ")
            if not t.name:
                raise fail(here, "an initializer has no name")
            if t.name in inits:
                raise fail(here, f"graph must be in SSA form, but {t.name!r} is used as initializer name twice")
            if self.ctx.ir_version < 4 and t.name not in inputs:
                raise fail(here, f"{t.name!r} is in initializer but not in graph input (required below IR version 4)")
            inits.add(t.name)
        return local | inits

    def _note_types(self, graph: GraphProto) -> None:
        """The types known without inference: initializers' and graph inputs' (value_info may be stale)."""
        for t in graph.initializer:
            s = tensor_type_string(t.data_type)
            if s is not None:
                self.types[t.name] = s
        for vi in graph.input:
            if vi.HasField("type"):
                s = type_string(vi.type)
                if s is not None:
                    self.types[vi.name] = s


def check_value_info(
    value_info: ValueInfoProto, ctx: CheckerContext = DEFAULT_CONTEXT, *, where: str = "value_info"
) -> None:
    """A graph input or output has a name and, in the main graph, a complete type.

    Raises:
        ValidationError: what is missing, naming the value.
    """
    if not value_info.name:
        raise fail(where, "field 'name' of a value_info is required to be non-empty")
    if not ctx.is_main_graph:
        return
    label = f"{where} {value_info.name!r}"
    which = value_info.type.WhichOneof("value") if value_info.HasField("type") else None
    if which is None:
        raise fail(label, "unrecognized type value case: the value_info has no type; declare one")
    inner = getattr(value_info.type, which)
    if which in ("tensor_type", "sparse_tensor_type"):
        if not inner.HasField("elem_type"):
            raise fail(label, "field 'elem_type' of its type is required but missing")
        if not inner.HasField("shape"):
            raise fail(label, "field 'shape' of its type is required but missing (an empty shape is a scalar)")
    elif which in ("sequence_type", "optional_type") and not inner.HasField("elem_type"):
        raise fail(label, "field 'elem_type' of its type is required but missing")
    elif which == "map_type" and not (inner.HasField("key_type") and inner.HasField("value_type")):
        raise fail(label, "fields 'key_type' and 'value_type' of its map type are required")


def check_tensor(tensor: TensorProto, ctx: CheckerContext = DEFAULT_CONTEXT, *, where: str = "") -> None:
    """A tensor has a data type and the number of stored values its dims need.

    Raises:
        ValidationError: naming the tensor.
    """
    del ctx  # the same at every IR version this checker knows
    check_tensor_data(tensor, where)


def check_sparse_tensor(sparse: SparseTensorProto, ctx: CheckerContext = DEFAULT_CONTEXT) -> None:
    """A sparse tensor (onnx.proto's SparseTensorProto) is well formed.

    ``dims`` is the dense shape; ``values`` a 1-D tensor of the NNZ stored values; ``indices``
    int64, either ``[NNZ]`` positions in the flattened tensor or ``[NNZ, rank]`` coordinates,
    in range and in ascending (lexicographic) order without repeats.

    Raises:
        ValidationError: naming what is wrong.
    """
    del ctx
    label = "sparse tensor"
    dims = list(sparse.dims)
    if not dims or any(d < 0 for d in dims):
        raise fail(label, f"dims {dims} must be set and non-negative")
    values = sparse.values
    check_tensor_data(values, "sparse tensor values: ")
    if len(values.dims) != 1:
        raise fail(label, f"values must be 1-D (NNZ values), got dims {list(values.dims)}")
    nnz = values.dims[0]
    if not sparse.HasField("indices"):
        if nnz:
            raise fail(label, f"{nnz} values but no indices")
        return
    indices = sparse.indices
    if indices.data_type != TensorProto.INT64:
        raise fail(label, f"indices must be int64, got data_type {indices.data_type}")
    from .numpy_helper import to_array  # numpy_helper imports the IR; import on use

    idx = to_array(indices)
    if idx.ndim == 1 and idx.shape[0] == nnz:
        flat = idx
    elif idx.ndim == 2 and idx.shape == (nnz, len(dims)):
        for axis, d in enumerate(dims):
            if idx.size and (idx[:, axis].min() < 0 or idx[:, axis].max() >= d):
                raise fail(label, f"an index along axis {axis} is outside [0, {d})")
        flat = np.ravel_multi_index(tuple(idx.T), dims)
    else:
        want = f"[NNZ]={[nnz]} nor [NNZ, rank]={[nnz, len(dims)]}"
        raise fail(label, f"indices of shape {list(idx.shape)} fit neither {want}")
    size = math.prod(dims)
    if flat.size and (flat.min() < 0 or flat.max() >= size):
        raise fail(label, f"an index is outside the dense tensor of {size} elements")
    if flat.size > 1 and not (flat[1:] > flat[:-1]).all():
        raise fail(label, "indices must be in ascending order without repeats")


def check_attribute(
    attr: AttributeProto,
    ctx: CheckerContext = DEFAULT_CONTEXT,
    lexical_scope_ctx: LexicalScopeContext = LEXICAL_SCOPE_CONTEXT,
) -> None:
    """An attribute has a name, a type and exactly the value field of that type; subgraphs are checked.

    Raises:
        ValidationError: naming the attribute.
    """
    check_attribute_fields(attr, ctx, "")
    sparse = [attr.sparse_tensor] if attr.type == AttributeProto.SPARSE_TENSOR else list(attr.sparse_tensors)
    for st in sparse:
        check_sparse_tensor(st, ctx)
    sub = CheckerContext(ctx.ir_version, ctx.opset_imports, False, ctx.functions, ctx.in_function)
    graphs = [attr.g] if attr.type == AttributeProto.GRAPH else list(attr.graphs)
    for g in graphs:
        _GraphWalk(sub, {}).graph(g, set(lexical_scope_ctx.names), f"attribute {attr.name!r}: ")


def check_node(
    node: NodeProto,
    ctx: CheckerContext = DEFAULT_CONTEXT,
    lexical_scope_ctx: LexicalScopeContext = LEXICAL_SCOPE_CONTEXT,
) -> None:
    """A node against its op schema at ``ctx``'s opset (existence, arity, attributes).

    Raises:
        ValidationError: naming the node and its ``domain::op_type``.
    """
    sub = CheckerContext(ctx.ir_version, ctx.opset_imports, False, ctx.functions, ctx.in_function)
    scope = set(lexical_scope_ctx.names) | {n for n in node.input if n}

    def subgraph(g: GraphProto, label: str) -> None:
        _GraphWalk(sub, {}).graph(g, set(scope), f"{label}: ")

    NodeChecks(ctx, lambda _name: None, subgraph).check(node, node_label(node))


def check_graph(
    graph: GraphProto,
    ctx: CheckerContext = DEFAULT_CONTEXT,
    lexical_scope_ctx: LexicalScopeContext = LEXICAL_SCOPE_CONTEXT,
) -> None:
    """A graph: names defined before use, single assignment, every node, every subgraph.

    Raises:
        ValidationError: naming the graph and the node.
    """
    _GraphWalk(ctx, {}).graph(graph, set(lexical_scope_ctx.names), "")


def check_function(
    function: FunctionProto,
    ctx: CheckerContext | None = None,
    lexical_scope_ctx: LexicalScopeContext = LEXICAL_SCOPE_CONTEXT,
) -> None:
    """A model-local function: its nodes in order, against the opsets it imports.

    Raises:
        ValidationError: naming the function and the node.
    """
    base = ctx if ctx is not None else DEFAULT_CONTEXT
    here = f"function {function.domain}::{function.name}"
    if not function.name:
        raise fail("function", "field 'name' of a function is required to be non-empty")
    opsets = dict(base.opset_imports)
    opsets.update({normalise_domain(o.domain): o.version for o in function.opset_import})
    fctx = CheckerContext(base.ir_version, opsets, False, base.functions, True)
    defined = set(lexical_scope_ctx.names) | set(function.input)
    walk = _GraphWalk(fctx, {})
    for i, node in enumerate(function.node):
        at = f"{here}: {node_label(node, i)}"
        for name in node.input:
            if name and name not in defined:
                raise fail(at, f"nodes must be topologically sorted, but input {name!r} is not defined before")
        NodeChecks(fctx, lambda _name: None, walk._subgraph(fctx, defined, at)).check(node, at)
        for name in node.output:
            if name in defined and name:
                raise fail(at, f"function must be in SSA form, but {name!r} is assigned twice")
            defined.add(name)
    for name in function.output:
        if name not in defined:
            raise fail(here, f"function output {name!r} is not an output of any node or an input")


def _as_model(model: ModelProto | str | bytes | os.PathLike[str]) -> ModelProto:
    if isinstance(model, ModelProto):
        return model
    if isinstance(model, (bytes, bytearray, memoryview)):
        return load_from_string(bytes(model))
    return load(os.fspath(model))


def _model_context(model: ModelProto) -> CheckerContext:
    if not model.HasField("ir_version") or model.ir_version < 1:
        raise fail("model", "the model does not have an ir_version set properly; set ModelProto.ir_version")
    if model.ir_version > MAXIMUM_IR_VERSION:
        raise fail(
            "model", f"the model's ir_version {model.ir_version} is higher than the checker's ({MAXIMUM_IR_VERSION})"
        )
    opsets: dict[str, int] = {}
    for o in model.opset_import:
        opsets.setdefault(normalise_domain(o.domain), o.version)
    if model.ir_version >= 3 and not opsets:
        raise fail("model", "a model with IR version >= 3 must specify opset_import (e.g. ai.onnx version 21)")
    functions = frozenset((normalise_domain(f.domain), f.name) for f in model.functions)
    return CheckerContext(model.ir_version, opsets, True, functions, False)


def check_model(
    model: ModelProto | str | bytes | os.PathLike[str],
    full_check: bool = False,
    skip_opset_compatibility_check: bool = False,
    check_custom_domain: bool = False,
) -> None:
    """Checks that a model is valid ONNX, as ``onnx.checker.check_model`` does.

    Args:
        model: a ModelProto, the path of a model file or its serialized bytes.
        full_check: also run shape inference and report where it disagrees with the
            declared types and shapes.
        skip_opset_compatibility_check: accepted for onnx's signature; unused.
        check_custom_domain: accepted for onnx's signature; unused.

    Raises:
        ValidationError: the first problem found, naming the graph, node (index, name,
            ``domain::op_type``) or attribute, and what to do.
    """
    del skip_opset_compatibility_check, check_custom_domain
    m = _as_model(model)
    ctx = _model_context(m)
    if not m.HasField("graph"):
        raise fail("model", "field 'graph' is required but missing")
    keys = [p.key for p in m.metadata_props]
    if len(set(keys)) != len(keys):
        twice = sorted({k for k in keys if keys.count(k) > 1})
        raise fail("model", f"metadata_props has duplicate keys {twice}: each key may appear once")
    for f in m.functions:
        check_function(f, CheckerContext(ctx.ir_version, ctx.opset_imports, False, ctx.functions, True))
    types: dict[str, str] = {}
    _GraphWalk(ctx, types).graph(m.graph, set(), "")
    if full_check:
        _check_inferred(m, ctx, types)


def _sequence_output(result: GraphTypes, name: str, opset: int) -> bool:
    """True when ``name`` is a sequence (inference types it by its elements)."""
    if name not in result.producer:
        return False
    _, node = result.producer[name]
    return output_is_sequence(normalise_domain(node.domain), node.op_type, opset, list(node.output).index(name))


def _check_inferred(model: ModelProto, ctx: CheckerContext, declared: dict[str, str]) -> None:
    """Shape inference over the main graph; a disagreement with a declared type is an error."""
    graph = model.graph
    opset = ctx.opset_imports.get("", 0)
    result = infer_graph(graph, opset)
    for name, want in result.declared.items():
        got = result.types.get(name)
        if got is None or want is None or name not in result.producer or _sequence_output(result, name, opset):
            continue
        i, node = result.producer[name]
        at = f"graph {graph.name!r}: {node_label(node, i)}"
        problem = _disagreement(got, want)
        if problem:
            raise fail(at, f"shape inference: output {name!r} {problem}")
    types = dict(declared)
    for name, t in result.types.items():
        s = tensor_type_string(t.dtype)
        if s is not None and name not in types and not _sequence_output(result, name, opset):
            types[name] = s
    for i, node in enumerate(graph.node):
        at = f"graph {graph.name!r}: {node_label(node, i)}"
        checks = NodeChecks(ctx, types.get, lambda _g, _w: None)
        schema = checks.schema(node, at)
        if schema is not None:
            checks.type_constraints(node, schema, at)


def _disagreement(got: ValueType, want: ValueType) -> str:
    """What differs between an inferred and a declared type ('' when they agree)."""
    if got.dtype and want.dtype and got.dtype != want.dtype:
        return f"is inferred as {tensor_type_string(got.dtype)} but declared {tensor_type_string(want.dtype)}"
    if got.shape is None or want.shape is None:
        return ""
    if len(got.shape) != len(want.shape):
        return f"is inferred with rank {len(got.shape)} but declared with rank {len(want.shape)}"
    for k, (a, b) in enumerate(zip(got.shape, want.shape)):
        if isinstance(a, int) and isinstance(b, int) and a != b:
            return f"inferred shape and declared shape differ in dimension {k}: ({a}) vs ({b})"
    return ""
