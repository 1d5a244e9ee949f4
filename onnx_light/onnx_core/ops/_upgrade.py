"""Upgrades forward nodes from an older default-domain opset to the pass's opset.

The gradient pass emits opset 21 (or newer), so forward nodes copied from a torch
export at opset 7–20 must mean the same there. Only ops whose signature changed are
rewritten, always into NEW nodes (the caller's nodes are never mutated); every other
node passes through as the same object. Attributes that became inputs are emitted as
``Constant`` nodes named by the caller's ``new_name``.

This module is the machinery (:class:`Upgrader`, :func:`upgrade_nodes`); each op's
upgrade is registered with ``@upgrade(op, until=...)`` beside its inference in its family
module (``_infer_math.py``, ``_infer_nn.py``, ``_infer_tensor.py``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._errors import GradientError
from .._proto import AttributeProto, NodeProto
from ..gradient._types import UNKNOWN, ValueType, infer_types
from ..helper import make_attribute, make_node
from ..numpy_helper import from_array
from ._registries import UPGRADES
from ._traits import op_types_with

__all__ = ["upgrade_nodes"]

NewName = Callable[[str], str]


class Upgrader:
    """State of one :func:`upgrade_nodes` call: callbacks, types, emitted nodes."""

    def __init__(
        self,
        nodes: list[NodeProto],
        source: int,
        target: int,
        new_name: NewName,
        dtype_of: Callable[[str], int] | None,
        rank_of: Callable[[str], int | None] | None,
        shape_of: Callable[[str], Any] | None,
    ) -> None:
        self.source, self.target, self.new_name = source, target, new_name
        self._dtype_of, self._rank_of, self._shape_of = dtype_of, rank_of, shape_of
        self.out: list[NodeProto] = []
        self._types: dict[str, ValueType] | None = None
        self._nodes = nodes

    # -- what is known of a value: the caller's callbacks first, then our inference ----
    def _inferred(self, name: str) -> ValueType:
        if self._types is None:
            produced = {o for n in self._nodes for o in n.output}
            known: dict[str, ValueType] = {}
            for n in self._nodes:
                for i in n.input:
                    if i and i not in produced and i not in known:
                        known[i] = ValueType(self._callback_dtype(i), self._callback_shape(i))
            try:
                self._types, _ = infer_types(self._nodes, known, {}, self.source)
            except Exception:  # best effort: the callbacks may still answer
                self._types = known
        return self._types.get(name, UNKNOWN)

    def _callback_dtype(self, name: str) -> int:
        return int(self._dtype_of(name) or 0) if self._dtype_of is not None else 0

    def _callback_shape(self, name: str) -> Any:
        shape = self._shape_of(name) if self._shape_of is not None else None
        if shape is None and self._rank_of is not None:
            r = self._rank_of(name)
            shape = None if r is None else (None,) * r
        return None if shape is None else tuple(shape)

    def dtype(self, name: str) -> int:
        """The element type of ``name`` (0 when unknown)."""
        return self._callback_dtype(name) or self._inferred(name).dtype

    def shape(self, name: str) -> tuple[Any, ...] | None:
        """The shape of ``name`` (None when even the rank is unknown)."""
        s = self._callback_shape(name)
        inferred = self._inferred(name).shape
        if s is None:
            return inferred
        if inferred is not None and len(inferred) == len(s):
            return tuple(a if isinstance(a, int) else b for a, b in zip(s, inferred))
        return s

    # -- emitting ------------------------------------------------------------------
    def emit(self, op: str, inputs: Sequence[str], prefix: str, n_out: int = 1, **attrs: Any) -> list[str]:
        """Appends a new node with fresh output names; returns them."""
        outs = [self.new_name(prefix) for _ in range(n_out)]
        self.out.append(make_node(op, list(inputs), outs, **attrs))
        return outs

    def const(self, arr: np.ndarray, prefix: str) -> str:
        """A Constant node holding ``arr``; returns its output name."""
        return self.emit("Constant", [], prefix, value=from_array(np.asarray(arr)))[0]

    def ints(self, values: Sequence[int], prefix: str) -> str:
        """A 1-D int64 Constant."""
        return self.const(np.asarray([int(v) for v in values], np.int64), prefix)

    def scalar_like(self, v: float, like: str, node: NodeProto, what: str) -> str:
        """A scalar Constant of ``like``'s element type."""
        from .._dtypes import tensor_dtype_to_np_dtype

        dt = self.dtype(like)
        if not dt:
            raise self.error(node, f"the element type of {like!r} is unknown, needed to turn {what} into an input")
        return self.const(np.asarray(v, dtype=tensor_dtype_to_np_dtype(dt)), f"{node.op_type}_{what}")

    def error(self, node: NodeProto, message: str) -> GradientError:
        """A GradientError naming the node, the op and the opsets."""
        name = f" {node.name!r}" if node.name else ""
        return GradientError(
            f"node{name} (ai.onnx::{node.op_type} -> {list(node.output)}) at opset {self.source}: cannot upgrade "
            f"to opset {self.target}: {message}"
        )


def attr(node: NodeProto, name: str) -> AttributeProto | None:
    return next((a for a in node.attribute if a.name == name), None)


def attr_value(node: NodeProto, name: str, default: Any = None) -> Any:
    from ..helper import get_attribute_value

    a = attr(node, name)
    if a is None:
        return default
    v = get_attribute_value(a)
    return v.decode("utf-8") if isinstance(v, bytes) else v


def clone(
    node: NodeProto,
    inputs: Sequence[str] | None = None,
    outputs: Sequence[str] | None = None,
    drop: Sequence[str] = (),
    op_type: str | None = None,
    **attrs: Any,
) -> NodeProto:
    """A deep copy of ``node`` with new inputs, dropped and added attributes."""
    new = copy.deepcopy(node)
    if inputs is not None:
        new.input = list(inputs)
    if outputs is not None:
        new.output = list(outputs)
    if op_type is not None:
        new.op_type = op_type
    gone = set(drop) | set(attrs)
    new.attribute = [a for a in new.attribute if a.name not in gone]
    new.attribute.extend(make_attribute(k, v) for k, v in sorted(attrs.items()) if v is not None)
    return new


def pad_inputs(inputs: Sequence[str], n: int) -> list[str]:
    return list(inputs) + [""] * (n - len(inputs))


# The per-op upgrades live with the op family: ops/_infer_math.py, _infer_nn.py, _infer_tensor.py.
def upgrade_nodes(
    nodes: list[NodeProto],
    source_opset: int,
    target_opset: int,
    new_name: NewName,
    dtype_of: Callable[[str], int] | None = None,
    rank_of: Callable[[str], int | None] | None = None,
    shape_of: Callable[[str], Any] | None = None,
    kinds: Sequence[tuple[str, str]] | None = None,
    subgraphs: bool = True,
) -> list[NodeProto]:
    """Rewrites default-domain nodes of ``source_opset`` so they mean the same at ``target_opset``.

    Covered: Reduce* ``axes`` (ReduceSum before 13, the others before 18), Split
    ``split`` (before 13; ``num_outputs`` at 18 for equal splits), Squeeze/Unsqueeze
    ``axes`` (before 13), Slice (before 10), Pad (before 11), Clip (before 11), Dropout
    ``ratio`` (before 12; mask type before 10), ConvTranspose's odd imposed padding (before
    11), Softmax/LogSoftmax/Hardmax (before 13,
    flatten-to-2D semantics), GroupNormalization 18–20 (per-group scale and bias), old
    BatchNormalization attributes, TopK ``k`` (before 10), Scatter, Upsample and
    Resize-10, RoiAlign's sampling (before 16), GridSample's modes and DFT's ``axis``
    (before 20); Scan-8 is refused. Other nodes pass through as the same objects.

    Args:
        nodes: the forward nodes, in order; never mutated.
        source_opset: their default-domain opset.
        target_opset: the opset they must run at (21 or newer).
        new_name: returns a fresh value name for a prefix.
        dtype_of: the TensorProto element type of a value (0 when unknown); needed by
            Clip and Pad, whose attribute values become typed inputs.
        rank_of: the rank of a value (None when unknown); Softmax keeps its form when
            the axis is the last one.
        shape_of: the shape of a value (dims int, str or None; None when unknown);
            GroupNormalization reads the channel count from it.
        kinds: ``(op_type, domain)`` of each node, when the caller has read them (the
            gradient pass has), which spares reading them again.
        subgraphs: upgrade the nodes of If/Loop/Scan bodies too (in copies of their nodes);
            False for a caller that walks the subgraphs itself (the version converter).

    Returns:
        The new node list.

    Raises:
        GradientError: a node cannot be expressed at the target opset.
    """
    from . import _infer_math, _infer_nn, _infer_tensor  # noqa: F401  (they register the upgrades)

    u = Upgrader(list(nodes), source_opset, target_opset, new_name, dtype_of, rank_of, shape_of)
    if source_opset >= target_opset:
        return list(nodes)
    if kinds is None:
        kinds = [(node.op_type, node.domain) for node in nodes]
    upgrades = UPGRADES.at(source_opset)
    nested = op_types_with("subgraphs") if subgraphs else frozenset()
    for node, (op_type, domain) in zip(nodes, kinds):
        fn = upgrades.get(op_type) if domain in ("", "ai.onnx") else None
        if fn is None:
            u.out.append(_with_upgraded_subgraphs(u, node) if op_type in nested else node)
        else:
            fn(u, node)
    return u.out


def _with_upgraded_subgraphs(u: Upgrader, node: NodeProto) -> NodeProto:
    """``node``, or a copy whose subgraphs' nodes are upgraded too (an If's branches of an
    opset-16 export hold Reduce* nodes with ``axes`` attributes)."""
    graphs = [g for a in node.attribute for g in ([a.g] if a.type == AttributeProto.GRAPH else a.graphs)]
    upgraded = [upgrade_nodes(list(g.node), u.source, u.target, u.new_name, u.dtype, None, u.shape) for g in graphs]
    if all(len(new) == len(g.node) and all(a is b for a, b in zip(new, g.node)) for new, g in zip(upgraded, graphs)):
        return node
    node = copy.deepcopy(node)
    copies = [g for a in node.attribute for g in ([a.g] if a.type == AttributeProto.GRAPH else a.graphs)]
    for g, new in zip(copies, upgraded):
        g.node = new
    return node
