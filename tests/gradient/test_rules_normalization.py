"""Gradient rules for normalizations, checked by ``gradcheck.check_gradient``.

One row per rule and per attribute combination that changes the backward graph.
Rows whose forward op onnxruntime cannot run in float64 compare in float32
(``ort_dtype``); the finite-difference check always runs in float64 in our runtime.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from gradcheck import Case, check_gradient
from onnx import helper as oh

F32 = np.float32
_rng = np.random.default_rng(11)


def rnd(*shape: int, positive: bool = False) -> np.ndarray:
    v = _rng.standard_normal(shape)
    return np.abs(v) + 0.5 if positive else v


def row(
    name: str,
    op: str,
    inputs: dict[str, np.ndarray],
    xs: list[str] | None = None,
    outputs: int = 1,
    y: str = "y",
    opset: int = 21,
    ort_dtype: Any = np.float64,
    extra: list[Any] | None = None,
    **attrs: Any,
) -> Case:
    """One normalization node; ``extra`` nodes may combine several outputs into ``y``."""
    outs = ["y", "o1", "o2"][:outputs] if not extra else ["t", "o1", "o2"][:outputs]
    nodes = [oh.make_node(op, list(inputs), outs, **attrs), *(extra or [])]
    return Case(name, nodes, inputs, xs or list(inputs), y=y, opset=opset, ort_dtype=ort_dtype)


def bn_inputs(c: int, *shape: int) -> dict[str, np.ndarray]:
    return {"x": rnd(*shape), "scale": rnd(c), "b": rnd(c), "mean": rnd(c), "var": rnd(c, positive=True)}


def combine(*names: str) -> list[Any]:
    """Sum of several outputs, each reduced to a scalar with its own weight (a 1-output graph)."""
    nodes, parts = [], []
    for k, n in enumerate(names):
        nodes.append(oh.make_node("ReduceSum", [n], [f"r{k}"], keepdims=0))
        parts.append(f"r{k}")
    nodes.append(oh.make_node("Sum", parts, ["y"]))
    return nodes


LN_X = rnd(2, 3, 4)
READ_C_AGAIN = oh.make_node("Mul", ["y", "c"], ["z"])
CASES = [
    row("layernorm-last", "LayerNormalization", {"x": LN_X, "scale": rnd(4), "bias": rnd(4)}),
    row("layernorm-axis1", "LayerNormalization", {"x": LN_X, "scale": rnd(3, 4), "bias": rnd(4)}, axis=1, epsilon=1e-3),
    row("layernorm-bcast-scale", "LayerNormalization", {"x": LN_X, "scale": rnd(1, 4)}, axis=1),
    row("layernorm-nobias", "LayerNormalization", {"x": LN_X, "scale": rnd(4)}, axis=-1, stash_type=11),
    row("layernorm-x-only", "LayerNormalization", {"x": LN_X, "scale": rnd(4), "bias": rnd(4)}, xs=["x"]),
    row(
        "layernorm-mean-invstd",
        "LayerNormalization",
        {"x": LN_X, "scale": rnd(3, 4), "bias": rnd(3, 4)},
        outputs=3,
        axis=1,
        stash_type=11,
        extra=[*combine("t", "o1", "o2")],
    ),
    # float32 X: dX reads the forward node's Mean / InvStdDev (asked of it when omitted)
    Case(
        "layernorm-f32-stats",
        [oh.make_node("LayerNormalization", ["x", "scale", "bias"], ["y"], axis=1)],
        {"x": LN_X, "scale": rnd(3, 4), "bias": rnd(4)},
        ["x", "scale", "bias"],
        dtype=F32,
        ort_dtype=F32,
        rtol=2e-3,
    ),
    Case(
        "layernorm-f32-mean-invstd",
        [
            oh.make_node("LayerNormalization", ["x", "scale", "bias"], ["t", "o1", "o2"], axis=-1, epsilon=1e-2),
            *combine("t", "o1", "o2"),
        ],
        {"x": LN_X, "scale": rnd(4), "bias": rnd(4)},
        ["x", "scale"],
        y="y",
        dtype=F32,
        ort_dtype=F32,
        rtol=2e-3,
    ),
    # float32 X with a bfloat16 stash: recomputed in float32 (the stash is less precise)
    Case(
        "layernorm-f32-bf16-stash",
        [oh.make_node("LayerNormalization", ["x", "scale"], ["y"], stash_type=16)],
        {"x": LN_X, "scale": rnd(4)},
        ["x", "scale"],
        dtype=F32,
        ort_dtype=F32,
        rtol=2e-3,
    ),
    row("batchnorm-inference", "BatchNormalization", bn_inputs(3, 2, 3, 2, 2)),
    row("batchnorm-inference-2d", "BatchNormalization", bn_inputs(3, 4, 3), epsilon=1e-2),
    row("batchnorm-training", "BatchNormalization", bn_inputs(3, 2, 3, 2, 2), xs=["x", "scale", "b"], training_mode=1),
    row(
        "batchnorm-training-running",
        "BatchNormalization",
        bn_inputs(2, 3, 2, 3),
        outputs=3,
        training_mode=1,
        momentum=0.8,
        extra=[*combine("t", "o1", "o2")],
    ),
    # Conv -> inference BatchNormalization: folded into one Conv before the pass (optimizer._conv_bn)
    *(
        Case(
            f"conv-batchnorm-{tag}",
            [
                oh.make_node("Conv", ["x", "w", *bias], ["c"], **conv),
                oh.make_node("BatchNormalization", ["c", "scale", "b", "mean", "var"], ["y"], epsilon=eps),
                *tail,
            ],
            {**bn_inputs(w[0]), "x": rnd(*x), "w": rnd(*w), **({"cb": rnd(w[0])} if bias else {})},
            xs or ["x", "w", *bias, "scale", "b", "mean", "var"],
            y="y" if not tail else "z",
            opset=opset,
            ort_dtype=F32,  # onnxruntime has no float64 ConvTranspose
        )
        for tag, x, w, bias, conv, eps, tail, xs, opset in [
            ("bias", (2, 3, 5, 5), (4, 3, 3, 3), ["cb"], {"pads": [1, 1, 1, 1]}, 1e-5, [], None, 21),
            ("nobias-strided", (1, 2, 6, 5), (3, 2, 3, 2), [], {"strides": [2, 1]}, 1e-3, [], None, 17),
            ("depthwise", (2, 4, 5, 5), (4, 1, 3, 3), [], {"group": 4, "dilations": [2, 1]}, 1e-5, [], None, 21),
            ("1d-weights-only", (2, 3, 7), (2, 3, 3), ["cb"], {}, 1e-5, [], ["w", "cb", "scale", "var"], 21),
            # the Conv's output read again: not folded, the two rules as they are
            (
                "conv-read-twice",
                (1, 2, 4, 4),
                (3, 2, 1, 1),
                [],
                {},
                1e-5,
                [oh.make_node("Mul", ["y", "c"], ["z"])],
                None,
                21,
            ),
        ]
    ),
    row("instancenorm", "InstanceNormalization", {"x": rnd(2, 3, 2, 3), "scale": rnd(3), "b": rnd(3)}, ort_dtype=F32),
    row(
        "instancenorm-1d",
        "InstanceNormalization",
        {"x": rnd(2, 2, 5), "scale": rnd(2), "b": rnd(2)},
        ort_dtype=F32,
        epsilon=1e-2,
    ),
    row(
        "groupnorm",
        "GroupNormalization",
        {"x": rnd(2, 4, 2, 3), "scale": rnd(4), "b": rnd(4)},
        num_groups=2,
        ort_dtype=F32,
    ),
    row(
        "groupnorm-1group",
        "GroupNormalization",
        {"x": rnd(2, 3, 4), "scale": rnd(3), "b": rnd(3)},
        num_groups=1,
        ort_dtype=F32,
    ),
    row(
        "groupnorm-per-channel",
        "GroupNormalization",
        {"x": rnd(1, 3, 2, 2), "scale": rnd(3), "b": rnd(3)},
        num_groups=3,
        ort_dtype=F32,
    ),
    row("lpnorm-p2", "LpNormalization", {"x": rnd(3, 4)}),
    row("lpnorm-p1-axis0", "LpNormalization", {"x": rnd(3, 4)}, axis=0, p=1),
    row("lpnorm-p2-axis1", "LpNormalization", {"x": rnd(2, 3, 2)}, axis=1, p=2),
    row("mvn", "MeanVarianceNormalization", {"x": rnd(2, 3, 2, 2)}, ort_dtype=F32),
    row("mvn-axes", "MeanVarianceNormalization", {"x": rnd(2, 3, 4)}, axes=[2], ort_dtype=F32),
    # found by the property tests: a size-1 axis (sigma = 0) gave a NaN gradient
    row("mvn-size1-axis", "MeanVarianceNormalization", {"x": rnd(2, 1, 3)}, axes=[1], ort_dtype=F32),
    row("rmsnorm", "RMSNormalization", {"x": rnd(2, 3, 4), "scale": rnd(4)}, opset=23),
    row("rmsnorm-axis1", "RMSNormalization", {"x": rnd(2, 3, 4), "scale": rnd(1, 4)}, axis=1, epsilon=1e-3, opset=23),
    # LRN: alpha large enough that the window term matters; odd and even sizes (the window
    # is asymmetric for even sizes), a window wider than C, 3-D and 5-D inputs, opset 1 and 13
    row("lrn-size3", "LRN", {"x": rnd(2, 5, 3, 2)}, size=3, alpha=0.5, beta=0.75, bias=1.0, ort_dtype=F32),
    row("lrn-size2", "LRN", {"x": rnd(1, 4, 2, 3)}, size=2, alpha=0.3, beta=0.6, bias=2.0, ort_dtype=F32),
    row("lrn-size4-opset9", "LRN", {"x": rnd(1, 6, 3)}, size=4, alpha=0.4, beta=1.2, opset=9, ort_dtype=F32),
    row("lrn-wide", "LRN", {"x": rnd(1, 3, 2, 2, 2)}, size=7, alpha=0.8, beta=0.5, bias=1.5, ort_dtype=F32),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_normalization(case: Case) -> None:
    check_gradient(case)
