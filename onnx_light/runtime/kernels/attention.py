"""The attention family: Attention (23, 24, 25), RotaryEmbedding, LinearAttention,
CausalConvWithState and ai.onnx.preview FlexAttention.

Heads are batched: a product over every (batch, head) pair is one ``np.matmul``. Grouped
query attention (``q_num_heads = G * kv_num_heads``; query head ``h`` reads key/value head
``h // G``) folds the G query heads of a group into the query axis,
``(B, Hkv, G * S, D) @ (B, Hkv, D, T)``, so keys and values are never repeated.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnx_light.onnx_core import TensorProto

from .._registry import kernel

#: softmax_precision values and the dtype they compute in (bfloat16 runs in float32 here)
_PRECISION = {
    TensorProto.FLOAT: np.float32,
    TensorProto.FLOAT16: np.float16,
    TensorProto.DOUBLE: np.float64,
    TensorProto.BFLOAT16: np.float32,
}


def _heads_first(x: np.ndarray, heads: int, what: str) -> np.ndarray:
    """``(B, S, H * D)`` -> ``(B, H, S, D)``."""
    b, s, hidden = x.shape
    if heads <= 0 or hidden % heads:
        raise ValueError(f"Attention: {what}'s hidden size {hidden} is not a multiple of its {heads} heads")
    return x.reshape(b, s, heads, hidden // heads).transpose(0, 2, 1, 3)


def _grouped_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a (B, Hq, S, X) @ b (B, Hkv, X, Y)`` with query head h reading b's head ``h // G``."""
    bsz, hq, s, x = a.shape
    hkv = b.shape[1]
    if hq == hkv or hkv == 1 and b.shape[0] == bsz:
        return np.matmul(a, b)
    if hq % hkv:
        raise ValueError(f"Attention: q_num_heads {hq} is not a multiple of kv_num_heads {hkv}")
    out = np.matmul(a.reshape(bsz, hkv, (hq // hkv) * s, x), b)
    return out.reshape(bsz, hq, s, b.shape[-1])


def _position_bias(
    s: int,
    t: int,
    offset: np.ndarray | int,
    dtype: np.dtype,
    *,
    causal: bool,
    left: int,
    right: int,
) -> np.ndarray | None:
    """The additive bias (0 or -inf) of causal masking and the sliding window: a query at
    in-block index i (absolute position ``p = i + offset``) attends key j iff
    ``j <= p`` (causal), ``p - left <= j`` (left >= 0) and ``j <= p + right`` (right >= 0).
    ``offset`` is a scalar or per batch ``(B, 1, 1, 1)``."""
    if not causal and left < 0 and right < 0:
        return None
    diff = np.arange(s).reshape(s, 1) + offset - np.arange(t).reshape(1, t)  # p - j
    allowed = np.ones(np.shape(diff), dtype=bool)
    if causal:
        allowed &= diff >= 0
    if left >= 0:
        allowed &= diff <= left
    if right >= 0:
        allowed &= -diff <= right
    return np.where(allowed, dtype.type(0), dtype.type(-np.inf))


def _mask_bias(mask: np.ndarray, t: int, dtype: np.dtype) -> np.ndarray:
    """A boolean mask as 0 / -inf, a numeric one as is; its last axis padded to ``t`` with
    masked positions."""
    if mask.dtype == np.bool_:
        bias = np.where(mask, dtype.type(0), dtype.type(-np.inf))
    else:
        bias = mask.astype(dtype, copy=False)
    pad = t - bias.shape[-1]
    if pad > 0:
        bias = np.pad(bias, [(0, 0)] * (bias.ndim - 1) + [(0, pad)], constant_values=-np.inf)
    elif pad < 0:
        raise ValueError(f"Attention: attn_mask's last axis {mask.shape[-1]} is longer than the {t} keys")
    return bias


def _softmax_rows(x: np.ndarray, blocked: np.ndarray | None, *, inplace: bool = False) -> np.ndarray:
    """Softmax over the last axis; rows whose bias is all -inf (``blocked``) are zero.
    ``inplace``: ``x`` is a scratch buffer the result may overwrite (it saves two passes)."""
    peak = x.max(axis=-1, keepdims=True)
    peak[~np.isfinite(peak)] = 0
    e = np.subtract(x, peak, out=x if inplace else None)
    np.exp(e, out=e)
    total = e.sum(axis=-1, keepdims=True)
    total[total == 0] = 1
    e /= total
    if blocked is not None and blocked.any():
        e[np.broadcast_to(blocked, e.shape)] = 0
    return e


def attention_core(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    bias: np.ndarray | None,
    *,
    scale: float | None,
    softcap: float,
    softmax_precision: int | None,
    mode: int,
) -> tuple[np.ndarray, np.ndarray]:
    """``Softmax(softcap(Q K^T * scale) + bias) V`` on ``(B, H, S, D)`` heads; returns Y and
    the ``qk_matmul_output`` of ``mode`` (0 raw, 1 softcapped, 2 with bias, 3 softmax)."""
    dtype = q.dtype
    if scale is None:
        scale = 1.0 / np.sqrt(q.shape[-1])
    root = dtype.type(np.sqrt(scale))  # the spec scales Q and K by sqrt(scale) each
    qk = _grouped_matmul(q * root, np.swapaxes(k * root, -1, -2))
    raw = qk
    if softcap > 0:
        qk = np.tanh(qk / dtype.type(softcap)) * dtype.type(softcap)
    capped = qk
    if bias is not None:
        qk = qk + bias
    scores = qk.astype(_PRECISION.get(softmax_precision or 0, dtype), copy=False)
    blocked = None
    if bias is not None:
        blocked = np.isneginf(bias.max(axis=-1, keepdims=True))
    kept = (raw, capped, qk, None)[mode] if 0 <= mode <= 3 else None  # the debug output, if a score
    probs = _softmax_rows(scores, blocked, inplace=scores is not kept).astype(dtype, copy=False)
    y = _grouped_matmul(probs, v)
    debug = (raw, capped, qk, probs)[mode] if 0 <= mode <= 3 else None
    if debug is None:
        raise ValueError(f"Attention: qk_matmul_output_mode must be 0, 1, 2 or 3, got {mode}")
    return y, np.broadcast_to(debug, probs.shape).astype(dtype)


def _attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    attn_mask: np.ndarray | None,
    past_key: np.ndarray | None,
    past_value: np.ndarray | None,
    nonpad_kv_seqlen: np.ndarray | None,
    attrs: dict[str, Any],
    num_outputs: int,
) -> tuple[np.ndarray, ...]:
    rank = q.ndim
    if not rank == k.ndim == v.ndim or rank not in (3, 4):
        raise ValueError(f"Attention takes Q, K, V all 3-D or all 4-D, got ranks {q.ndim}, {k.ndim}, {v.ndim}")
    if (past_key is None) != (past_value is None):
        raise ValueError("Attention: past_key and past_value must be given together")
    if nonpad_kv_seqlen is not None and past_key is not None:
        raise ValueError("Attention: nonpad_kv_seqlen cannot be combined with past_key / past_value")
    if rank == 3:
        qh, kvh = attrs["q_num_heads"], attrs["kv_num_heads"]
        if qh is None or kvh is None:
            raise ValueError("Attention with 3-D inputs needs the q_num_heads and kv_num_heads attributes")
        q, k, v = _heads_first(q, qh, "Q"), _heads_first(k, kvh, "K"), _heads_first(v, kvh, "V")
    if past_key is not None and past_value is not None:
        offset: np.ndarray | int = past_key.shape[2]
        k = np.concatenate([past_key, k], axis=2)
        v = np.concatenate([past_value, v], axis=2)
    else:
        offset = 0
    s, t, dtype = q.shape[2], k.shape[2], q.dtype
    if nonpad_kv_seqlen is not None:
        lengths = np.asarray(nonpad_kv_seqlen).reshape(-1, 1, 1, 1)
        offset = lengths - s
    bias = None if attn_mask is None else _mask_bias(attn_mask, t, dtype)
    position = _position_bias(
        s, t, offset, dtype, causal=bool(attrs["is_causal"]), left=attrs["left"], right=attrs["right"]
    )
    if position is not None:
        bias = position if bias is None else bias + position
    if nonpad_kv_seqlen is not None:
        pad = np.where(np.arange(t) < lengths, dtype.type(0), dtype.type(-np.inf))
        bias = pad if bias is None else bias + pad
    y, debug = attention_core(
        q,
        k,
        v,
        bias,
        scale=attrs["scale"],
        softcap=attrs["softcap"],
        softmax_precision=attrs["softmax_precision"],
        mode=attrs["mode"],
    )
    if rank == 3:
        y = y.transpose(0, 2, 1, 3).reshape(y.shape[0], y.shape[2], y.shape[1] * y.shape[3])  # not -1: batch 0
    return (y, k, v, debug)[:num_outputs]


@kernel("", "Attention", since=(23, 24, 25))
def attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    attn_mask: np.ndarray | None = None,
    past_key: np.ndarray | None = None,
    past_value: np.ndarray | None = None,
    nonpad_kv_seqlen: np.ndarray | None = None,
    *,
    is_causal: int = 0,
    kv_num_heads: int | None = None,
    q_num_heads: int | None = None,
    qk_matmul_output_mode: int = 0,
    scale: float | None = None,
    softcap: float = 0.0,
    softmax_precision: int | None = None,
    left_window_size: int = -1,
    right_window_size: int = -1,
    _num_outputs: int = 1,
) -> Any:
    """Scaled dot-product attention (see the module docstring and the spec): Y and, as the
    node asks, present_key, present_value (past concatenated with K, V) and qk_matmul_output."""
    if left_window_size < -1 or right_window_size < -1:
        raise ValueError("Attention: left_window_size and right_window_size are -1 or >= 0")
    attrs = {
        "q_num_heads": q_num_heads,
        "kv_num_heads": kv_num_heads,
        "is_causal": is_causal,
        "scale": scale,
        "softcap": softcap,
        "softmax_precision": softmax_precision,
        "mode": qk_matmul_output_mode,
        "left": left_window_size,
        "right": right_window_size,
    }
    out = _attention(q, k, v, attn_mask, past_key, past_value, nonpad_kv_seqlen, attrs, _num_outputs)
    return out[0] if _num_outputs == 1 else out


@kernel("", "RotaryEmbedding", since=23)
def rotary_embedding(
    x: np.ndarray,
    cos_cache: np.ndarray,
    sin_cache: np.ndarray,
    position_ids: np.ndarray | None = None,
    *,
    interleaved: int = 0,
    num_heads: int = 0,
    rotary_embedding_dim: int = 0,
) -> np.ndarray:
    """Rotates the first ``rotary_embedding_dim`` features of every head by the angles of
    ``cos_cache`` / ``sin_cache`` (picked by ``position_ids`` when given): pairs are
    ``(x[2i], x[2i+1])`` when interleaved, else ``(x[i], x[i + d/2])``."""
    if x.ndim == 4:  # (B, H, S, D) -> (B, S, H, D)
        work = x.transpose(0, 2, 1, 3)
    elif x.ndim == 3:
        if num_heads <= 0 or x.shape[2] % num_heads:
            raise ValueError(f"RotaryEmbedding: 3-D input needs num_heads dividing {x.shape[2]}, got {num_heads}")
        work = x.reshape(x.shape[0], x.shape[1], num_heads, x.shape[2] // num_heads)
    else:
        raise ValueError(f"RotaryEmbedding takes a 3-D or 4-D input, got shape {x.shape}")
    dim = rotary_embedding_dim or work.shape[3]
    if position_ids is not None:
        cos_cache, sin_cache = cos_cache[position_ids], sin_cache[position_ids]
    if cos_cache.shape[-1] != dim // 2 or sin_cache.shape[-1] != dim // 2:
        raise ValueError(
            f"RotaryEmbedding: the caches' last axis must be rotary_embedding_dim / 2 = {dim // 2}, "
            f"got {cos_cache.shape[-1]} and {sin_cache.shape[-1]}"
        )
    cos = cos_cache[:, :, None, :].astype(x.dtype, copy=False)
    sin = sin_cache[:, :, None, :].astype(x.dtype, copy=False)
    half = dim // 2
    # the two halves of each pair, read from the input and written into the output directly
    first, second = (slice(0, dim, 2), slice(1, dim, 2)) if interleaved else (slice(0, half), slice(half, dim))
    x1, x2 = work[..., first], work[..., second]
    out = np.empty(work.shape, x.dtype)
    real, imag = out[..., first], out[..., second]
    np.multiply(cos, x1, out=real)
    real -= sin * x2
    np.multiply(sin, x1, out=imag)
    imag += cos * x2
    out[..., dim:] = work[..., dim:]
    return out.reshape(x.shape) if x.ndim == 3 else out.transpose(0, 2, 1, 3)


def _compute_dtype(*xs: np.ndarray | None) -> np.dtype:
    """float64 when any operand is float64, else float32 (the family's accumulation type)."""
    return np.dtype(np.float64 if any(x is not None and x.dtype == np.float64 for x in xs) else np.float32)


def _linear_attention_inputs(
    query: np.ndarray, key: np.ndarray, value: np.ndarray, q_heads: int, kv_heads: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    for name, x in (("query", query), ("key", key), ("value", value)):
        if x.ndim != 3:
            raise ValueError(f"LinearAttention: {name} must be rank 3 (B, T, H*D), got shape {x.shape}")
    if q_heads <= 0 or kv_heads <= 0 or q_heads % kv_heads:
        raise ValueError(
            f"LinearAttention: q_num_heads {q_heads} must be a positive multiple of kv_num_heads {kv_heads}"
        )
    return (
        _heads_first(query, q_heads, "query"),
        _heads_first(key, kv_heads, "key"),
        _heads_first(value, kv_heads, "value"),
    )


def _per_head(x: np.ndarray, kv_heads: int, d_k: int, what: str) -> np.ndarray:
    """decay / beta ``(B, T, H)``, ``(B, T, 1)`` or ``(B, T, H * d_k)`` as ``(B, H|1, T, 1|d_k)``."""
    if x.ndim != 3:
        raise ValueError(f"LinearAttention: {what} must be rank 3, got shape {x.shape}")
    last = x.shape[2]
    if last in (kv_heads, 1):
        return x.reshape(x.shape[0], x.shape[1], last, 1).transpose(0, 2, 1, 3)
    if what == "decay" and last == kv_heads * d_k:
        return _heads_first(x, kv_heads, what)
    raise ValueError(f"LinearAttention: {what}'s last axis {last} does not fit kv_num_heads {kv_heads}")


@kernel("", "LinearAttention", since=27)
def linear_attention(
    query: np.ndarray,
    key: np.ndarray,
    value: np.ndarray,
    past_state: np.ndarray | None = None,
    decay: np.ndarray | None = None,
    beta: np.ndarray | None = None,
    *,
    chunk_size: int = 64,
    kv_num_heads: int,
    q_num_heads: int,
    scale: float = 0.0,
    update_rule: str = "gated_delta",
) -> tuple[np.ndarray, np.ndarray]:
    """The recurrence of ``update_rule`` (spec): ``S_t = exp(g_t) S_{t-1} + k_t ⊗ v'_t`` with
    ``v'_t = β_t (v_t - exp(g_t) S_{t-1}^T k_t)`` for the delta rules; ``o_t = scale q_t^T S_t``.
    One step per token, batched over batch and heads (``chunk_size`` is a tuning hint)."""
    if update_rule not in ("linear", "gated", "delta", "gated_delta"):
        raise ValueError(
            f"LinearAttention: update_rule must be linear, gated, delta or gated_delta, got {update_rule!r}"
        )
    gated, delta = update_rule in ("gated", "gated_delta"), update_rule in ("delta", "gated_delta")
    if gated != (decay is not None) or delta != (beta is not None):
        raise ValueError(
            f"LinearAttention: update_rule {update_rule!r} needs decay {'given' if gated else 'omitted'} "
            f"and beta {'given' if delta else 'omitted'}"
        )
    q, k, v = _linear_attention_inputs(query, key, value, q_num_heads, kv_num_heads)
    ct = _compute_dtype(query, past_state)
    b, hkv, t, d_k = k.shape
    d_v, group = v.shape[3], q_num_heads // kv_num_heads
    if past_state is not None and past_state.shape != (b, hkv, d_k, d_v):
        raise ValueError(f"LinearAttention: past_state has shape {past_state.shape}, want {(b, hkv, d_k, d_v)}")
    state = np.zeros((b, hkv, d_k, d_v), ct) if past_state is None else past_state.astype(ct)
    gate = None if decay is None else np.exp(_per_head(decay, hkv, d_k, "decay").astype(ct))
    rate = None if beta is None else _per_head(beta, hkv, d_k, "beta").astype(ct)
    q = q.astype(ct).reshape(b, hkv, group, t, d_k)
    k, v = k.astype(ct), v.astype(ct)
    out = np.empty((b, hkv, group, t, d_v), ct)
    for i in range(t):
        if gate is not None:
            state = state * gate[:, :, i, :, None]
        kt, vt = k[:, :, i], v[:, :, i]
        if rate is not None:
            vt = rate[:, :, i] * (vt - np.einsum("bhkv,bhk->bhv", state, kt))
        state = state + kt[..., :, None] * vt[..., None, :]
        out[:, :, :, i] = np.matmul(q[:, :, :, i], state)
    factor = scale if scale else 1.0 / np.sqrt(d_k)
    y = (out * ct.type(factor)).reshape(b, q_num_heads, t, d_v).transpose(0, 2, 1, 3).reshape(b, t, q_num_heads * d_v)
    state_type = query.dtype if past_state is None else past_state.dtype
    return y.astype(query.dtype), state.astype(state_type)


@kernel("", "CausalConvWithState", since=27)
def causal_conv_with_state(
    x: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None = None,
    past_state: np.ndarray | None = None,
    *,
    activation: str = "none",
) -> tuple[np.ndarray, np.ndarray]:
    """Depthwise causal 1-D convolution of ``(B, C, L)`` by ``(C, 1, k)`` over
    ``[past_state | x]`` (zeros for a missing state), then SiLU if asked; the new state is
    the last ``k - 1`` positions of that padded sequence."""
    if activation not in ("none", "silu", "swish"):
        raise ValueError(f"CausalConvWithState: activation must be none, silu or swish, got {activation!r}")
    if x.ndim != 3 or weight.ndim != 3 or weight.shape[1] != 1 or weight.shape[0] != x.shape[1]:
        raise ValueError(
            f"CausalConvWithState takes input (B, C, L) and weight (C, 1, k), got {x.shape} and {weight.shape}"
        )
    b, c, length = x.shape
    k = weight.shape[2]
    pad = np.zeros((b, c, k - 1), x.dtype) if past_state is None else past_state.astype(x.dtype, copy=False)
    if pad.shape != (b, c, k - 1):
        raise ValueError(f"CausalConvWithState: past_state has shape {pad.shape}, want {(b, c, k - 1)}")
    padded = np.concatenate([pad, x], axis=2)
    ct = _compute_dtype(x)
    windows = np.lib.stride_tricks.sliding_window_view(padded.astype(ct, copy=False), k, axis=2)  # (B, C, L, k)
    y = np.einsum("bclk,ck->bcl", windows, weight[:, 0].astype(ct))
    if bias is not None:
        y = y + bias.astype(ct)[:, None]
    y = y.astype(x.dtype).astype(ct)  # the convolution's result is rounded to T before the activation
    if activation != "none":
        y = y / (1 + np.exp(-y))
    return y.astype(x.dtype), padded[:, :, length:]


@kernel("ai.onnx.preview", "FlexAttention", since=1)
def flex_attention(
    *args: Any,
    prob_mod: Any = None,
    score_mod: Any = None,
    scale: float | None = None,
    softmax_precision: int | None = None,
    _captured: tuple[str, ...] = (),
) -> np.ndarray:
    """``Softmax(score_mod(Q K^T * scale)) -> prob_mod -> @ V`` on rank-4 heads (GQA by head
    groups); scores and probabilities in ``softmax_precision`` (default float32, float64
    for float64 inputs)."""
    from .control_flow import _run, _split_scope

    own, scope = _split_scope(args, _captured)
    q, k, v = own[:3]
    if not q.ndim == k.ndim == v.ndim == 4:
        raise ValueError(f"FlexAttention takes rank-4 Q, K, V, got shapes {q.shape}, {k.shape}, {v.shape}")
    if k.shape[1] != v.shape[1] or k.shape[2] != v.shape[2] or k.shape[3] != q.shape[3]:
        raise ValueError(f"FlexAttention: K {k.shape} and V {v.shape} do not fit Q {q.shape}")
    if softmax_precision is not None and softmax_precision not in _PRECISION:
        raise ValueError(f"FlexAttention: unsupported softmax_precision {softmax_precision}")
    ct = _PRECISION[softmax_precision] if softmax_precision else (np.float64 if q.dtype == np.float64 else np.float32)
    if scale is None:
        scale = 1.0 / np.sqrt(q.shape[-1])
    root = q.dtype.type(np.sqrt(np.float32(scale)))
    scores = _grouped_matmul(q * root, np.swapaxes(k * root, -1, -2)).astype(ct)
    if score_mod is not None:
        scores = np.asarray(_run(score_mod, [scores], scope)[0], dtype=ct)
    probs = _softmax_rows(scores, None)
    if prob_mod is not None:
        probs = np.asarray(_run(prob_mod, [probs], scope)[0], dtype=ct)
    return _grouped_matmul(probs, v.astype(ct)).astype(v.dtype)
