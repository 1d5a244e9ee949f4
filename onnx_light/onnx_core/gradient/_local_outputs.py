"""Subgraph outputs that name an outer value get an Identity inside their subgraph.

ONNX lets a branch or a loop body return a value of an enclosing graph directly, with no
node between (``then_branch`` with no nodes and output ``x``). The rules differentiate a body
through the values its nodes compute, and onnxruntime rejects such bodies ("an outer scope
value being returned directly"), so before the passes read the forward nodes, each such
output is renamed to a fresh name that an ``Identity(outer)`` inside the subgraph computes.
"""

from __future__ import annotations

from collections.abc import Callable

from .._proto import GraphProto, NodeProto
from ..helper import make_node

__all__ = ["localised_outputs"]


def _subgraphs(node: NodeProto) -> list[GraphProto]:
    return [g for a in node.attribute for g in ([a.g] if a.HasField("g") else []) + list(a.graphs)]


def _returns_outer(graph: GraphProto) -> bool:
    """True when ``graph`` or a subgraph of its nodes has an output no node of it computes."""
    local = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    local.update(o for n in graph.node for o in n.output)
    if any(o.name and o.name not in local for o in graph.output):
        return True
    return any(_returns_outer(g) for n in graph.node for g in _subgraphs(n))


def _localise(graph: GraphProto, new_name: Callable[[str], str]) -> None:
    """Adds the Identity nodes to ``graph`` (a copy) and to its nested subgraphs."""
    for n in graph.node:
        for g in _subgraphs(n):
            _localise(g, new_name)
    local = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    local.update(o for n in graph.node for o in n.output)
    for out in graph.output:
        if out.name and out.name not in local:
            fresh = new_name(out.name)
            graph.node.append(make_node("Identity", [out.name], [fresh]))
            out.name = fresh


def localised_outputs(nodes: list[NodeProto], new_name: Callable[[str], str]) -> list[NodeProto]:
    """``nodes``, with a copy of each node whose subgraphs return outer values directly
    (module docstring); ``nodes`` itself when there is none."""
    out = list(nodes)
    for i, node in enumerate(nodes):
        if any(_returns_outer(g) for g in _subgraphs(node)):
            copy = NodeProto()
            copy.CopyFrom(node)
            for g in _subgraphs(copy):
                _localise(g, new_name)
            out[i] = copy
    return out if any(a is not b for a, b in zip(out, nodes)) else nodes
