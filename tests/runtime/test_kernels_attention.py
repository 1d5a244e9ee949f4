"""The attention family's kernels against onnxruntime on random inputs (where onnxruntime has
the op), and their refusals of bad input."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from ort_reference import compare_with_ort, rng

from onnx_light.runtime.kernels import attention as k


def _qkv(b: int, hq: int, hkv: int, s: int, t: int, d: int, dv: int, dtype: type = np.float32) -> list[np.ndarray]:
    g = rng()
    return [
        g.standard_normal((b, hq, s, d)).astype(dtype),
        g.standard_normal((b, hkv, t, d)).astype(dtype),
        g.standard_normal((b, hkv, t, dv)).astype(dtype),
    ]


ATTENTION_ROWS = [
    ("mha", _qkv(2, 3, 3, 4, 5, 8, 8), {}),
    ("gqa causal", _qkv(2, 4, 2, 5, 5, 8, 6), {"is_causal": 1}),
    ("mqa scaled softcap", _qkv(1, 4, 1, 3, 6, 4, 4), {"scale": 0.3, "softcap": 2.0}),
]


@pytest.mark.parametrize("what,inputs,attrs", ATTENTION_ROWS, ids=[r[0] for r in ATTENTION_ROWS])
def test_attention_matches_onnxruntime(what: str, inputs: list[np.ndarray], attrs: dict) -> None:
    compare_with_ort("Attention", inputs, attrs, opset=23)


def test_attention_masks_past_and_outputs_match_onnxruntime() -> None:
    q, kk, v = _qkv(2, 4, 2, 3, 4, 8, 8)
    g = rng()
    past_k, past_v = (
        g.standard_normal((2, 2, 2, 8)).astype(np.float32),
        g.standard_normal((2, 2, 2, 8)).astype(np.float32),
    )
    float_mask = g.standard_normal((3, 6)).astype(np.float32)
    bool_mask = g.random((2, 1, 3, 6)) > 0.3
    bool_mask[..., 0] = True
    for mask in (float_mask, bool_mask):
        compare_with_ort("Attention", [q, kk, v, mask, past_k, past_v], {"is_causal": 1}, n_out=3, opset=23)


def test_attention_3d_inputs_match_onnxruntime() -> None:
    g = rng()
    q = g.standard_normal((2, 4, 12)).astype(np.float32)
    kv = g.standard_normal((2, 6, 6)).astype(np.float32)
    compare_with_ort("Attention", [q, kv, kv], {"q_num_heads": 4, "kv_num_heads": 2}, opset=23)


def test_attention_fully_masked_row_is_zero_not_nan() -> None:
    q, kk, v = _qkv(1, 2, 2, 3, 4, 4, 4)
    mask = np.ones((3, 4), bool)
    mask[1] = False
    y, _, _, probs = k.attention(q, kk, v, mask, qk_matmul_output_mode=3, _num_outputs=4)
    assert np.all(y[:, :, 1] == 0) and np.all(probs[:, :, 1] == 0)
    assert np.isfinite(y).all() and np.allclose(probs[:, :, [0, 2]].sum(-1), 1)


def test_attention_gqa_equals_repeated_heads() -> None:
    """Query head h reads key/value head h // G: the same as repeating each kv head G times."""
    q, kk, v = _qkv(2, 6, 2, 4, 5, 4, 3, np.float64)
    grouped = k.attention(q, kk, v)
    repeated = k.attention(q, np.repeat(kk, 3, axis=1), np.repeat(v, 3, axis=1))
    np.testing.assert_allclose(grouped, repeated, rtol=1e-12)


@pytest.mark.parametrize("interleaved", [0, 1])
def test_rotary_embedding_matches_onnxruntime(interleaved: int) -> None:
    g = rng()
    x = g.standard_normal((2, 3, 5, 8)).astype(np.float32)
    pos = g.integers(0, 7, (2, 5)).astype(np.int64)
    cos, sin = g.standard_normal((7, 3)).astype(np.float32), g.standard_normal((7, 3)).astype(np.float32)
    attrs = {"interleaved": interleaved, "rotary_embedding_dim": 6}
    compare_with_ort("RotaryEmbedding", [x, cos, sin, pos], attrs, opset=23)
    x3 = x.transpose(0, 2, 1, 3).reshape(2, 5, 24)
    compare_with_ort("RotaryEmbedding", [x3, cos, sin, pos], {**attrs, "num_heads": 3}, opset=23)


def test_linear_attention_linear_rule_is_causal_linear_attention() -> None:
    """With the 'linear' rule and no past, o_t = scale * sum_{s<=t} (q_t . k_s) v_s."""
    g = rng()
    q, kk, v = (g.standard_normal((2, 5, 2 * 4)) for _ in range(3))
    y, state = k.linear_attention(q, kk, v, q_num_heads=2, kv_num_heads=2, update_rule="linear")
    qh, kh, vh = (a.reshape(2, 5, 2, 4).transpose(0, 2, 1, 3) for a in (q, kk, v))
    scores = np.tril(qh @ kh.transpose(0, 1, 3, 2)) / 2.0
    want = (scores @ vh).transpose(0, 2, 1, 3).reshape(2, 5, 8)
    np.testing.assert_allclose(y, want, rtol=1e-12)
    np.testing.assert_allclose(state, kh.transpose(0, 1, 3, 2) @ vh, rtol=1e-12)


def test_causal_conv_with_state_is_a_padded_depthwise_conv() -> None:
    g = rng()
    x, w, bias = g.standard_normal((2, 3, 6)), g.standard_normal((3, 1, 4)), g.standard_normal(3)
    past = g.standard_normal((2, 3, 3))
    y, state = k.causal_conv_with_state(x, w, bias, past)
    full = np.concatenate([past, x], axis=2)
    want = np.stack([sum(full[:, :, i + j] * w[:, 0, j] for j in range(4)) for i in range(6)], axis=2) + bias[:, None]
    np.testing.assert_allclose(y, want, rtol=1e-12)
    np.testing.assert_array_equal(state, full[:, :, -3:])


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda: k.attention(*_qkv(1, 3, 2, 2, 2, 4, 4)), "multiple of kv_num_heads"),
        (lambda: k.attention(*_qkv(1, 2, 2, 2, 2, 4, 4), None, np.zeros((1, 2, 1, 4), np.float32)), "together"),
        (lambda: k.attention(np.zeros((1, 2, 8), np.float32), *_qkv(1, 2, 2, 2, 2, 4, 4)[1:]), "3-D or all 4-D"),
        (lambda: k.rotary_embedding(np.zeros((1, 2, 6)), np.zeros((2, 3)), np.zeros((2, 3))), "num_heads"),
        (lambda: k.causal_conv_with_state(np.zeros((1, 2, 3)), np.zeros((3, 1, 2))), "weight"),
        (
            lambda: k.linear_attention(
                np.zeros((1, 2, 4)), np.zeros((1, 2, 4)), np.zeros((1, 2, 4)), q_num_heads=1, kv_num_heads=1
            ),
            "decay",
        ),
    ],
)
def test_bad_input_is_a_clear_error(call: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def test_causal_conv_with_state_matches_onnxruntime() -> None:
    g = rng()
    x, w = g.standard_normal((2, 3, 6)).astype(np.float32), g.standard_normal((3, 1, 4)).astype(np.float32)
    bias, past = g.standard_normal(3).astype(np.float32), g.standard_normal((2, 3, 3)).astype(np.float32)
    compare_with_ort("CausalConvWithState", [x, w, bias, past], {"activation": "silu"}, n_out=2, opset=27)
    compare_with_ort("CausalConvWithState", [x, w], n_out=2, opset=27)


@pytest.mark.parametrize("rule", ["linear", "gated", "delta", "gated_delta"])
def test_linear_attention_matches_onnxruntime(rule: str) -> None:
    g = rng()
    q, kk, v = (g.standard_normal((2, 5, n)).astype(np.float32) for n in (12, 6, 4))
    past = g.standard_normal((2, 2, 3, 2)).astype(np.float32)
    decay = -g.random((2, 5, 6 if rule == "gated" else 2)).astype(np.float32) if "gated" in rule else None
    beta = g.random((2, 5, 2)).astype(np.float32) if "delta" in rule else None
    attrs = {"q_num_heads": 4, "kv_num_heads": 2, "update_rule": rule}
    compare_with_ort("LinearAttention", [q, kk / 2, v, past, decay, beta], attrs, n_out=2, opset=27)
