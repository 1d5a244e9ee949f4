"""Rules for If and Scan: the backward is control flow of the same kind.

If: an If on the same condition whose branches are each branch's vector-Jacobian
product with respect to the outer-scope float values the branches read (a branch
that does not read a value gives it zeros); only the taken branch runs.

Scan (opset 9+): the forward Scan is re-emitted with extra scan outputs recording
each iteration's input states (the tape); a backward Scan runs over it in reverse.
Its state: the states' gradients and one accumulator per captured float value (the
weights: O(|W|) memory); its scan inputs: the tape, the forward scan inputs and the
scan outputs' gradients; its scan outputs: the scan inputs' gradients. Its body is
the forward body's vector-Jacobian product, built by our own pass (``_subgraph``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...onnx_core import GraphProto, NodeProto, ValueInfoProto, helper
from ...onnx_core.gradient import (
    FLOAT_TYPES,
    GradContext,
    Grads,
    TangentContext,
    Tangents,
    ValueType,
    infer_types,
    sum_body,
    value_type,
)
from ._forward_subgraph import jvp_nodes, pruned
from ._loop_sequences import (
    Step,
    erases,
    insert_sums,
    record_erased,
    sequence_infos,
    sequence_states,
    undo_nodes,
    undo_steps,
)
from ._recurrent_cache import Built, cached_rule, optimized
from ._recurrent_direct import direct_grad
from ._recurrent_lowering import lower_recurrent, tape_from_outputs
from ._subgraph import elem_type, graph_with_types, seq_elem_type, tensor_info, vjp_nodes
from ._table import jvp_rule, rule
from .sequence import zeros_sequence


def _outer_info(ctx: GradContext, name: str) -> ValueInfoProto:
    elem = ctx.sequence_type(name) if ctx.is_sequence(name) else None
    if elem is not None:  # a list the body reads (a tape list, differentiated again)
        return helper.make_tensor_sequence_value_info(name, elem.dtype, None)
    t = ctx.type(name)
    return helper.make_tensor_value_info(name, t.dtype, t.shape)


def _accumulate(ctx: GradContext, acc: str, g: str, total: str, name: str) -> NodeProto:
    """``total = acc + g`` for the gradient of the captured ``name``: element-wise for a list."""
    elem = ctx.sequence_type(name) if ctx.is_sequence(name) else None
    if elem is None:
        return helper.make_node("Add", [acc, g], [total])
    return helper.make_node("SequenceMap", [acc, g], [total], body=sum_body(elem, 2, ctx.fresh_name))


def _zeros_captured(ctx: GradContext, name: str) -> str:
    """Zeros like the captured ``name`` (a list of zeros for a list)."""
    elem = ctx.sequence_type(name) if ctx.is_sequence(name) else None
    return ctx.zeros_like(name) if elem is None else zeros_sequence(ctx, name, elem)


#: the ranks the spec fixes for RNN/GRU/LSTM's inputs (X, W, R, B, sequence_lens, initial_h,
#: initial_c, P) and outputs (Y, Y_h, Y_c)
_RECURRENT_IN_RANKS = (3, 3, 3, 2, 1, 3, 3, 2)
_RECURRENT_OUT_RANKS = (4, 3, 3)


def _ranked_info(ctx: GradContext, name: str, rank: int, dtype: int) -> ValueInfoProto:
    """``_outer_info``, with ``rank`` unknown dims and the node's float type ``dtype`` where
    inference lost them (an If whose branches differ in rank, as torch exports an optional
    Unsqueeze)."""
    if ctx.shape(name) is not None and ctx.dtype(name):
        return _outer_info(ctx, name)
    shape = ctx.shape(name)
    return helper.make_tensor_value_info(name, ctx.dtype(name) or dtype, [None] * rank if shape is None else shape)


def _recurrent_types(ctx: GradContext, inputs: list[str], seeds: Sequence[tuple[int, str]]) -> list[ValueInfoProto]:
    """The types of the node's inputs and of the gradients ``seeds`` (output index, name)."""
    ranked = [(name, _RECURRENT_IN_RANKS[k]) for k, name in enumerate(inputs) if name and k != 4]
    ranked += [(g, _RECURRENT_OUT_RANKS[j]) for j, g in seeds]
    dtype = next((ctx.dtype(name) for name, _ in ranked if ctx.dtype(name)), 0)  # one type T for all
    types = [_ranked_info(ctx, name, rank, dtype) for name, rank in dict(ranked[::-1]).items()][::-1]
    return types + ([_outer_info(ctx, inputs[4])] if inputs[4] else [])


def _float_captured(ctx: GradContext) -> list[str]:
    """The captured outer values whose gradients are asked for."""
    return [c for c in ctx.captured if ctx.captured_needs_grad(c) and ctx.dtype(c) in (0, *FLOAT_TYPES)]


def _branch_vjp(ctx: GradContext, branch: GraphProto, wrt: list[str], name: str) -> GraphProto:
    seeds = [(o.name, g) for o, g in zip(branch.output, ctx.output_grads) if g]
    types = [_outer_info(ctx, n) for n in [*ctx.captured, *(g for _, g in seeds)]]
    nodes, outs, _, declared = vjp_nodes(ctx, list(branch.node), seeds, wrt, [*types, *_declared(branch)])
    infos = [tensor_info(o, _outer_info(ctx, c)) for o, c in zip(outs, wrt)]
    return graph_with_types(nodes, name, [], infos, declared)


def _declared(graph: GraphProto) -> list[ValueInfoProto]:
    return [*graph.input, *graph.value_info, *graph.output]


@rule("", "If")
def if_grad(ctx: GradContext, dy: str) -> Grads:
    """An If on the same condition: each branch computes its own VJP for the captured values."""
    wrt = _float_captured(ctx)
    if not wrt:
        return [None]
    then_b = _branch_vjp(ctx, ctx.attr("then_branch"), wrt, "then_vjp")
    else_b = _branch_vjp(ctx, ctx.attr("else_branch"), wrt, "else_vjp")
    outs = ctx.op.If(ctx.input(0), then_branch=then_b, else_branch=else_b, _outputs=len(wrt))
    outs = [outs] if isinstance(outs, str) else outs
    grads = dict(zip(wrt, outs))
    return [None, *(grads.get(c) for c in ctx.captured)]


class _ScanSpec:
    """Scan's counts, axes and directions, with the spec's defaults filled in."""

    def __init__(self, ctx: GradContext) -> None:
        self.body: GraphProto = ctx.attr("body")
        self.m = int(ctx.attr("num_scan_inputs"))
        self.n = len(ctx.inputs) - self.m
        self.k = len(self.body.output) - self.n
        self.in_axes = list(ctx.attr("scan_input_axes") or [0] * self.m)
        self.in_dirs = list(ctx.attr("scan_input_directions") or [0] * self.m)
        self.out_axes = list(ctx.attr("scan_output_axes") or [0] * self.k)
        self.out_dirs = list(ctx.attr("scan_output_directions") or [0] * self.k)

    def is_float(self, j: int) -> bool:
        return elem_type(self.body.input[j]) in FLOAT_TYPES


def _tape(ctx: GradContext, spec: _ScanSpec) -> list[str]:
    """The forward Scan again, with each iteration's input states as extra scan outputs."""
    body = GraphProto()
    body.CopyFrom(spec.body)
    for j in range(spec.n):
        state = spec.body.input[j]
        name = ctx.fresh_name(f"tape_{state.name}")
        body.node.append(helper.make_node("Identity", [state.name], [name]))
        body.output.append(tensor_info(name, state))
    outs = ctx.op.Scan(
        *ctx.inputs,
        body=body,
        num_scan_inputs=spec.m,
        scan_input_axes=spec.in_axes or None,
        scan_input_directions=spec.in_dirs or None,
        scan_output_axes=[*spec.out_axes, *[0] * spec.n] or None,
        scan_output_directions=[*spec.out_dirs, *[0] * spec.n] or None,
        _outputs=spec.n + spec.k + spec.n,
    )
    tape = list(outs[spec.n + spec.k :])
    for name, state in zip(tape, spec.body.input):
        ctx.declare(name, state, scan_axis=0)
    return tape


def _backward_body(
    ctx: GradContext, spec: _ScanSpec, states: list[int], scans: list[int], outs: list[int], wrt: list[str]
) -> tuple[GraphProto, list[str]]:
    """The backward Scan's body: (dstates, accumulators; tape, xs, dys) -> (dstates, accumulators; dxs)."""
    body = spec.body
    ds = {j: ctx.fresh_name(f"d_{body.output[j].name}") for j in states}
    dys = {k: ctx.fresh_name(f"d_{body.output[spec.n + k].name}") for k in outs}
    acc = {c: ctx.fresh_name(f"acc_{c}") for c in wrt}
    seeds = [(body.output[j].name, ds[j]) for j in states]
    seeds += [(body.output[spec.n + k].name, dys[k]) for k in outs]
    types = [*_declared(body), *(_outer_info(ctx, c) for c in ctx.captured)]
    types += [tensor_info(ds[j], body.output[j]) for j in states]
    types += [tensor_info(dys[k], body.output[spec.n + k]) for k in outs]
    xs = [body.input[j].name for j in states] + [body.input[spec.n + m].name for m in scans] + wrt
    local = [i.name for i in body.input] + list(ds.values()) + list(dys.values())
    nodes, grads, rename, declared = vjp_nodes(ctx, list(body.node), seeds, xs, types, local)
    ns, nx = len(states), len(scans)
    g_states, g_scans, g_wrt = grads[:ns], grads[ns : ns + nx], grads[ns + nx :]
    new_acc = []
    for c, g in zip(wrt, g_wrt):
        total = ctx.fresh_name(f"acc_{c}")
        nodes.append(helper.make_node("Add", [acc[c], g], [total]))
        new_acc.append(total)
    inputs = [tensor_info(rename[ds[j]], body.output[j]) for j in states]
    inputs += [tensor_info(acc[c], _outer_info(ctx, c)) for c in wrt]
    inputs += [tensor_info(rename[i.name], i) for i in body.input]
    inputs += [tensor_info(rename[dys[k]], body.output[spec.n + k]) for k in outs]
    outputs = [tensor_info(g, body.input[j]) for g, j in zip(g_states, states)]
    outputs += [tensor_info(g, _outer_info(ctx, c)) for g, c in zip(new_acc, wrt)]
    outputs += [tensor_info(g, body.input[spec.n + m]) for g, m in zip(g_scans, scans)]
    return graph_with_types(nodes, "scan_vjp", inputs, outputs, declared), [i.name for i in inputs]


@rule("", "Scan", since=9)
def scan_grad(ctx: GradContext, dy: str) -> Grads:
    """A backward Scan over the tape of input states, in reverse iteration order."""
    spec = _ScanSpec(ctx)
    n, m = spec.n, spec.m
    states = [j for j in range(n) if spec.is_float(j)]
    scans = [i for i in range(m) if ctx.needs_grad(n + i) and spec.is_float(n + i)]
    outs = [k for k in range(spec.k) if ctx.output_grads[n + k]]
    wrt = _float_captured(ctx)
    lists = [c for c in wrt if ctx.is_sequence(c)]
    if lists:
        raise ctx.error(
            f"the Scan body reads the list {lists[0]!r} from the outer scope, whose gradient would accumulate in "
            "the backward Scan's state, which holds tensors only: read its elements outside the Scan (SequenceAt) "
            "and let the body read those tensors, or use a Loop"
        )
    if not (states or scans or wrt):
        return [None] * (n + m)
    body, _ = _backward_body(ctx, spec, states, scans, outs, wrt)
    tape = _tape(ctx, spec)
    init: list[Any] = [ctx.output_grads[j] or ctx.zeros_like(ctx.input(j)) for j in states]
    init += [ctx.zeros_like(c) for c in wrt]
    xs = [*tape, *ctx.inputs[n:], *(ctx.output_grads[n + k] for k in outs)]
    results = ctx.op.Scan(
        *init,
        *xs,
        body=body,
        num_scan_inputs=len(xs),
        scan_input_axes=[*[0] * n, *spec.in_axes, *(spec.out_axes[k] for k in outs)],
        scan_input_directions=[*[1] * n, *(1 - d for d in spec.in_dirs), *(1 - spec.out_dirs[k] for k in outs)],
        scan_output_axes=[spec.in_axes[i] for i in scans] or None,
        scan_output_directions=[1 - spec.in_dirs[i] for i in scans] or None,
        _outputs=len(states) + len(wrt) + len(scans),
    )
    results = [results] if isinstance(results, str) else list(results)
    infos = [*(spec.body.input[j] for j in states), *(_outer_info(ctx, c) for c in wrt)]
    for name, info in zip(results, infos):
        ctx.declare(name, info)
    for name, i in zip(results[len(infos) :], scans):
        ctx.declare(name, spec.body.input[n + i], scan_axis=spec.in_axes[i])
    grads: list[str | None] = [None] * (n + m)
    for j, g in zip(states, results):
        grads[j] = g
    w_grads = dict(zip(wrt, results[len(states) : len(states) + len(wrt)]))
    for i, g in zip(scans, results[len(states) + len(wrt) :]):
        grads[n + i] = g
    return [*grads, *(w_grads.get(c) for c in ctx.captured)]


@rule("", "RNN", "GRU", "LSTM", nondiff=(4,))
def recurrent_grad(ctx: GradContext, dy: str) -> Grads:
    """The node lowered to one Scan per direction (see ``_recurrent_lowering``), differentiated
    by our own pass: a backward Scan in reverse time whose state accumulates W, R, B and P's
    gradients. Built once per signature (``_recurrent_cache``). The common LSTM and GRU
    (default activations, no clip, lens or peepholes) are written out directly instead
    (``_recurrent_direct``)."""
    direct = direct_grad(ctx)
    if direct is not None:
        return direct
    body, grads, declared = cached_rule(ctx, _recurrent_vjp)
    ctx.emit_nodes(body)
    for info in declared:
        ctx.declare(info.name, info)
    return grads


def _recurrent_vjp(ctx: GradContext) -> tuple[Built, list[NodeProto]]:
    tapes: list[Any] = []
    nodes, outs, inputs, infos = lower_recurrent(ctx, tapes)
    seeds = [(o, g) for o, g in zip(outs, ctx.output_grads) if g and o]
    # a tensor fed to two inputs (h0 as initial_h and initial_c) is differentiated once
    wrt = list(dict.fromkeys(name for k, name in enumerate(inputs) if name and k != 4 and ctx.needs_grad(k)))
    types = _recurrent_types(ctx, inputs, [(j, g) for j, (o, g) in enumerate(zip(outs, ctx.output_grads)) if g and o])
    dtype = ctx.dtype(inputs[0]) or ctx.dtype(inputs[1])
    body, grads, rename, declared = vjp_nodes(ctx, nodes, seeds, wrt, [*types, *infos], dtype=dtype)
    body = tape_from_outputs(ctx, body, tapes, rename)  # a recurrence of one state runs once, in the node
    by_name = dict(zip(wrt, grads))
    per_input: list[str | None] = []
    for k, name in enumerate(ctx.inputs):
        if name and k != 4 and name in ctx.inputs[:k] and name in by_name:
            # a repeated name: its whole gradient went to its first position (the pass adds them up)
            shape, zeros = ctx.fresh_name("rnn_shape"), ctx.fresh_name("rnn_zeros")
            zero = helper.make_tensor("zero", ctx.dtype(name) or dtype, [1], [0.0])
            body += [helper.make_node("Shape", [name], [shape])]
            body += [helper.make_node("ConstantOfShape", [shape], [zeros], value=zero)]
            per_input.append(zeros)
        else:
            per_input.append(by_name.get(name) if name and k != 4 else None)
    wanted = [g for g in per_input if g]
    body = optimized(body, [*ctx.inputs, *(g or "" for g in ctx.output_grads)], wanted, ctx.opset)
    made = {o for n in body for o in n.output}
    return (body, per_input, [d for d in declared if d.name in made]), nodes


def _growing(ctx: GradContext, body: GraphProto, taped: list[int]) -> tuple[GraphProto, set[int]]:
    """The carried tensors ``taped`` whose shape the body may change (inferred from the declared
    inputs: a list built by Concat, torch's ``torch.cat`` in a loop; or a dim unknown), and the body with their
    declared types relaxed (rank kept, dims unknown: an export declares the first iteration's)."""
    known = {i.name: t for i in body.input if (t := value_type(i)) is not None}
    known.update({c: ctx.type(c) for c in ctx.captured if c not in known})
    types, _ = infer_types(list(body.node), known, {}, ctx.opset)
    growing = set()
    for j in taped:
        before, after = known.get(body.input[2 + j].name), types.get(body.output[1 + j].name)
        if before is not None and before.shape is not None and None in before.shape:
            growing.add(j)  # declared with an unknown dim (a reverse Loop's gradient, differentiated again)
        elif before is not None and after is not None and before.shape is not None and after.shape is not None:
            if len(before.shape) != len(after.shape) or any(
                a != b or a is None for a, b in zip(before.shape, after.shape)
            ):
                growing.add(j)
    if not growing:
        return body, growing
    relaxed = GraphProto()
    relaxed.CopyFrom(body)
    for j in growing:
        for info in (relaxed.input[2 + j], relaxed.output[1 + j]):
            declared = value_type(info)
            rank = len(declared.shape or ()) if declared is not None else 0
            info.CopyFrom(helper.make_tensor_value_info(info.name, elem_type(info), [None] * rank if rank else None))
    return relaxed, growing


def _loop_tape(
    ctx: GradContext,
    body: GraphProto,
    n: int,
    taped: list[int],
    erased: dict[int, tuple[list[Step], int]],
    growing: set[int],
) -> tuple[list[str], str, list[str], list[str]]:
    """The forward Loop replaced by one that also records each iteration's carried tensors
    ``taped`` (in a scan output; those of ``growing``, whose shape changes, in a carried
    sequence), counts iterations and collects the tensors the ``erased`` sequences lose (so the
    loop runs once); returns the tape, the counter, the Loop's final carried values and the
    collections."""
    tape_body = GraphProto()
    tape_body.CopyFrom(body)
    for steps, dtype in erased.values():
        record_erased(ctx, tape_body, steps, dtype)
    listed = [j for j in taped if j in growing]
    for j in listed:
        _record_in_sequence(ctx, tape_body, body.input[2 + j])
    infos = [body.input[0], *(body.input[2 + j] for j in taped if j not in growing)]
    for info in infos:
        name = ctx.fresh_name(f"tape_{info.name}")
        tape_body.node.append(helper.make_node("Identity", [info.name], [name]))
        tape_body.output.append(tensor_info(name, info))
    k = len(body.output) - 1 - n
    dtypes = [dtype for _, dtype in erased.values()] + [elem_type(body.input[2 + j]) for j in listed]
    empty = [ctx.fresh_name("SequenceEmpty") for _ in dtypes]
    nodes = [helper.make_node("SequenceEmpty", [], [e], dtype=dtype) for e, dtype in zip(empty, dtypes)]
    # the node's own outputs keep their names (an omitted one gets a fresh name)
    own = [ctx.output(i) or ctx.fresh_name("loop_out") for i in range(n + k)]
    lost = [ctx.fresh_name("tape_erased") for _ in dtypes]
    counter, *tape = (ctx.fresh_name("tape") for _ in infos)
    loop = helper.make_node("Loop", [*ctx.inputs, *empty], [*own[:n], *lost, *own[n:], counter, *tape], body=tape_body)
    if not ctx.replace_forward([*nodes, loop]):  # the node is not run again: a Loop of its own
        own = [ctx.fresh_name("loop_out") for _ in own]
        loop.output[:] = [*own[:n], *lost, *own[n:], counter, *tape]
        ctx.emit_nodes([*nodes, loop])
    for name, info in zip([counter, *tape], infos):
        ctx.declare(name, info, scan_axis=0)
    for name, dtype in zip([*empty, *lost], [*dtypes, *dtypes]):
        ctx.declare_sequence(name, ValueType(dtype, None))
    by_j = dict(zip([j for j in taped if j not in growing], tape)) | dict(zip(listed, lost[len(erased) :]))
    return [by_j[j] for j in taped], counter, own[:n], lost[: len(erased)]


def _record_in_sequence(ctx: GradContext, body: GraphProto, info: ValueInfoProto) -> None:
    """Makes ``body`` carry a sequence of each iteration's ``info`` value, as its last carried value."""
    tape_in, tape_out = ctx.fresh_name("tape_list"), ctx.fresh_name("tape_list")
    body.node.append(helper.make_node("SequenceInsert", [tape_in, info.name], [tape_out]))
    slot = len(body.input)  # after the carried values and the collections added before
    body.input.append(helper.make_tensor_sequence_value_info(tape_in, elem_type(info), None))
    body.output.insert(slot - 1, helper.make_tensor_sequence_value_info(tape_out, elem_type(info), None))


@rule("", "Loop", nondiff=(0, 1))
def loop_grad(ctx: GradContext, dy: str) -> Grads:
    """A backward Loop over the recorded iterations, reading the tape backwards (Gather at T-1-i);
    a carried sequence is carried backwards too, undoing each iteration's inserts (``_loop_sequences``)."""
    body: GraphProto = ctx.attr("body")
    n = len(ctx.inputs) - 2
    k = len(body.output) - 1 - n
    seqs = sequence_states(ctx, body, list(ctx.inputs[2:]))
    carried = [j for j in range(n) if (seqs[j] if j in seqs else elem_type(body.input[2 + j])) in FLOAT_TYPES]
    outs = [s for s in range(k) if ctx.output_grads[n + s]]
    wrt = _float_captured(ctx)
    if not (carried or wrt):
        return [None] * len(ctx.inputs)
    undo = {j: undo_steps(ctx, body, j) for j in seqs}
    erased = {j: (undo[j], seqs[j]) for j in undo if erases(undo[j])}
    taped = [j for j in range(n) if j not in seqs]
    body, growing = _growing(ctx, body, taped)
    tape, counter, final, lost = _loop_tape(ctx, body, n, taped, erased, growing)
    steps = ctx.op.Squeeze(ctx.op.Shape(counter, start=0, end=1), ctx.ints([0]))
    last = ctx.op.Sub(steps, ctx.ints(1))
    loop_body = _loop_backward_body(ctx, body, n, carried, outs, wrt, tape, last, undo, list(erased), growing)
    init = [ctx.output_grads[j] or _zeros_state(ctx, final[j], seqs.get(j)) for j in carried]
    init += [_zeros_captured(ctx, c) for c in wrt]
    init += [final[j] for j in undo] + lost
    results = ctx.op.Loop(steps, "", *init, body=loop_body, _outputs=len(init))
    results = [results] if isinstance(results, str) else list(results)
    for name, j in zip(results, carried):
        if j in seqs:
            ctx.declare_sequence(name, ValueType(seqs[j], None))
        else:
            ctx.declare(name, _outer_info(ctx, ctx.input(2 + j)))
    for name, c in zip(results[len(carried) :], wrt):
        elem = ctx.sequence_type(c) if ctx.is_sequence(c) else None
        if elem is not None:
            ctx.declare_sequence(name, elem)
        else:
            ctx.declare(name, _outer_info(ctx, c))
    for name, j in zip([*(final[j] for j in seqs), *results[len(carried) + len(wrt) :]], [*seqs, *undo, *erased]):
        ctx.declare_sequence(name, ValueType(seqs[j], None))
    grads: list[str | None] = [None] * len(ctx.inputs)
    for j, g in zip(carried, results):
        grads[2 + j] = g
    w_grads = dict(zip(wrt, results[len(carried) :]))
    return [*grads, *(w_grads.get(c) for c in ctx.captured)]


def _zeros_state(ctx: GradContext, value: str, seq_dtype: int | None) -> str:
    """Zeros like a carried value: a tensor, or a sequence of ``seq_dtype`` tensors."""
    return ctx.zeros_like(value) if seq_dtype is None else zeros_sequence(ctx, value, ValueType(seq_dtype, None))


def _seq_dtype(body: GraphProto, j: int) -> int:
    """The element type the body declares for its carried sequence ``j``."""
    return seq_elem_type(body.input[2 + j]) or seq_elem_type(body.output[1 + j])


def _loop_backward_body(
    ctx: GradContext,
    body: GraphProto,
    n: int,
    carried: list[int],
    outs: list[int],
    wrt: list[str],
    tape: list[str],
    last: str,
    undo: dict[int, list[Step]],
    erased: list[int],
    growing: set[int],
) -> GraphProto:
    """(i, cond, dcarried, accumulators, sequences, erased) -> (true, dcarried, accumulators,
    sequences, erased), at iteration last - i; the sequences are the carried ones as that
    iteration left them, ``erased`` the tensors they lost until then."""
    ds = {j: ctx.fresh_name(f"d_{body.output[1 + j].name}") for j in carried}
    dys = {s: ctx.fresh_name(f"d_{body.output[1 + n + s].name}") for s in outs}
    acc = {c: ctx.fresh_name(f"acc_{c}") for c in wrt}
    current = {j: ctx.fresh_name(f"seq_{body.output[1 + j].name}") for j in undo}
    seeds = [(body.output[1 + j].name, ds[j]) for j in carried] + [(body.output[1 + n + s].name, dys[s]) for s in outs]
    types = [*_declared(body), *(_outer_info(ctx, c) for c in ctx.captured)]
    types += [tensor_info(ds[j], body.output[1 + j]) for j in carried]
    types += [tensor_info(dys[s], body.output[1 + n + s]) for s in outs]
    xs = [body.input[2 + j].name for j in carried] + wrt
    local = [i.name for i in body.input] + list(ds.values()) + list(dys.values())
    nodes, grads, rename, declared = vjp_nodes(ctx, list(body.node), seeds, xs, types, local)
    seq_grads = [(g, _seq_dtype(body, j)) for g, j in zip(grads, carried) if j in undo]
    declared += insert_sums(ctx, nodes, seq_grads)
    i_name, cond_in = ctx.fresh_name("i"), ctx.fresh_name("cond")
    idx = rename[body.input[0].name]
    pre = [helper.make_node("Sub", [last, i_name], [idx])]
    pre.append(helper.make_node("Identity", [cond_in], [rename[body.input[1].name]]))
    for t, j in zip(tape, [j for j in range(n) if j not in undo]):
        if j in growing:  # a tensor whose shape changes: read from a list
            pre.append(helper.make_node("SequenceAt", [t, idx], [rename[body.input[2 + j].name]]))
        else:
            pre.append(helper.make_node("Gather", [t, idx], [rename[body.input[2 + j].name]], axis=0))
    lost = {j: ctx.fresh_name("erased") for j in erased}
    lost_before = {j: ctx.fresh_name("erased") for j in erased}
    for j, steps in undo.items():
        undone = undo_nodes(
            ctx, current[j], steps, rename[body.input[2 + j].name], lost.get(j, ""), lost_before.get(j, "")
        )
        declared += sequence_infos(undone, _seq_dtype(body, j))
        pre += undone
    for s in outs:
        pre.append(helper.make_node("Gather", [ctx.output_grads[n + s] or "", idx], [rename[dys[s]]], axis=0))
    cond_out = ctx.fresh_name("cond")
    post = [helper.make_node("Identity", [cond_in], [cond_out])]
    new_acc = []
    for c, g in zip(wrt, grads[len(carried) :]):
        total = ctx.fresh_name(f"acc_{c}")
        post.append(_accumulate(ctx, acc[c], g, total, c))
        new_acc.append(total)
    previous = {j: ctx.fresh_name(f"seq_{body.input[2 + j].name}") for j in undo}
    post += [helper.make_node("Identity", [rename[body.input[2 + j].name]], [previous[j]]) for j in undo]
    inputs = [tensor_info(i_name, body.input[0]), tensor_info(cond_in, body.input[1])]
    inputs += [tensor_info(rename[ds[j]], body.output[1 + j]) for j in carried]
    inputs += [tensor_info(acc[c], _outer_info(ctx, c)) for c in wrt]
    inputs += [tensor_info(current[j], body.output[1 + j]) for j in undo]
    inputs += [tensor_info(lost[j], body.output[1 + j]) for j in erased]
    outputs = [tensor_info(cond_out, body.output[0])]
    outputs += [tensor_info(g, body.input[2 + j]) for g, j in zip(grads, carried)]
    outputs += [tensor_info(g, _outer_info(ctx, c)) for g, c in zip(new_acc, wrt)]
    outputs += [tensor_info(previous[j], body.input[2 + j]) for j in undo]
    outputs += [tensor_info(lost_before[j], body.input[2 + j]) for j in erased]
    # the values read from the tape have the body's types (for a second differentiation)
    declared += [tensor_info(rename[info.name], info) for info in [body.input[0], *body.input[2 : 2 + n]]]
    declared += [tensor_info(rename[dys[s]], body.output[1 + n + s]) for s in outs]
    every = [*pre, *nodes, *post]
    # a list's accumulator adds one-hot lists (SequenceAt's gradients) in place, undoably
    lists = [(t, e.dtype) for t, c in zip(new_acc, wrt) if (e := ctx.sequence_type(c) if ctx.is_sequence(c) else None)]
    declared += insert_sums(ctx, every, lists)
    return graph_with_types(every, "loop_vjp", inputs, outputs, declared)


# -- forward rules ------------------------------------------------------------------------------
def _floats(ctx: TangentContext, infos: Sequence[ValueInfoProto], outer: Sequence[str]) -> list[int]:
    """The positions whose value is float (declared by the body, else inferred for the outer name)."""
    return [k for k, (i, o) in enumerate(zip(infos, outer)) if (elem_type(i) or ctx.dtype(o)) in FLOAT_TYPES]


def _tangent_body(
    ctx: TangentContext, body: GraphProto, ys: list[str], wrt: dict[str, str], with_forward: bool = True
) -> tuple[list[NodeProto], list[str], dict[str, str]]:
    """The body's nodes (when ``with_forward``), the tangent of each of ``ys`` and the renaming of
    the body's names (its inputs included)."""
    types = [*_declared(body), *(_outer_info(ctx, c) for c in ctx.captured)]
    unique = list(dict.fromkeys(ys))
    local = [i.name for i in body.input] if with_forward else []
    nodes, tangents, _, rename = jvp_nodes(
        ctx, list(body.node), unique, wrt, types, with_forward=with_forward, local=local
    )
    of = dict(zip(unique, tangents))
    return nodes, [of[y] for y in ys], rename


def _renamed(infos: Sequence[ValueInfoProto], rename: dict[str, str]) -> list[ValueInfoProto]:
    return [tensor_info(rename.get(i.name, i.name), i) for i in infos]


def _branch_dtypes(ctx: TangentContext, then_g: GraphProto, else_g: GraphProto) -> list[int]:
    """Each If output's element type: declared by a branch, else inferred (0 when unknown)."""
    return [elem_type(a) or elem_type(b) or ctx.dtype(o) for a, b, o in zip(then_g.output, else_g.output, ctx.outputs)]


@jvp_rule("", "If")
def if_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """An If on the same condition whose branches compute their outputs' tangents from the
    tangents of the captured values they read: only the taken branch runs."""
    wrt = ctx.captured_tangents
    then_g, else_g = ctx.attr("then_branch"), ctx.attr("else_branch")
    # an output of unknown type (torch leaves nested branch outputs untyped) may be float: its
    # tangent is built, not taken for zero
    floats = [k for k, t in enumerate(_branch_dtypes(ctx, then_g, else_g)) if t in (0, *FLOAT_TYPES)]
    if not wrt or not floats:
        return None
    branches = {}
    for key, g in (("then_branch", then_g), ("else_branch", else_g)):
        nodes, tys, _ = _tangent_body(ctx, g, [g.output[k].name for k in floats], wrt, with_forward=False)
        infos = [tensor_info(t, g.output[k]) for t, k in zip(tys, floats)]
        branches[key] = helper.make_graph(nodes, f"{key}_jvp", [], infos)
    then_b, else_b = branches["then_branch"], branches["else_branch"]
    outs = ctx.op.If(ctx.input(0), then_branch=then_b, else_branch=else_b, _outputs=len(floats))
    outs = [outs] if isinstance(outs, str) else list(outs)
    result: list[str | None] = [None] * len(ctx.outputs)
    for k, t in zip(floats, outs):
        result[k] = t
        ctx.declare(t, then_g.output[k])
    return result


@jvp_rule("", "Scan")
def scan_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """A Scan carrying each float state's tangent as an extra state and each differentiated scan
    input's tangent as an extra scan input; its body is the body followed by its tangent."""
    spec, body = _ScanSpec(ctx), ctx.attr("body")
    n, m, k = spec.n, spec.m, spec.k
    wrt = ctx.captured_tangents
    states = _floats(ctx, list(body.input[:n]), ctx.inputs[:n])
    scans = [i for i in range(m) if i + n < len(ts) and ts[n + i] is not None]
    outs = _floats(ctx, list(body.output[n:]), ctx.outputs[n:])
    if not (wrt or scans or any(ts[j] for j in states)):
        return None
    t_in = {j: ctx.fresh_name(f"t_{body.input[j].name}") for j in [*states, *(n + i for i in scans)]}
    wrt = {**{body.input[j].name: t for j, t in t_in.items()}, **wrt}
    ys = [body.output[j].name for j in states] + [body.output[n + q].name for q in outs]
    nodes, tys, rename = _tangent_body(ctx, body, ys, wrt)
    ns = len(states)
    ins, outs_ = _renamed(body.input, rename), _renamed(body.output, rename)
    inputs = [*ins[:n], *(tensor_info(t_in[j], body.input[j]) for j in states), *ins[n:]]
    inputs += [tensor_info(t_in[n + i], body.input[n + i]) for i in scans]
    # the primal scan outputs are the forward node's: the tangent Scan carries only the states
    outputs = [*outs_[:n], *(tensor_info(t, body.output[j]) for t, j in zip(tys, states))]
    outputs += [tensor_info(t, body.output[n + q]) for t, q in zip(tys[ns:], outs)]
    init = [ts[j] or ctx.zeros_like(ctx.input(j)) for j in states]
    results = ctx.op.Scan(
        *ctx.inputs[:n], *init, *ctx.inputs[n:], *(ts[n + i] for i in scans),
        body=helper.make_graph(pruned(nodes, [o.name for o in outputs]), "scan_jvp", inputs, outputs),
        num_scan_inputs=m + len(scans),
        scan_input_axes=[*spec.in_axes, *(spec.in_axes[i] for i in scans)] or None,
        scan_input_directions=[*spec.in_dirs, *(spec.in_dirs[i] for i in scans)] or None,
        scan_output_axes=[spec.out_axes[q] for q in outs] or None,
        scan_output_directions=[spec.out_dirs[q] for q in outs] or None,
        _outputs=n + ns + len(outs),
    )  # fmt: skip
    results = [results] if isinstance(results, str) else list(results)
    tangents: list[str | None] = [None] * (n + k)
    for j, t in zip(states, results[n : n + ns]):
        tangents[j] = t
        ctx.declare(t, body.input[j])
    for q, t in zip(outs, results[n + ns :]):
        tangents[n + q] = t
        ctx.declare(t, body.output[n + q], scan_axis=spec.out_axes[q])
    return tangents


@jvp_rule("", "Loop")
def loop_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """A Loop carrying each float loop variable's tangent as an extra loop variable, and the scan
    outputs' tangents as extra scan outputs; its body is the body followed by its tangent."""
    body: GraphProto = ctx.attr("body")
    n = len(ctx.inputs) - 2
    k = len(body.output) - 1 - n
    wrt = ctx.captured_tangents
    seqs = sequence_states(ctx, body, list(ctx.inputs[2:]))
    carried = sorted({*(j for j in _floats(ctx, list(body.input[2:]), ctx.inputs[2:]) if j not in seqs),
                      *(j for j, dtype in seqs.items() if dtype in FLOAT_TYPES)})  # fmt: skip
    outs = _floats(ctx, list(body.output[1 + n :]), ctx.outputs[n:])
    if not (wrt or any(ts[2 + j] for j in carried)):
        return None
    t_in = {j: ctx.fresh_name(f"t_{body.input[2 + j].name}") for j in carried}
    wrt = {**{body.input[2 + j].name: t for j, t in t_in.items()}, **wrt}
    ys = [body.output[1 + j].name for j in carried] + [body.output[1 + n + q].name for q in outs]
    nodes, tys, rename = _tangent_body(ctx, body, ys, wrt)
    nc = len(carried)
    ins, outs_ = _renamed(body.input, rename), _renamed(body.output, rename)
    inputs = [*ins, *(tensor_info(t_in[j], body.input[2 + j]) for j in carried)]
    # the primal scan outputs are the forward node's: the tangent Loop carries only the variables
    outputs = [*outs_[: 1 + n], *(tensor_info(t, body.output[1 + j]) for t, j in zip(tys, carried))]
    outputs += [tensor_info(t, body.output[1 + n + q]) for t, q in zip(tys[nc:], outs)]
    init = [ts[2 + j] or _zeros_state(ctx, ctx.input(2 + j), seqs.get(j)) for j in carried]
    results = ctx.op.Loop(
        *ctx.inputs,
        *init,
        body=helper.make_graph(pruned(nodes, [o.name for o in outputs]), "loop_jvp", inputs, outputs),
        _outputs=n + nc + len(outs),
    )
    results = [results] if isinstance(results, str) else list(results)
    tangents: list[str | None] = [None] * (n + k)
    for j, name in enumerate(results[:n]):
        if j in seqs:
            ctx.declare_sequence(name, ValueType(seqs[j], None))
    for j, t in zip(carried, results[n : n + nc]):
        tangents[j] = t
        if j in seqs:  # a carried list's tangent is a list
            ctx.declare_sequence(t, ValueType(seqs[j], None))
        else:
            ctx.declare(t, body.input[2 + j])
    for q, t in zip(outs, results[n + nc :]):
        tangents[n + q] = t
        ctx.declare(t, body.output[1 + n + q], scan_axis=0)
    return tangents


@jvp_rule("", "RNN", "GRU", "LSTM")
def recurrent_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """The node lowered to one Scan per direction (as the reverse rule does), whose tangent our
    own forward pass builds: Scans carrying the state tangents beside the states."""
    nodes, outs, inputs, infos = lower_recurrent(ctx)
    wrt = {name: t for k, (name, t) in enumerate(zip(inputs, ts)) if name and k != 4 and t is not None}
    if not wrt:
        return None
    types = _recurrent_types(ctx, inputs, [])
    ys = [o for o in outs if o]
    body, tys, declared, _ = jvp_nodes(ctx, nodes, ys, wrt, [*types, *infos], with_forward=False)
    ctx.emit_nodes(body)
    for info in declared:
        ctx.declare(info.name, info)
    of = dict(zip(ys, tys))
    return [of.get(o) if o and ctx.output(i) else None for i, o in enumerate(outs)][: len(ctx.outputs)]
