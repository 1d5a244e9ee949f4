"""The output side of the optimizer: how the outputs are named, and dead-node removal.

Both work on the :data:`~._simplify.Entry` list the forward sweep keeps.
"""

from __future__ import annotations

from .._proto import NodeProto
from ._simplify import Entry, Foreign, renamed

__all__ = ["final_identities", "name_outputs", "remove_dead"]


def _output_producers(entries: list[Entry], outputs: list[str]) -> dict[str, int]:
    """The index of the entry producing each of ``outputs`` produced here, looked for from
    the end (where the pass puts the final Identities), stopping once all are found."""
    wanted = set(outputs)
    producer: dict[str, int] = {}
    for k in range(len(entries) - 1, -1, -1):
        if not wanted:
            break
        for o in entries[k][4]:
            if o in wanted:
                producer[o] = k
                wanted.discard(o)
    return producer


def _copied(entry: Entry) -> str | None:
    """What ``entry`` copies when it is ``Identity(v)``, else None."""
    _, op_type, domain, ins, outs, _ = entry
    if op_type == "Identity" and not domain and len(ins) == 1 and len(outs) == 1 and ins[0]:
        return ins[0]
    return None


def final_identities(entries: list[Entry], outputs: list[str], foreign: Foreign = None) -> list[Entry]:
    """Each output ``y = Identity(z)`` whose ``z`` is another output that an ``Identity``
    copies reads what that one reads instead (following chains), so every final Identity
    reads a value computed inside, or an input, never another output."""
    producer = _output_producers(entries, outputs)
    source = {y: v for y, k in producer.items() if (v := _copied(entries[k])) is not None}
    if source.keys().isdisjoint(source.values()):
        return entries  # the common case
    entries = list(entries)
    for y in outputs:
        z = source.get(y)
        if z is None or z not in source:
            continue
        seen = {y}
        while z in source and z not in seen:  # SSA rules out cycles; guard anyway
            seen.add(z)
            z = source[z]
        source[y] = z
        k = producer[y]
        node, op_type, domain, _, outs, reads = entries[k]
        entries[k] = (renamed(node, [z], None, foreign), op_type, domain, [z], outs, reads)
    return entries


def name_outputs(entries: list[Entry], outputs: list[str], inputs: set[str], pinned: set[str]) -> dict[str, str]:
    """Which outputs ``y = Identity(v)`` take ``v``'s name over: ``{v: y}``.

    Done when ``v`` is computed by a node here (not a function input), is not itself an
    output, is not read by a subgraph and no other output took it already.
    :func:`remove_dead` applies the renaming and drops those Identities.
    """
    rename: dict[str, str] = {}
    producer = _output_producers(entries, outputs)
    for y in outputs:
        k = producer.get(y)
        v = None if k is None else _copied(entries[k])
        if not v or v in inputs or v in pinned or v in rename:
            continue  # (a name that is no input is some node's output: SSA)
        rename[v] = y
    return rename


def remove_dead(
    entries: list[Entry], outputs: list[str], rename: dict[str, str] | None = None, foreign: Foreign = None
) -> list[NodeProto]:
    """The nodes at least one of whose outputs is needed for ``outputs``, renamed by
    ``rename`` (from :func:`name_outputs`: the Identity ``y = Identity(v)`` of each ``v -> y``
    goes); a renamed node is a copy unless it is the caller's own (see ``Foreign``)."""
    needed = set(outputs)
    keep: list[NodeProto] = []
    for node, op_type, _, ins, outs, reads in reversed(entries):
        if rename and not (rename.keys().isdisjoint(ins) and rename.keys().isdisjoint(outs)):
            if op_type == "Identity" and len(ins) == 1 and rename.get(ins[0]) == outs[0]:
                continue  # y = Identity(v): v is now called y
            ins, outs = [rename.get(i, i) for i in ins], [rename.get(o, o) for o in outs]
            node = renamed(node, ins, outs, foreign)
        if needed.isdisjoint(outs):
            continue
        keep.append(node)
        needed.update(ins)
        if reads:
            needed.update(reads)
    keep.reverse()
    return keep
