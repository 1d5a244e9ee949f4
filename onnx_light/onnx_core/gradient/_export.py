"""Wrapping a backward FunctionProto as a runnable ModelProto."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .._errors import GradientError
from .._inline import FunctionInliner
from .._interop import from_foreign
from .._proto import FunctionProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, ValueInfoProto
from ..helper import make_graph, make_model, make_node, make_opsetid, make_tensor, make_tensor_value_info
from ..ops import DEFAULT_DOMAIN, normalise_domain
from ._names import DY, GradCounter, NewGradName
from ._pass import subgraph_inputs
from ._registry import GradRegistry
from ._types import ValueType

__all__ = ["backward_model", "function_to_model", "gradient_model", "input_types"]


def _value_info(name: str, t: ValueType | None) -> ValueInfoProto:
    if t is None or t.dtype == 0:
        return ValueInfoProto(name=name)  # untyped: the consumer infers it
    shape = None if t.shape is None else list(t.shape)
    return make_tensor_value_info(name, t.dtype, shape)


def _default_opset(imports: Sequence[OperatorSetIdProto]) -> int:
    return next((int(o.version) for o in imports if normalise_domain(o.domain) == DEFAULT_DOMAIN), 21)


TypeSpec = ValueType | ValueInfoProto | tuple[int, Sequence[int | str | None] | None]


def _as_value_type(spec: TypeSpec) -> ValueType:
    from ._fastpath import value_type as _value_type

    if isinstance(spec, ValueType):
        return spec
    info = from_foreign(spec)
    if isinstance(info, ValueInfoProto):
        return _value_type(info) or ValueType(0, None)
    assert isinstance(spec, tuple)
    dtype, shape = spec
    return ValueType(int(dtype), None if shape is None else tuple(shape))


def function_to_model(
    fn: FunctionProto, types: Mapping[str, TypeSpec], *, inline: bool = False, ir_version: int = 10
) -> ModelProto:
    """A ModelProto whose graph calls (or, with ``inline``, contains) ``fn``.

    Args:
        fn: any FunctionProto, e.g. the result of ``GradientOfFunction``.
        types: the type of every input of ``fn``, as a ``ValueType``, a
            ``ValueInfoProto`` or a ``(TensorProto.FLOAT, [2, "N"])`` pair; outputs are
            typed from it when given, ``grad_<x>`` outputs of a backward function like
            their ``x``, the others are left for the runtime to infer.
        inline: put the function's nodes in the graph instead of calling it.
        ir_version: the model's IR version.

    Raises:
        GradientError: an input's type is unknown.
    """
    fn = from_foreign(fn)
    typed = {k: _as_value_type(v) for k, v in types.items()}
    missing = [n for n in fn.input if n not in typed or typed[n].dtype == 0]
    if missing:
        raise GradientError(f"the types of {missing} are unknown; pass them in `types`")
    inputs = [_value_info(n, typed[n]) for n in fn.input]
    outputs = [_value_info(out, _output_type(fn, out, typed)) for out in fn.output]
    if inline:
        graph = make_graph(list(fn.node), fn.name, inputs, outputs)
        return make_model(graph, opset_imports=list(fn.opset_import), ir_version=ir_version)
    call = make_node(fn.name, list(fn.input), list(fn.output), domain=fn.domain)
    graph = make_graph([call], fn.name, inputs, outputs)
    imports = list(fn.opset_import) + [make_opsetid(fn.domain, 1)]
    return make_model(graph, opset_imports=imports, functions=[fn], ir_version=ir_version)


def _output_type(fn: FunctionProto, out: str, types: Mapping[str, ValueType]) -> ValueType | None:
    if out in types:
        return types[out]
    if out.startswith("grad_") and out[5:] in fn.input:
        return types.get(out[5:])
    return None


def backward_model(
    bwd: FunctionProto, types: dict[str, ValueType], *, inline: bool = False, ir_version: int = 10
) -> ModelProto:
    """A model whose graph calls (or, with ``inline``, contains) the backward function.

    Args:
        bwd: the result of ``GradientOfFunction``.
        types: the type of every input of ``bwd`` (``dy`` included); see
            :func:`input_types` for deriving them from the forward model.
        inline: put the function's nodes in the graph instead of calling it.
        ir_version: the model's IR version.

    Raises:
        GradientError: an input's type is unknown.
    """
    n_x = len(bwd.output)
    typed = dict(types)
    for out, x in zip(bwd.output, bwd.input[:n_x]):
        if x in types:
            typed[out] = types[x]
    return function_to_model(bwd, typed, inline=inline, ir_version=ir_version)


def input_types(model: ModelProto, y: str, names: Sequence[str], *, seed: str = DY) -> dict[str, ValueType]:
    """Types of a backward function's inputs ``names``, read from the forward model, and of
    its seed, typed like ``y`` (``bwd.input[-1]``: ``dy``, or another name when the model
    has an input called ``dy``)."""
    types = _forward_types(model)
    out = {n: types[n] for n in names if n in types}
    if y in types:
        out[seed] = types[y]
    return out


def _forward_types(model: ModelProto) -> dict[str, ValueType]:
    """The type of every value of the forward model that is declared or can be inferred."""
    from ._fastpath import value_type as _value_type
    from ._types import infer_types

    graph = model.graph
    known: dict[str, ValueType] = {}
    for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
        t = _value_type(vi)
        if t is not None:
            known[vi.name] = t
    for init in graph.initializer:
        known[init.name] = ValueType(init.data_type, tuple(init.dims))
    types, _ = infer_types(list(graph.node), known, {}, _default_opset(model.opset_import))
    return types


def gradient_model(
    model: ModelProto,
    xs: Sequence[str],
    y: str,
    registry: GradRegistry,
    *,
    keep_initializers: bool = True,
    with_loss: bool = False,
    inline: bool = False,
    allow_unused: bool = False,
) -> ModelProto:
    """An ordinary ModelProto computing the gradients of ``y`` with respect to ``xs``.

    Its outputs are ``grad_<x>`` for each ``x`` (``y`` first with ``with_loss``), its
    inputs those of ``GradientOfFunction``'s result minus, with ``keep_initializers``,
    the forward's initializers that are not among ``xs``: those stay initializers
    (and stay overridable inputs when the forward declared them as inputs too). When
    ``y`` is a scalar, ``dy`` defaults to 1 (an initializer a feed overrides).

    Args:
        model: the forward model.
        xs: names to differentiate with respect to (inputs, initializers or
            intermediate values).
        y: the output to differentiate.
        registry: the rules.
        keep_initializers: keep the non-differentiated initializers in the model.
        with_loss: also output ``y``, first, computed by the forward's nodes.
        inline: put every node in the main graph instead of calling functions.
        allow_unused: an ``x`` that does not reach ``y`` gets zeros instead of an error.

    Raises:
        GradientError: as ``GradientOfFunction``; or a type that cannot be inferred.
    """
    from ._api import GradientOfFunction

    model = from_foreign(model)
    bwd = GradientOfFunction(model, xs, y, None, registry, allow_unused=allow_unused)
    types = _forward_types(model)
    seed = bwd.input[-1]  # "dy", or another name when the model has an input called dy
    if y in types:
        types[seed] = types[y]
    out = backward_model(bwd, {n: types[n] for n in bwd.input if n in types}, inline=inline and not with_loss)
    ir_version = max(int(model.ir_version), 10)  # opset 21 (what the backward imports) is IR 10
    out.ir_version = ir_version
    if with_loss:
        _add_loss(out, model, bwd, y, types, inline)
    if keep_initializers:
        _keep_initializers(out, model, set(xs))
    _default_dy(out, types.get(y), seed)
    return out


def _keep_initializers(out: ModelProto, model: ModelProto, xs: set[str]) -> None:
    """Moves the forward's initializers (not in ``xs``) the model reads into ``out``."""
    graph = out.graph
    fed = {vi.name for vi in model.graph.input}
    kept = [t for t in model.graph.initializer if t.name not in xs and t.name in {i.name for i in graph.input}]
    names = {t.name for t in kept}
    graph.initializer.extend(kept)
    graph.input[:] = [vi for vi in graph.input if vi.name not in names or vi.name in fed]


def _default_dy(out: ModelProto, y_type: ValueType | None, seed: str) -> None:
    """The seed of a scalar ``y`` gets the default 1 (the usual seed of a loss)."""
    if y_type is None or y_type.shape != () or y_type.dtype not in _FLOAT_DTYPES:
        return
    if seed in {vi.name for vi in out.graph.input}:
        one = make_tensor(seed, y_type.dtype, [], [1.0])
        out.graph.initializer.append(one)


_FLOAT_DTYPES = {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16}


def _add_loss(
    out: ModelProto, model: ModelProto, bwd: FunctionProto, y: str, types: dict[str, ValueType], inline: bool
) -> None:
    """Prepends the forward nodes computing ``y`` (at the backward's opset) and outputs ``y``."""
    from ..ops import upgrade_nodes

    graph = out.graph
    nodes = _ancestors(list(model.graph.node), y)
    source = _default_opset(model.opset_import)
    target = _default_opset(bwd.opset_import)
    if source < target:
        counter = GradCounter({n for node in nodes for n in [*node.input, *node.output]})
        nodes = upgrade_nodes(
            nodes,
            source,
            target,
            lambda prefix: NewGradName(prefix, counter),
            dtype_of=lambda n: types[n].dtype if n in types else 0,
            rank_of=lambda n: types[n].rank if n in types else None,
            shape_of=lambda n: types[n].shape if n in types else None,
        )
    body = list(graph.node)
    if inline:
        body = FunctionInliner([bwd, *model.functions]).expand([*nodes, *body])
        del out.functions[:]
    else:
        out.functions.extend(f for f in model.functions)
        body = [*nodes, *body]
    graph.ClearField("node")
    graph.node.extend(body)
    have = {vi.name for vi in graph.input}
    reads = {i for n in nodes for i in [*n.input, *subgraph_inputs(n)]}
    produced = {o for n in body for o in n.output}
    inits = {t.name for t in model.graph.initializer}
    for vi in list(model.graph.input) + [_value_info(t.name, types.get(t.name)) for t in model.graph.initializer]:
        needed = vi.name in reads
        if needed and vi.name not in have and vi.name not in produced:
            graph.input.append(vi if vi.name not in inits else _value_info(vi.name, types.get(vi.name)))
            have.add(vi.name)
    graph.output.insert(0, _value_info(y, types.get(y)))
    for imp in model.opset_import:
        if imp.domain not in ("", "ai.onnx") and imp.domain not in {o.domain for o in out.opset_import}:
            out.opset_import.append(imp)


def _ancestors(nodes: list[NodeProto], y: str) -> list[NodeProto]:
    """The nodes ``y`` depends on, in their order."""
    producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    keep: set[int] = set()
    stack = [y]
    while stack:
        i = producer.get(stack.pop())
        if i is None or i in keep:
            continue
        keep.add(i)
        stack.extend(n for n in [*nodes[i].input, *subgraph_inputs(nodes[i])] if n)
    return [n for i, n in enumerate(nodes) if i in keep]
