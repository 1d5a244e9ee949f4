"""Identity elimination, common-subexpression elimination, constant folding and dead-node
removal, in one forward sweep and one backward sweep over the nodes.

The nodes are in topological order and define every value once (SSA, as ONNX requires). A
value read by a node's subgraph (an If branch, a Loop body) is never renamed: the sweeps do
not look into subgraphs, so such names stay as they are (pinned).

Each node's fields are read once, by slot. An unset slot costs an exception to read, and
the pass's nodes leave the empty domain and attribute list unset, so the attributes are
read only where they matter: a ``Constant``, a node being folded, a second node with the
same (op, inputs) as an earlier one, and ops that may carry a subgraph.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from .._proto import AttributeProto, FunctionProto, NodeProto, TensorProto
from ..gradient._fastpath import attribute_values, copy_node, has_subgraph, raw_view, tensor_array
from ..ops import get_schema as _get_schema
from ..ops import has_schema
from ._fold import FoldFn, fold_node, has_reference

__all__ = ["Entry", "Foreign", "forward_sweep", "deterministic_ops", "subgraph_reads", "fresh_name"]

#: answers "may two nodes of (domain, op_type) with the same inputs and attributes be merged?"
Deterministic = Callable[[str, str], bool]

#: ids of the nodes a sweep must copy before renaming (None: all of them); the others are
#: the caller's own (the gradient pass's new nodes) and are renamed in place
Foreign = set[int] | None

#: a kept node: (node, op_type, domain, inputs, outputs, names its subgraphs read or None)
Entry = tuple[NodeProto, str, str, list[str], list[str], list[str] | None]

_EMPTY: list[Any] = []
_GRAPH_TYPES = (AttributeProto.GRAPH, AttributeProto.GRAPHS)
_TENSOR = AttributeProto.TENSOR


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


@functools.cache
def _may_have_subgraph(domain: str, op_type: str, version: int) -> bool:
    """False for a standard op whose schema declares no graph attribute (it may not carry
    one); True for any other op (custom domains, ops unknown at ``version``)."""
    if domain or not has_schema(op_type, version, domain):
        return True
    return any(a.type in _GRAPH_TYPES for a in _get_schema(op_type, version, domain).attributes.values())


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
            # a body output may be an outer value itself, returned with no node between
            names.extend(o.name for o in g.output if o.name and o.name not in local)
    return names


def _attribute_key(attributes: list[AttributeProto]) -> tuple[object, ...] | None:
    """The attributes as a hashable value, equal exactly when the attributes are (name,
    type and value; a tensor by dtype, shape and bytes); None for kinds not compared
    (graphs, lists of tensors, references to the function's attributes), whose nodes are not
    merged."""
    if not attributes:
        return ()
    if len(attributes) == 1 and getattr(attributes[0], "_type", 0) == _TENSOR:
        raw_key = _raw_tensor_key(attributes[0])  # a Constant's value, as exporters write it
        if raw_key is not None:
            return raw_key
    if has_subgraph(attributes) or has_reference(attributes):
        return None
    values = attribute_values(attributes)
    key: list[object] = []
    for a in sorted(attributes, key=lambda a: a.name):
        name = a.name
        v = values[name]
        if type(v) is float:
            v = v.hex()  # 0.0 == -0.0, but the ops' answers differ in sign (1 / x: -inf, inf)
        elif isinstance(v, list):
            v = tuple(e.hex() if type(e) is float else e for e in v)
        elif isinstance(v, TensorProto):
            arr = tensor_array(v)
            # an object array's bytes are pointers (which a freed array's successor may reuse):
            # strings are compared themselves
            data = tuple(arr.ravel().tolist()) if arr.dtype.kind == "O" else arr.tobytes()
            v = (arr.dtype.str, arr.shape, data)
        try:
            hash(v)
        except TypeError:
            return None
        key.append((name, a.type, v))
    return tuple(key)


def _raw_tensor_key(a: AttributeProto) -> tuple[object, ...] | None:
    """:func:`_attribute_key` of one tensor attribute held as ``raw_data``, read without
    numpy: the same key (the array's bytes are ``raw_data`` itself); None: not that form."""
    t = getattr(a, "_t", None)
    view = None if t is None or a.ref_attr_name else raw_view(t)
    if view is None:
        return None
    dtype, dims, raw = view
    return ((getattr(a, "_name", ""), a.type, (dtype.str, tuple(dims), raw)),)


def renamed(node: NodeProto, inputs: list[str], outputs: list[str] | None, foreign: Foreign) -> NodeProto:
    """``node`` reading ``inputs`` (and writing ``outputs`` when given): a copy when
    ``foreign`` is None or holds its id, else ``node`` itself, renamed in place."""
    if foreign is None or id(node) in foreign:
        node = copy_node(node, list(outputs if outputs is not None else getattr(node, "_output", _EMPTY)))
    elif outputs is not None:
        setattr(node, "_output", outputs)  # noqa: B010  (the slot, as _fastpath sets it)
    setattr(node, "_input", inputs)  # noqa: B010
    return node


class _Restart(Exception):
    """A subgraph reads names an earlier node's elimination took away: sweep again with them pinned."""

    def __init__(self, names: set[str]) -> None:
        super().__init__()
        self.names = names


class _Sweep:
    """The state of one forward sweep (see :func:`forward_sweep`)."""

    def __init__(self, fn: FunctionProto, pinned: set[str], opset: dict[str, int], foreign: Foreign) -> None:
        self.fn, self.pinned, self.opset, self.foreign = fn, pinned, opset, foreign
        self.deterministic = deterministic_ops(opset)
        self.alias: dict[str, str] = {}
        #: (op, inputs, outputs) -> the first node's (node, outputs), or, once a second
        #: node has that base, {(domain, attribute key): outputs}
        self.seen: dict[tuple[object, ...], Any] = {}
        self.known: dict[str, np.ndarray | NodeProto] = {}  # constants, for folding (see fold_node)
        self.shapes: dict[str, tuple[int, ...]] | None = None

    def subgraph(self, node: NodeProto, domain: str, op_type: str) -> list[str] | None:
        """The outer names ``node``'s subgraphs read (None: it has none); raises _Restart
        when one of them was eliminated. Called for the ops that may carry one."""
        attributes = getattr(node, "_attribute", _EMPTY)
        if not attributes or not has_subgraph(attributes):
            return None
        reads = subgraph_reads(node)
        lost = {r for r in reads if r in self.alias}
        if lost:
            raise _Restart(lost)
        self.pinned.update(reads)
        return reads

    def first_copy(self, base: tuple[object, ...], first: Any, node: NodeProto) -> list[str] | None:
        """The outputs of an earlier node with ``base`` and the same domain and attributes
        (None: this node is recorded instead). Reached only for a second node of a base."""
        if type(first) is tuple:
            first_node, first_outs = first
            first_domain = getattr(first_node, "_domain", "")
            table: dict[object, list[str]] = {}
            key = _attribute_key(getattr(first_node, "_attribute", _EMPTY))
            if key is not None:
                table[(first_domain, key)] = first_outs
            self.seen[base] = first = table
        key = _attribute_key(getattr(node, "_attribute", _EMPTY))
        if key is None:
            return None
        domain = getattr(node, "_domain", "")  # read here, not trusted from a fast sweep
        outs = first.get((domain, key))
        if outs is not None and self.deterministic(domain, str(base[0])):
            return list(outs)
        first.setdefault((domain, key), getattr(node, "_output", _EMPTY))
        return None

    def fold(self, node: NodeProto, op_type: str, domain: str, ins: list[str], fold: FoldFn) -> NodeProto | None:
        """The ``Constant`` node replacing ``node`` when it folds (its value recorded)."""
        if op_type == "Shape" and self.shapes is None:
            self.shapes = static_shapes(self.fn)
        return fold_node(node, op_type, domain, ins, self.known, self.shapes, fold)


def forward_sweep(
    fn: FunctionProto, pinned: set[str], opset: dict[str, int], foreign: Foreign, fold: FoldFn | None
) -> list[Entry]:
    """Folds constants, drops ``Identity`` nodes and repeated computations (reading the
    first copy instead), in one sweep over ``fn``'s nodes; returns what is kept.

    An ``Identity`` or repeated node whose output is in ``pinned`` (the function's outputs;
    the sweep adds what subgraphs read) is kept, with its inputs renamed like any other
    node's. Merged: same op, domain, inputs, output count and attributes, for ops the spec
    knows and does not call non-deterministic; never a node with a subgraph.
    """
    nodes = list(fn.node)
    while True:
        try:
            return _forward(_Sweep(fn, pinned, opset, foreign), nodes, fold)
        except _Restart as restart:  # rare: the renamed nodes still read equal values
            pinned.update(restart.names)


def _forward(state: _Sweep, nodes: list[NodeProto], fold: FoldFn | None) -> list[Entry]:
    alias, seen, pinned, known, foreign = state.alias, state.seen, state.pinned, state.known, state.foreign
    kept: list[Entry] = []
    may_graph: dict[str, bool] = {}  # by default-domain op type: _may_have_subgraph
    version = state.opset.get("", 0)
    exact = any(state.opset)  # another domain is imported: read every node's
    node: Any
    for node in nodes:
        try:  # set on every node the pass makes: plain slot reads
            op_type: str = node._op_type
            ins: list[str] = node._input
            outs: list[str] = node._output
        except AttributeError:  # (an unset slot: a decoded node without inputs, say)
            op_type = getattr(node, "_op_type", "")
            ins = getattr(node, "_input", _EMPTY)
            outs = getattr(node, "_output", _EMPTY)
        # an unset slot costs an exception to read: with only the default domain imported,
        # the domain is read where it decides something (Identity, folds, merges)
        domain: str = getattr(node, "_domain", "") if exact or op_type == "Identity" else ""
        if alias and not alias.keys().isdisjoint(ins):
            ins = [alias.get(i, i) for i in ins]
            node = renamed(node, ins, None, foreign)
        if op_type == "Identity" and not domain and len(ins) == 1 and len(outs) == 1 and ins[0]:
            if outs[0] not in pinned:
                alias[outs[0]] = ins[0]
                continue
            kept.append((node, op_type, domain, ins, outs, None))
            continue
        if fold is not None and (op_type == "Constant" or op_type == "Shape" or (ins and ins[0] in known)):
            folded = state.fold(node, op_type, domain if exact else getattr(node, "_domain", ""), ins, fold)
            if folded is not None:
                node, op_type, domain, ins = folded, "Constant", "", _EMPTY
        graphs = may_graph.get(op_type) if not domain else True
        if graphs is None:
            graphs = may_graph[op_type] = _may_have_subgraph("", op_type, version)
        reads = state.subgraph(node, domain, op_type) if graphs else None
        if reads is None:
            base = (op_type, tuple(ins), len(outs) if "" not in outs else tuple(bool(o) for o in outs))
            first = seen.get(base)
            if first is None:
                seen[base] = (node, outs)
            else:
                copy = state.first_copy(base, first, node)
                if copy is not None and pinned.isdisjoint(outs):
                    alias.update((o, f) for o, f in zip(outs, copy) if o)
                    continue
        kept.append((node, op_type, domain, ins, outs, reads))
    return kept


def static_shapes(fn: FunctionProto) -> dict[str, tuple[int, ...]]:
    """The fully static shapes ``fn``'s value_info declares, by name."""
    from ..gradient._fastpath import value_type

    shapes: dict[str, tuple[int, ...]] = {}
    for vi in fn.value_info:
        t = value_type(vi)
        if t is not None and t.shape is not None and all(type(d) is int for d in t.shape):
            shapes[vi.name] = tuple(int(d) for d in t.shape if d is not None)
    return shapes


def fresh_name(names: set[str], base: str) -> str:
    """``base``, or ``base`` with the first number that makes it new, added to ``names``."""
    name, k = base, 0
    while name in names:
        k += 1
        name = f"{base}{k}"
    names.add(name)
    return name
