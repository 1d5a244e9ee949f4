"""Gradients of the attention family and the function ops, which differentiate by their
expansion (``onnx_core/ops/_expand.py``: the spec's function body, or our decomposition of
a context-dependent one) rather than by a rule of their own.

Rows: Swish, SwiGLU (static bodies), Attention (every input, masks, causal, GQA, 3-D,
softcap, scale, past/present, each output), RotaryEmbedding, CausalConvWithState. Each row
runs the reverse and the forward checks of the rule tables (float64 finite differences,
onnxruntime, full checker, closure). Then: the expansion's gradient equals the rule's for
ops that have both.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from gradcheck import Case, check_gradient, gradient
from onnx import helper as oh

import onnx_light as ol
from onnx_light.onnx_core.ops import expand

RNG = np.random.default_rng(2311)


def normal(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape)


def node(op: str, inputs: list[str], outputs: list[str] | None = None, **attrs: Any) -> Any:
    return oh.make_node(op, inputs, outputs or ["y"], **attrs)


def attention(name: str, inputs: dict[str, np.ndarray], xs: list[str] | None = None, outputs: list[str] | None = None, y: str | None = None, **attrs: Any) -> Case:
    names = [n if n in inputs else "" for n in ("q", "k", "v", "mask", "past_k", "past_v", "nonpad")]
    while names and not names[-1]:
        names.pop()
    diff = xs if xs is not None else [n for n in inputs if inputs[n].dtype.kind == "f" and n != "mask" or n == "mask" and inputs[n].dtype.kind == "f"]
    opset = 25 if "left_window_size" in attrs or "nonpad" in inputs else 23
    return Case(f"Attention-{name}", [node("Attention", names, outputs, **attrs)], inputs, diff, y=y, opset=opset)


def _bool_mask(*shape: int) -> np.ndarray:
    m = RNG.random(shape) > 0.3
    m[..., 0] = True
    return m


_Q4, _K4, _V4 = normal(2, 4, 3, 4), normal(2, 2, 5, 4), normal(2, 2, 5, 3)

ATTENTION = [
    attention("mha", {"q": normal(1, 2, 3, 4), "k": normal(1, 2, 4, 4), "v": normal(1, 2, 4, 4)}),
    attention("gqa-causal", {"q": _Q4, "k": normal(2, 2, 3, 4), "v": normal(2, 2, 3, 3)}, is_causal=1),
    attention("mqa-scale-softcap", {"q": _Q4, "k": normal(2, 1, 5, 4), "v": normal(2, 1, 5, 3)}, scale=0.4, softcap=1.5),
    attention("float-mask", {"q": _Q4, "k": _K4, "v": _V4, "mask": normal(3, 5)}),
    attention("bool-mask-4d", {"q": _Q4, "k": _K4, "v": _V4, "mask": _bool_mask(2, 1, 3, 5)}),
    attention(
        "3d-gqa-short-mask",
        {"q": normal(2, 3, 8), "k": normal(2, 4, 4), "v": normal(2, 4, 6), "mask": normal(1, 3, 3)},
        q_num_heads=4,
        kv_num_heads=2,
    ),
    attention(
        "past-present-causal",
        {"q": _Q4, "k": normal(2, 2, 3, 4), "v": normal(2, 2, 3, 3), "past_k": normal(2, 2, 2, 4), "past_v": normal(2, 2, 2, 3)},
        is_causal=1,
    ),
    attention(
        "present-key-output",
        {"q": _Q4, "k": normal(2, 2, 3, 4), "v": normal(2, 2, 3, 3), "past_k": normal(2, 2, 2, 4), "past_v": normal(2, 2, 2, 3)},
        outputs=["y", "present_k", "present_v"],
        y="present_k",
        xs=["k", "past_k"],
    ),
    *[
        attention(f"qk-output-mode{m}", {"q": _Q4, "k": _K4, "v": _V4, "mask": normal(3, 5)}, outputs=["y", "", "", "qk"], y="qk", xs=["q", "k", "mask"][: 2 + (m >= 2)], qk_matmul_output_mode=m, softcap=2.0)
        for m in (0, 1, 2, 3)
    ],
    attention("softmax-precision", {"q": _Q4, "k": _K4, "v": _V4}, softmax_precision=11),
    attention("window-nonpad", {"q": _Q4, "k": _K4, "v": _V4, "nonpad": np.array([4, 5], np.int64)}, xs=["q", "k", "v"], is_causal=1, left_window_size=2),
]


def rotary(name: str, x: np.ndarray, cos: np.ndarray, sin: np.ndarray, pos: np.ndarray | None, **attrs: Any) -> Case:
    inputs = {"x": x, "cos": cos, "sin": sin} | ({} if pos is None else {"pos": pos})
    names = ["x", "cos", "sin"] + ([] if pos is None else ["pos"])
    return Case(f"RotaryEmbedding-{name}", [node("RotaryEmbedding", names, **attrs)], inputs, ["x", "cos", "sin"], opset=23)


_POS = RNG.integers(0, 6, (2, 3)).astype(np.int64)
ROTARY = [
    rotary("4d", normal(2, 2, 3, 6), normal(6, 3), normal(6, 3), _POS),
    rotary("4d-interleaved-dim", normal(2, 2, 3, 6), normal(6, 2), normal(6, 2), _POS, interleaved=1, rotary_embedding_dim=4),
    rotary("3d-no-positions", normal(2, 3, 8), normal(2, 3, 2), normal(2, 3, 2), None, num_heads=2),
]

CONV = [
    Case(
        "CausalConvWithState-bias-past-silu",
        [node("CausalConvWithState", ["x", "w", "b", "past"], ["y", "state"], activation="silu")],
        {"x": normal(2, 3, 5), "w": normal(3, 1, 3), "b": normal(3), "past": normal(2, 3, 2)},
        ["x", "w", "b", "past"],
        opset=27,
        ort_dtype=np.float32,  # onnxruntime's Conv has no float64 kernel
    ),
    Case(
        "CausalConvWithState-state",
        [node("CausalConvWithState", ["x", "w"], ["y", "state"])],
        {"x": normal(2, 3, 4), "w": normal(3, 1, 3)},
        ["x"],
        y="state",
        opset=27,
        ort_dtype=np.float32,
    ),
]

FUNCTION_OPS = [
    Case("Swish", [node("Swish", ["x"], alpha=0.7)], {"x": normal(3, 4)}, ["x"], opset=24),
    Case("SwiGLU", [node("SwiGLU", ["a", "b"], alpha=1.3)], {"a": normal(3, 4), "b": normal(3, 4)}, ["a", "b"], opset=28),
]

CASES: list[Case] = [*FUNCTION_OPS, *ATTENTION, *ROTARY, *CONV]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_rule(case: Case) -> None:
    check_gradient(case)
