"""Which of the optimizer's sweeps have work, told from what the caller recorded while it emitted.

The gradient pass knows things about the function it returns that the sweeps would spend
a walk each to find out: that every node it emitted has an output some node reads, and
which ``Constant`` nodes it made from which values (deduplicated by value as it made them).
:func:`has_work` adds one cheap scan over the nodes for the rest (Identity nodes, repeated
(op, inputs) keys, nodes all of whose inputs are constants, ``Shape`` of a static shape,
SiLU's pattern, subgraphs) and answers False only when no sweep could change anything: then
:func:`~._optimize.optimize_own` returns the function as it is. Every test errs towards
True (the sweeps then run and decide), so the answer is never "nothing" when a sweep would
have acted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import compress
from operator import itemgetter
from typing import Any

from .._proto import FunctionProto, NodeProto
from ..gradient._fastpath import has_subgraph
from ._simplify import _attribute_key, _may_have_subgraph, static_shapes

__all__ = ["EmitRecord", "has_work"]


@dataclass
class EmitRecord:
    """What the gradient pass recorded about the function it returns (see :func:`has_work`).

    Attributes:
        live: every node of the function has a named output that another node reads or
            that is an output of the function (then none is dead: following readers from
            any node ends at an output, the nodes being in topological order).
        constants: for each ``Constant`` node the pass made, by id: the node and the key
            of its value (dtype, shape, bytes: equal keys exactly for equal values).
        opset: the default domain's opset when the function imports no other domain
            (None: it does, or unknown).
        named: the function's last ``named`` nodes are the pass's ``Identity(v) -> output``,
            one per output, none reading an output or another Identity's result: what the
            scan's Identity test lets pass, known without it (0: none known).
    """

    live: bool = False
    opset: int | None = None
    named: int = 0
    constants: dict[int, tuple[NodeProto, tuple[Any, ...]]] = field(default_factory=dict)


class _Scan:
    """The state of one :func:`has_work` scan besides the hot loop's."""

    def __init__(self, fn: FunctionProto, record: EmitRecord) -> None:
        self.fn, self.made = fn, record.constants
        self.values: set[tuple[Any, ...]] = set()  # the keys of the constants seen
        self.constants: set[str] = set()  # their outputs
        self._outputs: set[str] | None = None
        self._static: dict[str, tuple[int, ...]] | None = None

    def outputs(self) -> set[str]:
        """``fn``'s outputs, as a set (built on first use)."""
        if self._outputs is None:
            self._outputs = set(self.fn.output)
        return self._outputs

    def static(self) -> dict[str, tuple[int, ...]]:
        """The fully static shapes ``fn``'s value_info declares (read on first use)."""
        if self._static is None:
            self._static = static_shapes(self.fn)
        return self._static


#: what :func:`has_work` does with a node of an op type (other op types: 0, nothing more)
_CONSTANT, _IDENTITY, _SHAPE, _GRAPH, _FUSED = 1, 2, 3, 4, 5
_KINDS = {"Constant": _CONSTANT, "Identity": _IDENTITY, "Shape": _SHAPE, "Sigmoid": _FUSED}
_OP = itemgetter(0)
_INPUTS = itemgetter(1)


def has_work(fn: FunctionProto, record: EmitRecord) -> bool:
    """False when the optimizer would return ``fn``'s nodes unchanged (``output_identity``).

    The scan runs in C loops (``map``, ``zip``, sets) over the nodes' slots; Python looks
    only at the nodes of the few op types that need a test of their own, and at repeated
    (op, inputs) keys.

    Args:
        fn: the function the pass returned, its nodes in topological order.
        record: what the pass recorded while it emitted them.

    Returns:
        True when some sweep might fold, merge, alias, fuse or remove a node.
    """
    version = record.opset
    if not record.live or version is None:
        return True  # another domain: the sweeps read every node's domain; not worth mirroring
    nodes: list[Any] = list(fn.node)
    try:  # (op, inputs, output count): the merge sweep's key, and all the scan reads of most nodes
        keys = [(n._op_type, tuple(n._input), len(n._output)) for n in nodes]
    except AttributeError:  # an unset slot: not a node the pass made; let the sweeps look
        return True
    known = _KIND_CACHE.setdefault(version, {})
    special: dict[str, int] = {}
    for op_type in {k[0] for k in keys}:
        kind = known.get(op_type)
        if kind is None:
            kind = known[op_type] = _KINDS.get(op_type) or (_GRAPH if _may_have_subgraph("", op_type, version) else 0)
        if kind == _FUSED:
            return True  # SiLU's gradient may be there (a Sigmoid)
        if kind:
            special[op_type] = kind
    scan = _Scan(fn, record)
    if special:
        # (the pass's own output Identities, last, pass the test: not looked at)
        own = record.named if record.named == len(fn.output) else 0
        picked = list(compress(range(len(keys) - own), map(special.__contains__, map(_OP, keys))))
        # the Constants first: their outputs are what the fold test looks for
        picked.sort(key=lambda k: special[keys[k][0]] != _CONSTANT)
        for k in picked:
            node = nodes[k]
            if _special(scan, node, special[keys[k][0]], node._input, node._output):
                return True
    constants = scan.constants
    if constants and any(map(constants.issuperset, filter(None, map(_INPUTS, keys)))):
        return True  # a fold may apply
    repeated_constants = max(len(scan.values) - 1, 0)  # every Constant has the key (Constant, (), 1)
    if len(set(keys)) == len(keys) - repeated_constants:
        return False
    return _repeated(nodes, keys)


#: the kind of each default-domain op type, by opset
_KIND_CACHE: dict[int, dict[str, int]] = {}


def _repeated(nodes: list[Any], keys: Sequence[tuple[object, ...]]) -> bool:
    """Whether a node other than a Constant may repeat an earlier node of its key."""
    seen: dict[tuple[object, ...], Any] = {}  # key -> first node, or the attribute keys seen
    for node, key in zip(nodes, keys):
        if key[0] == "Constant":
            continue
        first = seen.setdefault(key, node)
        if first is not node and _repeats(seen, key, first, node):
            return True
    return False


def _special(scan: _Scan, node: Any, kind: int, ins: list[str], outs: list[str]) -> bool:
    """:func:`has_work`'s test of a node of a kind other than 0 (a ``Constant`` is recorded)."""
    if kind == _CONSTANT:
        entry = scan.made.get(id(node))
        if entry is None or entry[0] is not node or len(outs) != 1 or entry[1] in scan.values:
            return True  # a constant of the source's or a rule's own, or a repeated value
        scan.values.add(entry[1])
        scan.constants.add(outs[0])
        return False
    if kind == _IDENTITY:
        outputs = scan.outputs()
        return len(ins) != 1 or len(outs) != 1 or outs[0] not in outputs or ins[0] in outputs
    if kind == _SHAPE:
        return bool(ins) and ins[0] in scan.static()
    if kind == _GRAPH:
        attributes: list[Any] = getattr(node, "_attribute", None) or []
        return bool(attributes) and has_subgraph(attributes)
    return True  # SiLU's gradient may be there (a Sigmoid)


def _repeats(seen: dict[tuple[object, ...], Any], key: tuple[object, ...], first: Any, node: NodeProto) -> bool:
    """Whether ``node``, the second or later of ``key``, may repeat an earlier one: equal
    attributes, or attributes not compared (a merge the sweep would decide); records them."""
    if type(first) is not set:
        first_key = _attribute_key(getattr(first, "_attribute", []))
        if first_key is None:
            return True
        seen[key] = first = {first_key}
    attributes = _attribute_key(getattr(node, "_attribute", []))
    if attributes is None or attributes in first:
        return True
    first.add(attributes)
    return False
