"""Reuse of the RNN/GRU/LSTM backward graph across nodes and calls with the same signature.

Building the backward graph of a recurrent node runs our pass on the lowered graph, on
each Scan body and its tape (``control_flow.recurrent_grad``): tens of milliseconds. Its
result depends only on the node's signature — op, attributes, opset, which inputs are
present, their types, which inputs need gradients, which outputs have gradients and their
types — and on the rules the pass used. So it is built once per signature and kept as a
template; another node (or another call) with that signature gets a copy whose values are
renamed: the node's inputs and output gradients to the node's own, every value the rule
made to a fresh name of the current pass (``ctx.fresh_name``), inside the Scan bodies too.

A template is valid only while the registry holds the very rule objects it was built with
(one ``lookup`` per op the template contains); a re-registered rule rebuilds it. Copies
share the non-graph attribute messages and the value infos' type messages with the
template, as the pass shares forward nodes with its results; graphs, nodes and value
infos are rebuilt, so a copy's Scan bodies are its own.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ...onnx_core import AttributeProto, FunctionProto, GraphProto, NodeProto, ValueInfoProto, helper
from ...onnx_core.gradient import GradContext
from ...onnx_core.optimizer import optimize
from ._hoist import hoist_scan_invariants, merge_tape_scans
from ._scan_sums import stack_weight_gradients

__all__ = ["Built", "cached_rule", "optimized"]

#: built: (nodes to emit, each input's gradient name or None, declared value infos)
Built = tuple[list[NodeProto], list[str | None], list[ValueInfoProto]]

_GRAPH = AttributeProto.GRAPH
_GRAPHS = AttributeProto.GRAPHS
_SUFFIX = re.compile(r"_grad\d+$")
#: at most this many templates are kept (a model rarely has more than a few signatures)
_LIMIT = 64


@dataclass
class _Template:
    externals: list[str]  # the node's inputs, output gradients and outputs when it was built
    nodes: list[tuple[Any, ...]]  # recipes (see _recipe)
    grads: list[str | None]
    declared: list[tuple[str, Any]]
    rules: list[tuple[str, Any]]  # (op_type, the GradRule it used)
    names: list[str]  # every value name the rule made, in first-seen order


_CACHE: dict[tuple[Any, ...], _Template] = {}


def _signature(ctx: GradContext) -> tuple[Any, ...]:
    types = tuple((ctx.dtype(n), ctx.shape(n)) if n else None for n in ctx.inputs)
    seeds = tuple((ctx.dtype(g), ctx.shape(g)) if g else None for g in ctx.output_grads)
    needs = tuple(ctx.needs_grad(k) for k in range(len(ctx.inputs)))
    present = tuple(bool(n) for n in ctx.inputs)
    attrs = repr(sorted(ctx.attrs.items()))
    # which names coincide (h0 fed as initial_c too): the template's renaming is positional
    names = [*ctx.inputs, *(g or "" for g in ctx.output_grads)]
    aliases = tuple(names.index(n) if n else -1 for n in names)
    outputs = tuple(bool(o) for o in ctx.outputs)  # the rule may read the node's outputs
    return (ctx.node.domain or "", ctx.node.op_type, ctx.opset, attrs, present, types, seeds, needs, aliases, outputs)


def _externals(ctx: GradContext) -> list[str]:
    """The names a template renames positionally: the node's inputs, output gradients and outputs."""
    return [*ctx.inputs, *(g or "" for g in ctx.output_grads), *ctx.outputs]


def _walk(nodes: Sequence[NodeProto], visit: Callable[[NodeProto], None]) -> None:
    """Calls ``visit`` on every node, inside subgraphs too."""
    for node in nodes:
        visit(node)
        for attr in node.attribute:
            for g in [attr.g] if attr.type == _GRAPH else list(attr.graphs) if attr.type == _GRAPHS else []:
                _walk(list(g.node), visit)


def _graph_names(graph: GraphProto, out: dict[str, None]) -> None:
    for info in [*graph.input, *graph.output, *graph.value_info]:
        out.setdefault(info.name)
    _node_names(list(graph.node), out)


def _node_names(nodes: Sequence[NodeProto], out: dict[str, None]) -> None:
    for node in nodes:
        for n in [*node.input, *node.output]:
            if n:
                out.setdefault(n)
        for attr in node.attribute:
            for g in [attr.g] if attr.type == _GRAPH else list(attr.graphs) if attr.type == _GRAPHS else []:
                _graph_names(g, out)


# -- copies: a template is compiled once into recipes (tuples of names and shared messages),
# from which each copy is built by writing the message slots directly (the wire codec's and the
# pass's fast path, ``_message.py``: field ``f`` lives in slot ``_f``): ~1,000 nodes per LSTM.
_NODE_FIELDS = ("_input", "_output", "_attribute")
_GRAPH_FIELDS = ("_node", "_input", "_output", "_value_info")


def _extras(message: Any, fields: Sequence[str]) -> tuple[tuple[str, Any], ...]:
    """The set slots of ``message`` other than ``fields`` (op_type, domain, name, doc_string, ...)."""
    slots = (*type(message).__slots__, "_unknown")
    return tuple((k, v) for k in slots if k not in fields and (v := getattr(message, k, None)) is not None)


def _info_recipe(info: ValueInfoProto) -> tuple[str, tuple[tuple[str, Any], ...]]:
    return info.name, _extras(info, ("_name",))


def _graph_recipe(graph: GraphProto) -> tuple[Any, ...]:
    infos = [[_info_recipe(i) for i in part] for part in (graph.input, graph.output, graph.value_info)]
    return (_extras(graph, _GRAPH_FIELDS), _recipe(list(graph.node)), *infos)


def _recipe(nodes: Sequence[NodeProto]) -> list[tuple[Any, ...]]:
    out = []
    for node in nodes:
        attrs: list[Any] = []
        for a in node.attribute:
            if a.type == _GRAPH:
                attrs.append((_extras(a, ("_g",)), _graph_recipe(a.g), None))
            elif a.type == _GRAPHS:
                attrs.append((_extras(a, ("_graphs",)), None, [_graph_recipe(g) for g in a.graphs]))
            else:
                attrs.append(a)  # shared
        out.append((_extras(node, _NODE_FIELDS), tuple(node.input), tuple(node.output), attrs))
    return out


def _fill(message: Any, extras: tuple[tuple[str, Any], ...]) -> Any:
    for k, v in extras:
        setattr(message, k, list(v) if type(v) is list else v)
    return message


def _build_info(recipe: tuple[str, Any], get: Callable[[str, str], str]) -> ValueInfoProto:
    info: Any = _fill(ValueInfoProto.__new__(ValueInfoProto), recipe[1])
    info._name = get(recipe[0], recipe[0])
    return info


def _build_graph(recipe: tuple[Any, ...], get: Callable[[str, str], str]) -> GraphProto:
    extras, nodes, inputs, outputs, value_info = recipe
    graph: Any = _fill(GraphProto.__new__(GraphProto), extras)
    graph._node = _build(nodes, get)
    graph._input = [_build_info(i, get) for i in inputs]
    graph._output = [_build_info(i, get) for i in outputs]
    graph._value_info = [_build_info(i, get) for i in value_info]
    return graph


def _build(recipes: list[tuple[Any, ...]], get: Callable[[str, str], str]) -> list[NodeProto]:
    """The nodes of ``recipes`` with every value name ``n`` replaced by ``get(n, n)``."""
    out = []
    for extras, inputs, outputs, attrs in recipes:
        node: Any = _fill(NodeProto.__new__(NodeProto), extras)
        node._input = [get(n, n) for n in inputs]
        node._output = [get(n, n) for n in outputs]
        if attrs:
            built = []
            for a in attrs:
                if type(a) is tuple:
                    attr: Any = _fill(AttributeProto.__new__(AttributeProto), a[0])
                    if a[1] is not None:
                        attr._g = _build_graph(a[1], get)
                    else:
                        attr._graphs = [_build_graph(g, get) for g in a[2]]
                    built.append(attr)
                else:
                    built.append(a)
            node._attribute = built
        out.append(node)
    return out


def optimized(nodes: Sequence[NodeProto], inputs: Sequence[str], outputs: Sequence[str], opset: int) -> list[NodeProto]:
    """``onnx_light.optimize`` on ``nodes`` (what computes ``outputs`` from ``inputs`` and outer
    values), inside every Scan, Loop and If body first; the bodies are rewritten in place.

    The reverse Scan body of a recurrent node holds ~100 nodes per step before (constant Slice
    bounds, repeated Shapes, Identities); each one costs a kernel call per step at run time.
    A Scan its tape Scan repeats is dropped (``merge_tape_scans``), and loop-invariant nodes
    of Scan bodies move out (``hoist_scan_invariants``), weight-gradient accumulators become
    one product after the loop where that is small (``stack_weight_gradients``).
    """
    for node in nodes:
        for attr in node.attribute:
            for g in [attr.g] if attr.type == _GRAPH else list(attr.graphs) if attr.type == _GRAPHS else []:
                body = optimized(list(g.node), [i.name for i in g.input], [o.name for o in g.output], opset)
                del g.node[:]
                g.node.extend(body)
    nodes = stack_weight_gradients(hoist_scan_invariants(merge_tape_scans(nodes)), opset)
    fn = FunctionProto(
        name="recurrent_vjp",
        domain="onnx_light.internal",
        input=list(dict.fromkeys(n for n in inputs if n)),
        output=list(dict.fromkeys(outputs)),
        node=list(nodes),
        opset_import=[helper.make_opsetid("", opset)],
    )
    return list(optimize(fn).node)


def _valid(t: _Template, ctx: GradContext) -> bool:
    return all(ctx.registry.lookup("", op, ctx.opset) is rule for op, rule in t.rules)


def _instantiate(t: _Template, ctx: GradContext) -> Built:
    externals = _externals(ctx)
    rename = {old: new for old, new in zip(t.externals, externals) if old}
    for name in t.names:
        if name not in rename:
            rename[name] = ctx.fresh_name(_SUFFIX.sub("", name))
    get = rename.get
    grads = [None if g is None else get(g, g) for g in t.grads]
    return _build(t.nodes, get), grads, [_build_info(i, get) for i in t.declared]


def _template(ctx: GradContext, built: Built, lowered: Sequence[NodeProto]) -> _Template:
    nodes, grads, declared = built
    externals = _externals(ctx)
    names: dict[str, None] = {}
    _node_names(nodes, names)
    for info in declared:
        names.setdefault(info.name)
    for g in grads:
        if g:
            names.setdefault(g)
    made = [n for n in names if n not in set(externals)]
    ops: dict[str, None] = {}
    _walk([*nodes, *lowered], lambda n: ops.setdefault(n.op_type) if not n.domain else None)
    rules = [(op, ctx.registry.lookup("", op, ctx.opset)) for op in ops]
    return _Template(externals, _recipe(nodes), list(grads), [_info_recipe(i) for i in declared], rules, made)


def cached_rule(ctx: GradContext, build: Callable[[GradContext], tuple[Built, Sequence[NodeProto]]]) -> Built:
    """``build(ctx)`` (which returns what to emit and the lowered forward nodes it differentiated),
    or a renamed copy of what it returned for a node of the same signature."""
    key = _signature(ctx)
    t = _CACHE.get(key)
    if t is not None and _valid(t, ctx):
        return _instantiate(t, ctx)
    built, lowered = build(ctx)
    if len(_CACHE) >= _LIMIT:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[key] = _template(ctx, built, lowered)
    return built
