"""Inference BatchNormalization folded into the Conv before it, in a forward about to be differentiated.

``BatchNormalization(Conv(x, W, b), scale, B, mean, var)`` in inference mode is, per output
channel, ``Conv(x, W s, (b - mean) s + B)`` with ``s = scale / sqrt(var + eps)``: the channel
vectors and the weights are rescaled (cheap: weight-sized), the feature map is not touched. The
gradient pass then differentiates that form with the ordinary rules, so the backward recomputes
one Conv (no BatchNormalization over the map, which the rule's data gradient, its centred input
and two channel sums over the map each read again) and takes every BatchNormalization parameter's
gradient through the weight-sized nodes: MobileNetV3's backward 0.82x the time
(``benchmarks/RESULTS.md``, h-bwd session 9).

The fold is the one the runtime makes at plan time for constant weights (and onnxruntime and
torch make for inference); its rounding is theirs: ``dScale`` comes out as
``(sum(dY Conv(x, W)) + (b - mean) sum(dY)) / std``, which cancels where a channel's mean is
far outside its spread (float32: about 1e-7 |mean| / std relative), as the folded forward's value
does.

Only a Conv whose output nothing else reads (and which is not asked for: an ``x``, ``y`` or ``z``)
is folded, for float and double, at opsets with the inference-only form (9 on), and only where
its weights have at most as many elements as its output (known shapes; see below).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable
from operator import itemgetter

import numpy as np

from .._proto import NodeProto
from ..gradient._fastpath import attribute_values, nodes_fields
from ..gradient._types import ValueType, infer_types
from ..helper import make_node
from ..numpy_helper import from_array
from ._simplify import fresh_name

_OP_TYPE = itemgetter(0)

__all__ = ["fold_conv_batch_norms"]

_FLOATS = {1: np.float32, 11: np.float64}


def fold_conv_batch_norms(
    nodes: list[NodeProto],
    types: dict[str, ValueType],
    constants: dict[str, np.ndarray],
    protected: Iterable[object],
    opset: int,
) -> list[NodeProto]:
    """``nodes`` with each inference ``Conv -> BatchNormalization`` pair rewritten as above,
    where the Conv's weights have at most as many elements as its output (the fold moves
    about five passes over the map onto four over the weights: not a gain past that, as on
    CRNN's deep 256-channel layers over 2 x 40 maps).

    Args:
        nodes: the forward's nodes, in topological order (not changed: new nodes replace them).
        types: the types known (the weights' and parameters' are needed: rank and dtype).
        constants: the constant values known (for the shapes' inference; not changed).
        protected: names that must keep their values, or lists of them (``y``, ``xs``, ``zs``:
            anything else in it is left to the pass's own checks of those arguments).
        opset: the default domain's opset of ``nodes``.

    Returns:
        The new node list (``nodes`` itself when nothing was folded).
    """
    if opset < 9 or "BatchNormalization" not in set(map(_OP_TYPE, nodes_fields(nodes))):  # (C loops)
        return nodes
    kept = _names(protected)
    if kept is None:
        return nodes
    producer: dict[str, int] = {}
    readers: dict[str, int] = {}
    names: set[str] = set(kept)
    for k, node in enumerate(nodes):
        for i in node.input:
            readers[i] = readers.get(i, 0) + 1
            names.add(i)
        for o in node.output:
            producer[o] = k
            names.add(o)
    pairs: dict[int, int] = {}  # BN index -> its Conv's
    for k, node in enumerate(nodes):
        conv_k = producer.get(node.input[0], -1) if node.op_type == "BatchNormalization" and node.input else -1
        if conv_k >= 0 and _foldable(node, nodes[conv_k], types, kept, readers):
            pairs[k] = conv_k
    if not pairs:
        return nodes
    shapes = infer_types(nodes[: max(pairs.values()) + 1], dict(types), dict(constants), opset)[0]
    folded = {k: _folded(nodes[c], nodes[k], types, names) for k, c in pairs.items() if _pays(nodes[c], shapes)}
    dropped = {pairs[k] for k in folded}
    out: list[NodeProto] = []
    for k, node in enumerate(nodes):
        if k in folded:
            out.extend(folded[k])
        elif k not in dropped:
            out.append(node)
    return out if folded else nodes


def _names(groups: Iterable[object]) -> set[str] | None:
    """The str names in ``groups`` (names or collections of them); None where a group is an
    iterator (reading it would consume it) or a name is not a str (the pass reports those)."""
    out: set[str] = set()
    for g in groups:
        if g is None:
            continue
        if isinstance(g, str):
            out.add(g)
            continue
        if not isinstance(g, Collection) or iter(g) is g:
            return None
        for n in g:
            if not isinstance(n, str):
                return None
            out.add(n)
    return out


def _elements(t: ValueType | None) -> int | None:
    dims = [d for d in t.shape if type(d) is int] if t is not None and t.shape is not None else []
    if t is None or t.shape is None or len(dims) != len(t.shape):
        return None
    return math.prod(dims)


def _pays(conv: NodeProto, shapes: dict[str, ValueType]) -> bool:
    """The fold's weight-sized passes cost less than the map-sized ones it removes."""
    weights, out = _elements(shapes.get(conv.input[1])), _elements(shapes.get(conv.output[0]))
    return weights is not None and out is not None and weights <= out


def _foldable(
    bn: NodeProto, conv: NodeProto, types: dict[str, ValueType], protected: Collection[str], readers: dict[str, int]
) -> bool:
    if bn.domain not in ("", "ai.onnx") or conv.op_type != "Conv" or conv.domain not in ("", "ai.onnx"):
        return False
    if len(bn.input) != 5 or not all(bn.input) or len([o for o in bn.output if o]) != 1 or len(conv.output) != 1:
        return False
    attrs = attribute_values(bn.attribute)
    if int(attrs.get("training_mode", 0)) or int(attrs.get("spatial", 1)) != 1 or "is_test" in attrs:
        return False
    c = conv.output[0]
    if readers.get(c, 0) != 1 or c in protected or len(conv.input) < 2:
        return False
    w = types.get(conv.input[1])
    if w is None or w.shape is None or len(w.shape) < 3 or w.dtype not in _FLOATS:
        return False
    vectors = [*bn.input[1:], *conv.input[2:3]]
    return all((t := types.get(v)) is not None and t.dtype == w.dtype and t.shape is not None for v in vectors if v)


def _folded(conv: NodeProto, bn: NodeProto, types: dict[str, ValueType], names: set[str]) -> list[NodeProto]:
    """The nodes computing ``bn``'s output as one Conv of rescaled weights and bias."""
    scale, bias, mean, var = bn.input[1:5]
    w = conv.input[1]
    wtype = types[w]
    dtype = _FLOATS[wtype.dtype]
    assert wtype.shape is not None  # _foldable
    eps = float(attribute_values(bn.attribute).get("epsilon", 1e-5))
    y = bn.output[0]

    def name(tag: str) -> str:
        return fresh_name(names, f"{y}_bnfold_{tag}")

    eps_c, var_eps, shape_c, std, s, s_w, w2, shift, shift_s, t = (
        name(tag) for tag in ("eps", "var_eps", "shape", "std", "s", "s_w", "w", "shift", "shift_s", "b")
    )
    rows = [-1] + [1] * (len(wtype.shape) - 1)
    b = conv.input[2] if len(conv.input) > 2 and conv.input[2] else ""
    new_conv = make_node("Conv", [conv.input[0], w2, t], [y], name=conv.name or None)
    new_conv.attribute.extend(conv.attribute)
    return [
        make_node("Constant", [], [eps_c], value=from_array(np.array(eps, dtype))),
        make_node("Add", [var, eps_c], [var_eps]),
        make_node("Sqrt", [var_eps], [std]),
        make_node("Div", [scale, std], [s]),
        make_node("Constant", [], [shape_c], value=from_array(np.array(rows, np.int64))),
        make_node("Reshape", [s, shape_c], [s_w]),
        make_node("Mul", [w, s_w], [w2]),
        make_node("Sub", [b, mean], [shift]) if b else make_node("Neg", [mean], [shift]),
        make_node("Mul", [shift, s], [shift_s]),
        make_node("Add", [shift_s, bias], [t]),
        new_conv,
    ]
