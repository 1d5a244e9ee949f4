"""DeformConv's rule, in X, the weights, the offsets, the mask and the bias (2-D).

Tap k of offset group g samples X at y = oy(k, p) + off_y[n, g, k, p] (x likewise), p the
output pixel, bilinearly with zero padding: the weight of pixel q is the tent
``T_y[q_y] T_x[q_x]`` with ``T(q) = relu(1 - |y - q|)`` (pixels outside the image are no q).
With ``A[n, g, (k, p), q] = T_y T_x`` over the image, the sampled columns are

    U[n, c, (k, p)] = sum_q A X[n, c, q],   S = mask * U,   Y = W_group @ S + B

so, with ``dS = W_group^T @ dY`` and ``dSm = mask * dS``:

* dX = dSm @ A, dW = sum_n dY @ S^T, dB = sum of dY, dmask = sum over the group's c of dS * U;
* doff_y = sum_q (dSm^T @ X) * T_y' T_x, ``T' = -sign(y - q) [|y - q| < 1]`` (x likewise).

The tables are dense over the image (N * G * K * P * H * W values): fine for the small
feature maps DeformConv heads see; X's spatial dims and the output's must be static.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...onnx_core.gradient import GradContext, Grads, TangentContext, Tangents
from ._table import jvp_rule, refuses, rule
from ._tensor_common import fill_shape, reshape_fill


@dataclass
class _Layout:
    n_groups: int  # offset groups G
    group: int
    channels: int
    height: int
    width: int
    taps: int
    cells: int  # P = oh * ow
    batch: Any  # N: an int, a symbolic name or None


def _layout(ctx: GradContext) -> tuple[_Layout, np.ndarray, np.ndarray]:
    """The node's sizes and the taps' sampling origins oy, ox (K, P) before the offsets."""
    x, w = ctx.input(0), ctx.input(1)
    shape, w_shape = ctx.require_shape(x), ctx.require_shape(w)
    if len(shape) != 4 or not all(isinstance(d, int) for d in (*shape[1:], *w_shape[2:])):
        raise ctx.error(f"needs a 2-D input with static channels and spatial dims (got X {list(shape)}); declare them")
    kh, kw = [int(k) for k in ctx.attr("kernel_shape", w_shape[2:])]
    sh, sw = [int(s) for s in ctx.attr("strides", [1, 1])]
    dh, dw = [int(d) for d in ctx.attr("dilations", [1, 1])]
    pt, pl, pb, pr = [int(p) for p in ctx.attr("pads", [0, 0, 0, 0])]
    c, h, wd = int(shape[1]), int(shape[2]), int(shape[3])
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    i, j = np.divmod(np.arange(kh * kw), kw)
    rows, cols = np.divmod(np.arange(oh * ow), ow)
    oy = (rows * sh - pt)[None, :] + (i * dh)[:, None]
    ox = (cols * sw - pl)[None, :] + (j * dw)[:, None]
    g = int(ctx.attr("offset_group", 1))
    return _Layout(g, int(ctx.attr("group", 1)), c, h, wd, kh * kw, oh * ow, shape[0]), oy, ox


class _Tables:
    """Tents and their derivatives along y and x, (N, G, K * P, size), and the image view."""

    def __init__(self, ctx: GradContext, offset: str) -> None:
        lay, oy, ox = _layout(ctx)
        x = ctx.input(0)
        self.lay = lay
        split = ctx.op.Reshape(offset, ctx.ints([0, lay.n_groups, lay.taps, 2, lay.cells]))
        self.t: list[str] = []
        self.d: list[str] = []
        for axis, (origin, size) in enumerate(((oy, lay.height), (ox, lay.width))):
            delta = ctx.op.Squeeze(ctx.op.Gather(split, ctx.ints([axis]), axis=3), ctx.ints([3]))  # (N, G, K, P)
            pos = ctx.op.Add(delta, ctx.const(origin.astype(np.float64), like=x))
            flat = ctx.op.Reshape(pos, ctx.ints([0, lay.n_groups, lay.taps * lay.cells, 1]))
            diff = ctx.op.Sub(flat, ctx.const(np.arange(size, dtype=np.float64), like=x))  # y - q
            near = ctx.op.Sub(ctx.const(1.0, like=x), ctx.op.Abs(diff))
            self.t.append(ctx.op.Relu(near))
            inside = ctx.op.CastLike(ctx.op.Greater(near, ctx.const(0.0, like=x)), x)
            self.d.append(ctx.op.Neg(ctx.op.Mul(ctx.op.Sign(diff), inside)))
        self.image = reshape_fill(ctx, x, [0, lay.n_groups, lay.channels // lay.n_groups, -1])

    def outer(self, ctx: GradContext, ty: str, tx: str) -> str:
        """ty (.., H) x tx (.., W) -> (N, G, K * P, H * W)."""
        prod = ctx.op.Mul(ctx.op.Unsqueeze(ty, ctx.ints([-1])), ctx.op.Unsqueeze(tx, ctx.ints([-2])))
        lay = self.lay
        return reshape_fill(
            ctx, prod, [0, 0, 0, -1], [lay.batch, lay.n_groups, lay.taps * lay.cells, lay.height, lay.width]
        )

    def reduce_outer(self, ctx: GradContext, z: str, ty: str, tx: str) -> str:
        """sum over (q_y, q_x) of z (N, G, K * P, H * W) times ty x tx, -> (N, G, K * P)."""
        lay = self.lay
        z4 = ctx.op.Reshape(z, ctx.ints([0, 0, 0, lay.height, lay.width]))
        along_x = ctx.op.ReduceSum(ctx.op.Mul(z4, ctx.op.Unsqueeze(tx, ctx.ints([-2]))), ctx.ints([4]), keepdims=0)
        return ctx.op.ReduceSum(ctx.op.Mul(along_x, ty), ctx.ints([3]), keepdims=0)


def _group_view(ctx: GradContext, lay: _Layout, v: str, per_group: int) -> str:
    """(N, G * a, ...) viewed as (N, group, a', P) with a' = per_group (channels x taps or outputs)."""
    return ctx.op.Reshape(v, ctx.ints([0, lay.group, per_group, lay.cells]))


@rule("", "DeformConv")
def deform_conv_grad(ctx: GradContext, dy: str) -> Grads:
    """See the module docstring for the formulas."""
    x, w, offset, b, mask = (ctx.input(i) for i in range(5))
    tab = _Tables(ctx, offset)
    lay = tab.lay
    ocg = int(ctx.require_shape(w)[0]) // lay.group
    icg_taps = lay.channels // lay.group * lay.taps
    a = tab.outer(ctx, tab.t[0], tab.t[1])  # (N, G, K * P, Q)
    unmasked = ctx.op.MatMul(tab.image, ctx.op.Transpose(a, perm=[0, 1, 3, 2]))  # (N, G, cg, K * P)
    mask_r = reshape_fill(ctx, mask, [0, lay.n_groups, 1, -1]) if mask else None
    s = unmasked if mask_r is None else ctx.op.Mul(unmasked, mask_r)
    dy_g = _group_view(ctx, lay, dy, ocg)  # (N, group, ocg, P)
    w_g = ctx.op.Reshape(w, ctx.ints([lay.group, ocg, icg_taps]))
    columns_shape = [lay.batch, lay.group, icg_taps, lay.cells]  # of the MatMul below
    to_columns = fill_shape(ctx, None, [0, lay.n_groups, -1, lay.taps * lay.cells], columns_shape)
    ds = ctx.op.Reshape(ctx.op.MatMul(ctx.op.Transpose(w_g, perm=[0, 2, 1]), dy_g), to_columns)  # (N, G, cg, K * P)
    dsm = ds if mask_r is None else ctx.op.Mul(ds, mask_r)
    grads: list[str | None] = [None] * 5
    if ctx.needs_grad(0):
        grads[0] = ctx.op.Reshape(ctx.op.MatMul(dsm, a), ctx.shape_of(x))
    if ctx.needs_grad(1):
        cols = _group_view(ctx, lay, s, icg_taps)
        dw = ctx.op.ReduceSum(ctx.op.MatMul(dy_g, ctx.op.Transpose(cols, perm=[0, 1, 3, 2])), ctx.ints([0]), keepdims=0)
        grads[1] = ctx.op.Reshape(dw, ctx.shape_of(w))
    if ctx.needs_grad(2):
        z = ctx.op.MatMul(ctx.op.Transpose(dsm, perm=[0, 1, 3, 2]), tab.image)  # (N, G, K * P, Q)
        parts = [tab.reduce_outer(ctx, z, tab.d[0], tab.t[1]), tab.reduce_outer(ctx, z, tab.t[0], tab.d[1])]
        per_tap = [ctx.op.Reshape(p, ctx.ints([0, lay.n_groups, lay.taps, 1, lay.cells])) for p in parts]
        grads[2] = ctx.op.Reshape(ctx.op.Concat(*per_tap, axis=3), ctx.shape_of(offset))
    if b and ctx.needs_grad(3):
        grads[3] = ctx.op.ReduceSum(dy, ctx.ints([0, 2, 3]), keepdims=0)
    if mask and ctx.needs_grad(4):
        dmask = ctx.op.ReduceSum(ctx.op.Mul(ds, unmasked), ctx.ints([2]), keepdims=0)
        grads[4] = ctx.op.Reshape(dmask, ctx.shape_of(mask))
    return tuple(grads)


@jvp_rule("", "DeformConv")
def deform_conv_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """Linear in X, in (W, B) and in the mask: the op on those tangents; the offsets'
    tangent goes through tS = mask * X @ (toff_y T_y' T_x + toff_x T_y T_x')^T, tY = W_group @ tS."""
    x, w, offset, b, mask = (ctx.input(i) for i in range(5))
    tx, tw, toff, tb, tmask = (list(ts) + [None] * 5)[:5]
    terms: list[str | None] = []

    def conv(*inputs: str) -> str:
        out = ctx.emit_like(list(inputs))
        return out if isinstance(out, str) else out[0]

    if tx is not None:
        terms.append(conv(tx, w, offset, "", mask))
    if tw is not None or tb is not None:
        terms.append(conv(x, tw or ctx.zeros_like(w), offset, tb or "", mask))
    if tmask is not None:
        terms.append(conv(x, w, offset, "", tmask))
    if toff is not None:
        tab = _Tables(ctx, offset)
        lay = tab.lay
        split = ctx.op.Reshape(toff, ctx.ints([0, lay.n_groups, lay.taps, 2, lay.cells]))
        mixed: str | None = None
        for axis, (ty, tx_) in enumerate(((tab.d[0], tab.t[1]), (tab.t[0], tab.d[1]))):
            picked = ctx.op.Gather(split, ctx.ints([axis]), axis=3)  # (N, G, K, 1, P)
            t_axis = reshape_fill(ctx, picked, [0, 0, -1, 1], [lay.batch, lay.n_groups, lay.taps, 1, lay.cells])
            term = ctx.op.Mul(tab.outer(ctx, ty, tx_), t_axis)
            mixed = term if mixed is None else ctx.op.Add(mixed, term)
        assert mixed is not None
        ts_ = ctx.op.MatMul(tab.image, ctx.op.Transpose(mixed, perm=[0, 1, 3, 2]))  # (N, G, cg, K * P)
        if mask:
            ts_ = ctx.op.Mul(ts_, reshape_fill(ctx, mask, [0, lay.n_groups, 1, -1]))
        ocg = int(ctx.require_shape(w)[0]) // lay.group
        icg_taps = lay.channels // lay.group * lay.taps
        w_g = ctx.op.Reshape(w, ctx.ints([lay.group, ocg, icg_taps]))
        out = ctx.op.MatMul(w_g, _group_view(ctx, lay, ts_, icg_taps))
        terms.append(ctx.op.Reshape(out, ctx.shape_of(ctx.output(0))))
    return ctx.add(*terms)


refuses(
    "",
    "DeformConv",
    what="inputs other than 2-D, symbolic channel or spatial dims",
    why="the dense tap tables and the sampling origins are built from them",
)
