"""Identity elimination, common-subexpression elimination and dead-node removal.

Each function is one sweep over the nodes, which are in topological order and define every
value once (SSA, as ONNX requires). A value read by a node's subgraph (an If branch, a Loop
body) is never renamed: the sweeps do not look into subgraphs, so such names stay as they are.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable

from .._proto import AttributeProto, NodeProto
from ..gradient._fastpath import copy_node, has_subgraph, node_fields
from ..ops import get_schema as _get_schema
from ..ops import has_schema

__all__ = ["deterministic_ops", "eliminate_common", "name_outputs", "remove_dead", "subgraph_reads"]

#: answers "may two nodes of (domain, op_type) with the same inputs and attributes be merged?"
Deterministic = Callable[[str, str], bool]


def deterministic_ops(opset: dict[str, int]) -> Deterministic:
    """True for an op the spec knows at ``opset`` and does not call non-deterministic.

    Ops of other domains (custom ops) are never merged: nothing says they are pure.
    """

    @functools.cache
    def deterministic(domain: str, op_type: str) -> bool:
        version = opset.get(domain)
        if version is None or not has_schema(op_type, version, domain):
            return False
        return not _get_schema(op_type, version, domain).non_deterministic

    return deterministic


def subgraph_reads(node: NodeProto) -> list[str]:
    """Outer-scope names read by ``node``'s subgraph attributes (at any depth)."""
    names: list[str] = []
    for attr in node.attribute:
        graphs = ([attr.g] if attr.HasField("g") else []) + list(attr.graphs)
        for g in graphs:
            local = {i.name for i in g.input} | {t.name for t in g.initializer}
            for n in g.node:
                names.extend(name for name in [*n.input, *subgraph_reads(n)] if name and name not in local)
                local.update(n.output)
    return names


def _attribute_key(attributes: list[AttributeProto]) -> bytes:
    """The attributes as bytes, in name order: equal exactly when the attribute values are."""
    return b"\0".join(a.SerializeToString() for a in sorted(attributes, key=lambda a: a.name))


def _pinned(nodes: list[NodeProto], outputs: Iterable[str]) -> set[str]:
    """Names that keep their node: the function's outputs and what subgraphs read."""
    pinned = set(outputs)
    for node in nodes:
        attributes = node_fields(node)[4]
        if attributes and has_subgraph(attributes):
            pinned.update(subgraph_reads(node))
    return pinned


def eliminate_common(nodes: list[NodeProto], outputs: set[str], deterministic: Deterministic) -> list[NodeProto]:
    """Drops ``Identity`` nodes and repeated computations, reading the first copy instead.

    An ``Identity`` or repeated node whose output is pinned (a function output, or read by a
    subgraph) is kept, with its inputs renamed like any other node's.
    """
    pinned = _pinned(nodes, outputs)
    alias: dict[str, str] = {}
    seen: dict[tuple[object, ...], list[str]] = {}
    kept: list[NodeProto] = []
    for node in nodes:
        op_type, domain, inputs, outs, attributes = node_fields(node)
        if alias and any(i in alias for i in inputs):
            inputs = [alias.get(i, i) for i in inputs]
            node = copy_node(node, list(outs))
            setattr(node, "_input", inputs)  # noqa: B010  (the slot, as _fastpath sets it)
        free = not any(o in pinned for o in outs)
        if op_type == "Identity" and not domain and len(inputs) == 1 and len(outs) == 1 and inputs[0]:
            if free:
                alias[outs[0]] = inputs[0]
                continue
        elif not (attributes and has_subgraph(attributes)) and deterministic(domain, op_type):
            key = (op_type, domain, tuple(inputs), tuple(bool(o) for o in outs), _attribute_key(attributes))
            first = seen.get(key)
            if first is None:
                seen[key] = list(outs)
            elif free:
                alias.update((o, f) for o, f in zip(outs, first) if o)
                continue
        kept.append(node)
    return kept


def name_outputs(nodes: list[NodeProto], outputs: list[str], inputs: set[str]) -> list[NodeProto]:
    """An output ``y = Identity(v)`` takes ``v``'s name over, and the Identity goes.

    Done when ``v`` is computed by a node here (not a function input), is not itself an
    output, is not read by a subgraph and no other output took it already.
    """
    producer: dict[str, int] = {}
    for k, node in enumerate(nodes):
        for o in node_fields(node)[3]:
            if o:
                producer[o] = k
    pinned = _pinned(nodes, outputs)
    rename: dict[str, str] = {}
    drop: set[int] = set()
    for y in outputs:
        at = producer.get(y)
        if at is None:
            continue
        op_type, domain, ins, outs, _ = node_fields(nodes[at])
        if op_type != "Identity" or domain or len(ins) != 1 or len(outs) != 1:
            continue
        v = ins[0]
        if v in inputs or v not in producer or v in pinned or v in rename:
            continue
        rename[v] = y
        drop.add(at)
    if not rename:
        return nodes
    out: list[NodeProto] = []
    for k, node in enumerate(nodes):
        if k in drop:
            continue
        _, _, ins, outs, _ = node_fields(node)
        if any(i in rename for i in ins) or any(o in rename for o in outs):
            copy = copy_node(node, [rename.get(o, o) for o in outs])
            setattr(copy, "_input", [rename.get(i, i) for i in ins])  # noqa: B010
            node = copy
        out.append(node)
    return out


def remove_dead(nodes: list[NodeProto], outputs: list[str]) -> list[NodeProto]:
    """Keeps the nodes at least one of whose outputs is needed for ``outputs``."""
    needed = set(outputs)
    keep: list[NodeProto] = []
    for node in reversed(nodes):
        _, _, ins, outs, attributes = node_fields(node)
        if not any(o in needed for o in outs):
            continue
        keep.append(node)
        needed.update(ins)
        if attributes and has_subgraph(attributes):
            needed.update(subgraph_reads(node))
    keep.reverse()
    return keep
