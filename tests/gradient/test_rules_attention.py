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


def attention(
    name: str,
    inputs: dict[str, np.ndarray],
    xs: list[str] | None = None,
    outputs: list[str] | None = None,
    y: str | None = None,
    **attrs: Any,
) -> Case:
    names = [n if n in inputs else "" for n in ("q", "k", "v", "mask", "past_k", "past_v", "nonpad")]
    while names and not names[-1]:
        names.pop()
    diff = (
        xs
        if xs is not None
        else [
            n
            for n in inputs
            if inputs[n].dtype.kind == "f" and n != "mask" or n == "mask" and inputs[n].dtype.kind == "f"
        ]
    )
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
    attention(
        "mqa-scale-softcap", {"q": _Q4, "k": normal(2, 1, 5, 4), "v": normal(2, 1, 5, 3)}, scale=0.4, softcap=1.5
    ),
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
        {
            "q": _Q4,
            "k": normal(2, 2, 3, 4),
            "v": normal(2, 2, 3, 3),
            "past_k": normal(2, 2, 2, 4),
            "past_v": normal(2, 2, 2, 3),
        },
        is_causal=1,
    ),
    attention(
        "present-key-output",
        {
            "q": _Q4,
            "k": normal(2, 2, 3, 4),
            "v": normal(2, 2, 3, 3),
            "past_k": normal(2, 2, 2, 4),
            "past_v": normal(2, 2, 2, 3),
        },
        outputs=["y", "present_k", "present_v"],
        y="present_k",
        xs=["k", "past_k"],
    ),
    *[
        attention(
            f"qk-output-mode{m}",
            {"q": _Q4, "k": _K4, "v": _V4, "mask": normal(3, 5)},
            outputs=["y", "", "", "qk"],
            y="qk",
            xs=["q", "k", "mask"][: 2 + (m >= 2)],
            qk_matmul_output_mode=m,
            softcap=2.0,
        )
        for m in (0, 1, 2, 3)
    ],
    Case(
        "Attention-symbolic-batch-causal",
        [node("Attention", ["q", "k", "v"], is_causal=1)],
        {"q": _Q4, "k": normal(2, 2, 3, 4), "v": normal(2, 2, 3, 3)},
        ["q", "k", "v"],
        opset=23,
        dynamic=["q", "k", "v"],
    ),
    attention("softmax-precision", {"q": _Q4, "k": _K4, "v": _V4}, softmax_precision=11),
    attention(
        "window-nonpad",
        {"q": _Q4, "k": _K4, "v": _V4, "nonpad": np.array([4, 5], np.int64)},
        xs=["q", "k", "v"],
        is_causal=1,
        left_window_size=2,
    ),
]


def rotary(name: str, x: np.ndarray, cos: np.ndarray, sin: np.ndarray, pos: np.ndarray | None, **attrs: Any) -> Case:
    inputs = {"x": x, "cos": cos, "sin": sin} | ({} if pos is None else {"pos": pos})
    names = ["x", "cos", "sin"] + ([] if pos is None else ["pos"])
    return Case(
        f"RotaryEmbedding-{name}", [node("RotaryEmbedding", names, **attrs)], inputs, ["x", "cos", "sin"], opset=23
    )


_POS = RNG.integers(0, 6, (2, 3)).astype(np.int64)
ROTARY = [
    rotary("4d", normal(2, 2, 3, 6), normal(6, 3), normal(6, 3), _POS),
    rotary(
        "4d-interleaved-dim",
        normal(2, 2, 3, 6),
        normal(6, 2),
        normal(6, 2),
        _POS,
        interleaved=1,
        rotary_embedding_dim=4,
    ),
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


def linear_attention(name: str, rule: str, extra: dict[str, np.ndarray], y: str | None = None, **attrs: Any) -> Case:
    b, t, hq, hkv, dk, dv = 2, 4, 4, 2, 3, 2
    inputs = {"q": normal(b, t, hq * dk), "k": normal(b, t, hkv * dk) / 2, "v": normal(b, t, hkv * dv)} | extra
    names = [n if n in inputs else "" for n in ("q", "k", "v", "past", "decay", "beta")]
    while not names[-1]:
        names.pop()
    attrs = {"q_num_heads": hq, "kv_num_heads": hkv, "update_rule": rule} | attrs
    n = node("LinearAttention", names, ["y", "state"], **attrs)
    return Case(f"LinearAttention-{name}", [n], inputs, list(inputs), y=y, opset=27)


LINEAR = [
    linear_attention("linear", "linear", {}),
    linear_attention("gated-per-key-past", "gated", {"past": normal(2, 2, 3, 2), "decay": -RNG.random((2, 4, 6))}),
    linear_attention("delta-scaled", "delta", {"beta": RNG.random((2, 4, 2))}, scale=0.4),
    linear_attention(
        "gated-delta",
        "gated_delta",
        {"past": normal(2, 2, 3, 2), "decay": -RNG.random((2, 4, 2)), "beta": RNG.random((2, 4, 1))},
    ),
    linear_attention(
        "gated-delta-state", "gated_delta", {"decay": -RNG.random((2, 4, 2)), "beta": RNG.random((2, 4, 2))}, y="state"
    ),
]

CROP = [
    Case(
        "CenterCropPad-axes-crop-and-pad",
        [node("CenterCropPad", ["x", "shape"], axes=[1, -1])],
        {"x": normal(3, 5, 6), "shape": np.array([4, 9], np.int64)},
        ["x"],
        initializers=["shape"],
        opset=18,
    ),
    Case(
        "CenterCropPad-runtime-shape",
        [node("CenterCropPad", ["x", "shape"])],
        {"x": normal(3, 5, 6), "shape": np.array([2, 7, 3], np.int64)},
        ["x"],
        opset=18,
    ),
]

FUNCTION_OPS = [
    Case("Swish", [node("Swish", ["x"], alpha=0.7)], {"x": normal(3, 4)}, ["x"], opset=24),
    Case(
        "SwiGLU", [node("SwiGLU", ["a", "b"], alpha=1.3)], {"a": normal(3, 4), "b": normal(3, 4)}, ["a", "b"], opset=28
    ),
]

CASES: list[Case] = [*FUNCTION_OPS, *ATTENTION, *ROTARY, *CONV, *LINEAR, *CROP]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_rule(case: Case) -> None:
    check_gradient(case)


def _expanded_case(case: Case) -> Case:
    """``case`` with its one node replaced by the node's expansion (made with our IR, then
    read back as onnx nodes)."""
    import onnx

    ours = ol.NodeProto.FromString(case.nodes[0].SerializeToString())
    counter = itertools.count()
    shapes = {k: (11, v.shape) for k, v in case.inputs.items()}
    body = expand(ours, lambda n: shapes.get(n, (0, None)), case.opset, lambda p: f"{p}_{next(counter)}")
    assert body is not None, f"{case.name}: no expansion"
    nodes = [onnx.NodeProto.FromString(n.SerializeToString()) for n in body]
    return Case(case.name + "-expanded", nodes, case.inputs, case.xs, y=case.nodes[0].output[0], opset=case.opset)


#: ops with a rule AND a static function body: the body's gradient must equal the rule's
BOTH = [
    Case("Mish", [node("Mish", ["x"])], {"x": normal(3, 4)}, ["x"], opset=22),
    Case("Celu", [node("Celu", ["x"], alpha=0.8)], {"x": normal(3, 4)}, ["x"], opset=28),
    Case("Softplus", [node("Softplus", ["x"])], {"x": normal(3, 4)}, ["x"], opset=22),
    Case("Selu", [node("Selu", ["x"], alpha=1.5)], {"x": normal(3, 4) + 0.05}, ["x"], opset=22),
    # the body's HardSigmoid alpha is 1/6 as a float32 attribute; the rule's is exact
    Case(
        "HardSwish",
        [node("HardSwish", ["x"])],
        {"x": np.array([[-4.0, -1.5, 0.5], [2.0, 3.5, -0.2]])},
        ["x"],
        opset=22,
        rtol=1e-7,
        atol=1e-7,
    ),
]


@pytest.mark.parametrize("case", BOTH, ids=lambda c: c.name)
def test_expansion_gradient_equals_rule_gradient(case: Case) -> None:
    expanded = _expanded_case(case)
    assert {n.op_type for n in expanded.nodes} != {case.nodes[0].op_type}
    dy = RNG.standard_normal(case.inputs["x"].shape)
    got = []
    for c in (case, expanded):
        _, bwd = gradient(c)
        got.append(ol.runtime.InferenceSession(bwd).run(None, {"x": case.inputs["x"], "dy": dy})[0])
    tol = 1e-7 if case.rtol == 1e-7 else 1e-12
    np.testing.assert_allclose(got[1], got[0], rtol=tol, atol=tol, err_msg=case.name)


def test_a_rule_wins_over_the_expansion() -> None:
    """A registered rule for Swish (deliberately wrong: dX = -dY) replaces the expansion."""
    registry = ol.DefaultGradRegistry()
    ol.RegisterGradientFunction("", "Swish", lambda ctx, dy: [ctx.op.Neg(dy)], registry=registry)
    case = FUNCTION_OPS[0]
    _, bwd = gradient(case, registry=registry)
    dy = RNG.standard_normal(case.inputs["x"].shape)
    (dx,) = ol.runtime.InferenceSession(bwd).run(None, {"x": case.inputs["x"], "dy": dy})
    np.testing.assert_array_equal(dx, -dy)


def test_an_op_without_rule_differentiates_by_its_expansion() -> None:
    registry = ol.DefaultGradRegistry()
    assert registry.lookup("", "Swish", 24) is None  # if Swish gets a rule, pick another op here
    _, bwd = gradient(FUNCTION_OPS[0])
    assert "Swish" not in {n.op_type for n in bwd.node} and "Sigmoid" in {n.op_type for n in bwd.node}


def test_an_impossible_expansion_is_a_clear_error() -> None:
    """Without types the rank of Q (3-D or 4-D layout) is unknown: refused, naming the node."""
    fn = ol.helper.make_function(
        "local",
        "f",
        ["q", "k", "v"],
        ["y"],
        [ol.helper.make_node("Attention", ["q", "k", "v"], ["y"], name="attn")],
        [ol.helper.make_opsetid("", 23)],
    )
    with pytest.raises(ol.GradientError, match=r"'attn'.*Attention.*opset 23.*rank of Q"):
        ol.GradientOfFunction(fn, ["q"], "y")


# A small mobile transformer block (pre-norm, rotary positions, grouped-query causal
# attention, SwiGLU MLP), differentiated in every weight.
_D, _H, _KV, _S = 8, 2, 1, 4
_ANGLES = np.arange(_S)[:, None] / 10000 ** (np.arange(_D // _H // 2)[None] / (_D // _H // 2))
BLOCK = Case(
    "transformer-block",
    [
        node("RMSNormalization", ["x", "g1"], ["h"], axis=-1),
        node("MatMul", ["h", "wq"], ["q"]),
        node("MatMul", ["h", "wk"], ["k"]),
        node("MatMul", ["h", "wv"], ["v"]),
        node("RotaryEmbedding", ["q", "cos", "sin", "pos"], ["qr"], num_heads=_H),
        node("RotaryEmbedding", ["k", "cos", "sin", "pos"], ["kr"], num_heads=_KV),
        node("Attention", ["qr", "kr", "v"], ["a"], is_causal=1, q_num_heads=_H, kv_num_heads=_KV),
        node("MatMul", ["a", "wo"], ["ao"]),
        node("Add", ["x", "ao"], ["r"]),
        node("RMSNormalization", ["r", "g2"], ["h2"], axis=-1),
        node("MatMul", ["h2", "w1"], ["u"]),
        node("MatMul", ["h2", "w3"], ["g"]),
        node("Mul", ["u", "g"], ["ug"]),
        node("Swish", ["ug"], ["act"]),
        node("MatMul", ["act", "w2"], ["m"]),
        node("Add", ["r", "m"], ["out"]),
    ],
    {
        "x": normal(2, _S, _D),
        "g1": 1 + 0.1 * normal(_D),
        "wq": normal(_D, _D) / 3,
        "wk": normal(_D, _D // _H * _KV) / 3,
        "wv": normal(_D, _D // _H * _KV) / 3,
        "cos": np.cos(_ANGLES),
        "sin": np.sin(_ANGLES),
        "pos": np.tile(np.arange(_S, dtype=np.int64), (2, 1)),
        "wo": normal(_D // _H * _H, _D) / 3,
        "g2": 1 + 0.1 * normal(_D),
        "w1": normal(_D, 12) / 3,
        "w3": normal(_D, 12) / 3,
        "w2": normal(12, _D) / 3,
    },
    ["x", "g1", "wq", "wk", "wv", "wo", "g2", "w1", "w3", "w2"],
    opset=24,
)


def test_transformer_block_gradient() -> None:
    check_gradient(BLOCK)


def _torch_block(torch: Any, p: dict[str, Any]) -> Any:
    """The same block in torch (float64): the spec's formulas, written out."""
    f = torch.nn.functional

    def rms(x: Any, g: Any) -> Any:
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-5) * g

    def rotate(x: Any, heads: int) -> Any:
        b, s, _ = x.shape
        x = x.reshape(b, s, heads, -1)
        cos, sin = p["cos"][p["pos"]][:, :, None], p["sin"][p["pos"]][:, :, None]
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat([cos * x1 - sin * x2, sin * x1 + cos * x2], dim=-1)  # (B, S, H, D)

    h = rms(p["x"], p["g1"])
    q = rotate(h @ p["wq"], _H).transpose(1, 2)
    k = rotate(h @ p["wk"], _KV).transpose(1, 2)
    v = (h @ p["wv"]).reshape(2, _S, _KV, -1).transpose(1, 2)
    a = f.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    r = p["x"] + a.transpose(1, 2).reshape(2, _S, -1) @ p["wo"]
    h2 = rms(r, p["g2"])
    ug = (h2 @ p["w1"]) * (h2 @ p["w3"])
    return r + (ug * torch.sigmoid(ug)) @ p["w2"]


def test_transformer_block_matches_torch_autograd() -> None:
    torch = pytest.importorskip("torch")
    model, bwd = gradient(BLOCK)
    feeds = dict(BLOCK.inputs)
    dy = RNG.standard_normal((2, _S, _D))
    ours = ol.runtime.InferenceSession(bwd).run(None, {n: (dy if n == "dy" else feeds[n]) for n in bwd.input})
    params = {n: torch.tensor(v, requires_grad=n in BLOCK.xs) for n, v in feeds.items()}
    out = _torch_block(torch, params)
    (out * torch.tensor(dy)).sum().backward()
    for x, g in zip(BLOCK.xs, ours):
        np.testing.assert_allclose(g, params[x].grad.numpy(), rtol=1e-10, atol=1e-12, err_msg=f"grad_{x}")
