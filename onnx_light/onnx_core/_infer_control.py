"""Type inference of If, Loop and Scan from their bodies (for :func:`_infer_model.infer_graph`).

Each body is inferred as a graph of its own with the enclosing values visible; the
node's outputs then follow the spec: If's are both branches' outputs merged (a dim the
branches disagree on is unknown), Loop's are the body's loop-carried outputs and its scan
outputs with a leading iteration dim (unknown), Scan's are the final states and the scan
outputs stacked along their axis with the sequence length.
"""

from __future__ import annotations

import numpy as np

from ._infer_model import CONTROL_FLOW, GraphTypes, infer_graph
from ._proto import AttributeProto, GraphProto, NodeProto
from .gradient._types import UNKNOWN, ValueType

__all__ = ["merge_types"]

Subgraphs = list[tuple[GraphProto, GraphTypes]]
Consts = dict[str, np.ndarray]


def _body(node: NodeProto, name: str) -> GraphProto | None:
    return next((a.g for a in node.attribute if a.name == name and a.type == AttributeProto.GRAPH), None)


def _ints(node: NodeProto, name: str) -> list[int]:
    return next((list(a.ints) for a in node.attribute if a.name == name), [])


def _outputs(
    body: GraphProto,
    outer: dict[str, ValueType],
    consts: Consts,
    opset: int,
    subgraphs: Subgraphs,
    inputs: list[ValueType] | None = None,
) -> list[ValueType]:
    result = infer_graph(body, opset, outer, inputs, consts)
    subgraphs.append((body, result))
    subgraphs.extend(result.subgraphs)
    return [_refine(result.types.get(o.name), result.declared.get(o.name)) for o in body.output]


def _refine(inferred: ValueType | None, declared: ValueType | None) -> ValueType:
    """A body output's type: the inferred one, each dim it leaves unknown taken from the declared one."""
    if inferred is None or declared is None:
        return inferred or declared or UNKNOWN
    dtype = inferred.dtype or declared.dtype
    a, b = inferred.shape, declared.shape
    if a is None or b is None or len(a) != len(b):
        return ValueType(dtype, a if a is not None else b)
    return ValueType(dtype, tuple(x if x is not None else y for x, y in zip(a, b)))


def merge_types(a: ValueType, b: ValueType) -> ValueType:
    """The type both ``a`` and ``b`` satisfy: a dim they disagree on unknown, a rank unknown if different."""
    dtype = a.dtype if a.dtype == b.dtype else (a.dtype or b.dtype if not (a.dtype and b.dtype) else 0)
    if a.shape is None or b.shape is None or len(a.shape) != len(b.shape):
        return ValueType(dtype, None)
    return ValueType(dtype, tuple(x if x == y else None for x, y in zip(a.shape, b.shape)))


def _if(
    node: NodeProto, types: dict[str, ValueType], consts: Consts, opset: int, subgraphs: Subgraphs
) -> list[ValueType]:
    then, other = _body(node, "then_branch"), _body(node, "else_branch")
    if then is None or other is None:
        return []
    a = _outputs(then, types, consts, opset, subgraphs)
    b = _outputs(other, types, consts, opset, subgraphs)
    return [merge_types(x, y) for x, y in zip(a, b)]


def _stacked(t: ValueType, length: int | str | None, axis: int = 0) -> ValueType:
    if t.shape is None:
        return ValueType(t.dtype, None)
    shape = list(t.shape)
    shape.insert(axis if axis >= 0 else len(shape) + 1 + axis, length)
    return ValueType(t.dtype, tuple(shape))


def _loop(
    node: NodeProto, types: dict[str, ValueType], consts: Consts, opset: int, subgraphs: Subgraphs
) -> list[ValueType]:
    body = _body(node, "body")
    if body is None:
        return []
    carried = len(node.input) - 2
    initial = [types.get(n, UNKNOWN) for n in node.input[2:]]
    body_inputs = [ValueType(7, ()), ValueType(9, ()), *initial]  # iteration number, condition, carried
    outs = _outputs(body, types, consts, opset, subgraphs, body_inputs)[1:]  # the body's first output is the condition
    states = [_carried(o, i) for o, i in zip(outs, initial)]
    return states + [_stacked(o, None) for o in outs[carried:]]


def _carried(after: ValueType, before: ValueType) -> ValueType:
    """The type of a carried value after any number of iterations (none included), from its
    type before the first (``before``) and after it (``after``): a dim one iteration changes
    (a list grown by Concat, torch's ``torch.cat`` in a loop) is unknown, not the first
    iteration's size."""
    if not (after.dtype and after.shape is not None):
        return merge_types(after, before)
    if before.shape is None:
        return after
    if len(before.shape) != len(after.shape):
        return ValueType(after.dtype, None)
    return ValueType(after.dtype, tuple(a if a == b else None for a, b in zip(after.shape, before.shape)))


def _slice(t: ValueType, axis: int) -> ValueType:
    """One slice of a scanned input: its type without the scan axis."""
    if t.shape is None or not -len(t.shape) <= axis < len(t.shape):
        return ValueType(t.dtype, None)
    drop = axis % len(t.shape)
    return ValueType(t.dtype, tuple(d for k, d in enumerate(t.shape) if k != drop))


def _scan(
    node: NodeProto, types: dict[str, ValueType], consts: Consts, opset: int, subgraphs: Subgraphs
) -> list[ValueType]:
    body = _body(node, "body")
    if body is None or opset < 9:  # Scan-8 has a batch axis and sequence_lens: not inferred
        return []
    n_scan = next((a.i for a in node.attribute if a.name == "num_scan_inputs"), 0)
    n_state = len(node.input) - n_scan
    in_axes = _ints(node, "scan_input_axes") or [0] * n_scan
    length: int | str | None = None
    if n_scan:
        first = types.get(node.input[n_state], UNKNOWN).shape
        axis = in_axes[0]
        if first is not None and -len(first) <= axis < len(first):
            length = first[axis]
    body_inputs = [types.get(n, UNKNOWN) for n in node.input[:n_state]]
    body_inputs.extend(_slice(types.get(n, UNKNOWN), axis) for n, axis in zip(node.input[n_state:], in_axes))
    outs = _outputs(body, types, consts, opset, subgraphs, body_inputs)
    out_axes = _ints(node, "scan_output_axes") or [0] * (len(outs) - n_state)
    states = [_carried(o, i) for o, i in zip(outs[:n_state], body_inputs)]
    return states + [_stacked(o, length, ax) for o, ax in zip(outs[n_state:], out_axes)]


CONTROL_FLOW.update({"If": _if, "Loop": _loop, "Scan": _scan})
