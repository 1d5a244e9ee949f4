"""Sequences carried by a Loop (a list appended to in a scripted loop), for the Loop's rules.

A Loop's scan outputs are tensors, so the reverse sweep cannot read a sequence state from a
tape as it reads a tensor state. It carries the state backwards instead: each iteration's
input sequence is its output sequence with the elements the body inserted erased again,

    S_in = SequenceErase(... SequenceErase(S_out, q_m) ..., q_1)

where the body built ``S_out`` from ``S_in`` by SequenceInserts at positions known before run
time (none: appended, what torch exports for ``list.append``), and with the tensors erased
(``list.pop``) inserted back: the forward Loop records those in a carried sequence of its own,
which the reverse sweep pops from. The reverse Loop starts from the forward Loop's final
sequences. A body changing its sequence otherwise (SequenceMap, a position computed at run
time) is refused with the reason.
"""

from __future__ import annotations

import numpy as np

from ...onnx_core import GraphProto, NodeProto, ValueInfoProto, helper, numpy_helper
from ...onnx_core.gradient import GradContext, ValueType, sum_body
from ._subgraph import seq_elem_type

__all__ = [
    "Step",
    "sequence_states",
    "undo_steps",
    "record_erased",
    "erases",
    "undo_nodes",
    "sequence_infos",
    "insert_sums",
]


def sequence_states(ctx: GradContext, body: GraphProto, inputs: list[str]) -> dict[int, int]:
    """The carried positions ``j`` (body input ``2 + j``) holding sequences, with their element
    types (declared by the body, else known for the outer value; an error when neither tells)."""
    found: dict[int, int] = {}
    for j, outer in enumerate(inputs):
        infos: list[ValueInfoProto] = [body.input[2 + j], body.output[1 + j]]
        dtype = next((seq_elem_type(i) for i in infos if seq_elem_type(i)), 0)
        if dtype or (outer and ctx.is_sequence(outer)):
            elem = ctx.sequence_type(outer) if outer else None
            found[j] = dtype or (elem.dtype if elem is not None else 0)
            if not found[j]:  # float or not decides whether its derivative is carried: never guess
                raise ctx.error(
                    f"the Loop carries the sequence {body.input[2 + j].name!r} whose element type is not declared; "
                    "declare it (a sequence type on the body's input or output, e.g. from shape inference)"
                )
    return found


def _constant(ctx: GradContext, body: GraphProto, name: str) -> int | None:
    """The one-element integer value of ``name``: a Constant of the body, or known outside."""
    for node in body.node:
        if name in node.output and node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value":
                    return int(numpy_helper.to_array(attr.t).reshape(-1)[0])
                if attr.name == "value_int":
                    return int(attr.i)
            return None
    if any(name in n.output for n in body.node):
        return None
    known = ctx.value(name)
    return None if known is None or np.size(known) != 1 else int(np.asarray(known).reshape(-1)[0])


#: one step of a body from its input sequence to its output, last step first: the node, and the
#: position to erase again (a SequenceInsert) or to insert the erased element back at (a SequenceErase)
Step = tuple[NodeProto, "int | None"]


def undo_steps(ctx: GradContext, body: GraphProto, j: int) -> list[Step]:
    """The SequenceInserts and SequenceErases leading from the body's input sequence ``2 + j``
    to its output ``1 + j``, last first, each with the position that undoes it (None: the last)."""
    start, name = body.input[2 + j].name, body.output[1 + j].name
    producer = {o: node for node in body.node for o in node.output if o}
    steps: list[Step] = []
    while name != start:
        node = producer.get(name)
        if node is not None and node.op_type == "Identity":
            name = node.input[0]
            continue
        if node is None or node.op_type not in ("SequenceInsert", "SequenceErase"):
            what = "an outer value" if node is None else f"{node.domain or 'ai.onnx'}::{node.op_type}"
            raise ctx.error(
                f"the Loop body builds its carried sequence {body.output[1 + j].name!r} from {what}, not by "
                "SequenceInsert or SequenceErase on the sequence it receives; the reverse sweep recovers each "
                "iteration's sequence by undoing those only: build the list with append/pop in the loop"
            )
        slot = 2 if node.op_type == "SequenceInsert" else 1
        p = node.input[slot] if len(node.input) > slot else ""
        value = _constant(ctx, body, p) if p else None
        if p and value is None:
            raise ctx.error(
                f"the Loop body changes its carried sequence at the position {p!r}, computed at run time; the "
                f"reverse sweep must undo its {node.op_type}: use a constant position, or append and pop"
            )
        if node.op_type == "SequenceInsert":  # the inserted tensor's index in the output
            steps.append((node, None if value is None else (value if value >= 0 else value - 1)))
        else:  # where the erased tensor goes back into the shorter output
            steps.append((node, None if value is None or value == -1 else (value if value >= 0 else value + 1)))
        name = node.input[0]
    return steps


def record_erased(ctx: GradContext, body: GraphProto, steps: list[Step], dtype: int) -> None:
    """Makes the tape Loop's ``body`` carry a sequence of the tensors ``steps`` erase (in the order
    erased), as its last carried value; the reverse sweep reads it backwards."""
    erases = [node for node, _ in reversed(steps) if node.op_type == "SequenceErase"]
    tape_in = name = ctx.fresh_name("tape_erased")
    for node in erases:
        elem, out = ctx.fresh_name("erased"), ctx.fresh_name("tape_erased")
        at = [node.input[1]] if len(node.input) > 1 and node.input[1] else [_minus_one(ctx, body)]
        body.node.append(helper.make_node("SequenceAt", [node.input[0], *at], [elem]))
        body.node.append(helper.make_node("SequenceInsert", [name, elem], [out]))
        name = out
    # after the carried values and the collections added before: (i, cond, carried..., tapes...)
    slot = len(body.input)
    body.input.append(helper.make_tensor_sequence_value_info(tape_in, dtype, None))
    body.output.insert(slot - 1, helper.make_tensor_sequence_value_info(name, dtype, None))


def _minus_one(ctx: GradContext, body: GraphProto) -> str:
    name = ctx.fresh_name("last")
    body.node.append(helper.make_node("Constant", [], [name], value=helper.make_tensor("q", 7, [], [-1])))
    return name


def erases(steps: list[Step]) -> bool:
    """True when undoing ``steps`` needs the erased tensors (a tape of them)."""
    return any(node.op_type == "SequenceErase" for node, _ in steps)


def undo_nodes(
    ctx: GradContext, current: str, steps: list[Step], previous: str, tape: str = "", tape_previous: str = ""
) -> list[NodeProto]:
    """Nodes computing the sequence ``previous`` from ``current`` by undoing ``steps`` (the erased
    tensors popped from the end of ``tape``, leaving ``tape_previous``); see ``sequence_infos``."""
    nodes: list[NodeProto] = []
    name = current
    for node, q in steps:
        out = ctx.fresh_name("seq_undo")
        pos = [_const(ctx, nodes, q)] if q is not None else []
        if node.op_type == "SequenceInsert":
            nodes.append(helper.make_node("SequenceErase", [name, *pos], [out]))
        else:
            elem, popped = ctx.fresh_name("erased"), ctx.fresh_name("tape_erased")
            nodes.append(helper.make_node("SequenceAt", [tape, _const(ctx, nodes, -1)], [elem]))
            nodes.append(helper.make_node("SequenceErase", [tape], [popped]))
            nodes.append(helper.make_node("SequenceInsert", [name, elem, *pos], [out]))
            tape = popped
        name = out
    nodes.append(helper.make_node("Identity", [name], [previous]))
    if tape_previous:
        nodes.append(helper.make_node("Identity", [tape], [tape_previous]))
    return nodes


def _const(ctx: GradContext, nodes: list[NodeProto], value: int) -> str:
    name = ctx.fresh_name("seq_pos")
    nodes.append(helper.make_node("Constant", [], [name], value=helper.make_tensor("q", 7, [], [value])))
    return name


def sequence_infos(nodes: list[NodeProto], dtype: int) -> list[ValueInfoProto]:
    """The sequence types of the sequences ``undo_nodes`` computes (for a second differentiation)."""
    seq_ops = ("SequenceErase", "SequenceInsert", "Identity")
    names = [o for n in nodes if n.op_type in seq_ops for o in n.output]
    return [helper.make_tensor_sequence_value_info(name, dtype, None) for name in names]


def _producers(nodes: list[NodeProto]) -> dict[str, int]:
    return {o: k for k, node in enumerate(nodes) for o in node.output if o}


def _one_hot(nodes: list[NodeProto], producer: dict[str, int], name: str) -> NodeProto | None:
    """The SequenceInsert making ``name`` a one-hot sequence (SequenceAt's gradient: zeros like
    the list, one erased and a tensor inserted back at a constant position), else None."""
    k = producer.get(name)
    while k is not None and nodes[k].op_type == "Identity":
        k = producer.get(nodes[k].input[0])
    insert = nodes[k] if k is not None else None
    if insert is None or insert.op_type != "SequenceInsert":
        return None
    k = producer.get(insert.input[0])
    erase = nodes[k] if k is not None else None
    if erase is None or erase.op_type != "SequenceErase" or len(erase.input) < 2:
        return None
    k = producer.get(erase.input[0])
    zeros = nodes[k] if k is not None else None
    if zeros is None or zeros.op_type != "SequenceMap" or zeros.attribute[0].g.name != "zeros_like":
        return None
    return insert


def insert_sums(ctx: GradContext, nodes: list[NodeProto], grads: list[tuple[str, int]]) -> list[ValueInfoProto]:
    """Rewrites in ``nodes`` the element-wise sums producing the sequence gradients ``grads``
    (name, element type; a SequenceMap 'sequence_sum') whose terms include one-hot sequences (a SequenceAt's
    gradient inside the body): the tensor is added into the other terms' sum at its position,
    by SequenceAt, Add, SequenceErase and SequenceInsert. A second differentiation's reverse
    sweep undoes those (it cannot undo a sum). Returns the new sequences' types."""
    infos: list[ValueInfoProto] = []
    for grad, dtype in grads:
        producer = _producers(nodes)
        k = producer.get(grad)
        while k is not None and nodes[k].op_type == "Identity":
            k = producer.get(nodes[k].input[0])
        if k is None or nodes[k].op_type != "SequenceMap" or nodes[k].attribute[0].g.name != "sequence_sum":
            continue
        node = nodes[k]
        hots = [h for h in (_one_hot(nodes, producer, p) for p in node.input) if h is not None]
        rest = [p for p in node.input if _one_hot(nodes, producer, p) is None]
        if not hots or not rest:
            continue
        new: list[NodeProto] = []
        total = rest[0]
        if len(rest) > 1:
            total = ctx.fresh_name("seq_sum")
            body = sum_body(ValueType(dtype, None), len(rest), ctx.fresh_name)
            new.append(helper.make_node("SequenceMap", rest, [total], body=body))
            infos.append(helper.make_tensor_sequence_value_info(total, dtype, None))
        for hot in hots:
            erase_at = nodes[producer[hot.input[0]]].input[1]
            old, cut, summed = ctx.fresh_name("seq_elem"), ctx.fresh_name("seq_cut"), ctx.fresh_name("seq_elem")
            out = node.output[0] if hot is hots[-1] else ctx.fresh_name("seq_sum")
            new.append(helper.make_node("SequenceAt", [total, erase_at], [old]))
            new.append(helper.make_node("Add", [old, hot.input[1]], [summed]))
            new.append(helper.make_node("SequenceErase", [total, erase_at], [cut]))
            new.append(helper.make_node("SequenceInsert", [cut, summed, *hot.input[2:]], [out]))
            total = out
        infos += sequence_infos(new, dtype)
        nodes[k : k + 1] = new
    return infos
