"""Upgrades forward nodes from an older default-domain opset to the pass's opset.

The gradient pass emits opset 21 (or newer), so forward nodes copied from a torch
export at opset 7–20 must mean the same there. Only ops whose signature changed are
rewritten, always into NEW nodes (the caller's nodes are never mutated); every other
node passes through as the same object. Attributes that became inputs are emitted as
``Constant`` nodes named by the caller's ``new_name``.
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
from . import REDUCE_OPS, SAME_PADS, axes_input_since, transpose_window
from ._registries import UPGRADES, upgrade

__all__ = ["upgrade_nodes"]

NewName = Callable[[str], str]


class _Upgrader:
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


def _attr(node: NodeProto, name: str) -> AttributeProto | None:
    return next((a for a in node.attribute if a.name == name), None)


def _attr_value(node: NodeProto, name: str, default: Any = None) -> Any:
    from ..helper import get_attribute_value

    a = _attr(node, name)
    if a is None:
        return default
    v = get_attribute_value(a)
    return v.decode("utf-8") if isinstance(v, bytes) else v


def _clone(
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


def _pad_inputs(inputs: Sequence[str], n: int) -> list[str]:
    return list(inputs) + [""] * (n - len(inputs))


# ----------------------------------------------------------------------------- per op
def _reduce(u: _Upgrader, node: NodeProto) -> None:
    since = axes_input_since(node.op_type)
    axes = _attr_value(node, "axes")
    if u.source >= since or u.target < since or axes is None:
        u.out.append(node)
        return
    ax = u.ints(axes, f"{node.op_type}_axes")
    u.out.append(_clone(node, [node.input[0], ax], drop=["axes"]))


for _op in REDUCE_OPS:
    upgrade(_op, until=axes_input_since(_op) - 1)(_reduce)


@upgrade("Squeeze", "Unsqueeze", until=12)
def _axes_to_input(u: _Upgrader, node: NodeProto, attr: str = "axes") -> None:
    axes = _attr_value(node, attr)
    if u.source >= 13 or u.target < 13 or axes is None:
        u.out.append(node)
        return
    u.out.append(_clone(node, [node.input[0], u.ints(axes, f"{node.op_type}_{attr}")], drop=[attr]))


@upgrade("Split", until=17)
def _split(u: _Upgrader, node: NodeProto) -> None:
    sizes = _attr_value(node, "split")
    inputs = list(node.input)
    changed = False
    if u.source < 13 <= u.target and sizes is not None:
        inputs = [inputs[0], u.ints(sizes, "Split_split")]
        changed = True
    num: int | None = None
    if u.source < 18 <= u.target and (len(inputs) < 2 or not inputs[1]):
        num = len(node.output)  # equal split: at 18 the count must be explicit
        changed = True
    u.out.append(_clone(node, inputs, drop=["split"], num_outputs=num) if changed else node)


@upgrade("Slice", until=9)
def _slice(u: _Upgrader, node: NodeProto) -> None:
    starts = _attr_value(node, "starts")
    if u.source >= 10 or u.target < 10 or starts is None:
        u.out.append(node)
        return
    inputs = [node.input[0], u.ints(starts, "Slice_starts"), u.ints(_attr_value(node, "ends"), "Slice_ends")]
    axes = _attr_value(node, "axes")
    if axes is not None:
        inputs.append(u.ints(axes, "Slice_axes"))
    u.out.append(_clone(node, inputs, drop=["starts", "ends", "axes"]))


@upgrade("Pad", until=10)
def _pad(u: _Upgrader, node: NodeProto) -> None:
    pads = _attr_value(node, "pads", _attr_value(node, "paddings"))
    if u.source >= 11 or u.target < 11 or pads is None:
        u.out.append(node)
        return
    inputs = [node.input[0], u.ints(pads, "Pad_pads")]
    value = float(_attr_value(node, "value", 0.0))
    if value != 0.0 and str(_attr_value(node, "mode", "constant")) == "constant":
        inputs.append(u.scalar_like(value, node.input[0], node, "value"))
    u.out.append(_clone(node, inputs, drop=["pads", "paddings", "value"]))


@upgrade("Clip", until=10)
def _clip(u: _Upgrader, node: NodeProto) -> None:
    lo, hi = _attr_value(node, "min"), _attr_value(node, "max")
    if u.source >= 11 or u.target < 11 or (lo is None and hi is None):
        u.out.append(node)
        return
    inputs = [node.input[0], "", ""]
    if lo is not None:
        inputs[1] = u.scalar_like(float(lo), node.input[0], node, "min")
    if hi is not None:
        inputs[2] = u.scalar_like(float(hi), node.input[0], node, "max")
    while inputs[-1] == "":
        inputs.pop()
    u.out.append(_clone(node, inputs, drop=["min", "max"]))


@upgrade("Dropout", until=11)
def _dropout(u: _Upgrader, node: NodeProto) -> None:
    if u.source >= 12 or u.target < 12:
        u.out.append(node)
        return
    ratio = _attr_value(node, "ratio")
    inputs = [node.input[0]]
    if ratio is not None:
        inputs.append(u.const(np.asarray(ratio, np.float32), "Dropout_ratio"))
    outputs = list(node.output)
    cast_to = None
    if u.source < 10 and len(outputs) > 1 and outputs[1]:
        # the mask was of the input's type before opset 10, bool since
        cast_to, outputs[1] = outputs[1], u.new_name("Dropout_mask")
    u.out.append(_clone(node, inputs, outputs, drop=["ratio", "is_test"]))
    if cast_to is not None:
        dt = u.dtype(node.input[0])
        if not dt:
            raise u.error(node, f"the element type of {node.input[0]!r} is unknown, needed to convert the mask")
        u.out.append(make_node("Cast", [outputs[1]], [cast_to], to=dt))


@upgrade("ConvTranspose", until=10)
def _conv_transpose(u: _Upgrader, node: NodeProto) -> None:
    """Before opset 11 an odd imposed padding (``output_shape`` or SAME_*) was split the
    other way round: the node gets the explicit ``pads`` that mean the same at 11+."""
    auto_pad = str(_attr_value(node, "auto_pad", "NOTSET"))
    output_shape = _attr_value(node, "output_shape")
    if u.source >= 11 or u.target < 11 or (not output_shape and auto_pad not in SAME_PADS):
        u.out.append(node)
        return
    x, w = u.shape(node.input[0]), u.shape(node.input[1])
    if x is None or w is None or not all(isinstance(d, int) for d in (*x[2:], *w[2:])):
        raise u.error(
            node,
            f"the spatial dims of {node.input[0]!r} and {node.input[1]!r} are needed to place its odd "
            "padding (ConvTranspose-1 split it the other way round); give the inputs static shapes",
        )
    attrs = {k: _attr_value(node, k) for k in ("strides", "dilations", "output_padding")}
    args = (x[2:], w[2:], attrs["strides"], attrs["dilations"], None, auto_pad, attrs["output_padding"], output_shape)
    old = transpose_window(*args, legacy=True)
    if old.begin == transpose_window(*args).begin:
        u.out.append(node)
        return
    u.out.append(_clone(node, drop=["auto_pad", "output_shape"], pads=old.begin + old.end))


@upgrade("Softmax", "LogSoftmax", "Hardmax", until=12)
def _softmax(u: _Upgrader, node: NodeProto) -> None:
    if u.source >= 13 or u.target < 13:
        u.out.append(node)
        return
    x = node.input[0]
    axis = int(_attr_value(node, "axis", 1))
    shape = u.shape(x)
    rank = None if shape is None else len(shape)
    if rank is not None and (axis + rank if axis < 0 else axis) == rank - 1:
        u.out.append(_clone(node, axis=-1))
        return
    # flatten-to-2D semantics: the op runs on rows of prod(dims[axis:]) elements
    flat = u.emit("Flatten", [x], f"{node.op_type}_2d", axis=axis)[0]
    shp = u.emit("Shape", [x], f"{node.op_type}_shape")[0]
    res = u.new_name(f"{node.op_type}_out")
    u.out.append(_clone(node, [flat], [res], axis=-1))
    u.out.append(make_node("Reshape", [res, shp], [node.output[0]]))


@upgrade("GroupNormalization", until=20, since=18)
def _group_norm(u: _Upgrader, node: NodeProto) -> None:
    if not 18 <= u.source < 21 or u.target < 21:
        u.out.append(node)
        return
    x, scale, bias = node.input[:3]
    groups = int(_attr_value(node, "num_groups", 0))
    shape = u.shape(x)
    c = shape[1] if shape is not None and len(shape) > 1 else None
    if isinstance(c, int):
        if c % groups:
            raise u.error(node, f"channels {c} not divisible by num_groups {groups}")
        target = u.ints([groups, c // groups], "GroupNormalization_target")
    else:
        # the channel count is known only at run time: target = [G, C / G]
        c_val = u.emit("Shape", [x], "GroupNormalization_C", start=1, end=2)[0]
        per = u.emit("Div", [c_val, u.ints([groups], "GroupNormalization_G")], "GroupNormalization_CG")[0]
        target = u.emit("Concat", [u.ints([groups], "GroupNormalization_G"), per], "GroupNormalization_target", axis=0)[
            0
        ]
    col = u.ints([groups, 1], "GroupNormalization_col")
    flat = u.ints([-1], "GroupNormalization_flat")
    per_channel = []
    for v, what in ((scale, "scale"), (bias, "bias")):
        r = u.emit("Reshape", [v, col], f"GroupNormalization_{what}_col")[0]
        e = u.emit("Expand", [r, target], f"GroupNormalization_{what}_expand")[0]
        per_channel.append(u.emit("Reshape", [e, flat], f"GroupNormalization_{what}_c")[0])
    u.out.append(_clone(node, [x, *per_channel]))


@upgrade("BatchNormalization", until=13)
def _batch_norm(u: _Upgrader, node: NodeProto) -> None:
    if u.source >= 14 or u.target < 9:
        u.out.append(node)
        return
    if _attr(node, "spatial") is not None and int(_attr_value(node, "spatial")) == 0:
        raise u.error(
            node,
            "spatial=0 (per-activation statistics) has no equivalent after opset 9; re-export the model with spatial=1",
        )
    if int(_attr_value(node, "is_test", 1)) == 0 or len([o for o in node.output[1:] if o]) > 0:
        raise u.error(
            node,
            "the training-mode outputs (mean, var, saved_mean, saved_var) changed meaning at "
            "opset 14; export the model in inference mode",
        )
    if any(_attr(node, a) is not None for a in ("spatial", "is_test", "consumed_inputs")):
        u.out.append(_clone(node, outputs=node.output[:1], drop=["spatial", "is_test", "consumed_inputs"]))
    else:
        u.out.append(node)


@upgrade("TopK", until=9)
def _topk(u: _Upgrader, node: NodeProto) -> None:
    k = _attr_value(node, "k")
    if u.source >= 10 or u.target < 10 or k is None:
        u.out.append(node)
        return
    u.out.append(_clone(node, [node.input[0], u.ints([k], "TopK_k")], drop=["k"]))


@upgrade("Scatter", until=None)
def _scatter(u: _Upgrader, node: NodeProto) -> None:
    u.out.append(_clone(node, op_type="ScatterElements") if u.target >= 11 else node)


@upgrade("Upsample", "Resize", until=None)
def _resize(u: _Upgrader, node: NodeProto) -> None:
    """Upsample (7–9) and Resize-10 -> Resize with asymmetric coordinates, floor nearest."""
    if node.op_type == "Resize" and (u.source >= 11 or u.target < 11):
        u.out.append(node)
        return
    if node.op_type == "Upsample" and u.target < 10:
        u.out.append(node)
        return
    mode = str(_attr_value(node, "mode", "nearest"))
    if node.op_type == "Upsample" and _attr(node, "scales") is not None:
        scales = u.const(np.asarray(_attr_value(node, "scales"), np.float32), "Upsample_scales")
    else:
        scales = node.input[1]
    attrs: dict[str, Any] = {"mode": mode, "coordinate_transformation_mode": "asymmetric"}
    if mode == "nearest":
        attrs["nearest_mode"] = "floor"
    u.out.append(_clone(node, [node.input[0], "", scales], drop=["scales"], op_type="Resize", **attrs))


def upgrade_nodes(
    nodes: list[NodeProto],
    source_opset: int,
    target_opset: int,
    new_name: NewName,
    dtype_of: Callable[[str], int] | None = None,
    rank_of: Callable[[str], int | None] | None = None,
    shape_of: Callable[[str], Any] | None = None,
    kinds: Sequence[tuple[str, str]] | None = None,
) -> list[NodeProto]:
    """Rewrites default-domain nodes of ``source_opset`` so they mean the same at ``target_opset``.

    Covered: Reduce* ``axes`` (ReduceSum before 13, the others before 18), Split
    ``split`` (before 13; ``num_outputs`` at 18 for equal splits), Squeeze/Unsqueeze
    ``axes`` (before 13), Slice (before 10), Pad (before 11), Clip (before 11), Dropout
    ``ratio`` (before 12; mask type before 10), ConvTranspose's odd imposed padding (before
    11), Softmax/LogSoftmax/Hardmax (before 13,
    flatten-to-2D semantics), GroupNormalization 18–20 (per-group scale and bias), old
    BatchNormalization attributes, TopK ``k`` (before 10), Scatter, Upsample and
    Resize-10. Other nodes pass through as the same objects.

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

    Returns:
        The new node list.

    Raises:
        GradientError: a node cannot be expressed at the target opset.
    """
    u = _Upgrader(list(nodes), source_opset, target_opset, new_name, dtype_of, rank_of, shape_of)
    if source_opset >= target_opset:
        return list(nodes)
    if kinds is None:
        kinds = [(node.op_type, node.domain) for node in nodes]
    upgrades = UPGRADES.at(source_opset)
    for node, (op_type, domain) in zip(nodes, kinds):
        fn = upgrades.get(op_type) if domain in ("", "ai.onnx") else None
        if fn is None:
            u.out.append(node)
        else:
            fn(u, node)
    return u.out
