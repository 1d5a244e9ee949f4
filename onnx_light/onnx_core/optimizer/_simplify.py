"""Identity elimination, common-subexpression elimination and dead-node removal.

Each function is one sweep over the nodes, which are in topological order and define every
value once (SSA, as ONNX requires). A value read by a node's subgraph (an If branch, a Loop
body) is never renamed: the sweeps do not look into subgraphs, so such names stay as they are.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable

from .._proto import AttributeProto, NodeProto, TensorProto
from ..gradient._fastpath import Fields, attribute_values, copy_node, has_subgraph, tensor_array
from ..ops import get_schema as _get_schema
from ..ops import has_schema

__all__ = [
    "Nodes",
    "deterministic_ops",
    "eliminate_common",
    "name_outputs",
    "pinned_names",
    "remove_dead",
    "subgraph_reads",
]

#: answers "may two nodes of (domain, op_type) with the same inputs and attributes be merged?"
Deterministic = Callable[[str, str], bool]


def deterministic_ops(opset: dict[str, int]) -> Deterministic:
    """True for an op the spec knows at ``opset`` and does not call non-deterministic.

    Ops of other domains (custom ops) are never merged: nothing says they are pure.
    """

    def deterministic(domain: str, op_type: str) -> bool:
        version = opset.get(domain)
        return version is not None and _deterministic(domain, op_type, version)

    return deterministic


@functools.cache
def _deterministic(domain: str, op_type: str, version: int) -> bool:
    if not has_schema(op_type, version, domain):
        return False
    return not _get_schema(op_type, version, domain).non_deterministic


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


def _attribute_key(attributes: list[AttributeProto]) -> tuple[object, ...] | None:
    """The attributes as a hashable value, equal exactly when the attributes are (name,
    type and value; a tensor by dtype, shape and bytes); None for kinds not compared
    (graphs, lists of tensors), whose nodes are not merged."""
    values = attribute_values(attributes)
    key: list[object] = []
    for a in sorted(attributes, key=lambda a: a.name):
        name = a.name
        v = values[name]
        if isinstance(v, list):
            v = tuple(v)
        elif isinstance(v, TensorProto):
            arr = tensor_array(v)
            v = (arr.dtype.str, arr.shape, arr.tobytes())
        try:
            hash(v)
        except TypeError:
            return None
        key.append((name, a.type, v))
    return tuple(key)


#: the nodes of a function, each with its fields (``_fastpath.node_fields``), read once
Nodes = list[tuple[NodeProto, Fields]]


def pinned_names(nodes: Nodes, outputs: Iterable[str]) -> set[str]:
    """Names that keep their node: the function's outputs and what subgraphs read."""
    pinned = set(outputs)
    for node, fields in nodes:
        attributes = fields[4]
        if attributes and has_subgraph(attributes):
            pinned.update(subgraph_reads(node))
    return pinned


def _renamed(node: NodeProto, fields: Fields, inputs: list[str], outputs: list[str]) -> tuple[NodeProto, Fields]:
    copy = copy_node(node, outputs)
    setattr(copy, "_input", inputs)  # noqa: B010  (the slot, as _fastpath sets it)
    return copy, (fields[0], fields[1], inputs, outputs, fields[4])


def eliminate_common(nodes: Nodes, pinned: set[str], deterministic: Deterministic) -> Nodes:
    """Drops ``Identity`` nodes and repeated computations, reading the first copy instead.

    An ``Identity`` or repeated node whose output is pinned (a function output, or read by a
    subgraph) is kept, with its inputs renamed like any other node's.
    """
    alias: dict[str, str] = {}
    seen: dict[tuple[object, ...], list[str]] = {}
    kept: Nodes = []
    for item in nodes:
        op_type, domain, inputs, outs, attributes = item[1]
        if alias and not alias.keys().isdisjoint(inputs):
            inputs = [alias.get(i, i) for i in inputs]
            item = _renamed(item[0], item[1], inputs, list(outs))
        free = not any(o in pinned for o in outs)
        if op_type == "Identity" and not domain and len(inputs) == 1 and len(outs) == 1 and inputs[0]:
            if free:
                alias[outs[0]] = inputs[0]
                continue
        elif not (attributes and has_subgraph(attributes)) and deterministic(domain, op_type):
            key = (
                op_type,
                domain,
                tuple(inputs),
                tuple(bool(o) for o in outs),
                _attribute_key(attributes) if attributes else b"",
            )
            first = seen.get(key)
            if first is None:
                seen[key] = list(outs)
            elif free:
                alias.update((o, f) for o, f in zip(outs, first) if o)
                continue
        kept.append(item)
    return kept


def name_outputs(nodes: Nodes, outputs: list[str], inputs: set[str], pinned: set[str]) -> Nodes:
    """An output ``y = Identity(v)`` takes ``v``'s name over, and the Identity goes.

    Done when ``v`` is computed by a node here (not a function input), is not itself an
    output, is not read by a subgraph and no other output took it already.
    """
    producer: dict[str, int] = {}
    for k, (_, fields) in enumerate(nodes):
        for o in fields[3]:
            if o:
                producer[o] = k
    rename: dict[str, str] = {}
    drop: set[int] = set()
    for y in outputs:
        at = producer.get(y)
        if at is None:
            continue
        op_type, domain, ins, outs, _ = nodes[at][1]
        if op_type != "Identity" or domain or len(ins) != 1 or len(outs) != 1:
            continue
        v = ins[0]
        if v in inputs or v not in producer or v in pinned or v in rename:
            continue
        rename[v] = y
        drop.add(at)
    if not rename:
        return nodes
    out: Nodes = []
    for k, item in enumerate(nodes):
        if k in drop:
            continue
        ins, outs = item[1][2], item[1][3]
        if not (rename.keys().isdisjoint(ins) and rename.keys().isdisjoint(outs)):
            item = _renamed(item[0], item[1], [rename.get(i, i) for i in ins], [rename.get(o, o) for o in outs])
        out.append(item)
    return out


def remove_dead(nodes: Nodes, outputs: list[str]) -> list[NodeProto]:
    """The nodes at least one of whose outputs is needed for ``outputs``."""
    needed = set(outputs)
    keep: list[NodeProto] = []
    for node, (_, _, ins, outs, attributes) in reversed(nodes):
        if needed.isdisjoint(outs):
            continue
        keep.append(node)
        needed.update(ins)
        if attributes and has_subgraph(attributes):
            needed.update(subgraph_reads(node))
    keep.reverse()
    return keep
