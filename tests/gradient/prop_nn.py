"""Property generators of the nn (convolution), pool, normalization and loss families (see propgen.py).

Window geometry is drawn within the spec's domain: pads below the kernel, inputs at least
one window long, output_padding below the stride or the dilation, num_groups dividing C.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gradcheck import Case
from hypothesis import strategies as st
from propgen import (
    Draw,
    Gen,
    axes,
    axis,
    broadcast_to,
    magnitude,
    make_case,
    normal,
    shape,
    side,
    subset,
    sum_of_squares,
)


def _window(draw: Draw, spatial: int, pooling: bool = False) -> dict[str, Any]:
    """kernel, strides, dilations, and pads (explicit, or an auto_pad mode) per spatial axis."""
    kernel = [int(draw(st.integers(1, 3))) for _ in range(spatial)]
    geo: dict[str, Any] = {"kernel_shape": kernel, "strides": [int(draw(st.integers(1, 3))) for _ in kernel]}
    if draw(st.booleans()):
        geo["dilations"] = [int(draw(st.integers(1, 2))) for _ in kernel]
    mode = draw(st.sampled_from(["pads", "pads", "none", "SAME_UPPER", "SAME_LOWER", "VALID"]))
    if mode == "pads":
        geo["pads"] = [int(draw(st.integers(0, k - 1))) for k in kernel * 2]
    elif mode != "none":
        geo["auto_pad"] = mode
    if mode.startswith("SAME"):
        # a stride above the window span makes the spec's SAME total padding negative (the
        # window shifts right): onnx's reference and onnxruntime's float64 MaxPool follow it,
        # onnxruntime's float32 kernels refuse it, and our kernels clamp the total at 0
        # (reported, not drawn)
        dil = geo.get("dilations", [1] * spatial)
        geo["strides"] = [min(s, (k - 1) * d + 1) for s, k, d in zip(geo["strides"], kernel, dil)]
    return geo


def _input_sides(draw: Draw, geo: dict[str, Any]) -> list[int]:
    """Spatial sides holding at least one window (after explicit pads)."""
    kernel, dil = geo["kernel_shape"], geo.get("dilations", [1] * len(geo["kernel_shape"]))
    pads = geo.get("pads", [0] * 2 * len(kernel))
    sides = []
    for i, (k, d) in enumerate(zip(kernel, dil)):
        span = (k - 1) * d + 1
        sides.append(max(1, span - pads[i] - pads[i + len(kernel)]) + int(draw(st.integers(0, 3))))
    return sides


def _conv(draw: Draw, rng: np.random.Generator) -> Case:
    spatial = int(draw(st.sampled_from([1, 1, 2, 2, 3])))
    geo = _window(draw, spatial)
    group = int(draw(st.integers(1, 2)))
    c, m = group * side(draw, 1, 2), group * side(draw, 1, 2)
    x = [side(draw, 1, 2), c, *_input_sides(draw, geo)]
    w = [m, c // group, *geo["kernel_shape"]]
    if draw(st.booleans()):  # kernel_shape is optional: read from W
        geo.pop("kernel_shape")
    inputs = {"x": normal(rng, x), "w": normal(rng, w), "b": normal(rng, [m]) if draw(st.booleans()) else None}
    xs = subset(draw, [k for k, v in inputs.items() if v is not None])
    return make_case("Conv", inputs, xs, attrs={**geo, "group": group})


def _conv_transpose(draw: Draw, rng: np.random.Generator) -> Case:
    spatial = int(draw(st.sampled_from([1, 1, 2, 2, 3])))
    geo = _window(draw, spatial)
    kernel, strides = geo["kernel_shape"], geo["strides"]
    dil = geo.get("dilations", [1] * spatial)
    if "pads" in geo:  # keep the output at least one long: both pads together below the window span
        pads = geo["pads"]
        for i, (k, d) in enumerate(zip(kernel, dil)):
            pads[i] = min(pads[i], (k - 1) * d)
            pads[i + spatial] = min(pads[i + spatial], (k - 1) * d - pads[i])
    if geo.get("auto_pad") == "VALID":
        geo.pop("auto_pad")
    group = int(draw(st.integers(1, 2)))
    c, m = group * side(draw, 1, 2), group * side(draw, 1, 2)
    sides = [side(draw, 1, 3) for _ in kernel]
    if draw(st.booleans()):
        geo["output_padding"] = [int(draw(st.integers(0, max(s, d) - 1))) for s, d in zip(strides, dil)]
    if "auto_pad" not in geo and draw(st.booleans()) and draw(st.booleans()):
        # output_shape: total padding s (in - 1) + output_padding + span - out in [0, span - 1]
        outpad = geo.get("output_padding", [0] * spatial)
        geo.pop("pads", None)
        geo["output_shape"] = [
            s * (n - 1) + op + (k - 1) * d + 1 - int(draw(st.integers(0, (k - 1) * d)))
            for s, n, op, k, d in zip(strides, sides, outpad, kernel, dil)
        ]
    inputs = {"x": normal(rng, [side(draw, 1, 2), c, *sides]), "w": normal(rng, [c, m // group, *kernel])}
    inputs["b"] = normal(rng, [m]) if draw(st.booleans()) else None
    xs = subset(draw, [k for k, v in inputs.items() if v is not None])
    return make_case("ConvTranspose", inputs, xs, attrs={**geo, "group": group})


NN: dict[str, Gen] = {"Conv": _conv, "ConvTranspose": _conv_transpose}


# -- pool -------------------------------------------------------------------------------------
def _max_pool(draw: Draw, rng: np.random.Generator) -> Case:
    spatial = int(draw(st.sampled_from([1, 2, 2, 3])))
    geo = _window(draw, spatial, pooling=True)
    geo["ceil_mode"] = int(draw(st.integers(0, 1)))
    outputs = int(draw(st.integers(1, 2)))
    if spatial == 2 and draw(st.booleans()):
        geo["storage_order"] = int(draw(st.integers(0, 1)))
    x = [side(draw, 1, 2), side(draw, 1, 2), *_input_sides(draw, geo)]
    dilated_same = "auto_pad" in geo and any(d > 1 for d in geo.get("dilations", []))
    # onnxruntime's SAME output size ignores the dilation (x [1, 1, 3], kernel 2, dilation 2: 2 not 3)
    skip = "onnxruntime's SAME padding ignores dilations" if dilated_same else None
    return make_case("MaxPool", {"x": normal(rng, x)}, ["x"], attrs=geo, outputs=outputs, y="y", skip_ort=skip)


def _average_pool(draw: Draw, rng: np.random.Generator) -> Case:
    spatial = int(draw(st.sampled_from([1, 2, 2, 3])))
    geo = _window(draw, spatial, pooling=True)
    geo["ceil_mode"] = int(draw(st.integers(0, 1)))
    geo["count_include_pad"] = int(draw(st.integers(0, 1)))
    x = [side(draw, 1, 2), side(draw, 1, 2), *_input_sides(draw, geo)]
    return make_case("AveragePool", {"x": normal(rng, x)}, ["x"], attrs=geo, opset=int(draw(st.sampled_from([19, 21]))))


def _global_pool(draw: Draw, rng: np.random.Generator, op: str) -> Case:
    x = shape(draw, 3, 5)
    return make_case(op, {"x": normal(rng, x)}, ["x"])


POOL: dict[str, Gen] = {
    "MaxPool": _max_pool,
    "AveragePool": _average_pool,
    "GlobalAveragePool": lambda draw, rng: _global_pool(draw, rng, "GlobalAveragePool"),
    "GlobalMaxPool": lambda draw, rng: _global_pool(draw, rng, "GlobalMaxPool"),
}


# -- normalization ----------------------------------------------------------------------------
def _batch_norm(draw: Draw, rng: np.random.Generator) -> Case:
    c = side(draw)
    x = [side(draw, 1, 3), c, *shape(draw, 0, 2)]
    inputs = {"x": normal(rng, x), "scale": normal(rng, [c]), "b": normal(rng, [c])}
    inputs |= {"mean": normal(rng, [c]), "var": np.asarray(rng.uniform(0.5, 2.0, [c]))}
    attrs: dict[str, Any] = {"epsilon": float(draw(st.sampled_from([1e-5, 1e-2])))}
    if draw(st.booleans()):  # inference
        return make_case("BatchNormalization", inputs, subset(draw, list(inputs)), attrs=attrs)
    attrs |= {"training_mode": 1, "momentum": float(draw(st.floats(0.1, 0.9)))}
    outputs = int(draw(st.sampled_from([1, 3])))
    extra = sum_of_squares(["y", "y1", "y2"]) if outputs == 3 else None
    xs = subset(draw, ["x", "scale", "b"])
    # onnxruntime runs the backward graph (it recomputes the running statistics) to answers that
    # change with its graph optimization level; ours agree with finite differences
    skip = "onnxruntime's running statistics in a larger graph" if outputs == 3 or int(np.prod(x)) == c else None
    return make_case("BatchNormalization", inputs, xs, attrs=attrs, outputs=outputs, extra=extra, skip_ort=skip)


def _channel_norm(draw: Draw, rng: np.random.Generator, op: str) -> Case:
    """InstanceNormalization, GroupNormalization (scale per channel at 21, per group at 18)."""
    groups = side(draw, 1, 3)
    c = groups * side(draw, 1, 2) if op == "GroupNormalization" else side(draw)
    x = [side(draw, 1, 2), c, *shape(draw, 1 if op == "InstanceNormalization" else 0, 2)]
    opset = int(draw(st.sampled_from([18, 21]))) if op == "GroupNormalization" else 21
    per = groups if opset < 21 else c
    inputs = {"x": normal(rng, x), "scale": normal(rng, [per]), "b": normal(rng, [per])}
    attrs: dict[str, Any] = {"epsilon": float(draw(st.sampled_from([1e-5, 1e-2])))}
    if op == "GroupNormalization":
        attrs["num_groups"] = groups
    return make_case(op, inputs, subset(draw, list(inputs)), attrs=attrs, opset=opset)


def _layer_norm(draw: Draw, rng: np.random.Generator, op: str) -> Case:
    """LayerNormalization and RMSNormalization: scale (and bias) broadcast to X's dims from axis."""
    x = shape(draw, 1, 4)
    a = axis(draw, len(x))
    normed = x[a:]
    inputs = {"x": normal(rng, x), "scale": normal(rng, broadcast_to(draw, normed, min_rank=1))}
    if op == "LayerNormalization" and draw(st.booleans()):
        inputs["bias"] = normal(rng, broadcast_to(draw, normed, min_rank=1))
    attrs: dict[str, Any] = {"axis": a, "epsilon": float(draw(st.sampled_from([1e-5, 1e-2])))}
    # (LayerNormalization's Mean and InvStdDev are float or bfloat16 by the schema: rounded, so
    # finite differences in float64 do not apply; the fixed rows cover them)
    opset = 23 if op == "RMSNormalization" else 21
    return make_case(op, inputs, subset(draw, list(inputs)), attrs=attrs, opset=opset)


def _lp_norm(draw: Draw, rng: np.random.Generator) -> Case:
    x = shape(draw, 1, 3)
    attrs = {"axis": axis(draw, len(x)), "p": int(draw(st.integers(1, 2)))}
    return make_case("LpNormalization", {"x": magnitude(rng, x)}, ["x"], attrs=attrs)


def _mvn(draw: Draw, rng: np.random.Generator) -> Case:
    x = shape(draw, 1, 4)
    attrs = {"axes": axes(draw, len(x), min_size=1)} if len(x) != 4 or draw(st.booleans()) else {}
    return make_case("MeanVarianceNormalization", {"x": normal(rng, x)}, ["x"], attrs=attrs)


NORMALIZATION: dict[str, Gen] = {
    "BatchNormalization": _batch_norm,
    "InstanceNormalization": lambda draw, rng: _channel_norm(draw, rng, "InstanceNormalization"),
    "GroupNormalization": lambda draw, rng: _channel_norm(draw, rng, "GroupNormalization"),
    "LayerNormalization": lambda draw, rng: _layer_norm(draw, rng, "LayerNormalization"),
    "RMSNormalization": lambda draw, rng: _layer_norm(draw, rng, "RMSNormalization"),
    "LpNormalization": _lp_norm,
    "MeanVarianceNormalization": _mvn,
}


# -- loss -------------------------------------------------------------------------------------
def _loss(draw: Draw, rng: np.random.Generator, op: str) -> Case:
    """Scores [N, C, d...], labels in [0, C) with an ignore_index (inside or outside the range),
    weights, every reduction; SoftmaxCrossEntropyLoss's log_prob output summed in too."""
    n, c = side(draw, 1, 3), side(draw, 1, 4)
    extra_dims = shape(draw, 0, 2, hi=3)
    labels = rng.integers(0, c, [n, *extra_dims]).astype(np.int64)
    attrs: dict[str, Any] = {"reduction": draw(st.sampled_from(["mean", "sum", "none"]))}
    if draw(st.booleans()):
        ignore = int(draw(st.sampled_from([0, c - 1, -1, -100])))
        attrs["ignore_index"] = ignore
        labels.flat[rng.integers(0, labels.size)] = ignore  # at least one ignored ...
        if np.all(labels == ignore):  # ... and one not (a mean over nothing is 0 / 0)
            labels.flat[0] = (ignore + 1) % c if 0 <= ignore < c and c > 1 else 0
        if np.all(labels == ignore):
            attrs.pop("ignore_index")
    scores = normal(rng, [n, c, *extra_dims])
    inputs = {"s": scores, "l": labels, "w": np.asarray(rng.uniform(0.5, 1.5, [c])) if draw(st.booleans()) else None}
    outputs = 2 if op == "SoftmaxCrossEntropyLoss" and draw(st.booleans()) else 1
    extra = sum_of_squares(["y", "y1"]) if outputs == 2 else None
    xs = subset(draw, [k for k in ("s", "w") if inputs[k] is not None])
    consts = ("l",) if draw(st.booleans()) else ()
    return make_case(op, inputs, xs, attrs=attrs, outputs=outputs, extra=extra, consts=consts)


LOSS: dict[str, Gen] = {
    "SoftmaxCrossEntropyLoss": lambda draw, rng: _loss(draw, rng, "SoftmaxCrossEntropyLoss"),
    "NegativeLogLikelihoodLoss": lambda draw, rng: _loss(draw, rng, "NegativeLogLikelihoodLoss"),
}
