"""Our decompositions of context-dependent function ops, written from the spec text:
Attention (23-25), RotaryEmbedding (23), CausalConvWithState (27), LinearAttention (27, one
Scan over the tokens) and CenterCropPad (18).

Each emits standard ops only. Head counts and kernel sizes must be known when expanding
(static dims or attributes); sequence lengths may stay symbolic (positions come from
a CumSum of ones over ``Shape``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..numpy_helper import from_array
from ._expand import Expander, expansion

_INT_MAX = 2**62
_NEG_INF = float("-inf")


def _dim(e: Expander, name: str, axis: int) -> str:
    """``Shape(name)[axis]`` as a 1-D int64 of one element."""
    return e.op("Shape", name, start=axis, end=axis + 1)


def _static(e: Expander, name: str, axis: int, what: str) -> int:
    shape = e.shape(name)
    dim = shape[axis] if shape is not None and len(shape) > axis else None
    if not isinstance(dim, int):
        raise e.error(f"{what} must be known (a static dimension {axis} of {name!r}) to expand it")
    return dim


def _heads_first(e: Expander, x: str, heads: int) -> str:
    """``(B, S, H * D)`` -> ``(B, H, S, D)``."""
    return e.op("Transpose", e.op("Reshape", x, e.ints(0, 0, heads, -1)), perm=[0, 2, 1, 3])


def _grouped_matmul(e: Expander, a: str, b: str, groups: int) -> str:
    """``a (B, Hq, S, X) @ b (B, Hkv, X, Y)``; query head h reads b's head ``h // groups``."""
    if groups == 1:
        return e.op("MatMul", a, b)
    shape = e.op("Shape", a)
    head = e.op("Slice", shape, e.ints(0), e.ints(1))
    tail = e.op("Slice", shape, e.ints(2), e.ints(4))
    folded = e.op("Reshape", a, e.op("Concat", head, e.ints(-1, groups), tail, axis=0))  # (B, Hkv, G, S, X)
    out = e.op("MatMul", folded, e.op("Unsqueeze", b, e.ints(2)))  # (B, Hkv, G, S, Y)
    return _merge_heads(e, out)


def _merge_heads(e: Expander, x: str) -> str:
    """``(B, Hkv, G, S, Y)`` -> ``(B, Hkv * G, S, Y)``."""
    shape = e.op("Shape", x)
    b = e.op("Slice", shape, e.ints(0), e.ints(1))
    s_y = e.op("Slice", shape, e.ints(3), e.ints(5))
    return e.op("Reshape", x, e.op("Concat", b, e.ints(-1), s_y, axis=0))


def _positions(e: Expander, x: str, axis: int) -> str:
    """``[0, 1, ..., n - 1]`` (int64) for ``n = Shape(x)[axis]``: a CumSum of ones (not a
    Range, so that the expansion differentiates in forward mode too)."""
    ones = e.op("ConstantOfShape", _dim(e, x, axis), value=_int64_one())
    return e.op("Sub", e.op("CumSum", ones, e.const(0, 7)), e.const(1, 7))


def _int64_one() -> Any:
    return from_array(np.ones(1, np.int64))


def _position_bias(e: Expander, q: str, k: str, offset: str | None, like: str) -> str | None:
    """The 0 / -inf bias of causal masking and the sliding window (see the kernel)."""
    causal = bool(e.attr("is_causal", 0))
    left, right = int(e.attr("left_window_size", -1)), int(e.attr("right_window_size", -1))
    if not causal and left < 0 and right < 0:
        return None
    rows = e.op("Unsqueeze", _positions(e, q, 2), e.ints(1))
    cols = _positions(e, k, 2)
    diff = e.op("Sub", rows if offset is None else e.op("Add", rows, offset), cols)  # p - j
    allowed: list[str] = []
    if causal:
        allowed.append(e.op("GreaterOrEqual", diff, e.const(0, 7)))
    if left >= 0:
        allowed.append(e.op("LessOrEqual", diff, e.const(left, 7)))
    if right >= 0:
        allowed.append(e.op("GreaterOrEqual", diff, e.const(-right, 7)))
    ok = allowed[0]
    for a in allowed[1:]:
        ok = e.op("And", ok, a)
    return e.op("Where", ok, e.scalar_like(0.0, like), e.scalar_like(_NEG_INF, like))


def _mask_bias(e: Expander, mask: str, k: str, like: str) -> str:
    """A boolean mask as 0 / -inf, a numeric one cast to the scores' type; its last axis
    padded with -inf up to the key count."""
    if e.dtype(mask) == 9:  # BOOL
        bias = e.op("Where", mask, e.scalar_like(0.0, like), e.scalar_like(_NEG_INF, like))
    else:
        bias = e.op("CastLike", mask, like)
    rank = e.rank(mask)
    if rank is None:
        raise e.error("the rank of attn_mask must be known")
    pad = e.op("Sub", _dim(e, k, 2), e.op("Shape", bias, start=-1))
    pads = e.op("Concat", e.ints(*([0] * (2 * rank - 1))), pad, axis=0)
    return e.op("Pad", bias, pads, e.scalar_like(_NEG_INF, like))


def _bias(e: Expander, q: str, k: str, past: str) -> str | None:
    """Mask, causal / window and padding biases, summed (None when there is none)."""
    nonpad = e.input(6)
    offset = None
    if past:
        offset = _dim(e, past, 2)
    elif nonpad:
        offset = e.op("Reshape", e.op("Sub", nonpad, _dim(e, q, 2)), e.ints(-1, 1, 1, 1))
    parts = []
    if e.input(3):
        parts.append(_mask_bias(e, e.input(3), k, q))
    position = _position_bias(e, q, k, offset, q)
    if position is not None:
        parts.append(position)
    if nonpad:
        cols = _positions(e, k, 2)
        valid = e.op("Less", cols, e.op("Reshape", nonpad, e.ints(-1, 1, 1, 1)))
        parts.append(e.op("Where", valid, e.scalar_like(0.0, q), e.scalar_like(_NEG_INF, q)))
    if not parts:
        return None
    total = parts[0]
    for p in parts[1:]:
        total = e.op("Add", total, p)
    return total


def _scores(e: Expander, q: str, k: str, groups: int) -> str:
    """``(Q * sqrt(scale)) (K * sqrt(scale))^T``."""
    scale = e.attr("scale")
    if scale is None:
        root = e.op("Pow", e.op("CastLike", _dim(e, q, 3), q), e.scalar_like(-0.25, q))
    else:
        root = e.scalar_like(float(scale) ** 0.5, q)
    kt = e.op("Transpose", e.op("Mul", k, root), perm=[0, 1, 3, 2])
    return _grouped_matmul(e, e.op("Mul", q, root), kt, groups)


def _softmax(e: Expander, scores: str, bias: str | None, like: str) -> str:
    """Softmax over keys in softmax_precision; a row whose bias is all -inf is zero (its
    scores are made finite first, so that no NaN reaches a gradient)."""
    precision = e.attr("softmax_precision")
    blocked = None
    if bias is not None:
        peak = e.op("ReduceMax", bias, e.ints(-1), keepdims=1)
        blocked = e.op("Equal", peak, e.scalar_like(_NEG_INF, like))
        with_bias = e.op("Add", scores, bias)
        scores = e.op("Where", blocked, e.op("Mul", scores, e.scalar_like(0.0, like)), with_bias)
    if precision:
        scores = e.op("Cast", scores, to=int(precision))
    probs = e.op("Softmax", scores, axis=-1)
    if precision:
        probs = e.op("CastLike", probs, like)
    if blocked is not None:
        probs = e.op("Where", blocked, e.scalar_like(0.0, like), probs)
    return probs


def _heads(e: Expander, q: str, k: str) -> tuple[int, int]:
    if e.rank(q) == 3:
        qh, kvh = e.attr("q_num_heads"), e.attr("kv_num_heads")
        if qh is None or kvh is None:
            raise e.error("3-D inputs need the q_num_heads and kv_num_heads attributes")
        return int(qh), int(kvh)
    return _static(e, q, 1, "q_num_heads"), _static(e, k, 1, "kv_num_heads")


@expansion("Attention", since=23)
def attention(e: Expander) -> list[str]:
    """Attention as MatMul / Softmax / MatMul (the spec's pattern), with masks, causal and
    window biases, GQA by head groups, past/present and the qk_matmul_output modes."""
    q, k, v, past_k, past_v = e.input(0), e.input(1), e.input(2), e.input(4), e.input(5)
    rank = e.rank(q)
    if rank not in (3, 4):
        raise e.error("the rank of Q (3 or 4) must be known")
    if bool(past_k) != bool(past_v):
        raise e.error("past_key and past_value must be given together")
    if past_k and e.input(6):
        raise e.error("nonpad_kv_seqlen cannot be combined with past_key / past_value")
    qh, kvh = _heads(e, q, k)
    if qh % kvh:
        raise e.error(f"q_num_heads {qh} is not a multiple of kv_num_heads {kvh}")
    if rank == 3:
        q, k, v = _heads_first(e, q, qh), _heads_first(e, k, kvh), _heads_first(e, v, kvh)
    if past_k:
        k, v = e.op("Concat", past_k, k, axis=2), e.op("Concat", past_v, v, axis=2)
    raw = _scores(e, q, k, qh // kvh)
    capped = raw
    softcap = float(e.attr("softcap", 0.0))
    if softcap > 0:
        c = e.scalar_like(softcap, q)
        capped = e.op("Mul", e.op("Tanh", e.op("Div", raw, c)), c)
    bias = _bias(e, q, k, past_k)
    probs = _softmax(e, capped, bias, q)
    y = _grouped_matmul(e, probs, v, qh // kvh)
    if rank == 3:
        y = e.op("Reshape", e.op("Transpose", y, perm=[0, 2, 1, 3]), e.ints(0, 0, -1))
    mode = int(e.attr("qk_matmul_output_mode", 0))
    debug: Any = (raw, capped, capped if bias is None else e.op("Add", capped, bias), probs)[mode]
    return [y, k, v, debug]


@expansion("RotaryEmbedding", since=23)
def rotary_embedding(e: Expander) -> list[str]:
    """Rotation of feature pairs by the cached angles (the spec's real / imaginary parts)."""
    x, cos, sin, pos = e.input(0), e.input(1), e.input(2), e.input(3)
    rank = e.rank(x)
    if rank == 4:
        work = e.op("Transpose", x, perm=[0, 2, 1, 3])
    elif rank == 3:
        heads = int(e.attr("num_heads", 0))
        if heads <= 0:
            raise e.error("a 3-D input needs the num_heads attribute")
        work = e.op("Reshape", x, e.ints(0, 0, heads, -1))
    else:
        raise e.error("the rank of the input (3 or 4) must be known")
    if pos:
        cos, sin = e.op("Gather", cos, pos), e.op("Gather", sin, pos)
    cos, sin = e.op("Unsqueeze", cos, e.ints(2)), e.op("Unsqueeze", sin, e.ints(2))
    dim = int(e.attr("rotary_embedding_dim", 0))
    rot = work if not dim else e.op("Slice", work, e.ints(0), e.ints(dim), e.ints(3))
    if e.attr("interleaved", 0):
        x1 = e.op("Slice", rot, e.ints(0), e.ints(_INT_MAX), e.ints(3), e.ints(2))
        x2 = e.op("Slice", rot, e.ints(1), e.ints(_INT_MAX), e.ints(3), e.ints(2))
    else:
        x1, x2 = e.op("Split", rot, axis=3, num_outputs=2, n_out=2)
    real = e.op("Sub", e.op("Mul", cos, x1), e.op("Mul", sin, x2))
    imag = e.op("Add", e.op("Mul", sin, x1), e.op("Mul", cos, x2))
    if e.attr("interleaved", 0):
        pairs = e.op("Concat", e.op("Unsqueeze", real, e.ints(4)), e.op("Unsqueeze", imag, e.ints(4)), axis=4)
        turned = e.op("Reshape", pairs, e.ints(0, 0, 0, -1))
    else:
        turned = e.op("Concat", real, imag, axis=3)
    if dim:
        turned = e.op("Concat", turned, e.op("Slice", work, e.ints(dim), e.ints(_INT_MAX), e.ints(3)), axis=3)
    if rank == 4:
        return [e.op("Transpose", turned, perm=[0, 2, 1, 3])]
    return [e.op("Reshape", turned, e.ints(0, 0, -1))]


@expansion("CausalConvWithState", since=27)
def causal_conv_with_state(e: Expander) -> list[str]:
    """``Conv(Concat(past_state or zeros, X), W, B, group=C)``, then SiLU if asked; the
    present state is the last ``k - 1`` positions of the padded sequence."""
    x, w, b, past = e.input(0), e.input(1), e.input(2), e.input(3)
    channels, k = _static(e, w, 0, "the channel count"), _static(e, w, 2, "the kernel size")
    if not past:
        batch = _dim(e, x, 0)
        shape = e.op("Concat", batch, e.ints(channels, k - 1), axis=0)
        past = e.op("CastLike", e.op("ConstantOfShape", shape), x)
    padded = e.op("Concat", past, x, axis=2)
    y = e.op("Conv", *([padded, w, b] if b else [padded, w]), group=channels, kernel_shape=[k])
    activation = e.attr("activation", "none")
    if activation in ("silu", "swish"):
        y = e.op("Mul", y, e.op("Sigmoid", y))
    elif activation != "none":
        raise e.error(f"activation must be none, silu or swish, got {activation!r}")
    start = _INT_MAX if k == 1 else 1 - k
    return [y, e.op("Slice", padded, e.ints(start), e.ints(_INT_MAX), e.ints(2))]


def _per_head(e: Expander, x: str, kv_heads: int, *, per_key: bool) -> str:
    """decay / beta ``(B, T, H)`` or ``(B, T, 1)`` as ``(B, H|1, T, 1)``; a per-key decay
    ``(B, T, H * d_k)`` as ``(B, H, T, d_k)``."""
    if per_key:
        return _heads_first(e, x, kv_heads)
    return e.op("Transpose", e.op("Reshape", x, e.ints(0, 0, -1, 1)), perm=[0, 2, 1, 3])


def _linear_attention_cell(e: Expander, dtype: int, gated: bool, delta: bool) -> tuple[Any, list[str]]:
    """The Scan body of one token: ``S = exp(g) S``; ``v' = β (v - S^T k)`` (delta rules);
    ``S = S + k ⊗ v'``; ``o = q S`` (per query head group). Returns (graph, input names)."""
    from ..helper import make_graph, make_tensor_value_info

    b = e.subgraph()
    state, q, k, v = b.fresh("state"), b.fresh("q_t"), b.fresh("k_t"), b.fresh("v_t")
    gate, rate = b.fresh("gate_t") if gated else "", b.fresh("beta_t") if delta else ""
    s = state
    if gated:
        s = b.op("Mul", s, b.op("Unsqueeze", gate, b.ints(-1)))
    vt = v
    if delta:
        retrieved = b.op("Squeeze", b.op("MatMul", b.op("Unsqueeze", k, b.ints(-2)), s), b.ints(-2))
        vt = b.op("Mul", rate, b.op("Sub", v, retrieved))
    s = b.op("Add", s, b.op("Mul", b.op("Unsqueeze", k, b.ints(-1)), b.op("Unsqueeze", vt, b.ints(-2))))
    o = b.op("MatMul", q, s)
    s_out = b.op("Identity", s)
    names = [n for n in (state, q, k, v, gate, rate) if n]
    ranks = {state: 4, q: 4, k: 3, v: 3, gate: 3, rate: 3}
    inputs = [make_tensor_value_info(n, dtype, [None] * ranks[n]) for n in names]
    outputs = [make_tensor_value_info(s_out, dtype, [None] * 4), make_tensor_value_info(o, dtype, [None] * 4)]
    return make_graph(b.out, "linear_attention_step", inputs, outputs), names


@expansion("LinearAttention", since=27)
def linear_attention(e: Expander) -> list[str]:
    """The recurrence of ``update_rule`` as one Scan over the tokens (state carried,
    batched over batch and heads), then the output scaled and packed to ``(B, T, H_q d_v)``."""
    query, key, value, past, decay, beta = (e.input(i) for i in range(6))
    rule = e.attr("update_rule", "gated_delta")
    if rule not in ("linear", "gated", "delta", "gated_delta"):
        raise e.error(f"update_rule must be linear, gated, delta or gated_delta, got {rule!r}")
    gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if gated != bool(decay) or delta != bool(beta):
        raise e.error(
            f"update_rule {rule!r} needs decay {'given' if gated else 'omitted'}, "
            f"beta {'given' if delta else 'omitted'}"
        )
    qh, kvh = int(e.attr("q_num_heads", 0)), int(e.attr("kv_num_heads", 0))
    if qh <= 0 or kvh <= 0 or qh % kvh:
        raise e.error(f"q_num_heads {qh} must be a positive multiple of kv_num_heads {kvh}")
    dtype = e.dtype(query)
    if not dtype:
        raise e.error("the element type of query must be known")
    q = _heads_first(e, query, qh)  # (B, Hq, T, dk)
    k, v = _heads_first(e, key, kvh), _heads_first(e, value, kvh)
    shape = e.op("Shape", q)
    grouped = e.op(
        "Concat",
        e.op("Slice", shape, e.ints(0), e.ints(1)),
        e.ints(kvh, qh // kvh),
        e.op("Slice", shape, e.ints(2), e.ints(4)),
        axis=0,
    )
    q = e.op("Reshape", q, grouped)  # (B, Hkv, G, T, dk)
    if not past:
        size = e.op("Concat", _dim(e, k, 0), e.ints(kvh), _dim(e, k, 3), _dim(e, v, 3), axis=0)
        past = e.op("CastLike", e.op("ConstantOfShape", size), query)
    scanned, axes = [q, k, v], [3, 2, 2]
    if gated:
        last = (e.shape(decay) or (None,))[-1]
        if not isinstance(last, int):
            raise e.error("the last dimension of decay (kv_num_heads or kv_num_heads * d_k) must be known")
        scanned.append(e.op("Exp", _per_head(e, decay, kvh, per_key=last != kvh)))
        axes.append(2)
    if delta:
        scanned.append(_per_head(e, beta, kvh, per_key=False))
        axes.append(2)
    body, _ = _linear_attention_cell(e, dtype, gated, delta)
    state, o = e.op(
        "Scan",
        past,
        *scanned,
        n_out=2,
        body=body,
        num_scan_inputs=len(scanned),
        scan_input_axes=axes,
        scan_output_axes=[3],
    )
    scale = float(e.attr("scale", 0.0))
    factor = (
        e.scalar_like(scale, query)
        if scale
        else e.op("Pow", e.op("CastLike", _dim(e, k, 3), query), e.scalar_like(-0.5, query))
    )
    y = e.op("Mul", _merge_heads(e, o), factor)  # (B, Hq, T, dv)
    y = e.op("Reshape", e.op("Transpose", y, perm=[0, 2, 1, 3]), e.ints(0, 0, -1))
    return [y, state]


@expansion("CenterCropPad", since=18)
def center_crop_pad(e: Expander) -> list[str]:
    """Per axis, a centred Slice where the target is smaller (start ``(dim - target) // 2``)
    and a centred zero Pad where it is larger (``(target - dim) // 2`` before, the rest after)."""
    x, target = e.input(0), e.input(1)
    axes = e.attr("axes")
    if axes is None:
        rank = e.rank(x)
        if rank is None:
            raise e.error("the rank of the input must be known when axes is omitted")
        axes = list(range(rank))
    axes_in = e.ints(*axes)
    dims = e.op("Gather", e.op("Shape", x), axes_in)
    zero, two = e.const(0, 7), e.const(2, 7)
    start = e.op("Div", e.op("Max", e.op("Sub", dims, target), zero), two)
    cropped = e.op("Slice", x, start, e.op("Add", start, e.op("Min", dims, target)), axes_in)
    extra = e.op("Max", e.op("Sub", target, dims), zero)
    before = e.op("Div", extra, two)
    pads = e.op("Concat", before, e.op("Sub", extra, before), axis=0)
    return [e.op("Pad", cropped, pads, "", axes_in)]
