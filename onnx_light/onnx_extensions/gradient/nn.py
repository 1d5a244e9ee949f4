"""Rules for convolutions: Conv and ConvTranspose (1-D/2-D/3-D, groups, strides, dilations, pads).

Both ops are linear in each operand, so each gradient is one more convolution:

* Conv ``dX`` is a ConvTranspose of ``dy`` with the same weights (its pads and
  ``output_padding`` chosen so the result is exactly ``X``'s shape), and ConvTranspose
  ``dX`` is a Conv of ``dy`` with the same weights;
* ``dW`` correlates the input with ``dy``: a Conv whose batch is the channels per group
  and whose channels are (group, sample), strides and dilations swapped; or, for
  ungrouped convolutions with small windows, im2col (a one-hot depthwise Conv) and a
  batched MatMul, which onnxruntime runs faster;
* ``dB = ReduceSum(dy, [0, 2, 3, ...])``.

Spatial dimensions must be known when the pass runs (the batch may be symbolic).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from ...onnx_core.gradient import GradContext, Grads, TangentContext, Tangents
from ._table import jvp_rule, rule

__all__ = ["Geometry", "conv_geometry", "transpose_into", "correlate"]


class Geometry:
    """Resolved window geometry along each spatial axis.

    Attributes:
        size: input spatial dims. kernel: kernel dims. out: output spatial dims.
        strides, dilations: per axis. begin, end: pads.
    """

    __slots__ = ("size", "kernel", "strides", "dilations", "begin", "end", "out")

    def __init__(
        self,
        size: list[int],
        kernel: list[int],
        strides: list[int],
        dilations: list[int],
        begin: list[int],
        end: list[int],
        out: list[int],
    ) -> None:
        self.size, self.kernel, self.strides, self.dilations = size, kernel, strides, dilations
        self.begin, self.end, self.out = begin, end, out

    @property
    def nd(self) -> int:
        """The number of spatial axes."""
        return len(self.size)


def _spatial(ctx: GradContext, name: str, what: str) -> tuple[Any, ...]:
    shape = ctx.shape(name)
    if shape is None or len(shape) < 3 or not all(isinstance(d, int) for d in shape[1:]):
        raise ctx.error(
            f"needs the channel and spatial dims of {what} {name!r} (got {shape}); "
            "give the graph input a static shape (the batch may stay symbolic)"
        )
    return tuple(shape)


def _int_list(ctx: GradContext, name: str, default: list[int]) -> list[int]:
    value = ctx.attr(name)
    return [int(v) for v in value] if value is not None else list(default)


def _pads(
    ctx: GradContext, size: list[int], kernel: list[int], strides: list[int], dilations: list[int]
) -> tuple[list[int], list[int]]:
    """Begin and end pads of a Conv / pooling window after resolving ``auto_pad``."""
    nd = len(size)
    auto_pad = str(ctx.attr("auto_pad", "NOTSET"))
    if auto_pad == "VALID":
        return [0] * nd, [0] * nd
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begin, end = [], []
        for d, k, s, dil in zip(size, kernel, strides, dilations):
            total = max(0, (-(-d // s) - 1) * s + (k - 1) * dil + 1 - d)
            begin.append(total // 2 if auto_pad == "SAME_UPPER" else total - total // 2)
            end.append(total - begin[-1])
        return begin, end
    pads = _int_list(ctx, "pads", [0] * 2 * nd)
    return pads[:nd], pads[nd:]


def conv_geometry(ctx: GradContext, kernel: list[int], ceil_mode: bool = False) -> Geometry:
    """The geometry of a Conv or pooling node (input 0 must have static spatial dims).

    The output dims are computed here, as onnxruntime does: with ``ceil_mode`` a last
    window that would start in the end padding is dropped.
    """
    x_shape = _spatial(ctx, ctx.input(0), "input")
    size = list(x_shape[2:])
    nd = len(size)
    strides = _int_list(ctx, "strides", [1] * nd)
    dilations = _int_list(ctx, "dilations", [1] * nd)
    begin, end = _pads(ctx, size, kernel, strides, dilations)
    out = []
    for n, k, s, d, b, e in zip(size, kernel, strides, dilations, begin, end):
        room = n + b + e - (k - 1) * d - 1
        o = (-(-room // s) if ceil_mode else room // s) + 1
        out.append(o - 1 if ceil_mode and (o - 1) * s >= n + b else o)
    return Geometry(size, kernel, strides, dilations, begin, end, out)


def transpose_into(ctx: GradContext, dy: str, w: str, geo: Geometry, group: int) -> str:
    """The adjoint of ``Conv(·, w)`` with geometry ``geo`` applied to ``dy``: one ConvTranspose.

    The end pad is what makes the last window end exactly at the input's end; when the
    input has cells no window reads, the end pad is 0 and ``output_padding`` adds them.
    """
    end, extra = [], []
    for d, k, s, dil, b, o in zip(geo.size, geo.kernel, geo.strides, geo.dilations, geo.begin, geo.out):
        e = (o - 1) * s + (k - 1) * dil + 1 - d - b
        end.append(max(e, 0))
        extra.append(max(-e, 0))
    attrs: dict[str, Any] = {"strides": geo.strides, "dilations": geo.dilations, "pads": geo.begin + end}
    if any(extra):
        attrs["output_padding"] = extra
    if group != 1:
        attrs["group"] = group
    return ctx.op.ConvTranspose(dy, w, **attrs)


def correlate(
    ctx: GradContext,
    inp: str,
    wt: str,
    *,
    size: list[int],
    wsize: list[int],
    out: list[int],
    strides: list[int],
    dilations: list[int],
    begin: list[int],
    group: int,
) -> str:
    """``Conv(inp, wt)`` whose spatial output is exactly ``out`` for begin pads ``begin``.

    The end pads follow from ``out``; negative pads become a Slice of ``inp``.
    """
    end = [
        (o - 1) * s + (k - 1) * d + 1 - n - b for o, s, k, d, n, b in zip(out, strides, wsize, dilations, size, begin)
    ]
    if any(b < 0 for b in begin) or any(e < 0 for e in end):
        nd = len(size)
        starts = [max(-b, 0) for b in begin]
        ends = [n - max(-e, 0) for n, e in zip(size, end)]
        inp = ctx.op.Slice(inp, ctx.ints(starts), ctx.ints(ends), ctx.ints(list(range(2, 2 + nd))))
        begin = [max(b, 0) for b in begin]
        end = [max(e, 0) for e in end]
    attrs: dict[str, Any] = {"strides": strides, "dilations": dilations, "pads": begin + end}
    if group != 1:
        attrs["group"] = group
    return ctx.op.Conv(inp, wt, **attrs)


def _swap01(ctx: GradContext, t: str, rank: int) -> str:
    return ctx.op.Transpose(t, perm=[1, 0, *range(2, rank)])


def _group_major(ctx: GradContext, t: str, channels: int, group: int, spatial: list[int]) -> str:
    """``(N, g*Cg, S...)`` -> ``(Cg, g*N, S...)``: channels per group become the batch."""
    rank = 2 + len(spatial)
    if group == 1:
        return _swap01(ctx, t, rank)
    per = channels // group
    if per == 1:
        return ctx.op.Reshape(_swap01(ctx, t, rank), ctx.ints([1, -1, *spatial]))
    split = ctx.op.Reshape(t, ctx.ints([0, group, per, *spatial]))
    moved = ctx.op.Transpose(split, perm=[2, 1, 0, *range(3, rank + 1)])
    return ctx.op.Reshape(moved, ctx.ints([per, -1, *spatial]))


def _bias_grad(ctx: GradContext, dy: str, rank: int) -> str:
    return ctx.op.ReduceSum(dy, ctx.ints([0, *range(2, rank)]), keepdims=0)


#: largest kernel window (cells) for which Conv's dW goes through im2col (the columns
#: are that many times the input)
_IM2COL_MAX_WINDOW = 25


def _weight_grad_im2col(ctx: GradContext, x: str, dy: str, w_shape: tuple[Any, ...], geo: Geometry) -> str:
    """dW of an ungrouped Conv as one batched matrix product over im2col columns.

    cols = Conv(X, E, group=C) with the forward's geometry and E (C*K, 1, k...) one-hot
    (E[c*K + j, 0, cell j] = 1, K = prod(k)), so cols[n, c*K + j, o] = Xpad[n, c, o*s + j*d];
    dW = Reshape(Transpose(ReduceSum_n(cols[n] (C*K, O) @ dY[n]^T (O, M))), (M, C, k...)).
    onnxruntime runs this 2x faster than the correlation ``Conv`` over transposed X and dY,
    whose kernel is as large as the image. (One ``Einsum("nko,nmo->mk")`` instead of the
    Reshapes, Transpose, MatMul and ReduceSum emits 4 fewer nodes but runs ~1.5x slower.)
    """
    channels, window = w_shape[1], int(np.prod(geo.kernel))
    eye = np.zeros((channels * window, 1, window), dtype=np.float64)
    eye[np.arange(channels * window), 0, np.tile(np.arange(window), channels)] = 1.0
    eye = eye.reshape((channels * window, 1, *geo.kernel))
    cols = ctx.op.Conv(
        x,
        ctx.const(eye, like=x),
        strides=geo.strides,
        dilations=geo.dilations,
        pads=geo.begin + geo.end,
        group=channels,
    )
    cols = ctx.op.Reshape(cols, ctx.ints([0, channels * window, -1]))
    # cols[n] @ dY[n]^T, transposed once after the sum: ~12% faster in onnxruntime than
    # dY[n] @ cols[n]^T (the per-sample products' long axis is the contraction either way)
    dy_t = ctx.op.Transpose(ctx.op.Reshape(dy, ctx.ints([0, w_shape[0], -1])), perm=[0, 2, 1])
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
    (``_weight_grad_im2col``).
    """
    x, w = ctx.input(0), ctx.input(1)
    w_shape = _spatial(ctx, w, "weight")
    group = int(ctx.attr("group", 1))
    geo = conv_geometry(ctx, list(w_shape[2:]))
    rank = geo.nd + 2
    dx = transpose_into(ctx, dy, w, geo, group) if ctx.needs_grad(0) else None
    dw = None
    if ctx.needs_grad(1) and group == 1 and int(np.prod(geo.kernel)) <= _IM2COL_MAX_WINDOW:
        dw = _weight_grad_im2col(ctx, x, dy, w_shape, geo)
    elif ctx.needs_grad(1):
        channels = w_shape[1] * group
        corr = correlate(
            ctx,
            _group_major(ctx, x, channels, group, geo.size),
            _swap01(ctx, dy, rank),
            size=geo.size,
            wsize=geo.out,
            out=geo.kernel,
            strides=geo.dilations,
            dilations=geo.strides,
            begin=geo.begin,
            group=group,
        )
        dw = _swap01(ctx, corr, rank)
    db = _bias_grad(ctx, dy, rank) if ctx.needs_grad(2) else None
    return (dx, dw, db)[: len(ctx.inputs)]


def _transpose_begin(
    ctx: GradContext, size: list[int], kernel: list[int], strides: list[int], dilations: list[int]
) -> tuple[list[int], list[int]]:
    """ConvTranspose's begin pads and output spatial dims, per the opset-11+ rules."""
    nd = len(size)
    extra = _int_list(ctx, "output_padding", [0] * nd)
    full = [(n - 1) * s + (k - 1) * d + 1 + e for n, s, k, d, e in zip(size, strides, kernel, dilations, extra)]
    auto_pad = str(ctx.attr("auto_pad", "NOTSET"))
    output_shape = ctx.attr("output_shape")
    if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        if output_shape is not None:
            out = [int(v) for v in output_shape][-nd:]
        else:
            out = [n * s for n, s in zip(size, strides)]
        begin = []
        for f, t in zip(full, out):
            total = f - t
            begin.append(total // 2 if auto_pad == "SAME_UPPER" else total - total // 2)
        return begin, out
    if auto_pad == "VALID":
        return [0] * nd, full
    pads = _int_list(ctx, "pads", [0] * 2 * nd)
    return pads[:nd], [f - pads[i] - pads[i + nd] for i, f in enumerate(full)]


@rule("", "ConvTranspose")
def conv_transpose_grad(ctx: GradContext, dy: str) -> Grads:
    """Y = ConvTranspose(X, W) + B with W (C, M/g, k...), Y[i*s + k*d - pad] += X[i] W[k]:

    dX = Conv(dY, W) (same strides, dilations, groups, begin pads);
    dW = Transpose(Conv(dY as (M/g, g*N, O...), X as (C, N, D...), group=g,
         strides=dilations, dilations=strides));  dB = ReduceSum(dY, [0, 2, ...]).
    """
    x, w = ctx.input(0), ctx.input(1)
    x_shape = _spatial(ctx, x, "input")
    w_shape = _spatial(ctx, w, "weight")
    group = int(ctx.attr("group", 1))
    size, kernel = list(x_shape[2:]), list(w_shape[2:])
    nd = len(size)
    rank = nd + 2
    strides = _int_list(ctx, "strides", [1] * nd)
    dilations = _int_list(ctx, "dilations", [1] * nd)
    begin, out = _transpose_begin(ctx, size, kernel, strides, dilations)
    dx = None
    if ctx.needs_grad(0):
        dx = correlate(
            ctx, dy, w, size=out, wsize=kernel, out=size, strides=strides, dilations=dilations, begin=begin, group=group
        )
    dw = None
    if ctx.needs_grad(1):
        corr = correlate(
            ctx,
            _group_major(ctx, dy, w_shape[1] * group, group, out),
            _swap01(ctx, x, rank),
            size=out,
            wsize=size,
            out=kernel,
            strides=dilations,
            dilations=strides,
            begin=begin,
            group=group,
        )
        dw = _swap01(ctx, corr, rank)
    db = _bias_grad(ctx, dy, rank) if ctx.needs_grad(2) else None
    return (dx, dw, db)[: len(ctx.inputs)]


# -- forward rules ------------------------------------------------------------------------------
@jvp_rule("", "Conv", "ConvTranspose")
def conv_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """Y = Conv(X, W) + B is bilinear in (X, W) plus B: tY = Conv(tX, W) + Conv(X, tW) + tB
    (tB on the channel axis)."""
    x, w = ctx.input(0), ctx.input(1)
    terms = []
    if ts[0] is not None:
        terms.append(cast(str, ctx.emit_like([ts[0], w])))
    if len(ts) > 1 and ts[1] is not None:
        terms.append(cast(str, ctx.emit_like([x, ts[1]])))
    tb = ts[2] if len(ts) > 2 else None
    if tb is not None:
        rank = ctx.require_rank(ctx.output(0))
        column = ctx.op.Reshape(tb, ctx.ints([1, -1] + [1] * (rank - 2)))
        terms.append(ctx.op.Expand(column, ctx.shape_of(ctx.output(0))))
    return ctx.add(*terms)
