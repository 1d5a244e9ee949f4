"""The entry points: GradientOfNodes and GradientOfFunction."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from .._errors import GradientError
from .._inline import FunctionInliner
from .._interop import from_foreign
from .._proto import FunctionProto, GraphProto, ModelProto, NodeProto, TensorProto, ValueInfoProto
from ..numpy_helper import to_array
from ..ops import normalise_domain
from ..optimizer._conv_bn import fold_conv_batch_norms
from ..optimizer._optimize import optimize_own
from ..optimizer._plan import EmitRecord
from ._fastpath import value_type
from ._names import EMITTED_OPSET
from ._pass import FOLD_MAX, _GradientPass, subgraph_inputs
from ._registry import GradRegistry
from ._types import ValueType

__all__ = ["GradientOfNodes", "GradientOfFunction"]

#: initializers folded for inference (small int32 and int64 tensors: shapes, axes, Slice
#: bounds, exporters write either; booleans: the conditions of If, inlined when known)
_FOLDED_INT_TYPES = frozenset({TensorProto.INT32, TensorProto.INT64, TensorProto.BOOL})


def _default_registry(registry: GradRegistry | None) -> GradRegistry:
    if registry is not None:
        return registry
    raise GradientError(
        "no registry given: pass registry=onnx_light.DefaultGradRegistry() "
        "(onnx_core knows no rules; they live in onnx_extensions)"
    )


def _gc_paused(pause: bool, run: Callable[[], FunctionProto]) -> FunctionProto:
    """``run()`` with the cyclic garbage collector paused when ``pause`` (re-enabled after, if it was on).

    The pass allocates many small acyclic objects (nodes, names, lists); on a large
    graph the collector's generational passes over them and over the caller's model
    cost a fifth of the run, and find nothing: everything is freed by reference counting.

    The objects still alive at the end (the result's nodes, lists and attributes) go
    straight to the oldest generation (``gc.freeze()`` then ``gc.unfreeze()``: two list
    splices, no traversal), so the first collection after the call does not walk the whole
    result, nor the next young one again (8-10% of a call on a 9-node model). Skipped when
    the caller froze objects of its own (``gc.freeze`` would unfreeze them).
    """
    if not pause or not gc.isenabled():
        return run()
    gc.disable()
    try:
        return run()
    finally:
        if gc.get_freeze_count() == 0:
            gc.freeze()
            gc.unfreeze()
        gc.enable()


def _finish(result: tuple[FunctionProto, EmitRecord], foreign: set[int], optimize: bool) -> FunctionProto:
    """The pass's function, optimized when ``optimize`` (skipping the sweeps with no work, as
    the pass's record tells: see ``optimizer._plan``)."""
    fn, record = result
    return optimize_own(fn, foreign, output_identity=True, record=record) if optimize else fn


def _run(grad_pass: _GradientPass) -> tuple[FunctionProto, EmitRecord]:
    """Runs ``grad_pass``; returns its function and what it recorded for the optimizer.

    The pass's ``ctx.op`` builders refer to the pass, which holds them: that cycle is broken
    here, so the pass and its state (every emitted node's record, the types, the indices) are
    freed when the call returns, not at the next full collection (the collector is paused
    during the call and the survivors go to its oldest generation, see ``_gc_paused``).
    """
    try:
        return grad_pass.run(), grad_pass.emit_record
    finally:
        grad_pass.builders.clear()


def GradientOfNodes(  # noqa: N802  (the seed's name)
    nodes: Iterable[NodeProto],
    xs: Sequence[str],
    y: str,
    zs: Sequence[str] | None = None,
    registry: GradRegistry | None = None,
    *,
    allow_unused: bool = False,
    opset: int = EMITTED_OPSET,
    value_info: Iterable[ValueInfoProto] = (),
    name: str = "gradient",
    pause_gc: bool = True,
    optimize: bool = True,
) -> FunctionProto:
    """Differentiates a list of forward nodes.

    Args:
        nodes: the forward nodes, in topological order.
        xs: names to differentiate with respect to.
        y: the output whose gradient flows back (``dy`` has its dtype and shape).
        zs: the other inputs of the result, in order (default: every other free value
            the computation needs, in first-use order).
        registry: the rules (``onnx_light.DefaultGradRegistry()`` when called through
            the ``onnx_light`` package).
        allow_unused: an ``x`` that does not reach ``y`` gets zeros instead of an error.
        opset: the default-domain opset the nodes were written for.
        value_info: types of values (inputs especially), when known.
        name: the FunctionProto's name.
        pause_gc: pause the cyclic garbage collector while the pass runs (faster on large
            graphs; the collector is re-enabled after).
        optimize: run ``onnx_light.optimize`` on the result (Identity, common-subexpression
            and dead-node elimination, constant folding), keeping the final ``Identity`` that
            names each ``grad_<x>`` (DESIGN §3); ``False`` returns the pass's nodes as emitted.

    Returns:
        A FunctionProto with inputs ``[*xs, *zs, seed]`` and outputs ``grad_<x>``; the
        seed is ``dy`` unless an input of ``nodes`` has that name (see GradientOfFunction),
        and an intermediate ``x`` is an input, not recomputed.

    Raises:
        GradientError: an unreachable ``x``, a missing ``y``, a non-float ``x`` or ``y``,
            a cycle, an op without a rule, ...
    """

    forward = [from_foreign(n) for n in nodes]

    def run() -> tuple[FunctionProto, EmitRecord]:
        infos = [from_foreign(vi) for vi in value_info]
        types = {vi.name: t for vi in infos if (t := value_type(vi)) is not None}
        produced = {o for n in forward for o in n.output}
        free: list[str] = []
        for n in forward:
            for i in list(n.input) + subgraph_inputs(n):
                if i and i not in produced and i not in free:
                    free.append(i)
        return _run(
            _GradientPass(
                forward,
                xs,
                y,
                zs,
                _default_registry(registry),
                allow_unused=allow_unused,
                types=types,
                constants={},
                free_order=free,
                opset_imports={"": opset},
                name=name,
                declared={vi.name: vi for vi in infos if vi.name not in types},  # sequences
            )
        )

    return _gc_paused(pause_gc, lambda: _finish(run(), {id(n) for n in forward}, optimize))


def GradientOfFunction(  # noqa: N802  (the seed's name)
    fn: FunctionProto | GraphProto | ModelProto,
    xs: Sequence[str],
    y: str,
    zs: Sequence[str] | None = None,
    registry: GradRegistry | None = None,
    *,
    allow_unused: bool = False,
    pause_gc: bool = True,
    optimize: bool = True,
) -> FunctionProto:
    """Differentiates a FunctionProto, GraphProto or ModelProto.

    Initializers of a graph or model become ordinary inputs (the pure-function form
    convenient for training), so weights can be among ``xs``; model-local functions
    are inlined first.

    The forward values the rules read are recomputed inside the result, except the
    outputs of random ops without a ``seed`` (training-mode Dropout, RandomNormal,
    ...): those become inputs, to be fed with the values of the forward run. An ``x``
    that is an intermediate value is a cut point (as torch treats a non-leaf): the
    result takes it as an input and does not recompute it; the gradients flow on from
    it to any other ``x`` it is computed from.

    The seed (the output gradient) is the last input, called ``dy``; when the source has
    an input called ``dy`` (say, a backward function differentiated again), the seed is
    called ``dy_grad<n>`` instead, the first such name free in the source, and that
    input keeps its name.

    Args:
        fn: what to differentiate.
        xs: names to differentiate with respect to.
        y: the output whose gradient flows back.
        zs: the other inputs of the result (default: every other free value needed,
            graph inputs first, then initializers, in their order).
        registry: the rules.
        allow_unused: an ``x`` that does not reach ``y`` gets zeros instead of an error.
        pause_gc: pause the cyclic garbage collector while the pass runs.
        optimize: run ``onnx_light.optimize`` on the result (Identity, common-subexpression
            and dead-node elimination, constant folding), keeping the final ``Identity`` that
            names each ``grad_<x>`` (DESIGN §3); ``False`` returns the pass's nodes as emitted.

    Returns:
        A FunctionProto with inputs ``[*xs, *zs, seed]`` and outputs ``grad_<x>``.

    Raises:
        GradientError: an unreachable ``x``, a non-float ``x`` or ``y``, a cycle, an op
            without a rule, ...
    """

    def run() -> tuple[FunctionProto, EmitRecord]:
        rules = _default_registry(registry)
        source = from_foreign(fn)  # an onnx package object: converted through its bytes
        imports, functions, graph, name = _source(source)
        foreign.update(_source_node_ids(source))
        if graph is not None:
            nodes, types, constants, declared, free_order = _graph_source(graph)
        else:
            assert isinstance(source, FunctionProto)
            nodes, types, constants, declared, free_order = _function_source(source)
        if functions:
            nodes = FunctionInliner(functions).expand(nodes)
        imports.setdefault("", EMITTED_OPSET)
        nodes = fold_conv_batch_norms(nodes, types, constants, (y, xs, zs), imports[""])
        return _run(_GradientPass(
            nodes, xs, y, zs, rules, allow_unused=allow_unused, types=types, constants=constants,
            free_order=free_order, opset_imports=imports, name=name, declared=declared,
        ))  # fmt: skip

    foreign: set[int] = set()
    return _gc_paused(pause_gc, lambda: _finish(run(), foreign, optimize))


def _source_node_ids(fn: FunctionProto | GraphProto | ModelProto) -> set[int]:
    """The ids of the top-level nodes of ``fn`` (and of a model's local functions): the
    nodes a result shares with its source, which the optimizer must copy to rename."""
    graph = fn.graph if isinstance(fn, ModelProto) else fn
    ids = set(map(id, graph.node))  # (a C loop)
    if isinstance(fn, ModelProto):
        ids.update(id(n) for f in fn.functions for n in f.node)
    return ids


def _source(
    fn: FunctionProto | GraphProto | ModelProto,
) -> tuple[dict[str, int], list[FunctionProto], GraphProto | None, str]:
    """What ``GradientOfFunction`` differentiates: (opset imports, local functions, graph or None, result name)."""
    if isinstance(fn, ModelProto):
        imports = {normalise_domain(o.domain): int(o.version) for o in fn.opset_import}
        return imports, list(fn.functions), fn.graph, (fn.graph.name or "model") + "_grad"
    if isinstance(fn, GraphProto):
        return {"": EMITTED_OPSET}, [], fn, (fn.name or "graph") + "_grad"
    if isinstance(fn, FunctionProto):
        imports = {normalise_domain(o.domain): int(o.version) for o in fn.opset_import}
        return imports, [], None, (fn.name or "function") + "_grad"
    raise TypeError(f"GradientOfFunction takes a FunctionProto, GraphProto or ModelProto, not {type(fn).__name__}")


_Source = tuple[list[NodeProto], dict[str, ValueType], dict[str, np.ndarray], dict[str, ValueInfoProto], list[str]]


def _graph_source(graph: GraphProto) -> _Source:
    """(nodes, types, folded int32/int64 initializers, value_info left unread, free-input order) of a graph."""
    types: dict[str, ValueType] = {}
    constants: dict[str, np.ndarray] = {}
    declared = _graph_types(graph, types)
    for init in graph.initializer:
        types[init.name] = ValueType(init.data_type, tuple(init.dims))
        if init.data_type in _FOLDED_INT_TYPES and int(np.prod(init.dims)) <= FOLD_MAX:
            constants[init.name] = to_array(init)
    free_order = _names(graph.input) + _names(graph.initializer)
    return list(graph.node), types, constants, declared, free_order


def _function_source(fn: FunctionProto) -> _Source:
    """(nodes, types, constants, declared, free-input order) of a function, as for a graph."""
    types: dict[str, ValueType] = {}
    others: dict[str, ValueInfoProto] = {}  # sequence types: the pass reads them when asked
    for vi in fn.value_info:
        t = value_type(vi)
        if t is not None:
            types[vi.name] = t
        else:
            others[vi.name] = vi
    return list(fn.node), types, {}, others, list(fn.input)


def _graph_types(graph: GraphProto, types: dict[str, ValueType]) -> dict[str, ValueInfoProto]:
    """Puts the types a graph declares into ``types``, and returns the value_info entries
    left unread, by name.

    Reading an unread entry later gives the same ``types`` as reading every ``input``,
    ``value_info`` and ``output`` in that order (a later type replaces an earlier one):
    the entries of a name declared more than once, or also as an input or output, are
    read here, in that order. The others, one per intermediate value on a shape-inferred
    graph (6,000 on the benchmark chain), are left to the pass, which reads few of them:
    type inference gives every value on the way to ``y`` a type of its own.
    """
    in_out = set(_names(graph.input))
    in_out.update(_names(graph.output))
    infos = graph.value_info
    names = _names(infos)
    if in_out.isdisjoint(names) and len(set(names)) == len(names):  # the common case, in C loops
        for vi in graph.input:
            if (t := value_type(vi)) is not None:
                types[vi.name] = t
        for vi in graph.output:
            if (t := value_type(vi)) is not None:
                types[vi.name] = t
        return dict(zip(names, infos))
    unread: dict[str, ValueInfoProto] = {}
    read_now: list[ValueInfoProto] = []
    repeated: set[str] = set()
    for vi in infos:
        name = vi.name
        if name in in_out or name in repeated:
            read_now.append(vi)
        elif name in unread:  # declared twice: both read now, in order
            read_now.append(unread.pop(name))
            read_now.append(vi)
            repeated.add(name)
        else:
            unread[name] = vi
    for vi in [*graph.input, *read_now, *graph.output]:
        t = value_type(vi)
        if t is not None:
            types[vi.name] = t
    return unread


def _names(messages: Iterable[ValueInfoProto | TensorProto]) -> list[str]:
    """``[m.name for m in messages]`` by slot reads (no property call per message)."""
    return [getattr(m, "_name", "") for m in messages]
