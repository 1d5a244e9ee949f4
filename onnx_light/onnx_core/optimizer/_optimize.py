"""The driver: the forward sweep of :mod:`._simplify` (folding with :mod:`._fold`), then the
output naming and dead-node removal of :mod:`._outputs`, on a FunctionProto."""

from __future__ import annotations

from .._errors import OnnxLightError
from .._proto import FunctionProto, NodeProto
from ._fold import FoldFn, fold_numpy
from ._outputs import final_identities, name_outputs, remove_dead
from ._plan import EmitRecord, has_work
from ._silu import fuse_silu_gradients
from ._simplify import Foreign, forward_sweep

__all__ = ["optimize", "optimize_own"]


def optimize(fn: FunctionProto, *, fold: FoldFn | None = fold_numpy, output_identity: bool = False) -> FunctionProto:
    """Returns a smaller FunctionProto computing the same outputs as ``fn``.

    Two sweeps over the nodes (linear in their number): 1 and 2 in one forward sweep, node by
    node; 3 and 4 in one backward sweep.

    1. constant folding: a node of a small set of shape and integer ops (Shape of a static
       shape, Concat, Gather, Unsqueeze, Squeeze, Reshape, Cast, Add, Sub, Mul, Div, Range,
       ConstantOfShape) whose inputs are all small constants becomes a ``Constant``;
    2. Identity elimination and common-subexpression elimination (same op, domain, inputs
       and attributes; never for an op the spec calls non-deterministic, an op without a
       schema, or a node with a subgraph);
    3. each output produced by ``Identity(v)`` takes over ``v``'s name where it can, so the
       outputs keep their names without the copy; with ``output_identity`` instead, that
       final ``Identity`` stays (DESIGN §3: it names each ``grad_<x>``), reading the value
       itself, never another output or a copy of it;
    4. dead-node removal: nodes none of whose outputs is needed for ``fn``'s outputs;

    and between 2 and 3, SiLU's gradient as the Mul and Sigmoid rules emit it, ``dy * s +
    ((dy * x) * s) * (1 - s)`` with ``s = Sigmoid(x)``, becomes ``dy * (s + x s (1 - s))``
    (:mod:`._silu`: 3-4 elementwise nodes instead of 6).

    ``fn`` is not modified; the result shares the nodes it keeps unchanged with ``fn``.

    Args:
        fn: the function to optimize (nodes in topological order, as the pass emits them).
        fold: computes a node's outputs from constant inputs, or None when it does not
            fold it (see :func:`fold_numpy`, the default); None turns folding off.
        output_identity: keep exactly one ``Identity`` producing each output that one
            produces (what the gradient entry points return: ``grad_<x> = Identity(v)``).

    Returns:
        A FunctionProto with ``fn``'s name, domain, inputs, outputs, opset imports and
        value_info.

    Raises:
        OnnxLightError: ``fn`` is not a FunctionProto.
    """
    if not isinstance(fn, FunctionProto):
        raise OnnxLightError(
            f"optimize takes a FunctionProto (what GradientOfFunction returns), not {type(fn).__name__}"
        )
    return optimize_own(fn, None, fold=fold, output_identity=output_identity)


def optimize_own(
    fn: FunctionProto,
    foreign: Foreign,
    *,
    fold: FoldFn | None = fold_numpy,
    output_identity: bool = False,
    record: EmitRecord | None = None,
) -> FunctionProto:
    """:func:`optimize` for a caller that owns ``fn``'s nodes but those whose ids ``foreign``
    holds (None: it owns none): the owned nodes are renamed in place instead of copied.

    The gradient entry points pass the ids of their source's nodes: the others are the
    pass's own new nodes, which nobody else holds. With ``record`` (what the pass recorded
    while it emitted ``fn``; see :mod:`._plan`) and ``output_identity``, ``fn`` itself is
    returned when no sweep has work, as the sweeps would have returned its nodes.
    """
    if record is not None and output_identity and not has_work(fn, record):
        return fn
    outputs = list(fn.output)
    opset = {("" if o.domain == "ai.onnx" else o.domain): int(o.version) for o in fn.opset_import}
    pinned = set(outputs)
    entries = fuse_silu_gradients(forward_sweep(fn, pinned, opset, foreign, fold), fn.input)
    if output_identity:
        entries = final_identities(entries, outputs, foreign)
        rename: dict[str, str] = {}
    else:
        rename = name_outputs(entries, outputs, set(fn.input), pinned)
    return _with_nodes(fn, remove_dead(entries, outputs, rename, foreign))


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
