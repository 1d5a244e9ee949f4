"""Wrapping a backward FunctionProto as a runnable ModelProto."""

from __future__ import annotations

from collections.abc import Sequence

from .._errors import GradientError
from .._proto import FunctionProto, ModelProto, ValueInfoProto
from ..helper import make_graph, make_model, make_node, make_opsetid, make_tensor_value_info
from ..ops import DEFAULT_DOMAIN, normalise_domain
from ._types import ValueType

__all__ = ["backward_model", "input_types"]


def _value_info(name: str, t: ValueType | None) -> ValueInfoProto:
    shape = None if t is None or t.shape is None else list(t.shape)
    return make_tensor_value_info(name, t.dtype if t is not None else 0, shape)


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
    missing = [n for n in bwd.input if n not in types or types[n].dtype == 0]
    if missing:
        raise GradientError(f"the types of {missing} are unknown; pass them in `types`")
    n_x = len(bwd.output)
    inputs = [_value_info(n, types[n]) for n in bwd.input]
    outputs = [_value_info(out, types[x]) for out, x in zip(bwd.output, bwd.input[:n_x])]
    if inline:
        graph = make_graph(list(bwd.node), bwd.name, inputs, outputs)
        return make_model(graph, opset_imports=list(bwd.opset_import), ir_version=ir_version)
    call = make_node(bwd.name, list(bwd.input), list(bwd.output), domain=bwd.domain)
    graph = make_graph([call], bwd.name, inputs, outputs)
    imports = list(bwd.opset_import) + [make_opsetid(bwd.domain, 1)]
    return make_model(graph, opset_imports=imports, functions=[bwd], ir_version=ir_version)


def input_types(model: ModelProto, y: str, names: Sequence[str]) -> dict[str, ValueType]:
    """Types of a backward function's inputs, read from the forward model (``dy`` typed like ``y``)."""
    from ._fastpath import value_type as _value_type
    from ._names import DY
    from ._types import infer_types

    graph = model.graph
    known: dict[str, ValueType] = {}
    for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
        t = _value_type(vi)
        if t is not None:
            known[vi.name] = t
    for init in graph.initializer:
        known[init.name] = ValueType(init.data_type, tuple(init.dims))
    opset = next((int(o.version) for o in model.opset_import if normalise_domain(o.domain) == DEFAULT_DOMAIN), 21)
    types, _ = infer_types(list(graph.node), known, {}, opset)
    out = {n: types[n] for n in names if n in types}
    if y in types:
        out[DY] = types[y]
    return out
