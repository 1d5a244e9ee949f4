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


#: ids of the nodes a sweep must copy before renaming (None: all of them); the others are
#: the caller's own (the gradient pass's new nodes) and are renamed in place
Foreign = set[int] | None


def _renamed(
    node: NodeProto, fields: Fields, inputs: list[str], outputs: list[str], foreign: Foreign
) -> tuple[NodeProto, Fields]:
    if foreign is None or id(node) in foreign:
        node = copy_node(node, outputs)
    else:
        setattr(node, "_output", outputs)  # noqa: B010  (the slot, as _fastpath sets it)
    setattr(node, "_input", inputs)  # noqa: B010
    return node, (fields[0], fields[1], inputs, outputs, fields[4])


def eliminate_common(nodes: Nodes, pinned: set[str], deterministic: Deterministic, foreign: Foreign = None) -> Nodes:
    """Drops ``Identity`` nodes and repeated computations, reading the first copy instead.

    An ``Identity`` or repeated node whose output is pinned (a function output, or read by a
    subgraph) is kept, with its inputs renamed like any other node's. A renamed node is a
    copy when ``foreign`` is None or holds its id, else renamed in place.
    """
    alias: dict[str, str] = {}
    seen: dict[tuple[object, ...], _Firsts] = {}
    merge: dict[tuple[str, str], bool] = {}  # deterministic(domain, op_type), asked once per op
    kept: Nodes = []
    for item in nodes:
        op_type, domain, inputs, outs, attributes = item[1]
        if alias and not alias.keys().isdisjoint(inputs):
            inputs = [alias.get(i, i) for i in inputs]
            item = _renamed(item[0], item[1], inputs, list(outs), foreign)
        if op_type == "Identity" and not domain and len(inputs) == 1 and len(outs) == 1 and inputs[0]:
            if outs[0] not in pinned:
                alias[outs[0]] = inputs[0]
                continue
            kept.append(item)
            continue
        ok = merge.get((domain, op_type))
        if ok is None:
            ok = merge[(domain, op_type)] = deterministic(domain, op_type)
        if ok:
            base = (op_type, domain, tuple(inputs), len(outs) if "" not in outs else tuple(bool(o) for o in outs))
            first = _first_copy(seen, base, attributes, outs)
            if first is not None and pinned.isdisjoint(outs):
                alias.update((o, f) for o, f in zip(outs, first) if o)
                continue
        kept.append(item)
    return kept


#: what a CSE key's earlier nodes are: (attributes, outputs, attribute key or _UNKEYED)
_Firsts = list[tuple[list[AttributeProto], list[str], object]]
_UNKEYED = object()


def _first_copy(
    seen: dict[tuple[object, ...], _Firsts], base: tuple[object, ...], attributes: list[AttributeProto], outs: list[str]
) -> list[str] | None:
    """The outputs of an earlier node with ``base`` (op, domain, inputs, outputs) and the
    same attributes, or None (and this node is recorded). Attributes are compared only
    when the rest agrees, so most nodes never build an attribute key."""
    firsts = seen.get(base)
    if firsts is None:
        seen[base] = [(attributes, outs, _UNKEYED)]
        return None
    if attributes and has_subgraph(attributes):
        return None  # never merged (nor recorded: its twin has the same subgraph)
    key = _attribute_key(attributes) if attributes else b""
    if key is not None:
        for k, (other, other_outs, other_key) in enumerate(firsts):
            if other_key is _UNKEYED:
                other_key = _attribute_key(other) if other else b""
                firsts[k] = (other, other_outs, other_key)
            if other_key == key:
                return other_outs
    firsts.append((attributes, outs, key))
    return None


def name_outputs(nodes: Nodes, outputs: list[str], inputs: set[str], pinned: set[str]) -> dict[str, str]:
    """Which outputs ``y = Identity(v)`` take ``v``'s name over: ``{v: y}``.

    Done when ``v`` is computed by a node here (not a function input), is not itself an
    output, is not read by a subgraph and no other output took it already. The output
    Identities come last in the pass's results, so the producers are looked for from
    the end, and the scan stops once every output's is found. :func:`remove_dead` applies
    the renaming and drops those Identities.
    """
    wanted = set(outputs)
    producer: dict[str, Fields] = {}
    for _, fields in reversed(nodes):
        if not wanted:
            break
        for o in fields[3]:
            if o in wanted:
                producer[o] = fields
                wanted.discard(o)
    rename: dict[str, str] = {}
    for y in outputs:
        found = producer.get(y)
        if found is None:
            continue
        op_type, domain, ins, outs, _ = found
        if op_type != "Identity" or domain or len(ins) != 1 or len(outs) != 1:
            continue
        v = ins[0]
        if not v or v in inputs or v in pinned or v in rename:
            continue  # (a name that is no input is some node's output: SSA)
        rename[v] = y
    return rename


def remove_dead(
    nodes: Nodes, outputs: list[str], rename: dict[str, str] | None = None, foreign: Foreign = None
) -> list[NodeProto]:
    """The nodes at least one of whose outputs is needed for ``outputs``, renamed by
    ``rename`` (from :func:`name_outputs`: the Identity ``y = Identity(v)`` of each ``v -> y``
    goes); a renamed node is a copy unless it is the caller's own (see ``Foreign``)."""
    needed = set(outputs)
    keep: list[NodeProto] = []
    for node, fields in reversed(nodes):
        ins, outs, attributes = fields[2], fields[3], fields[4]
        if rename and not (rename.keys().isdisjoint(ins) and rename.keys().isdisjoint(outs)):
            if fields[0] == "Identity" and len(ins) == 1 and rename.get(ins[0]) == outs[0]:
                continue  # y = Identity(v): v is now called y
            node, fields = _renamed(
                node, fields, [rename.get(i, i) for i in ins], [rename.get(o, o) for o in outs], foreign
            )
            ins, outs = fields[2], fields[3]
        if needed.isdisjoint(outs):
            continue
        keep.append(node)
        needed.update(ins)
        if attributes and has_subgraph(attributes):
            needed.update(subgraph_reads(node))
    keep.reverse()
    return keep
