"""Rules for the sequence ops (what torch's tensor_split, unbind, hstack/vstack export to).

The gradient of a sequence is a sequence of the same length holding each element's
gradient (zeros for an element never read); the core sums several of them element-wise
(``onnx_core.gradient._sequences``). So each rule is the op's adjoint on sequences:

- SequenceConstruct(x_1..x_n): dx_k = SequenceAt(dS, k)
- SequenceAt(S, p): dS = zeros like S with dY at p
- SequenceInsert(S, T, p): dT = dS'[q], dS = dS' without q (q: where T went in S')
- SequenceErase(S, p): dS = dS' with zeros like S[p] inserted back at p
- SplitToSequence(X): dX = ConcatFromSequence(dS) (stacked when the axis was dropped)
- ConcatFromSequence(S): dS = SplitToSequence(dY) into the elements' sizes
- SequenceMap(S, ...): a SequenceMap of the body's vector-Jacobian product

Each op is linear in its tensors and sequences, so its forward rule is the op itself
applied to the tangents (a tangent of a sequence is a sequence too); SequenceMap's is
a SequenceMap of the body's tangent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...onnx_core import GraphProto, ValueInfoProto, helper
from ...onnx_core.gradient import GradContext, Grads, TangentContext, TangentOfNodes, Tangents, ValueType
from ...onnx_core.numpy_helper import from_array
from ._subgraph import elem_type, graph_with_types, renamed_nodes, tensor_info, vjp_nodes
from ._table import jvp_rule, no_grad, rule

no_grad("", "SequenceLength", "SequenceEmpty")


def _elem(ctx: GradContext, seq: str, *like: str) -> ValueType:
    """The element type of sequence ``seq`` (declared, else inferred, else the dtype of the first
    tensor of ``like`` that has one), recorded as ``seq``'s: a sequence the schema does not call
    one (a Loop's carried list) then has its several gradients summed element-wise."""
    t = ctx.sequence_type(seq)
    if t is not None and t.dtype:
        return t
    inferred = ctx.type(seq)  # inference types a sequence by its elements
    dtype = inferred.dtype or next((d for name in like if name and (d := ctx.dtype(name))), 0)
    if not dtype:
        raise ctx.error(
            f"needs the element type of the sequence {seq!r}, which is not declared; declare it "
            "(a value_info with a sequence type, e.g. from shape inference)"
        )
    elem = inferred if inferred.dtype else ValueType(dtype, None)
    ctx.declare_sequence(seq, elem)
    return elem


def _declared(ctx: GradContext, name: str, elem: ValueType) -> str:
    ctx.declare_sequence(name, elem)
    return name


def _map_body(elem: ValueType, out_dtype: int, build: Any, ctx: GradContext, name: str) -> GraphProto:
    """A one-input SequenceMap body: ``build(x) -> (nodes, out)`` over an ``elem`` tensor ``x``."""
    x = ctx.fresh_name(f"{name}_in")
    nodes, out = build(x)
    return helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info(x, elem.dtype, elem.shape)],
        [helper.make_tensor_value_info(out, out_dtype, None)],
    )


def zeros_sequence(ctx: GradContext, seq: str, elem: ValueType) -> str:
    """A sequence like ``seq`` whose elements are zeros of their shapes."""

    def build(x: str) -> tuple[list[Any], str]:
        shape, out = ctx.fresh_name("zeros_shape"), ctx.fresh_name("zeros")
        zero = from_array(np.zeros((1,), helper.tensor_dtype_to_np_dtype(elem.dtype)))
        return [
            helper.make_node("Shape", [x], [shape]),
            helper.make_node("ConstantOfShape", [shape], [out], value=zero),
        ], out

    body = _map_body(elem, elem.dtype, build, ctx, "zeros_like")
    return _declared(ctx, ctx.op.SequenceMap(seq, body=body), elem)


def _zeros_tensor(ctx: GradContext, tensor: str, dtype: int) -> str:
    zero = from_array(np.zeros((1,), helper.tensor_dtype_to_np_dtype(dtype)))
    return ctx.op.ConstantOfShape(ctx.op.Shape(tensor), value=zero)


def _index(ctx: GradContext, position: str, seq: str) -> str:
    """``position`` as a non-negative int64 index into ``seq`` (negative counts from the back)."""
    known = ctx.value(position)
    if known is not None and int(np.asarray(known).reshape(-1)[0]) >= 0:
        return position
    p = ctx.op.Cast(position, to=helper.TensorProto.INT64)
    negative = ctx.op.Cast(ctx.op.Less(p, ctx.ints(0)), to=helper.TensorProto.INT64)
    return ctx.op.Add(p, ctx.op.Mul(negative, ctx.op.SequenceLength(seq)))


def _inserted_at(ctx: GradContext, position: str) -> str:
    """Where SequenceInsert put its tensor, as an index into its output: ``position`` when
    non-negative, ``position - 1`` when negative (it counted in the shorter input), the
    last element when omitted."""
    if not position:
        return ctx.ints(-1)
    known = ctx.value(position)
    if known is not None:
        p = int(np.asarray(known).reshape(-1)[0])
        return ctx.ints(p if p >= 0 else p - 1)
    p = ctx.op.Cast(position, to=helper.TensorProto.INT64)
    return ctx.op.Sub(p, ctx.op.Cast(ctx.op.Less(p, ctx.ints(0)), to=helper.TensorProto.INT64))


@rule("", "SequenceConstruct", since=11)
def sequence_construct_grad(ctx: GradContext, dy: str) -> Grads:
    """dx_k = SequenceAt(dS, k)."""
    return [ctx.op.SequenceAt(dy, ctx.ints(k)) if ctx.needs_grad(k) else None for k in range(len(ctx.inputs))]


@rule("", "SequenceAt", since=11, nondiff=(1,))
def sequence_at_grad(ctx: GradContext, dy: str) -> Grads:
    """dS = zeros like S, with dY at the position read (a constant position is kept as it
    is, so a Loop's reverse sweep can undo the Erase and Insert, see ``_loop_sequences``)."""
    seq, position = ctx.inputs[:2]
    elem = _elem(ctx, seq, ctx.output(0), dy)
    known = ctx.value(position)
    if known is not None:
        p = int(np.asarray(known).reshape(-1)[0])
        # dY goes back where the erased zeros were, counted in the shorter sequence
        back = [] if p == -1 else [position if p >= 0 else ctx.ints(p + 1)]
        zeros = ctx.op.SequenceErase(zeros_sequence(ctx, seq, elem), position)
        return _declared(ctx, ctx.op.SequenceInsert(zeros, dy, *back), elem), None
    q = _index(ctx, position, seq)
    zeros = ctx.op.SequenceErase(zeros_sequence(ctx, seq, elem), q)
    return _declared(ctx, ctx.op.SequenceInsert(zeros, dy, q), elem), None


@rule("", "SequenceInsert", since=11, nondiff=(2,))
def sequence_insert_grad(ctx: GradContext, dy: str) -> Grads:
    """dT = dS'[q], dS = dS' without element q (q: the inserted tensor's index in S')."""
    q = _inserted_at(ctx, ctx.input(2))
    elem = _elem(ctx, ctx.output(0), ctx.input(1))
    _elem(ctx, ctx.input(0), ctx.input(1))
    d_seq = _declared(ctx, ctx.op.SequenceErase(dy, q), elem) if ctx.needs_grad(0) else None
    d_tensor = ctx.op.SequenceAt(dy, q) if ctx.needs_grad(1) else None
    return d_seq, d_tensor, None


@rule("", "SequenceErase", since=11, nondiff=(1,))
def sequence_erase_grad(ctx: GradContext, dy: str) -> Grads:
    """dS = dS' with zeros like the erased element inserted back where it was."""
    seq, position = ctx.input(0), ctx.input(1)
    elem = _elem(ctx, seq)
    if not position:  # the last one was erased: zeros appended
        zeros = _zeros_tensor(ctx, ctx.op.SequenceAt(seq, ctx.ints(-1)), elem.dtype)
        return _declared(ctx, ctx.op.SequenceInsert(dy, zeros), elem), None
    q = _index(ctx, position, seq)
    zeros = _zeros_tensor(ctx, ctx.op.SequenceAt(seq, q), elem.dtype)
    inserted = ctx.op.SequenceInsert(dy, zeros, q)
    return _declared(ctx, inserted, elem), None


def _split_drops_axis(ctx: GradContext) -> bool:
    """SplitToSequence without ``split`` and with keepdims=0: chunks of 1, the axis removed."""
    return not ctx.input(1) and not int(ctx.attr("keepdims", 1))


@rule("", "SplitToSequence", since=11, nondiff=(1,))
def split_to_sequence_grad(ctx: GradContext, dy: str) -> Grads:
    """dX = ConcatFromSequence(dS) along the axis (stacked on a new one when it was dropped)."""
    axis = int(ctx.attr("axis", 0))
    return ctx.op.ConcatFromSequence(dy, axis=axis, new_axis=1 if _split_drops_axis(ctx) else None), None


@rule("", "ConcatFromSequence", since=11)
def concat_from_sequence_grad(ctx: GradContext, dy: str) -> Grads:
    """dS = SplitToSequence(dY) into chunks of the elements' sizes along the axis (one
    chunk per element, the axis dropped, when they were stacked)."""
    axis = int(ctx.attr("axis"))
    seq = ctx.input(0)
    elem = _elem(ctx, seq, ctx.output(0), dy)
    if int(ctx.attr("new_axis", 0)):
        return _declared(ctx, ctx.op.SplitToSequence(dy, axis=axis, keepdims=0), elem)

    def build(x: str) -> tuple[list[Any], str]:
        out = ctx.fresh_name("size")
        bounds: dict[str, Any] = {"start": axis} if axis == -1 else {"start": axis, "end": axis + 1}
        return [helper.make_node("Shape", [x], [out], **bounds)], out

    sizes = ctx.op.SequenceMap(seq, body=_map_body(elem, helper.TensorProto.INT64, build, ctx, "split_size"))
    split = ctx.op.ConcatFromSequence(sizes, axis=0)
    return _declared(ctx, ctx.op.SplitToSequence(dy, split, axis=axis), elem)


# ------------------------------------------------------------------ SequenceMap
def _map_is_sequence(ctx: GradContext, k: int) -> bool:
    """Input ``k`` of a SequenceMap is a sequence (the first always is)."""
    return k == 0 or ctx.is_sequence(ctx.inputs[k])


@rule("", "SequenceMap", since=17)
def sequence_map_grad(ctx: GradContext, dy: str) -> Grads:
    """A SequenceMap over the inputs and the outputs' gradients whose body is the forward
    body's vector-Jacobian product with respect to the sequence inputs' elements."""
    body: GraphProto = ctx.attr("body")
    n_in = len(ctx.inputs)
    wanted = [k for k in range(n_in) if ctx.needs_grad(k)]
    refused = [ctx.inputs[k] for k in wanted if not _map_is_sequence(ctx, k)]
    refused += [c for c in ctx.captured if ctx.captured_needs_grad(c)]
    if refused:
        raise ctx.error(
            f"differentiates only the sequence inputs of a SequenceMap; {refused[:3]} (a tensor input or a "
            "value its body reads) depend on a variable: pass them as sequences or compute them outside"
        )
    outs = [k for k, g in enumerate(ctx.output_grads) if g]
    if not wanted or not outs:
        return [None] * n_in
    body = _typed_body(ctx, body)
    ds = {k: ctx.fresh_name(f"d_{body.output[k].name}") for k in outs}
    seeds = [(body.output[k].name, ds[k]) for k in outs]
    types = [*body.input, *body.value_info, *body.output, *(tensor_info(ds[k], body.output[k]) for k in outs)]
    xs = [body.input[k].name for k in wanted]
    local = [i.name for i in body.input] + list(ds.values())
    dtype = elem_type(body.output[outs[0]]) or ctx.dtype(ctx.output(0))
    nodes, grads, rename, declared = vjp_nodes(ctx, list(body.node), seeds, xs, types, local, dtype=dtype)
    inputs = [tensor_info(rename[i.name], i) for i in body.input]
    inputs += [tensor_info(rename[ds[k]], body.output[k]) for k in outs]
    outputs = [tensor_info(g, body.input[k]) for g, k in zip(grads, wanted)]
    vjp = graph_with_types(nodes, "sequence_map_vjp", inputs, outputs, declared)
    results = ctx.op.SequenceMap(*ctx.inputs, *(ctx.output_grads[k] for k in outs), body=vjp, _outputs=len(wanted))
    results = [results] if isinstance(results, str) else list(results)
    grads_by_input: list[str | None] = [None] * n_in
    for k, g in zip(wanted, results):
        grads_by_input[k] = _declared(ctx, g, _info_type(body.input[k]))
    return grads_by_input


def _typed_body(ctx: GradContext, body: GraphProto) -> GraphProto:
    """``body`` with its untyped inputs and outputs typed from the node (exporters leave them
    bare): the elements of the sequences, the tensors whole, the outputs' elements."""
    typed = GraphProto()
    typed.CopyFrom(body)
    pairs = [*zip(typed.input, ctx.inputs), *zip(typed.output, ctx.outputs)]
    for info, outer in pairs:
        if elem_type(info):
            continue
        t = ctx.sequence_type(outer) if ctx.is_sequence(outer) else ctx.type(outer)
        if t is not None and t.dtype:
            info.CopyFrom(helper.make_tensor_value_info(info.name, t.dtype, t.shape))
    return typed


def _info_type(info: ValueInfoProto) -> ValueType:
    """The element type a body's ValueInfoProto declares (its shape left unknown)."""
    return ValueType(elem_type(info), None)


# ------------------------------------------------------------------ forward rules
@jvp_rule("", "SequenceConstruct")
def sequence_construct_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """The sequence of the tangents (zeros for an input without one)."""
    seq = ctx.op.SequenceConstruct(*(ctx.tangent_or_zeros(k) for k in range(len(ctx.inputs))))
    return _declared(ctx, seq, ValueType(ctx.dtype(ctx.inputs[0]), None))


@jvp_rule("", "SequenceAt")
def sequence_at_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """The tangent sequence's element at the same position."""
    return ctx.op.SequenceAt(ts[0], ctx.inputs[1]) if ts[0] is not None else None


@jvp_rule("", "SequenceInsert")
def sequence_insert_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """The tangent tensor inserted into the tangent sequence (zeros where one has none)."""
    seq, tensor = ctx.inputs[0], ctx.inputs[1]
    elem = _elem(ctx, seq, tensor)
    t_seq = ctx.tangent(0) or zeros_sequence(ctx, seq, elem)
    position = [ctx.input(2)] if ctx.input(2) else []
    return _declared(ctx, ctx.op.SequenceInsert(t_seq, ctx.tangent_or_zeros(1), *position), elem)


@jvp_rule("", "SequenceErase")
def sequence_erase_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """The tangent sequence without the same element."""
    if ts[0] is None:
        return None
    position = [ctx.input(1)] if ctx.input(1) else []
    return _declared(ctx, ctx.op.SequenceErase(ts[0], *position), _elem(ctx, ctx.inputs[0]))


@jvp_rule("", "SplitToSequence")
def split_to_sequence_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """The tangent split the same way."""
    if ts[0] is None:
        return None
    out = ctx.emit_like([ts[0], *ctx.inputs[1:]])
    assert isinstance(out, str)
    return _declared(ctx, out, ValueType(ctx.dtype(ctx.inputs[0]), None))


@jvp_rule("", "ConcatFromSequence")
def concat_from_sequence_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """The tangent sequence concatenated (or stacked) the same way."""
    return ctx.emit_like([ts[0]]) if ts[0] is not None else None


@jvp_rule("", "SequenceMap")
def sequence_map_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """A SequenceMap over the inputs and their tangents whose body is the body's tangent."""
    moving = [k for k, t in enumerate(ts) if t is not None]
    if not moving:
        return None
    body = _typed_body(ctx, ctx.attr("body"))  # an export's body is untyped: its If then has float outputs
    fn = TangentOfNodes(
        list(body.node),
        [body.input[k].name for k in moving],
        [o.name for o in body.output],
        registry=ctx.registry,
        allow_unused=True,
        opset=ctx.opset,
        value_info=[*body.input, *body.value_info, *body.output],
    )
    fwd_in = list(fn.input[len(fn.input) - len(moving) :])
    produced = {o for n in fn.node for o in n.output if o}
    rename = {name: ctx.fresh_name(name) for name in sorted(produced | {i.name for i in body.input} | set(fwd_in))}
    inputs = [tensor_info(rename[i.name], i) for i in body.input]
    inputs += [tensor_info(rename[f], body.input[k]) for f, k in zip(fwd_in, moving)]
    outputs = [tensor_info(rename.get(o, o), info) for o, info in zip(fn.output, body.output)]
    jvp = helper.make_graph(renamed_nodes(fn.node, rename), "sequence_map_jvp", inputs, outputs)
    moved = [ts[k] for k in moving]
    results = ctx.op.SequenceMap(*ctx.inputs, *moved, body=jvp, _outputs=len(body.output))
    results = [results] if isinstance(results, str) else list(results)
    return [_declared(ctx, r, _info_type(info)) for r, info in zip(results, body.output)]
