"""Graph surgery shared by the artifacts: mode rewrites, running statistics, assembly."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..onnx_core import NodeProto, helper
from ._emit import Emitter

__all__ = ["for_eval", "for_training", "assemble", "used_values"]


def _attrs(node: NodeProto, drop: Sequence[str] = ()) -> dict[str, Any]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute if a.name not in drop}


def _copy(node: NodeProto, inputs: Sequence[str], outputs: Sequence[str], drop: Sequence[str] = ()) -> NodeProto:
    return helper.make_node(
        node.op_type,
        list(inputs),
        list(outputs),
        name=node.name or None,
        domain=node.domain or None,
        **_attrs(node, drop),
    )


def _is_default(node: NodeProto) -> bool:
    return node.domain in ("", "ai.onnx")


def is_training_bn(node: NodeProto) -> bool:
    """A BatchNormalization in training mode (batch statistics, running ones updated)."""
    return (
        _is_default(node)
        and node.op_type == "BatchNormalization"
        and any(a.name == "training_mode" and a.i for a in node.attribute)
    )


def bn_buffers(nodes: Iterable[NodeProto]) -> list[str]:
    """The running mean and variance read by training-mode BatchNormalizations."""
    out: list[str] = []
    for n in nodes:
        if is_training_bn(n):
            out += [n.input[3], n.input[4]]
    return out


def _running_update(e: Emitter, node: NodeProto) -> list[NodeProto]:
    """torch's update: r = (1 - m) r + m batch, with the unbiased variance (m = 1 - ONNX momentum)."""
    x, _, _, mean_in, var_in = node.input[:5]
    keep = float(next((a.f for a in node.attribute if a.name == "momentum"), 0.9))
    e = e.child()
    x3 = e.Reshape(x, e.const([0, 0, -1], np.int64))
    axes = e.const([0, 2], np.int64)
    mean = e.ReduceMean(x3, axes, keepdims=0)
    centered = e.Sub(x3, e.Reshape(mean, e.const([1, -1, 1], np.int64)))
    ss = e.ReduceSumSquare(centered, axes, keepdims=0)
    count = e.Cast(e.Div(e.Size(x), e.Shape(x, start=1, end=2)), to=1)
    var = e.Div(ss, e.Sub(count, e.const(1.0)))
    k, r = e.const(keep), e.const(1.0 - keep)
    e.Add(e.Mul(mean_in, k), e.Mul(mean, r), out=f"{mean_in}_next")
    e.Add(e.Mul(var_in, k), e.Mul(var, r), out=f"{var_in}_next")
    return e.nodes


def is_training_dropout(node: NodeProto) -> bool:
    """A Dropout whose ``training_mode`` input is given (a torch export in training mode)."""
    return _is_default(node) and node.op_type == "Dropout" and len(node.input) > 2 and bool(node.input[2])


_M32 = 1 << 32


def _seeded_dropout(e: Emitter, node: NodeProto, seed: str, salt: int) -> list[NodeProto]:
    """Dropout whose mask is a hash of (seed, node, element index): the same seed, the same mask.

    u = hash / 2^32 in [0, 1) per element (two multiply-xorshift rounds on 32-bit values
    held in int64, so nothing overflows); keep = u >= ratio or not training_mode;
    Y = X keep / (1 - ratio), mask = keep.
    """
    e = e.child()
    x, ratio, training = node.input[0], node.input[1] or e.const(0.5), node.input[2]
    shape = e.Shape(x)
    idx = e.Range(e.const(0, np.int64), e.ReduceProd(shape, keepdims=0), e.const(1, np.int64))
    mix = e.Add(
        e.Mul(e.Mod(seed, e.const(1 << 31, np.int64)), e.const(0x5BD1E995, np.int64)),
        e.const(salt * 0x27D4EB2F % (1 << 31), np.int64),
    )
    h = e.Mod(e.Add(idx, mix), e.const(_M32, np.int64))
    for _ in range(2):
        h = e.BitwiseXor(h, e.Div(h, e.const(1 << 16, np.int64)))
        h = e.Mod(e.Mul(h, e.const(0x45D9F3B, np.int64)), e.const(_M32, np.int64))
    h = e.BitwiseXor(h, e.Div(h, e.const(1 << 16, np.int64)))
    u = e.Div(e.Cast(h, to=1), e.const(float(_M32)))
    ratio_f = e.Cast(ratio, to=1)
    keep = e.Reshape(e.Or(e.Not(e.Less(u, ratio_f)), e.Not(training)), shape)
    one = e.const(1.0)
    scale = e.CastLike(e.Div(one, e.Sub(one, ratio_f)), x)
    e.Mul(e.Mul(x, e.CastLike(keep, x)), scale, out=node.output[0])
    if len(node.output) > 1 and node.output[1]:
        e.Identity(keep, out=node.output[1])
    return e.nodes


def for_training(
    nodes: Sequence[NodeProto], e: Emitter, arrays: Mapping[str, np.ndarray], seed: str = "dropout_seed"
) -> tuple[list[NodeProto], list[NodeProto]]:
    """The forward in training mode, and the nodes computing ``<buffer>_next``.

    A training BatchNormalization's own running outputs are left unread: the spec's use
    the biased batch variance, torch's the unbiased one, computed separately. Its Y
    reads only batch statistics, so its running inputs become constants of their shape:
    onnxruntime's kernel writes its running outputs into those input buffers, which
    must therefore not be the checkpoint's tensors (``arrays``: the initializers).
    A training Dropout draws its mask from the int64 scalar ``seed`` (see _seeded_dropout).
    """
    fwd: list[NodeProto] = []
    updates: list[NodeProto] = []
    for n in nodes:
        if is_training_bn(n):
            updates += _running_update(e, n)
            if n.input[3] in arrays and n.input[4] in arrays:
                c = e.child()
                m_in, v_in = arrays[n.input[3]], arrays[n.input[4]]
                mean, var = c.const(np.zeros_like(m_in), m_in.dtype), c.const(np.ones_like(v_in), v_in.dtype)
                fwd += c.nodes
                n = _copy(n, [*n.input[:3], mean, var], n.output)
        elif is_training_dropout(n):
            fwd += _seeded_dropout(e, n, seed, len(fwd))
            continue
        fwd.append(n)
    return fwd, updates


def for_eval(nodes: Sequence[NodeProto], e: Emitter) -> list[NodeProto]:
    """The forward in inference mode: BatchNormalization on running statistics, Dropout off."""
    out: list[NodeProto] = []
    for n in nodes:
        if is_training_bn(n):
            out.append(_copy(n, n.input, n.output[:1], drop=("training_mode",)))
        elif is_training_dropout(n):
            c = e.child()
            off = c.const(False, np.bool_)
            out += c.nodes
            out.append(_copy(n, [n.input[0], n.input[1], off], n.output))
        else:
            out.append(n)
    return out


def assemble(
    first: Sequence[NodeProto], second: Sequence[NodeProto], wanted: Sequence[str], fresh: Callable[[str], str]
) -> list[NodeProto]:
    """The nodes computing ``wanted``, in topological order, from two node lists.

    A value ``first`` produces is taken from it; ``second`` supplies the rest. Outputs of
    a node of ``second`` that ``first`` also produces are renamed (they are computed twice).
    """
    producer: dict[str, tuple[int, NodeProto]] = {}
    for n in first:
        for o in n.output:
            if o:
                producer[o] = (0, n)
    for n in second:
        if any(o and o not in producer for o in n.output):
            for o in n.output:
                if o and o not in producer:
                    producer[o] = (1, n)
    order: list[tuple[int, NodeProto]] = []
    seen: set[int] = set()
    stack: list[tuple[str, bool]] = [(w, False) for w in reversed(wanted)]
    while stack:
        value, expanded = stack.pop()
        entry = producer.get(value)
        if entry is None or id(entry[1]) in seen and not expanded:
            continue
        if expanded:
            if id(entry[1]) not in seen:
                seen.add(id(entry[1]))
                order.append(entry)
            continue
        stack.append((value, True))
        stack += [(i, False) for i in reversed(_reads(entry[1])) if i]
    first_out = {o for n in first for o in n.output}
    result = []
    for src, n in order:
        if src == 1 and any(o in first_out for o in n.output):
            n = _copy(n, n.input, [fresh("dup") if o in first_out else o for o in n.output])
        result.append(n)
    return result


def _reads(node: NodeProto) -> list[str]:
    names = list(node.input)
    for a in node.attribute:
        for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
            names += used_values(g.node)
    return names


def used_values(nodes: Iterable[NodeProto]) -> list[str]:
    """Every name the nodes read (subgraphs included), in first-use order."""
    out: dict[str, None] = {}
    for n in nodes:
        for i in _reads(n):
            if i:
                out[i] = None
    return list(out)


def differentiable_sources(
    nodes: Sequence[NodeProto], roots: Iterable[str], nondiff: Callable[[NodeProto], frozenset[int] | None]
) -> set[str]:
    """The values from which a differentiable path of ``nodes`` leads to one of ``roots``.

    ``nondiff(node)`` gives the input positions of ``node`` that carry no gradient (Resize's
    scales, Dropout's ratio, ...), or None when no input does (an op with no gradient at
    all: every position). A value read inside a subgraph counts as differentiable.
    """
    live = set(roots)
    for node in reversed(nodes):
        if not any(o in live for o in node.output if o):
            continue
        skip = nondiff(node)
        if skip is None:
            continue
        live.update(name for k, name in enumerate(node.input) if name and k not in skip)
        for a in node.attribute:
            for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                live.update(used_values(g.node))
    return live
