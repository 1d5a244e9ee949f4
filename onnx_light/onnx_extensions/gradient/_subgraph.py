"""The vector-Jacobian product of a subgraph, as nodes to nest in a backward If or Scan body.

A body computing outputs ``out_k`` from its inputs and from captured outer-scope values
is differentiated by our own pass: the loss ``L = sum_k ReduceSum(dy_k * out_k)``
(``dy_k`` the seeds) is appended to its nodes and ``GradientOfNodes`` differentiates
it with respect to the chosen values, with the outer pass's registry. A sequence output
(a Loop carrying a list) and its sequence seed add ``sum_i ReduceSum(dy_k[i] * out_k[i])``:
a SequenceMap of the products' sums, stacked after a zero (so an empty sequence adds 0). The result's
local names (every value its nodes produce, and the names given in ``local``) are
renamed to fresh names of the outer pass, so nothing shadows an outer-scope value.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ...onnx_core import GraphProto, NodeProto, ValueInfoProto, helper, numpy_helper
from ...onnx_core.gradient import GradContext, GradientOfNodes

__all__ = ["vjp_nodes", "elem_type", "seq_elem_type", "renamed_nodes", "tensor_info", "graph_with_types", "pruned"]


def elem_type(info: ValueInfoProto) -> int:
    """The element type a ValueInfoProto declares (0 when it declares none)."""
    if not info.HasField("type") or not info.type.HasField("tensor_type"):
        return 0
    return int(info.type.tensor_type.elem_type)


def seq_elem_type(info: ValueInfoProto) -> int:
    """The element type of the tensors of a ValueInfoProto declaring ``seq(tensor)`` (0 otherwise)."""
    if not info.HasField("type") or not info.type.HasField("sequence_type"):
        return 0
    elem = info.type.sequence_type.elem_type
    return int(elem.tensor_type.elem_type) if elem.HasField("tensor_type") else 0


def tensor_info(name: str, like: ValueInfoProto) -> ValueInfoProto:
    """A copy of ``like`` under ``name``."""
    info = ValueInfoProto()
    info.CopyFrom(like)
    info.name = name
    return info


def graph_with_types(
    nodes: Sequence[NodeProto],
    name: str,
    inputs: Sequence[ValueInfoProto],
    outputs: Sequence[ValueInfoProto],
    known: Iterable[ValueInfoProto],
) -> GraphProto:
    """A body graph whose value_info holds the ``known`` types of its intermediates (those
    inference cannot follow: Scan, Loop, Gather of a tape), so that differentiating the
    backward graph again starts from them."""
    ends = {i.name for i in inputs} | {o.name for o in outputs}
    produced = {o for n in nodes for o in n.output}
    value_info = list({vi.name: vi for vi in known if vi.name in produced and vi.name not in ends}.values())
    return helper.make_graph(list(nodes), name, list(inputs), list(outputs), value_info=value_info)


def vjp_nodes(
    ctx: GradContext,
    nodes: Sequence[NodeProto],
    seeds: Sequence[tuple[str, str]],
    xs: Sequence[str],
    types: Iterable[ValueInfoProto],
    local: Iterable[str] = (),
    dtype: int = 0,
) -> tuple[list[NodeProto], list[str], dict[str, str], list[ValueInfoProto]]:
    """The nodes computing ``d<sum_k dy_k * out_k>/dx`` for each x in ``xs``.

    Args:
        ctx: the outer rule's context (fresh names, registry, opset).
        nodes: the subgraph's nodes.
        seeds: ``(out_k, dy_k)`` pairs; every ``out_k`` has one float dtype.
        xs: the values to differentiate with respect to (subgraph inputs or outer values).
        types: the known types of the subgraph's inputs, seeds and outer values.
        local: names defined by the enclosing body (its inputs): renamed too.
        dtype: the outputs' float type, when ``types`` does not tell it.

    Returns:
        The renamed nodes, the renamed name of each gradient, the renaming, and the types
        the inner pass declared for values inference cannot follow (renamed).
    """
    redefined = sorted({o for n in nodes for o in n.output} & set(xs))
    if redefined:  # the inner pass would take the body's own value for the outer one
        raise ctx.error(
            f"a body node redefines {redefined}, already a value of an enclosing scope (an outer value or a"
            " body input); ONNX graphs are in SSA form across scopes: give the body's value another name"
        )
    types = list(types)
    outs = {o for o, _ in seeds}
    sequences = {t.name: seq_elem_type(t) for t in types if t.name in outs and seq_elem_type(t)}
    dtypes = {elem_type(t) for t in types if t.name in outs} - {0} | set(sequences.values())
    if len(dtypes) > 1:
        raise ctx.error(f"the subgraph outputs that receive gradients have several float types {sorted(dtypes)}")
    dtype = dtypes.pop() if dtypes else dtype or ctx.dtype(seeds[0][1]) or ctx.dtype(xs[0]) or 1
    loss: list[NodeProto] = []
    terms = []
    for out, dy in seeds:
        if out in sequences:
            terms.append(_sequence_term(ctx, out, dy, dtype, loss))
            continue
        prod, term = ctx.fresh_name("vjp_mul"), ctx.fresh_name("vjp_sum")
        loss.append(helper.make_node("Mul", [dy, out], [prod]))
        loss.append(helper.make_node("ReduceSum", [prod], [term], keepdims=0))
        terms.append(term)
    total = terms[0]
    if len(terms) > 1:
        total = ctx.fresh_name("vjp_loss")
        loss.append(helper.make_node("Sum", terms, [total]))
    fn = GradientOfNodes(
        [*nodes, *loss], list(xs), total, registry=ctx.registry, allow_unused=True, opset=ctx.opset, value_info=types
    )
    seed = fn.input[-1]
    one = helper.make_tensor("one", dtype, [], np.ones((), helper.tensor_dtype_to_np_dtype(dtype)).tobytes(), raw=True)
    folded = _fold_seed(list(fn.node), seed, seeds, types, fn.output)
    if sequences:
        folded = _fold_sequence_seeds(folded, [(o, d) for o, d in seeds if o in sequences], fn.output)
    body = [helper.make_node("Constant", [], [seed], value=one), *folded]
    # every name the nodes define, in nested subgraphs too: the inner pass named them
    # fresh for itself only, so a nested one could repeat a name of the enclosing graphs
    produced = _defined(body) | set(local)
    rename = {name: ctx.fresh_name(name) for name in sorted(produced)}
    declared = [tensor_info(rename[vi.name], vi) for vi in fn.value_info if vi.name in rename]
    return renamed_nodes(body, rename), [rename.get(o, o) for o in fn.output], rename, declared


def _sequence_term(ctx: GradContext, out: str, dy: str, dtype: int, loss: list[NodeProto]) -> str:
    """Appends to ``loss`` the nodes of ``sum_i ReduceSum(dy[i] * out[i])`` for sequences; returns its name."""
    a, b, prod, part = (ctx.fresh_name(p) for p in ("vjp_dy", "vjp_out", "vjp_mul", "vjp_sum"))
    body = helper.make_graph(
        [helper.make_node("Mul", [a, b], [prod]), helper.make_node("ReduceSum", [prod], [part], keepdims=0)],
        "vjp_term",
        [helper.make_tensor_value_info(a, dtype, None), helper.make_tensor_value_info(b, dtype, None)],
        [helper.make_tensor_value_info(part, dtype, [])],
    )
    parts, zero, padded, stacked, term = (
        ctx.fresh_name(p) for p in ("vjp_parts", "zero", "vjp_pad", "vjp_st", "vjp_sum")
    )
    zero_t = helper.make_tensor(
        "zero", dtype, [], np.zeros((), helper.tensor_dtype_to_np_dtype(dtype)).tobytes(), raw=True
    )
    loss.append(helper.make_node("SequenceMap", [dy, out], [parts], body=body))
    loss.append(helper.make_node("Constant", [], [zero], value=zero_t))
    loss.append(helper.make_node("SequenceInsert", [parts, zero], [padded]))
    loss.append(helper.make_node("ConcatFromSequence", [padded], [stacked], axis=0, new_axis=1))
    loss.append(helper.make_node("ReduceSum", [stacked], [term], keepdims=0))
    return term


def _fold_sequence_seeds(
    nodes: list[NodeProto], seeds: Sequence[tuple[str, str]], results: Sequence[str]
) -> list[NodeProto]:
    """Replaces the gradient the loss term of each sequence seed gives its output, a SequenceMap
    of ``dy[i] * 1`` over (dy, out, ones), by ``dy`` itself, and drops what only fed it: so a
    carried list's gradient reaches the body's SequenceInserts directly (and a second
    differentiation finds them)."""
    pairs = set(seeds)
    out: list[NodeProto] = []
    for node in nodes:
        if node.op_type == "SequenceMap" and len(node.input) == 3 and (node.input[1], node.input[0]) in pairs:
            node = helper.make_node("Identity", [node.input[0]], [node.output[0]])
        out.append(node)
    return pruned(out, results)


def pruned(nodes: Sequence[NodeProto], outputs: Iterable[str]) -> list[NodeProto]:
    """The nodes (in order) that some of ``outputs`` depends on, reads inside their subgraphs included."""
    needed = set(outputs)
    keep: list[NodeProto] = []
    for node in reversed(nodes):
        if any(o in needed for o in node.output if o):
            keep.append(node)
            needed.update(node_reads(node))
    return keep[::-1]


def node_reads(node: NodeProto) -> set[str]:
    """The names a node reads: its inputs and what its subgraphs' nodes read."""
    out = {i for i in node.input if i}
    for attr in node.attribute:
        graphs: list[GraphProto] = ([attr.g] if attr.HasField("g") else []) + list(attr.graphs)
        for g in graphs:
            for n in g.node:
                out |= node_reads(n)
            out.update(o.name for o in g.output)
    return out


def _defined(nodes: Iterable[NodeProto]) -> set[str]:
    """The names ``nodes`` produce, and those their subgraphs (at any depth) define."""
    names: set[str] = set()
    for node in nodes:
        names.update(o for o in node.output if o)
        for attr in node.attribute:
            for g in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                names.update(i.name for i in g.input)
                names.update(t.name for t in g.initializer)
                names |= _defined(g.node)
    return names


def _dims(info: ValueInfoProto | None) -> tuple[Any, ...] | None:
    """A declared tensor shape as a tuple of dim values/params (None when unknown or partly anonymous)."""
    if info is None or not info.HasField("type") or not info.type.tensor_type.HasField("shape"):
        return None
    dims: list[int | str] = []
    for d in info.type.tensor_type.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param:
            dims.append(d.dim_param)
        else:
            return None
    return tuple(dims)


def _fold_seed(
    nodes: list[NodeProto],
    seed: str,
    seeds: Sequence[tuple[str, str]],
    types: Sequence[ValueInfoProto],
    results: Sequence[str],
) -> list[NodeProto]:
    """Drops the multiplications of each ``dy_k`` by the expanded ones-seed of the loss.

    The loss ``ReduceSum(dy_k * out_k)`` gives ``out_k`` the gradient ``Expand(1, s) * dy_k``
    (``s`` the shape of ``dy_k * out_k``): that is ``Expand(dy_k, s)``, and ``dy_k`` itself when
    ``dy_k`` is declared with the shape of ``out_k`` or with the constant ``s``.
    """
    known = {t.name: _dims(t) for t in types}
    dys = {dy: out for out, dy in seeds}
    consts: dict[str, tuple[int, ...]] = {}
    ones: dict[str, str] = {}  # Expand(seed, s) output -> s
    out: list[NodeProto] = []
    for node in nodes:
        ins = list(node.input)
        if node.op_type == "Constant" and len(node.attribute) == 1 and node.attribute[0].name == "value":
            t = node.attribute[0].t
            if t.data_type == 7 and len(t.dims) == 1:
                consts[node.output[0]] = tuple(int(v) for v in numpy_helper.to_array(t).tolist())
        if node.op_type == "Expand" and ins[0] == seed:
            ones[node.output[0]] = ins[1]
        if node.op_type == "Mul" and len(ins) == 2 and ((ins[0] in ones) != (ins[1] in ones)):
            e, dy = (ins[0], ins[1]) if ins[0] in ones else (ins[1], ins[0])
            if dy in dys:
                shape, dy_dims = ones[e], known.get(dy)
                same = dy_dims is not None and (dy_dims == known.get(dys[dy]) or dy_dims == consts.get(shape))
                args = [dy] if same else [dy, shape]
                out.append(helper.make_node("Identity" if same else "Expand", args, list(node.output)))
                continue
        out.append(node)
    # what the nodes read, inside their subgraphs too (a nested If may read the shape)
    used = {i for n in out for i in node_reads(n)} | set(results)
    dead = {e for e in ones if e not in used}
    used = {i for n in out if n.output[0] not in dead for i in node_reads(n)} | set(results)
    shapes = {ones[e] for e in dead} - used  # the Constant or Shape that fed only the dropped Expands
    return [n for n in out if not (set(n.output) & (dead | shapes))]


def renamed_nodes(nodes: Iterable[NodeProto], rename: dict[str, str]) -> list[NodeProto]:
    """Copies of ``nodes`` with every name in ``rename`` replaced, inside subgraphs too."""
    out = []
    for node in nodes:
        # a deep copy through the codec: several times faster than CopyFrom on nodes with bodies
        copy = NodeProto.FromString(node.SerializeToString())
        _rename_node(copy, rename)
        out.append(copy)
    return out


def _rename_node(node: NodeProto, rename: dict[str, str]) -> None:
    node.input[:] = [rename.get(n, n) for n in node.input]
    node.output[:] = [rename.get(n, n) for n in node.output]
    for attr in node.attribute:
        graphs: list[Any] = ([attr.g] if attr.HasField("g") else []) + list(attr.graphs)
        for g in graphs:
            _rename_graph(g, rename)


def _rename_graph(graph: GraphProto, rename: dict[str, str]) -> None:
    for info in [*graph.input, *graph.output, *graph.value_info]:
        info.name = rename.get(info.name, info.name)
    for init in graph.initializer:
        init.name = rename.get(init.name, init.name)
    for node in graph.node:
        _rename_node(node, rename)
