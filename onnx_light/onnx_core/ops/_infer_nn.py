"""Inference of convolution, pooling, resizing, normalization and loss ops."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._proto import NodeProto
from ..gradient._types import Dim, InferContext, ValueType, infer
from ._infer_common import FLOAT, INT64, axis_index, dims_value, has_input, in_type, value
from ._registries import upgrade
from ._traits import declare_traits
from ._upgrade import Upgrader, attr, attr_value, clone
from ._window import SAME_PADS, transpose_out_dim, transpose_window, window_out_dim


def _window(ctx: InferContext, kernel: list[Dim], x_shape: tuple[Dim, ...], ceil_mode: bool) -> list[Dim]:
    n = len(kernel)
    strides = list(ctx.attr("strides", [1] * n))
    dilations = list(ctx.attr("dilations", [1] * n))
    pads = list(ctx.attr("pads", [0] * 2 * n))
    auto_pad = str(ctx.attr("auto_pad", "NOTSET"))
    return [
        window_out_dim(x_shape[2 + i], kernel[i], strides[i], pads[i], pads[i + n], dilations[i], auto_pad, ceil_mode)
        for i in range(n)
    ]


@infer("Conv", "ConvInteger")
def conv(ctx: InferContext) -> list[ValueType]:
    """``(N, M, out...)`` with M = W.shape[0]."""
    x, w = in_type(ctx, 0), in_type(ctx, 1)
    dtype = x.dtype if ctx.node.op_type == "Conv" else 6  # ConvInteger: int32
    if x.shape is None:
        return [ValueType(dtype, None)]
    n = len(x.shape) - 2
    kernel = ctx.attr("kernel_shape")
    if kernel is None:
        kernel = list(w.shape[2:]) if w.shape is not None else [None] * n
    m = w.shape[0] if w.shape is not None else None
    return [ValueType(dtype, (x.shape[0], m, *_window(ctx, list(kernel), x.shape, False)))]


@infer("ConvTranspose")
def conv_transpose(ctx: InferContext) -> list[ValueType]:
    """``(N, W.shape[1] * group, out...)``; ``output_shape`` wins over the formula."""
    x, w = in_type(ctx, 0), in_type(ctx, 1)
    if x.shape is None:
        return [ValueType(x.dtype, None)]
    n = len(x.shape) - 2
    group = int(ctx.attr("group", 1))
    c: Dim = w.shape[1] * group if w.shape is not None and isinstance(w.shape[1], int) else None
    kernel = ctx.attr("kernel_shape") or (list(w.shape[2:]) if w.shape is not None else [None] * n)
    if ctx.attr("output_shape") is not None:
        spatial: list[Dim] = [int(d) for d in ctx.attr("output_shape")[-n:]]
        return [ValueType(x.dtype, (x.shape[0], c, *spatial))]
    strides = list(ctx.attr("strides", [1] * n))
    dilations = list(ctx.attr("dilations", [1] * n))
    out_pad = list(ctx.attr("output_padding", [0] * n))
    auto_pad = str(ctx.attr("auto_pad", "NOTSET"))
    pads = [0] * 2 * n if auto_pad != "NOTSET" else list(ctx.attr("pads", [0] * 2 * n))
    spatial = [
        transpose_out_dim(
            x.shape[2 + i], kernel[i], strides[i], pads[i], pads[i + n], dilations[i], out_pad[i], auto_pad
        )
        for i in range(n)
    ]
    return [ValueType(x.dtype, (x.shape[0], c, *spatial))]


@infer("MaxPool", "AveragePool", "LpPool")
def pool(ctx: InferContext) -> list[ValueType]:
    """``(N, C, out...)`` over ``kernel_shape`` (``ceil_mode`` rounds up); MaxPool's indices int64."""
    x = in_type(ctx, 0)
    if x.shape is None:
        return [ValueType(x.dtype, None), ValueType(INT64, None)]
    kernel = list(ctx.attr("kernel_shape", []))
    shape = (*x.shape[:2], *_window(ctx, kernel, x.shape, bool(ctx.attr("ceil_mode", 0))))
    return [ValueType(x.dtype, shape), ValueType(INT64, shape)]


@infer("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")
def global_pool(ctx: InferContext) -> list[ValueType]:
    """``(N, C, 1, ...)``."""
    x = in_type(ctx, 0)
    if x.shape is None:
        return [ValueType(x.dtype, None)]
    return [ValueType(x.dtype, (*x.shape[:2], *([1] * (len(x.shape) - 2))))]


@infer("BatchNormalization")
def batch_norm(ctx: InferContext) -> list[ValueType]:
    """Y as X; the extra statistics outputs ``(C,)`` in the mean's type."""
    x, mean = in_type(ctx, 0), in_type(ctx, 3)
    c: Dim = x.shape[1] if x.shape is not None and len(x.shape) > 1 else None
    if mean.shape is not None and len(mean.shape) == 1:
        c = c if isinstance(c, int) else mean.shape[0]
    stat = ValueType(mean.dtype or x.dtype, (c,))
    return [x] + [stat] * (len(ctx.node.output) - 1)


@infer("InstanceNormalization", "GroupNormalization", "RMSNormalization")
def same_as_input(ctx: InferContext) -> list[ValueType]:
    """As the input."""
    return [in_type(ctx, 0)]


@infer("LayerNormalization")
def layer_norm(ctx: InferContext) -> list[ValueType]:
    """Y as X; Mean and InvStdDev keep ``X[:axis]`` and are 1 after, in ``stash_type``."""
    x = in_type(ctx, 0)
    stash = int(ctx.attr("stash_type", FLOAT))
    if x.shape is None:
        return [x, ValueType(stash, None), ValueType(stash, None)]
    axis = axis_index(int(ctx.attr("axis", -1)), len(x.shape))
    stat = ValueType(stash, (*x.shape[:axis], *([1] * (len(x.shape) - axis))))
    return [x, stat, stat]


@infer("SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss")
def loss(ctx: InferContext) -> list[ValueType]:
    """A scalar (mean/sum) or the labels' shape (none); SCE's log_prob as the scores."""
    x, labels = in_type(ctx, 0), in_type(ctx, 1)
    reduction = str(ctx.attr("reduction", "mean"))
    if reduction == "none":
        shape = labels.shape
        if shape is None and x.shape is not None:
            shape = (x.shape[0], *x.shape[2:])
        out = ValueType(x.dtype, shape)
    else:
        out = ValueType(x.dtype, ())
    return [out, x]


@infer("RNN", "GRU", "LSTM")
def recurrent(ctx: InferContext) -> list[ValueType]:
    """Y ``[seq, dirs, batch, hidden]`` and Y_h (Y_c) ``[dirs, batch, hidden]``; batch first when layout=1."""
    x = in_type(ctx, 0)
    dtype = x.dtype or in_type(ctx, 1).dtype  # one type T for X, W, R...: W's when X's is lost
    dirs = 2 if ctx.attr("direction", "forward") == "bidirectional" else 1
    hidden = ctx.attr("hidden_size")
    h: Dim = int(hidden) if hidden is not None else None
    layout = int(ctx.attr("layout", 0))
    seq: Dim = None
    batch: Dim = None
    if x.shape is not None and len(x.shape) == 3:  # else still ranks 4 and 3 (the spec's)
        seq, batch = (x.shape[1], x.shape[0]) if layout else (x.shape[0], x.shape[1])
    y = (batch, seq, dirs, h) if layout else (seq, dirs, batch, h)
    state = (batch, dirs, h) if layout else (dirs, batch, h)
    return [ValueType(dtype, y), ValueType(dtype, state), ValueType(dtype, state)]


# the scales (Resize-10, Upsample-9) and roi / scales / sizes (Resize-11+) set the output's shape
declare_traits("Upsample", since=9, sizes_from=(1,))
declare_traits("Resize", since=10, sizes_from=(1,))
declare_traits("Resize", since=11, sizes_from=(1, 2, 3))


@infer("Resize", "Upsample")
def resize(ctx: InferContext) -> list[ValueType]:
    """Each dim times its scale (floored), or the given sizes (over ``axes`` at 18+)."""
    x = in_type(ctx, 0)
    if x.shape is None:
        return [ValueType(x.dtype, None)]
    rank = len(x.shape)
    scales: list[float] | None = None
    sizes: list[Dim] | None = None
    if "scales" in ctx.attrs:  # Upsample-7
        scales = [float(s) for s in ctx.attrs["scales"]]
    elif ctx.node.op_type == "Upsample" or (ctx.opset < 11 and len(ctx.node.input) == 2):
        v = value(ctx, 1)
        scales = None if v is None else [float(s) for s in v.reshape(-1)]
    else:
        v = value(ctx, 2)
        if v is not None and v.size:
            scales = [float(s) for s in v.reshape(-1)]
        elif has_input(ctx, 3):
            sizes = dims_value(ctx, 3)  # partly known: sizes taken from Shape(X) stay symbolic
            if str(ctx.attr("keep_aspect_ratio_policy", "stretch")) != "stretch":
                sizes = None
    axes = [axis_index(int(a), rank) for a in ctx.attr("axes", range(rank))]
    shape: list[Dim] = list(x.shape) if scales is not None or sizes is not None else [None] * rank
    for j, a in enumerate(axes):
        if sizes is not None:
            shape[a] = sizes[j]
        elif scales is not None:
            d = x.shape[a]
            shape[a] = int(math.floor(d * scales[j])) if isinstance(d, int) else (d if scales[j] == 1 else None)
    return [ValueType(x.dtype, tuple(shape))]


# --------------------------------------------------------------------------- upgrades
@upgrade("ConvTranspose", until=10)
def _conv_transpose(u: Upgrader, node: NodeProto) -> None:
    """Before opset 11 an odd imposed padding (``output_shape`` or SAME_*) was split the
    other way round: the node gets the explicit ``pads`` that mean the same at 11+."""
    auto_pad = str(attr_value(node, "auto_pad", "NOTSET"))
    output_shape = attr_value(node, "output_shape")
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
    attrs = {k: attr_value(node, k) for k in ("strides", "dilations", "output_padding")}
    args = (x[2:], w[2:], attrs["strides"], attrs["dilations"], None, auto_pad, attrs["output_padding"], output_shape)
    old = transpose_window(*args, legacy=True)
    if old.begin == transpose_window(*args).begin:
        u.out.append(node)
        return
    u.out.append(clone(node, drop=["auto_pad", "output_shape"], pads=old.begin + old.end))


@upgrade("GroupNormalization", until=20, since=18)
def _group_norm(u: Upgrader, node: NodeProto) -> None:
    if not 18 <= u.source < 21 or u.target < 21:
        u.out.append(node)
        return
    x, scale, bias = node.input[:3]
    groups = int(attr_value(node, "num_groups", 0))
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
    u.out.append(clone(node, [x, *per_channel]))


@upgrade("BatchNormalization", until=13)
def _batch_norm(u: Upgrader, node: NodeProto) -> None:
    if u.source >= 14 or u.target < 9:
        u.out.append(node)
        return
    if attr(node, "spatial") is not None and int(attr_value(node, "spatial")) == 0:
        raise u.error(
            node,
            "spatial=0 (per-activation statistics) has no equivalent after opset 9; re-export the model with spatial=1",
        )
    if int(attr_value(node, "is_test", 1)) == 0 or len([o for o in node.output[1:] if o]) > 0:
        raise u.error(
            node,
            "the training-mode outputs (mean, var, saved_mean, saved_var) changed meaning at "
            "opset 14; export the model in inference mode",
        )
    if any(attr(node, a) is not None for a in ("spatial", "is_test", "consumed_inputs")):
        u.out.append(clone(node, outputs=node.output[:1], drop=["spatial", "is_test", "consumed_inputs"]))
    else:
        u.out.append(node)


@upgrade("Upsample", "Resize", until=None)
def _resize(u: Upgrader, node: NodeProto) -> None:
    """Upsample (7–9) and Resize-10 -> Resize with asymmetric coordinates, floor nearest."""
    if node.op_type == "Resize" and (u.source >= 11 or u.target < 11):
        u.out.append(node)
        return
    if node.op_type == "Upsample" and u.target < 10:
        u.out.append(node)
        return
    mode = str(attr_value(node, "mode", "nearest"))
    if node.op_type == "Upsample" and attr(node, "scales") is not None:
        scales = u.const(np.asarray(attr_value(node, "scales"), np.float32), "Upsample_scales")
    else:
        scales = node.input[1]
    attrs: dict[str, Any] = {"mode": mode, "coordinate_transformation_mode": "asymmetric"}
    if mode == "nearest":
        attrs["nearest_mode"] = "floor"
    u.out.append(clone(node, [node.input[0], "", scales], drop=["scales"], op_type="Resize", **attrs))


@upgrade("RoiAlign", until=15)
def _roi_align(u: Upgrader, node: NodeProto) -> None:
    """Before 16 RoiAlign sampled as ``output_half_pixel``; 16 added the attribute with ``half_pixel``."""
    if u.source >= 16 or u.target < 16 or attr(node, "coordinate_transformation_mode") is not None:
        u.out.append(node)
        return
    u.out.append(clone(node, coordinate_transformation_mode="output_half_pixel"))


@upgrade("GridSample", until=19)
def _grid_sample(u: Upgrader, node: NodeProto) -> None:
    """GridSample 20 renamed the modes: bilinear -> linear, bicubic -> cubic (the default was bilinear)."""
    if u.source >= 20 or u.target < 20:
        u.out.append(node)
        return
    mode = str(attr_value(node, "mode", "bilinear"))
    u.out.append(clone(node, mode={"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)))
