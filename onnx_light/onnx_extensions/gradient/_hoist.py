"""Loop-invariant hoisting: the nodes of a Scan body that read only outer values and constants
run once, before the Scan, instead of once per step.

A reverse Scan body built by differentiating a recurrence reads the (transposed) weights from
the outer scope; the gradient of ``MatMul(h, R^T)`` with respect to ``h`` transposes them back
in every step. Hoisted, that Transpose runs once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ...onnx_core import GraphProto, NodeProto

__all__ = ["hoist_scan_invariants"]

_GRAPH, _GRAPHS = 5, 10
# ops whose result is not a function of their inputs alone, never hoisted
_STATEFUL = frozenset(
    {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli", "Dropout"}
)


def _subgraphs(node: NodeProto) -> list[GraphProto]:
    out: list[GraphProto] = []
    for attr in node.attribute:
        out += [attr.g] if attr.type == _GRAPH else list(attr.graphs) if attr.type == _GRAPHS else []
    return out


def _names(nodes: Iterable[NodeProto]) -> set[str]:
    """Every value name the nodes read or write, inside their subgraphs too."""
    names: set[str] = set()
    for node in nodes:
        names.update(node.input)
        names.update(node.output)
        for g in _subgraphs(node):
            names.update(i.name for i in g.input)
            names.update(_names(g.node))
    return names


def _split(body: GraphProto, taken: set[str]) -> list[NodeProto]:
    """Removes from ``body`` (in place) the nodes computed from outer values only; returns them."""
    local = {i.name for i in body.input} | {o for n in body.node for o in n.output}
    results = {o.name for o in body.output}
    outer: set[str] = set()  # outputs of nodes that may be hoisted
    invariant: list[NodeProto] = []
    for node in body.node:
        ok = node.domain in ("", "ai.onnx") and node.op_type not in _STATEFUL and not _subgraphs(node)
        ok = ok and all(not i or i not in local or i in outer for i in node.input)
        ok = ok and not any(o in results or o in taken for o in node.output)
        if ok:
            outer.update(o for o in node.output if o)
            invariant.append(node)
    # a Constant moves only with a non-Constant node reading it (alone it costs nothing per step)
    needed = {i for n in invariant if n.op_type != "Constant" for i in n.input}
    hoisted = [n for n in invariant if n.op_type != "Constant" or n.output[0] in needed]
    if not any(n.op_type != "Constant" for n in hoisted):
        return []
    gone = {id(n) for n in hoisted}
    moved = [NodeProto() for _ in hoisted]
    for copy, node in zip(moved, hoisted):
        copy.CopyFrom(node)
    kept = [n for n in body.node if id(n) not in gone]
    names = {o for n in moved for o in n.output}
    infos = [v for v in body.value_info if v.name not in names]
    del body.node[:]
    body.node.extend(kept)
    del body.value_info[:]
    body.value_info.extend(infos)
    return moved


def hoist_scan_invariants(nodes: Sequence[NodeProto]) -> list[NodeProto]:
    """``nodes`` with each Scan body's loop-invariant nodes moved before the Scan.

    A body node is invariant when every input is an outer-scope value, a constant, or the
    output of another invariant node, it has no subgraph and is deterministic. A node whose
    output is a body output, or whose output name is used elsewhere in ``nodes``, stays.
    The bodies are rewritten in place.
    """
    taken = {o for n in nodes for o in n.output} | {i for n in nodes for i in n.input}
    out: list[NodeProto] = []
    for node in nodes:
        if node.op_type == "Scan" and node.domain in ("", "ai.onnx"):
            for g in _subgraphs(node):
                out += _split(g, taken)
        out.append(node)
    return out
