"""The assembly's sweeps on node indices: ancestors, first-use order, liveness.

The gradient pass keeps, for each forward node ``i``, the names it reads (``reads[i]``)
and a map from each forward value to the index of its producer. The functions here
answer the questions the assembly asks with one sweep each over those indices, marks in
a ``bytearray`` instead of sets of indices, and C loops (``dict.fromkeys``, ``chain``,
set operations) over the backward nodes' names instead of a Python loop per name.

Each function checks the invariant its shortcut relies on (the nodes it follows are in
topological order; each backward node has one output) and returns None when it does not
hold: the caller then takes the general path, which gives the same answer, or the error.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import chain
from operator import itemgetter
from typing import Any

from .._proto import FunctionProto, NodeProto, OperatorSetIdProto

__all__ = ["NEEDED", "STOP", "function_proto", "marked_ancestors", "needed_indices", "read_order", "singles_live"]

#: a mark of ``marked_ancestors``: the node is an ancestor
NEEDED = 1
#: a mark of ``marked_ancestors``: the node is not crossed (nor marked needed)
STOP = 2

_READS = itemgetter(0)
_OUTPUTS = itemgetter(1)


def marked_ancestors(
    reads: Sequence[Sequence[str]],
    producer: dict[str, int],
    roots: Iterable[int],
    stop: Iterable[int] = (),
) -> bytearray | None:
    """The ancestors of the nodes ``roots`` (themselves included), as marks by node index.

    One sweep from the highest root down to node 0: a node marked ``NEEDED`` marks the
    producers of the names it reads, except the nodes in ``stop`` (marked ``STOP``, never
    crossed). Every producer must come before its reader: None when a node followed reads
    a value produced by itself or a later node (a cycle, or nodes out of topological
    order), which the caller's general path then reports or handles.

    Args:
        reads: the names each forward node reads, by index.
        producer: each forward value's producer index.
        roots: indices of the nodes to start from (not in ``stop``).
        stop: indices of nodes not to cross.
    """
    mark = bytearray(len(reads))
    for s in stop:
        mark[s] = STOP
    top = -1
    for r in roots:
        mark[r] = NEEDED
        if r > top:
            top = r
    get = producer.get
    for i in range(top, -1, -1):
        if mark[i] != NEEDED:
            continue
        for name in reads[i]:
            j = get(name)
            if j is not None and mark[j] != STOP:
                if j >= i:
                    return None
                mark[j] = NEEDED
    return mark


def needed_indices(mark: bytearray) -> list[int]:
    """The indices ``marked_ancestors`` marked ``NEEDED``, ascending."""
    return [i for i, m in enumerate(mark) if m == NEEDED]


def read_order(io: Sequence[tuple[list[str], list[str], str]]) -> dict[str, None]:
    """Every name the nodes of ``io`` ``(reads, outputs, domain)`` read, once, in first-read order."""
    return dict.fromkeys(chain.from_iterable(map(_READS, io)))


def singles_live(
    io: Sequence[tuple[list[str], list[str], str]], read: dict[str, None], outputs: set[str]
) -> tuple[bool, set[str]] | None:
    """(whether each node of ``io`` has its output in ``read`` or ``outputs``, the set of their
    outputs) when every node of ``io`` has exactly one output; None otherwise."""
    outs = list(map(_OUTPUTS, io))
    if set(map(len, outs)) - {1}:
        return None
    made = set(chain.from_iterable(outs))
    live = "" not in made and not made.difference(read, outputs)
    return live, made


def function_proto(
    name: str,
    domain: str,
    inputs: list[str],
    outputs: list[str],
    nodes: list[NodeProto],
    opsets: Iterable[tuple[str, int]],
) -> FunctionProto:
    """``FunctionProto(name=name, domain=domain)`` with ``input``, ``output``, ``node`` and
    ``opset_import`` (one ``make_opsetid(d, v)`` each) assigned: the same message, its slots
    filled directly (owning the lists), as the codec does; each property write would look
    up an unset slot (an AttributeError formatted and discarded) first."""
    fn: Any = _new(FunctionProto)
    fn._name = name
    fn._domain = domain
    fn._input = inputs
    fn._output = list(outputs)
    fn._node = nodes
    imports = []
    for d, v in opsets:
        opset: Any = _new(OperatorSetIdProto)
        opset._domain = d
        opset._version = v
        imports.append(opset)
    fn._opset_import = imports
    return fn


_new = object.__new__
