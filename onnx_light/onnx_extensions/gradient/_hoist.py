"""Loop-invariant hoisting: the nodes of a Scan body that read only outer values and constants
run once, before the Scan, instead of once per step.

A reverse Scan body built by differentiating a recurrence reads the (transposed) weights from
the outer scope; the gradient of ``MatMul(h, R^T)`` with respect to ``h`` transposes them back
in every step. Hoisted, that Transpose runs once.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from ...onnx_core import GraphProto, NodeProto, helper
from ._subgraph import _rename_node

__all__ = ["hoist_scan_invariants", "merge_tape_scans"]

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
                moved = _split(g, taken)
                # body names are only unique per body (two bodies may both say "MatMul_grad33"):
                # outside, each gets the Scan's (unique) first output as a suffix
                tag = next((o for o in node.output if o), "scan")
                rename = {o: _unused(f"{o}_{tag}", taken) for n in moved for o in n.output if o}
                taken.update(rename.values())
                for n in [*moved, *g.node]:
                    _rename_node(n, rename)
                out += moved
        out.append(node)
    return out


def _unused(name: str, taken: set[str]) -> str:
    k, out = 0, name
    while out in taken:
        k += 1
        out = f"{name}_{k}"
    return out


def _body(node: NodeProto) -> GraphProto | None:
    return next((a.g for a in node.attribute if a.name == "body" and a.type == _GRAPH), None)


def _extends(tape: NodeProto, scan: NodeProto) -> bool:
    """Whether ``tape`` is ``scan`` recording more outputs: same inputs and attributes, its body
    the same nodes with more after them, the same outputs first (the Scan rule's tape)."""
    a, b = _body(scan), _body(tape)
    if a is None or b is None or list(scan.input) != list(tape.input) or scan.domain != tape.domain:
        return False
    if len(b.node) < len(a.node) or len(b.output) < len(a.output):
        return False
    if _scan_attrs(scan, a) != _scan_attrs(tape, b, len(a.output)):
        return False
    same_io = [i.name for i in a.input] == [i.name for i in b.input]
    same_out = [o.name for o in a.output] == [o.name for o in b.output[: len(a.output)]]
    return same_io and same_out and all(x == y for x, y in zip(a.node, b.node))


def _scan_attrs(node: NodeProto, body: GraphProto, n_out: int | None = None) -> dict[str, Any]:
    """A Scan's attributes other than its body, the per-input/output lists with their defaults
    spelled out (the lists of the first ``n_out`` body outputs only)."""
    attrs: dict[str, Any] = {x.name: x for x in node.attribute if x.name != "body"}
    n_in = int(attrs["num_scan_inputs"].i) if "num_scan_inputs" in attrs else 0
    n_state = len(node.input) - n_in
    n_scan = (len(body.output) if n_out is None else n_out) - n_state
    for name, n in (("scan_input_axes", n_in), ("scan_input_directions", n_in)):
        attrs[name] = list(attrs[name].ints) if name in attrs else [0] * n
    for name in ("scan_output_axes", "scan_output_directions"):
        attrs[name] = (list(attrs[name].ints) if name in attrs else [0] * len(body.output))[: max(n_scan, 0)]
    return attrs


def merge_tape_scans(nodes: Sequence[NodeProto]) -> list[NodeProto]:
    """``nodes`` without a Scan that a later tape Scan repeats (see :func:`_extends`): its
    outputs are read from the tape's, so the recurrence runs once."""
    out = list(nodes)
    scans = [n for n in out if n.op_type == "Scan"]
    rename: dict[str, str] = {}
    drop: set[int] = set()
    for scan in scans:
        tape = next((t for t in scans if t is not scan and id(t) not in drop and _extends(t, scan)), None)
        if tape is None:
            continue
        drop.add(id(scan))
        rename.update({o: t for o, t in zip(scan.output, tape.output) if o})
    if not rename:
        return out
    kept: list[NodeProto] = []
    for node in out:
        if id(node) not in drop:
            kept.append(node)
            continue
        # the dropped Scan's names stay defined (they may be results): Identities of the tape's
        kept += [helper.make_node("Identity", [rename[o]], [o]) for o in node.output if o]
    # the tape may run after the dropped Scan's consumers: order by dependencies
    return _toposorted(kept)


def _toposorted(nodes: list[NodeProto]) -> list[NodeProto]:
    """``nodes`` in an order where each node follows the producers of its inputs (stable)."""
    producer = {o: k for k, n in enumerate(nodes) for o in n.output if o}
    placed: set[int] = set()
    path: set[int] = set()  # the nodes being placed (a name read in a cycle is not waited for)
    order: list[NodeProto] = []

    def deps(j: int) -> Iterator[int]:
        return iter(sorted({producer[i] for i in _reads(nodes[j]) if i in producer}))

    def place(k: int) -> None:
        if k in placed:
            return
        stack = [(k, deps(k))]
        path.add(k)
        while stack:
            j, todo = stack[-1]
            d = next((d for d in todo if d not in placed and d not in path), None)
            if d is None:
                stack.pop()
                path.discard(j)
                placed.add(j)
                order.append(nodes[j])
            else:
                path.add(d)
                stack.append((d, deps(d)))

    for k in range(len(nodes)):
        place(k)
    return order


def _reads(node: NodeProto) -> set[str]:
    """The names a node reads: its inputs and its subgraphs' outer-scope references."""
    names = {i for i in node.input if i}
    for g in _subgraphs(node):
        names |= _names(g.node)
    return names
