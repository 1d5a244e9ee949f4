"""The tangent of a subgraph, as nodes to nest in a forward-mode If, Loop or Scan body.

A body computing outputs ``y_k`` from its inputs and captured outer-scope values is
differentiated by our own forward pass (``TangentOfNodes`` with the outer pass's
registry). The tangent pass re-emits the forward nodes it reads under their own names,
so the body that computes both the primal values and the tangents is the body's nodes
(replaced by the pass's copies, which may carry extra outputs) followed by the tangent
nodes: about twice the body, nothing stored across iterations. The tangent nodes' names
are renamed to fresh names of the outer pass, so nothing shadows an outer-scope value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ...onnx_core import GraphProto, NodeProto, ValueInfoProto
from ...onnx_core.gradient import GradContext, TangentOfNodes
from ._subgraph import node_reads, pruned, renamed_nodes, tensor_info

__all__ = ["jvp_nodes", "pruned"]


def jvp_nodes(
    ctx: GradContext,
    nodes: Sequence[NodeProto],
    ys: Sequence[str],
    wrt: Mapping[str, str],
    types: Iterable[ValueInfoProto],
    *,
    with_forward: bool = True,
    local: Iterable[str] = (),
) -> tuple[list[NodeProto], list[str], list[ValueInfoProto], dict[str, str]]:
    """The nodes computing the tangent of each y in ``ys``, given the tangent ``wrt[x]`` of each x.

    Args:
        ctx: the outer rule's context (fresh names, registry, opset).
        nodes: the subgraph's nodes.
        ys: the values whose tangents to compute (each float).
        wrt: the tangent's name of each differentiated value (subgraph inputs or outer values);
            the result reads these names.
        types: the known types of the subgraph's inputs and of the outer values.
        with_forward: the result computes every value of ``nodes`` too (a body replacing its
            forward body); otherwise only the forward values the tangents read.
        local: names defined by the enclosing body (its inputs): renamed too.

    Returns:
        The nodes, the name of each y's tangent, the types the inner pass declared for
        values inference cannot follow, and the renaming (source names included).
    """
    xs = list(wrt)
    fn = TangentOfNodes(
        list(nodes), xs, list(ys), registry=ctx.registry, allow_unused=True, opset=ctx.opset, value_info=types
    )
    source = {o for n in nodes for o in n.output if o}
    copies: dict[str, NodeProto] = {}
    tangent: list[NodeProto] = []
    for node in fn.node:
        outs = [o for o in node.output if o]
        if outs and any(o in source for o in outs):
            for o in outs:
                copies[o] = node
        else:
            tangent.append(node)
    rename = dict(zip(list(fn.input)[len(fn.input) - len(xs) :], wrt.values()))
    kept = [n for n in nodes if with_forward and not any(o in copies for o in n.output)]
    # the inner pass named its values apart from the body's names only (not from the outer
    # names in ``wrt``): every name defined here, in nested bodies too, gets a fresh name of the
    # outer pass (one renaming step: the fwd_ inputs become the wrt names, which stay)
    new = _defined([*kept, *copies.values(), *tangent]) | set(local)
    rename.update({name: ctx.fresh_name(name) for name in sorted(new)})
    if with_forward:
        forward: list[NodeProto] = []
        seen: set[int] = set()
        for node in nodes:
            copy = next((copies[o] for o in node.output if o in copies), node)
            if id(copy) not in seen:
                seen.add(id(copy))
                forward.append(copy)
    else:
        is_tangent = {id(n) for n in tangent}
        forward = [n for n in fn.node if id(n) not in is_tangent]
    declared = [tensor_info(rename[vi.name], vi) for vi in fn.value_info if vi.name in new]
    body = renamed_nodes(_in_order([*forward, *tangent]), rename)
    return body, [rename.get(o, o) for o in fn.output], declared, rename


def _defined(nodes: Iterable[NodeProto]) -> set[str]:
    """The names the nodes define: their outputs, and the inputs and outputs of nested bodies."""
    out: set[str] = set()
    for node in nodes:
        out.update(o for o in node.output if o)
        for attr in node.attribute:
            graphs: list[GraphProto] = ([attr.g] if attr.HasField("g") else []) + list(attr.graphs)
            for g in graphs:
                out.update(i.name for i in g.input)
                out |= _defined(g.node)
    return out


def _in_order(nodes: list[NodeProto]) -> list[NodeProto]:
    """``nodes`` with each after the producers of what it reads (its subgraphs' reads too),
    otherwise in their order. A forward value the inner pass renamed (a constant If it
    inlined) sorts as a tangent node, after the copies of the forward nodes reading it."""
    producer = {o: k for k, n in enumerate(nodes) for o in n.output if o}
    deps = [{producer[r] for r in node_reads(n) if r in producer} - {k} for k, n in enumerate(nodes)]
    if all(d < k for k, ds in enumerate(deps) for d in ds):
        return nodes
    done: set[int] = set()
    out: list[NodeProto] = []

    def visit(k: int) -> None:
        stack = [k]
        while stack:
            top = stack[-1]
            todo = [d for d in sorted(deps[top]) if d not in done and d not in stack]
            if todo:
                stack.append(todo[0])
                continue
            stack.pop()
            if top not in done:
                done.add(top)
                out.append(nodes[top])

    for k in range(len(nodes)):
        visit(k)
    return out
