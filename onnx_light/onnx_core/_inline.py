"""Inlining calls to model-local functions (FunctionProto) into their bodies."""

from __future__ import annotations

from collections.abc import Iterable

from ._errors import OnnxLightError
from ._proto import AttributeProto, FunctionProto, NodeProto

__all__ = ["FunctionInliner", "MAX_INLINE_DEPTH"]

#: model-local functions calling each other deeper than this are refused (recursion)
MAX_INLINE_DEPTH = 64


def _label(node: NodeProto) -> str:
    return f"node {node.name!r} ({node.domain or 'ai.onnx'}::{node.op_type})"


def _function_key(domain: str, name: str) -> tuple[str, str]:
    return ("" if domain == "ai.onnx" else domain, name)


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
