"""The driver: the passes of :mod:`._simplify` and :mod:`._fold`, in order, on a FunctionProto."""

from __future__ import annotations

from .._proto import FunctionProto, NodeProto
from ..gradient._fastpath import nodes_fields
from ._fold import FoldFn, fold_constants, fold_numpy
from ._simplify import Foreign, Nodes, deterministic_ops, eliminate_common, name_outputs, pinned_names, remove_dead

__all__ = ["optimize", "optimize_own"]


def optimize(fn: FunctionProto, *, fold: FoldFn | None = fold_numpy) -> FunctionProto:
    """Returns a smaller FunctionProto computing the same outputs as ``fn``.

    Every pass is one sweep over the nodes (linear in their number):

    1. constant folding: a node of a small set of shape and integer ops (Shape of a static
       shape, Concat, Gather, Unsqueeze, Squeeze, Reshape, Cast, Add, Sub, Mul, Div, Range,
       ConstantOfShape) whose inputs are all small constants becomes a ``Constant``;
    2. Identity elimination and common-subexpression elimination (same op, domain, inputs
       and attributes; never for an op the spec calls non-deterministic, an op without a
       schema, or a node with a subgraph);
    3. each output produced by ``Identity(v)`` takes over ``v``'s name where it can, so the
       outputs keep their names (``grad_<x>``) without the copy;
    4. dead-node removal: nodes none of whose outputs is needed for ``fn``'s outputs.

    ``fn`` is not modified; the result shares the nodes it keeps unchanged with ``fn``.

    Args:
        fn: the function to optimize (nodes in topological order, as the pass emits them).
        fold: computes a node's outputs from constant inputs, or None when it does not
            fold it (see :func:`fold_numpy`, the default); None turns folding off.

    Returns:
        A FunctionProto with ``fn``'s name, domain, inputs, outputs, opset imports and
        value_info.
    """
    return optimize_own(fn, None, fold=fold)


def optimize_own(fn: FunctionProto, foreign: Foreign, *, fold: FoldFn | None = fold_numpy) -> FunctionProto:
    """:func:`optimize` for a caller that owns ``fn``'s nodes but those whose ids ``foreign``
    holds (None: it owns none): the owned nodes are renamed in place instead of copied.

    The gradient entry points pass the ids of their source's nodes: the others are the
    pass's own new nodes, which nobody else holds.
    """
    source = list(fn.node)
    nodes: Nodes = list(zip(source, nodes_fields(source)))
    outputs = list(fn.output)
    opset = {("" if o.domain == "ai.onnx" else o.domain): int(o.version) for o in fn.opset_import}
    if fold is not None:
        nodes = fold_constants(nodes, fn, fold)
    pinned = pinned_names(nodes, outputs)
    nodes = eliminate_common(nodes, pinned, deterministic_ops(opset), foreign)
    rename = name_outputs(nodes, outputs, set(fn.input), pinned)
    return _with_nodes(fn, remove_dead(nodes, outputs, rename, foreign))


#: a FunctionProto's field slots, and the unknown fields it keeps
_FUNCTION_SLOTS = (*FunctionProto.__slots__, "_unknown")


def _with_nodes(fn: FunctionProto, nodes: list[NodeProto]) -> FunctionProto:
    """A copy of ``fn`` with ``nodes``: lists of its own, sharing the sub-messages (value_info,
    opset imports), as the gradient pass shares the forward nodes with its result."""
    out = FunctionProto.__new__(FunctionProto)
    for slot in _FUNCTION_SLOTS:
        value = getattr(fn, slot, _MISSING)
        if value is not _MISSING:
            setattr(out, slot, list(value) if type(value) is list else value)
    setattr(out, "_node", nodes)  # noqa: B010  (a slot, set as the codec does)
    return out


_MISSING = object()
