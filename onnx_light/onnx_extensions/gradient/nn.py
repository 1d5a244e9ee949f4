"""Rules for convolutions: Conv and ConvTranspose (1-D/2-D/3-D, groups, strides, dilations, pads).

Both ops are linear in each operand, so each gradient is one more convolution:

* Conv ``dX`` is a ConvTranspose of ``dy`` with the same weights (its pads and
  ``output_padding`` chosen so the result is exactly ``X``'s shape), and ConvTranspose
  ``dX`` is a Conv of ``dy`` with the same weights;
* ``dW`` correlates the input with ``dy``: a Conv whose batch is the channels per group
  and whose channels are (group, sample), strides and dilations swapped; or, for
  ungrouped convolutions with small windows, im2col (a one-hot depthwise Conv; X itself for
  1x1 windows with stride 1) and a batched MatMul, which onnxruntime runs faster (one Gemm
  on a batch of one);
* ``dB = ReduceSum(dy, [0, 2, 3, ...])``.

Spatial dimensions may be symbolic: the weights' shape and the attributes fix
everything but the cells a stride leaves over at the end of an axis, so where a size
is only known at run time ``dX`` of a strided Conv is a ConvTranspose with the
largest ``output_padding`` cropped to ``Shape(X)``, and the correlations take the
forward's end pads and crop their output to the kernel. ``auto_pad=SAME_*`` with
strides > 1 on a symbolic axis pads by amounts that depend on the size: Conv then
pads X at run time and differentiates the VALID convolution of the padded X
(AveragePool likewise). The geometry itself (pads, output dims, which pads only the run
time knows) is ``onnx_core.ops``' ``window`` / ``transpose_window``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from onnx_light.onnx_core.ops import (
    RunTimePads,
    TransposeWindow,
    Window,
    runtime_pad_axes,
    transpose_window,
    window,
)

from ...onnx_core.gradient import GradContext, Grads, TangentContext, Tangents
from ._table import jvp_rule, refuses, rule
from ._tensor_common import merge_axes, reshape_fill

__all__ = ["Geometry", "conv_geometry", "transpose_into", "correlate", "same_padded", "valid_geometry"]


Geometry = Window
"""The resolved window geometry of a Conv or pooling node (``onnx_core.ops.Window``):
``size`` and ``out`` hold None where a dim is only known at run time (``geo.is_static``)."""


def _spatial(ctx: GradContext, name: str, what: str) -> tuple[Any, ...]:
    """The static shape of a convolution's weight ``name``."""
    shape = ctx.shape(name)
    if shape is None or len(shape) < 3 or not all(isinstance(d, int) for d in shape):
        raise ctx.error(
            f"needs the shape of {what} {name!r} (got {shape}); give it a static shape "
            "(an initializer, or a graph input with fixed dims)"
        )
    return tuple(shape)


def _input_dims(ctx: GradContext, name: str, nd: int) -> list[Any]:
    """The ``nd`` spatial dims of input ``name`` (None where unknown, e.g. symbolic)."""
    shape = ctx.shape(name)
    if shape is None or len(shape) != nd + 2:
        return [None] * nd
    return [d if isinstance(d, int) else None for d in shape[2:]]


def _int_list(ctx: GradContext, name: str, default: list[int]) -> list[int]:
    value = ctx.attr(name)
    return [int(v) for v in value] if value is not None else list(default)


def conv_geometry(ctx: GradContext, kernel: list[int], ceil_mode: bool = False) -> Geometry:
    """The geometry of a Conv or pooling node (``kernel`` fixes the number of spatial axes).

    The output dims are computed here, as onnxruntime does: with ``ceil_mode`` a last
    window that would start in the end padding is dropped. Input and output dims are
    None where the input's are not known when the pass runs.
    """
    nd = len(kernel)
    size = _input_dims(ctx, ctx.input(0), nd)
    strides = _int_list(ctx, "strides", [1] * nd)
    dilations = _int_list(ctx, "dilations", [1] * nd)
    pads = _int_list(ctx, "pads", [0] * 2 * nd)
    auto_pad = str(ctx.attr("auto_pad", "NOTSET"))
    try:
        return window(size, kernel, strides, dilations, pads, auto_pad, ceil_mode)
    except RunTimePads:
        raise ctx.error(
            f"the window geometry: auto_pad={auto_pad} with strides > 1 pads the begin of a symbolic "
            "spatial axis by an amount that depends on its size; export with explicit pads, "
            "or give the input static spatial dims"
        ) from None


def transpose_into(ctx: GradContext, dy: str, w: str, geo: Geometry, group: int, like: str | None = None) -> str:
    """The adjoint of ``Conv(·, w)`` with geometry ``geo`` applied to ``dy``: one ConvTranspose.

    The end pad is what makes the last window end exactly at the input's end; when the
    input has cells no window reads, the end pad is 0 and ``output_padding`` adds them.
    On a symbolic axis with stride 1 that end pad is the forward's; with stride s > 1
    the cells left over are known only at run time, so the ConvTranspose takes end pad 0
    and ``output_padding`` s - 1 (at least the input's size) and is cropped to
    ``Shape(like)`` (default: the node's input 0).
    """
    end, extra = [], []
    crop = False
    for d, k, s, dil, b, o, e_fwd in zip(geo.size, geo.kernel, geo.strides, geo.dilations, geo.begin, geo.out, geo.end):
        if isinstance(d, int) and isinstance(o, int):
            e = (o - 1) * s + (k - 1) * dil + 1 - d - b
            end.append(max(e, 0))
            extra.append(max(-e, 0))
        elif s == 1:
            end.append(e_fwd)
            extra.append(0)
        else:
            end.append(0)
            extra.append(s - 1)
            crop = True
    attrs: dict[str, Any] = {"strides": geo.strides, "dilations": geo.dilations, "pads": geo.begin + end}
    if any(extra):
        attrs["output_padding"] = extra
    if group != 1:
        attrs["group"] = group
    dx = ctx.op.ConvTranspose(dy, w, **attrs)
    if crop:
        spatial = ctx.op.Shape(like or ctx.input(0), start=2)
        dx = ctx.op.Slice(dx, ctx.ints([0] * geo.nd), spatial, ctx.ints(list(range(2, 2 + geo.nd))))
    return dx


def correlate(
    ctx: GradContext,
    inp: str,
    wt: str,
    *,
    size: list[Any],
    wsize: list[Any],
    out: list[Any],
    strides: list[int],
    dilations: list[int],
    begin: list[int],
    group: int,
    end: list[int] | None = None,
    crop: bool = False,
) -> str:
    """``Conv(inp, wt)`` whose spatial output is exactly ``out`` for begin pads ``begin``.

    The end pads follow from ``out``, or are given as ``end`` where ``size`` or ``wsize``
    are symbolic: the exact pads, or with ``crop`` pads large enough and the output then
    cropped to ``out``. Negative pads become a Slice of ``inp``.
    """
    nd = len(size)
    if end is None:
        end = [
            (o - 1) * s + (k - 1) * d + 1 - n - b
            for o, s, k, d, n, b in zip(out, strides, wsize, dilations, size, begin)
        ]
    if any(b < 0 for b in begin) or any(e < 0 for e in end):
        starts = [max(-b, 0) for b in begin]
        # an end cut of c cells is the index -c, whatever the size (INT64_MAX: no cut)
        ends = [n - max(-e, 0) if isinstance(n, int) else (e if e < 0 else _INT64_MAX) for n, e in zip(size, end)]
        inp = ctx.op.Slice(inp, ctx.ints(starts), ctx.ints(ends), ctx.ints(list(range(2, 2 + nd))))
        begin = [max(b, 0) for b in begin]
        end = [max(e, 0) for e in end]
    attrs: dict[str, Any] = {"strides": strides, "dilations": dilations, "pads": begin + end}
    if group != 1:
        attrs["group"] = group
    result = ctx.op.Conv(inp, wt, **attrs)
    if crop:
        result = ctx.op.Slice(result, ctx.ints([0] * nd), ctx.ints(out), ctx.ints(list(range(2, 2 + nd))))
    return result


_INT64_MAX = (1 << 63) - 1


def _swap01(ctx: GradContext, t: str, rank: int, shape: Sequence[Any] | None = None) -> str:
    """``t`` with its first two axes swapped; a Reshape where one of them is 1 and ``shape``
    (``t``'s) is static: the same cells in the same order, no copy."""
    if shape is not None and 1 in shape[:2] and all(isinstance(d, int) for d in shape):
        return ctx.op.Reshape(t, ctx.ints([shape[1], shape[0], *shape[2:]]))
    return ctx.op.Transpose(t, perm=[1, 0, *range(2, rank)])


def _batch_of_one(ctx: GradContext, name: str) -> bool:
    shape = ctx.shape(name)
    return shape is not None and len(shape) > 0 and shape[0] == 1


def _group_major(ctx: GradContext, t: str, channels: int, group: int, spatial: list[Any]) -> str:
    """``(N, g*Cg, S...)`` -> ``(Cg, g*N, S...)``: channels per group become the batch.

    Symbolic spatial dims travel flattened into one axis and come back from ``Shape(t)``.
    """
    rank = 2 + len(spatial)
    if group == 1:
        return _swap01(ctx, t, rank, ctx.shape(t))
    per = channels // group
    if per == 1 and _batch_of_one(ctx, t):  # (1, g, S...) is already (1, g*1, S...)
        return t
    static = all(isinstance(d, int) for d in spatial)

    def target(lead: list[int]) -> str:
        if static:
            return ctx.ints([*lead, *spatial])
        return ctx.op.Concat(ctx.ints(lead), ctx.op.Shape(t, start=2), axis=0)

    if per == 1:
        return ctx.op.Reshape(_swap01(ctx, t, rank), target([1, -1]))
    if static:
        split = ctx.op.Reshape(t, ctx.ints([0, group, per, *spatial]))
        moved = ctx.op.Transpose(split, perm=[2, 1, 0, *range(3, rank + 1)])
    else:
        batch = (ctx.shape(ctx.input(0)) or [None])[0]  # t's (X's or dY's)
        split = reshape_fill(ctx, t, [0, group, per, -1], [batch, channels, *spatial])
        moved = ctx.op.Transpose(split, perm=[2, 1, 0, 3])
    return ctx.op.Reshape(moved, target([per, -1]))


def _bias_grad(ctx: GradContext, dy: str, rank: int) -> str:
    return ctx.op.ReduceSum(dy, ctx.ints([0, *range(2, rank)]), keepdims=0)


#: largest kernel window (cells) for which Conv's dW goes through im2col (the columns
#: are that many times the input)
_IM2COL_MAX_WINDOW = 25


def _im2col_fits(group: int, kernel: list[int], pads: list[int]) -> bool:
    """Whether dW goes through im2col columns: ungrouped, a window of at most
    ``_IM2COL_MAX_WINDOW`` cells, and pads that are not negative (ConvTranspose's columns
    of dY: an ``output_padding`` past the end pad would be a crop)."""
    return group == 1 and math.prod(kernel) <= _IM2COL_MAX_WINDOW and min(pads, default=0) >= 0


def _im2col(ctx: GradContext, x: str, channels: int, geo: Geometry) -> str:
    """The columns ``cols[n, c*K + j, o] = Xpad[n, c, o*s + j*d]`` (K = prod(k)) as (N, C*K, O...).

    A one-hot depthwise Conv E (C*K, 1, k...) with the forward's geometry (E[c*K + j, 0, cell j]
    = 1); a 1x1 window with stride 1 and no pads reads every cell once: the columns are X.
    """
    window = math.prod(geo.kernel)
    if window == 1 and all(s == 1 for s in geo.strides) and not any(geo.begin + geo.end):
        return x
    eye = np.zeros((channels * window, 1, window), dtype=np.float64)
    eye[np.arange(channels * window), 0, np.tile(np.arange(window), channels)] = 1.0
    eye = eye.reshape((channels * window, 1, *geo.kernel))
    return cast(
        str,
        ctx.op.Conv(
            x,
            ctx.const(eye, like=x),
            strides=geo.strides,
            dilations=geo.dilations,
            pads=geo.begin + geo.end,
            group=channels,
        ),
    )


def _weight_grad_im2col(ctx: GradContext, x: str, dy: str, w_shape: tuple[Any, ...], geo: Geometry) -> str:
    """dW of an ungrouped Conv as matrix products over im2col columns (``_im2col``):

    dW = Reshape(sum_n dY[n] (M, O) @ cols[n]^T (O, C*K), (M, C, k...)).
    On a batch of one that is one ``Gemm(Flatten(dY), Flatten(cols), transB=1)``: no
    per-sample product to sum, no Transpose (onnxruntime's ReduceSum over a batch axis of
    one is a slow copy: 0.3-0.5x the time on ResNet-18's deep layers, benchmarks/RESULTS.md).
    Otherwise a batched MatMul cols[n] @ dY[n]^T, summed over n and transposed once:
    onnxruntime runs this 2x faster than the correlation ``Conv`` over transposed X and dY,
    whose kernel is as large as the image. (One ``Einsum("nko,nmo->mk")`` instead of the
    Reshapes, Transpose, MatMul and ReduceSum emits 4 fewer nodes but runs ~1.5x slower.)
    """
    channels = w_shape[1]
    cols = _im2col(ctx, x, channels, geo)
    # the batch, from whichever operand has a known shape (ConvTranspose's x is a gradient)
    known = ctx.shape(x) or ctx.shape(dy)
    batch = [known[0] if known else None]
    if batch[0] == 1:
        product = ctx.op.Gemm(ctx.op.Flatten(dy, axis=2), ctx.op.Flatten(cols, axis=2), transB=1)
        return ctx.op.Reshape(product, ctx.ints(list(w_shape)))
    # (N, C*K, O...) and (N, M, o...) with their spatial axes flattened: with a known batch,
    # one shape constant [0, 0, -1] for both and every Conv of the graph (0 keeps an axis);
    # a batch that may be 0 takes the product of the output cells (merge_axes)
    cols = merge_axes(ctx, cols, 2, shape=batch + [channels * math.prod(geo.kernel)] + list(geo.out))
    # cols[n] @ dY[n]^T, transposed once after the sum: ~12% faster in onnxruntime than
    # dY[n] @ cols[n]^T (the per-sample products' long axis is the contraction either way)
    dy_t = ctx.op.Transpose(merge_axes(ctx, dy, 2, shape=batch + [w_shape[0]] + list(geo.out)), perm=[0, 2, 1])
    per_sample = ctx.op.MatMul(cols, dy_t)
    summed = ctx.op.Transpose(ctx.op.ReduceSum(per_sample, ctx.ints([0]), keepdims=0), perm=[1, 0])
    return ctx.op.Reshape(summed, ctx.ints(list(w_shape)))


@rule("", "Conv")
def conv_grad(ctx: GradContext, dy: str) -> Grads:
    """Y = Conv(X, W) + B with W (M, C/g, k...):

    dX = ConvTranspose(dY, W) (same strides, dilations, groups, pads);
    dW = Transpose(Conv(X as (C/g, g*N, D...), dY as (M, N, o...), group=g,
         strides=dilations, dilations=strides)) ;  dB = ReduceSum(dY, [0, 2, ...]).
    Ungrouped convolutions with windows up to 25 cells take dW through im2col instead
    (``_weight_grad_im2col``: one Gemm on a batch of one).
    """
    x, w = ctx.input(0), ctx.input(1)
    w_shape = _spatial(ctx, w, "weight")
    group = int(ctx.attr("group", 1))
    padded = same_padded(ctx, x, list(w_shape[2:]))
    if padded is None:
        geo = conv_geometry(ctx, list(w_shape[2:]))
    else:  # the Conv is a VALID one of X padded at run time
        x, begin, spatial, _ = padded
        geo = valid_geometry(ctx, list(w_shape[2:]))
    rank = geo.nd + 2
    dx = None
    if ctx.needs_grad(0):
        dx = transpose_into(ctx, dy, w, geo, group, like=x)
        if padded is not None:  # X's cells out of the padded X
            dx = ctx.op.Slice(dx, begin, ctx.op.Add(begin, spatial), ctx.ints(list(range(2, rank))))
    dw = None
    if ctx.needs_grad(1) and _im2col_fits(group, geo.kernel, geo.begin + geo.end):
        dw = _weight_grad_im2col(ctx, x, dy, w_shape, geo)
    elif ctx.needs_grad(1):
        channels = w_shape[1] * group
        corr = correlate(
            ctx,
            _group_major(ctx, x, channels, group, geo.size),
            _swap01(ctx, dy, rank, ctx.shape(ctx.output(0))),
            size=geo.size,
            wsize=geo.out,
            out=geo.kernel,
            strides=geo.dilations,
            dilations=geo.strides,
            begin=geo.begin,
            group=group,
            # symbolic sizes: the forward's end pads reach every kernel cell; crop to the kernel
            end=None if geo.is_static else geo.end,
            crop=not geo.is_static,
        )
        dw = _swap01(ctx, corr, rank, (w_shape[1], w_shape[0], *w_shape[2:]))
    db = _bias_grad(ctx, dy, rank) if ctx.needs_grad(2) else None
    return (dx, dw, db)[: len(ctx.inputs)]


def valid_geometry(ctx: GradContext, kernel: list[int]) -> Geometry:
    """The geometry of the node's window without pads, on input dims known at run time."""
    nd = len(kernel)
    strides = _int_list(ctx, "strides", [1] * nd)
    dilations = _int_list(ctx, "dilations", [1] * nd)
    return window([None] * nd, kernel, strides, dilations, None, "VALID")


def same_padded(ctx: GradContext, x: str, kernel: list[int]) -> tuple[str, str, str, str] | None:
    """``auto_pad=SAME_*`` with strides > 1 on a symbolic axis (``ops.runtime_pad_axes``):
    ``(Pad(X, pads), begin, Shape(X)[2:], pads)`` with the pads computed at run time, else None.

    Per axis, out = ceil(n / s), total = max((out - 1) * s + (k - 1) * d + 1 - n, 0),
    begin = total // 2 (SAME_UPPER) or total - total // 2 (SAME_LOWER), end = total - begin.
    """
    auto_pad = str(ctx.attr("auto_pad", "NOTSET"))
    nd = len(kernel)
    strides = _int_list(ctx, "strides", [1] * nd)
    if not runtime_pad_axes(_input_dims(ctx, x, nd), strides, auto_pad):
        return None
    dilations = _int_list(ctx, "dilations", [1] * nd)
    n = ctx.op.Shape(x, start=2)
    s = ctx.ints(strides)
    out = ctx.op.Div(ctx.op.Add(n, ctx.ints([st - 1 for st in strides])), s)
    span = ctx.ints([(k - 1) * d + 1 for k, d in zip(kernel, dilations)])
    last = ctx.op.Mul(ctx.op.Sub(out, ctx.ints([1] * nd)), s)  # where the last window starts
    total = ctx.op.Max(ctx.op.Sub(ctx.op.Add(last, span), n), ctx.ints([0]))
    half = ctx.op.Div(total, ctx.ints([2] * nd))
    begin = half if auto_pad == "SAME_UPPER" else ctx.op.Sub(total, half)
    zeros = ctx.ints([0, 0])
    pads = ctx.op.Concat(zeros, begin, zeros, ctx.op.Sub(total, begin), axis=0)
    return ctx.op.Pad(x, pads), begin, n, pads


def _transpose_window(ctx: GradContext, size: list[Any], kernel: list[int]) -> TransposeWindow:
    """ConvTranspose's geometry (``ops.transpose_window``; None dims where ``size`` is unknown).

    The pass has upgraded older nodes to the opset-11+ split of an odd imposed padding.
    """
    nd = len(size)
    output_shape = ctx.attr("output_shape")
    try:
        return transpose_window(
            size,
            kernel,
            _int_list(ctx, "strides", [1] * nd),
            _int_list(ctx, "dilations", [1] * nd),
            _int_list(ctx, "pads", [0] * 2 * nd),
            str(ctx.attr("auto_pad", "NOTSET")),
            _int_list(ctx, "output_padding", [0] * nd),
            [int(v) for v in output_shape] if output_shape is not None else None,
        )
    except RunTimePads:
        raise ctx.error(
            f"output_shape={list(output_shape)} on an input with symbolic spatial dims "
            f"{size}: the pads depend on the input's size; give the input static spatial dims"
        ) from None


@rule("", "ConvTranspose")
def conv_transpose_grad(ctx: GradContext, dy: str) -> Grads:
    """Y = ConvTranspose(X, W) + B with W (C, M/g, k...), Y[i*s + k*d - pad] += X[i] W[k]:

    dX = Conv(dY, W) (same strides, dilations, groups, begin pads);
    dW = Transpose(Conv(dY as (M/g, g*N, O...), X as (C, N, D...), group=g,
         strides=dilations, dilations=strides));  dB = ReduceSum(dY, [0, 2, ...]).
    Ungrouped ones with windows up to 25 cells take dW through the im2col columns of dY
    instead (one Gemm on a batch of one): the correlation's kernel is as large as X, and
    both runtimes run it at a few GFLOP/s (DBNet's 2x2/2 head: 12.7 ms for 52 MFLOP).
    """
    x, w = ctx.input(0), ctx.input(1)
    w_shape = _spatial(ctx, w, "weight")
    group = int(ctx.attr("group", 1))
    kernel = list(w_shape[2:])
    nd = len(kernel)
    size = _input_dims(ctx, x, nd)
    rank = nd + 2
    tw = _transpose_window(ctx, size, kernel)
    strides, dilations, begin, out, end = tw.strides, tw.dilations, tw.begin, tw.out, tw.end
    # both correlations below end exactly e - output_padding past Y's last cell (Y's size
    # is (n - 1) * s + (k - 1) * d + 1 + output_padding - begin - e), whatever n
    corr_end = [e - p for e, p in zip(end, tw.output_padding)]
    dx = None
    if ctx.needs_grad(0):
        dx = correlate(
            ctx,
            dy,
            w,
            size=out,
            wsize=kernel,
            out=size,
            strides=strides,
            dilations=dilations,
            begin=begin,
            group=group,
            end=corr_end,
        )
    dw = None
    if ctx.needs_grad(1) and _im2col_fits(group, kernel, [*begin, *corr_end]):
        # dW[c, m, j] = sum_(n, i) X[n, c, i] dYpad[n, m, i*s + j*d]: the im2col of dY in dX's
        # geometry (its output is X's cells), against X as Conv's dW takes dY against its columns
        geo = Window(out, kernel, strides, dilations, begin, corr_end, size)
        dw = _weight_grad_im2col(ctx, dy, x, w_shape, geo)
    elif ctx.needs_grad(1):
        corr = correlate(
            ctx,
            _group_major(ctx, dy, w_shape[1] * group, group, out),
            _swap01(ctx, x, rank, ctx.shape(x)),
            size=out,
            wsize=size,
            out=kernel,
            strides=dilations,
            dilations=strides,
            begin=begin,
            group=group,
            end=corr_end,
        )
        dw = _swap01(ctx, corr, rank, (w_shape[1], w_shape[0], *w_shape[2:]))
    db = _bias_grad(ctx, dy, rank) if ctx.needs_grad(2) else None
    return (dx, dw, db)[: len(ctx.inputs)]


# -- forward rules ------------------------------------------------------------------------------
@jvp_rule("", "Conv", "ConvTranspose")
def conv_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """Y = Conv(X, W) + B is bilinear in (X, W) plus B: tY = Conv(tX, W) + Conv(X, tW) + tB.

    tB is the bias of the first of those convolutions (onnxruntime: 1.58 -> 1.34 ms for
    the 16x3x32x32 -> 16 channel 3x3 layer, numpy 4.2 -> 3.2 ms, against an Expand and an
    Add); one Conv over the concatenated channels [tX, X] * [W, tW] was measured too and
    is no faster (16x16x16x16 -> 32: 2.00 vs 1.85 ms in onnxruntime), so it is not used.
    Without tX and tW, tB is spread on the channel axis.
    """
    x, w = ctx.input(0), ctx.input(1)
    tb = ts[2] if len(ts) > 2 else None
    terms = []
    if ts[0] is not None:
        terms.append(cast(str, ctx.emit_like([ts[0], w] + ([tb] if tb is not None else []))))
        tb = None
    if len(ts) > 1 and ts[1] is not None:
        terms.append(cast(str, ctx.emit_like([x, ts[1]] + ([tb] if tb is not None else []))))
        tb = None
    if tb is not None:
        rank = ctx.require_rank(ctx.output(0))
        column = ctx.op.Reshape(tb, ctx.ints([1, -1] + [1] * (rank - 2)))
        terms.append(ctx.op.Expand(column, ctx.shape_of(ctx.output(0))))
    return ctx.add(*terms)


# -- what these rules refuse (the README's table) ----------------------------------------------
refuses(
    "",
    "Conv",
    "ConvTranspose",
    "AveragePool",
    what="unknown channel or spatial dims (the batch may be symbolic)",
    why="the transposed convolution's pads and output padding are chosen from them",
)
