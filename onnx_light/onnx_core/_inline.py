"""Inlining calls to model-local functions (FunctionProto) into their bodies."""

from __future__ import annotations

from collections.abc import Iterable

from ._errors import OnnxLightError
from ._proto import AttributeProto, FunctionProto, GraphProto, NodeProto
from .ops import normalise_domain, op_label

__all__ = ["FunctionInliner", "MAX_INLINE_DEPTH"]

#: model-local functions calling each other deeper than this are refused (recursion)
MAX_INLINE_DEPTH = 64


def _label(node: NodeProto) -> str:
    return f"node {node.name!r} ({op_label(node.domain, node.op_type)})"


def _function_key(domain: str, name: str) -> tuple[str, str]:
    return (normalise_domain(domain), name)


class FunctionInliner:
    """Expands calls to model-local functions, binding attribute references.

    Values inside an inlined body get the prefix ``__<function>_<n>__`` so that two
    calls never share names.
    """

    def __init__(self, functions: Iterable[FunctionProto]) -> None:
        self.functions = {_function_key(f.domain, f.name): f for f in functions}
        self.counter = 0

    def expand(self, nodes: Iterable[NodeProto], depth: int = 0) -> list[NodeProto]:
        out: list[NodeProto] = []
        for node in nodes:
            fn = self.functions.get(_function_key(node.domain, node.op_type))
            if fn is None:
                out.append(node)
                continue
            if depth >= MAX_INLINE_DEPTH:
                raise OnnxLightError(
                    f"{_label(node)}: model-local functions nest deeper than {MAX_INLINE_DEPTH} "
                    "levels (recursive function?)"
                )
            out.extend(self.expand(self._instantiate(fn, node), depth + 1))
        return out

    def _instantiate(self, fn: FunctionProto, call: NodeProto) -> list[NodeProto]:
        self.counter += 1
        prefix = f"__{fn.name}_{self.counter}__"
        rename: dict[str, str] = {"": ""}
        for formal, actual in zip(fn.input, call.input):
            rename[formal] = actual
        for formal in fn.input[len(call.input) :]:
            rename[formal] = ""
        for formal, actual in zip(fn.output, call.output):
            rename[formal] = actual
        attrs = {a.name: a for a in fn.attribute_proto}
        attrs.update({a.name: a for a in call.attribute})
        body: list[NodeProto] = []
        for node in fn.node:
            new = NodeProto()
            new.CopyFrom(node)
            new.input[:] = [rename.get(n, prefix + n) if n else "" for n in node.input]
            for n in node.output:
                if n and n not in rename:
                    rename[n] = prefix + n
            new.output[:] = [rename[n] if n else "" for n in node.output]
            bound = []
            for a in new.attribute:
                if a.HasField("g") or len(a.graphs):
                    a = self._rename_subgraphs(a, rename, attrs)
                if a.ref_attr_name:
                    ref = attrs.get(a.ref_attr_name)
                    if ref is None:
                        continue  # the attribute is optional and the caller omitted it
                    b = AttributeProto()
                    b.CopyFrom(ref)
                    b.name = a.name
                    bound.append(b)
                else:
                    bound.append(a)
            new.attribute[:] = bound
            body.append(new)
        return body

    def _rename_subgraphs(
        self, attr: AttributeProto, rename: dict[str, str], attrs: dict[str, AttributeProto]
    ) -> AttributeProto:
        """A copy of a GRAPH(S) attribute whose subgraphs read the inlined names of the body's
        values (they may read any value of the enclosing function by name) and whose
        attribute references are bound to the call's attributes."""
        out = AttributeProto()
        out.CopyFrom(attr)
        if out.HasField("g"):
            _rename_graph(out.g, rename, attrs)
        for g in out.graphs:
            _rename_graph(g, rename, attrs)
        return out


def _rename_graph(graph: GraphProto, rename: dict[str, str], attrs: dict[str, AttributeProto]) -> None:
    """Renames, in place, the names ``graph`` reads from enclosing scopes (not those it defines)."""
    local = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    for node in graph.node:
        node.input[:] = [n if (not n or n in local) else rename.get(n, n) for n in node.input]
        bound = []
        for a in node.attribute:
            if a.HasField("g") or len(a.graphs):
                inner = {k: v for k, v in rename.items() if k not in local}
                b = AttributeProto()
                b.CopyFrom(a)
                for g in ([b.g] if b.HasField("g") else []) + list(b.graphs):
                    _rename_graph(g, inner, attrs)
                a = b
            if a.ref_attr_name:
                ref = attrs.get(a.ref_attr_name)
                if ref is None:
                    continue
                b = AttributeProto()
                b.CopyFrom(ref)
                b.name = a.name
                a = b
            bound.append(a)
        node.attribute[:] = bound
        local.update(node.output)
    for o in graph.output:
        if o.name not in local and o.name in rename:
            o.name = rename[o.name]
