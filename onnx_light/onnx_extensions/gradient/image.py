"""Rules for the image ops: Resize (and Upsample, upgraded to Resize), DepthToSpace,
SpaceToDepth, CenterCropPad and AffineGrid.

* Resize is separable: along each resized axis ``a`` every mode (nearest with any
  ``nearest_mode``, linear, cubic, antialias, ``exclude_outside``, any coordinate
  transformation) is a matrix ``M_a`` (out_a x in_a) applied to that axis, so
  ``dX = dY x_a M_a^T`` axis by axis (a MatMul each). ``M_a`` is the op's own answer on
  an identity: ``Resize(eye(in_a))`` along axis 0 with the node's attributes and that
  axis' roi, scale or size. The facts of the coordinate transform stay in the op; symbolic
  sizes stay symbolic (the identity is built with EyeLike from Shape(X) at run time).
  ``tf_crop_and_resize`` writes ``extrapolation_value`` outside the roi: a constant, whose
  tangent is zero. roi, scales and sizes carry no gradient. An axis that provably keeps its
  size at scale 1 (known scales, or sizes that repeat X's dim, symbolic ones included) is
  skipped; scales the pass cannot read (an initializer is a run-time input of the gradient
  function) give every axis its matrix: correct, slower on the batch and channel axes.
* DepthToSpace and SpaceToDepth permute elements: the gradient is the inverse
  permutation (DCR DepthToSpace and SpaceToDepth are each other's inverse; CRD is DCR
  after a channel permutation).
* CenterCropPad is self-adjoint in form: the transpose of cropping (start ``(in - out) // 2``)
  is padding to the input size with begin ``(in - out) // 2``, which is CenterCropPad again.
* AffineGrid is linear in theta: grid[n, p] = theta[n] @ [base(p), 1], so
  dtheta[n] = dgrid[n]^T @ [base, 1], base read from AffineGrid of the identity theta.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ...onnx_core.gradient import GradContext, Grads, TangentContext, Tangents, same_op
from ._table import jvp_rule, refuses, rule
from ._tensor_common import const_ints, reshape_fill

# -- Resize -------------------------------------------------------------------------------------
#: the attributes that shape the per-axis matrix (``axes`` and the policy are the node's own)
_RESIZE_MATRIX_ATTRS = (
    "antialias",
    "coordinate_transformation_mode",
    "cubic_coeff_a",
    "exclude_outside",
    "mode",
    "nearest_mode",
)


def _resize_axes(ctx: GradContext, rank: int) -> list[int]:
    """The axes the node resizes, non-negative (all of them without ``axes``)."""
    return [int(a) % rank for a in ctx.attr("axes", range(rank))]


def _scale_values(ctx: GradContext) -> list[float] | None:
    """The scales when the pass knows them, else None."""
    scales = ctx.input(2)
    value = ctx.value(scales) if scales else None
    return None if value is None or not np.size(value) else [float(v) for v in np.reshape(value, -1)]


def _uses_scales(ctx: GradContext) -> bool:
    """True when the node resizes by its scales (not by sizes; an empty scales tensor beside
    sizes is the older exporters' way of omitting it)."""
    return bool(ctx.input(2)) and (_scale_values(ctx) is not None or not ctx.input(3))


def _is_identity(ctx: GradContext, axis: int, j: int) -> bool:
    """True when axis ``axis`` (the ``j``-th resized one) is provably left as it is:
    the same size in and out at scale 1 (scale out/in with sizes), not cropped to a roi."""
    if str(ctx.attr("coordinate_transformation_mode", "half_pixel")) == "tf_crop_and_resize":
        return False
    x_shape, y_shape = ctx.shape(ctx.input(0)), ctx.shape(ctx.output(0))
    if x_shape is None or y_shape is None or x_shape[axis] is None or x_shape[axis] != y_shape[axis]:
        return False
    if not _uses_scales(ctx):
        return True
    scales = _scale_values(ctx)
    return scales is not None and scales[j] == 1.0


def _identity(ctx: GradContext, x: str, axis: int) -> str:
    """eye(n) in x's type, n = dim ``axis`` of x (EyeLike at run time when symbolic)."""
    shape = ctx.shape(x)
    n = shape[axis] if shape is not None else None
    if isinstance(n, int):
        return ctx.const(np.eye(n), like=x)
    dim = ctx.op.Shape(x, start=axis, end=axis + 1)
    square = ctx.op.Expand(ctx.const(np.zeros((1, 1)), like=x), ctx.op.Concat(dim, dim, axis=0))
    eye: str = ctx.op.EyeLike(square)
    return eye


def _resize_matrix(ctx: GradContext, axis: int, j: int, n_axes: int) -> str:
    """M (out x in) for the ``j``-th resized axis: the node's Resize of eye(in) along axis 0."""
    x, roi, scales, sizes = (ctx.input(i) for i in range(4))
    attrs = {k: ctx.attr(k) for k in _RESIZE_MATRIX_ATTRS if ctx.attr(k) is not None}
    inputs = ["", "", ""]
    if str(ctx.attr("coordinate_transformation_mode", "half_pixel")) == "tf_crop_and_resize" and roi:
        inputs[0] = ctx.op.Gather(roi, ctx.ints([j, j + n_axes]))
    if _uses_scales(ctx):
        inputs[1] = ctx.op.Gather(scales, ctx.ints([j]))
    else:
        inputs[2] = ctx.op.Gather(sizes, ctx.ints([j]))
    matrix: str = ctx.op.Resize(_identity(ctx, x, axis), *inputs, axes=[0], **attrs)
    return matrix


def _apply_on_axis(ctx: GradContext, g: str, matrix: str, axis: int, rank: int) -> str:
    """``g`` with axis ``axis`` (size out) contracted against ``matrix`` (out x in): the
    last axis as g @ M, the one before as M^T @ g, others moved last and back."""
    if axis == rank - 1:
        out: str = ctx.op.MatMul(g, matrix)
        return out
    if axis == rank - 2:
        out = ctx.op.MatMul(ctx.op.Transpose(matrix, perm=[1, 0]), g)
        return out
    perm = [d for d in range(rank) if d != axis] + [axis]
    moved = ctx.op.MatMul(ctx.op.Transpose(g, perm=perm), matrix)
    out = ctx.op.Transpose(moved, perm=list(np.argsort(perm)))
    return out


@rule("", "Resize", nondiff=(1, 2, 3))
def resize_grad(ctx: GradContext, dy: str) -> Grads:
    """dX = dY x_a M_a^T over the resized axes a, M_a = Resize(eye(in_a)) along axis 0
    (see the module docstring); no gradient for roi, scales and sizes."""
    x = ctx.input(0)
    rank = ctx.require_rank(x)
    if not _uses_scales(ctx) and str(ctx.attr("keep_aspect_ratio_policy", "stretch")) != "stretch":
        raise ctx.error(
            f"keep_aspect_ratio_policy={ctx.attr('keep_aspect_ratio_policy')!r} shares one scale among the axes, "
            "which the per-axis gradient cannot reproduce; give the resize as scales (or sizes with 'stretch')"
        )
    axes = _resize_axes(ctx, rank)
    g = dy
    for j, axis in enumerate(axes):
        if not _is_identity(ctx, axis, j):
            g = _apply_on_axis(ctx, g, _resize_matrix(ctx, axis, j, len(axes)), axis, rank)
    return (g, None, None, None)


@jvp_rule("", "Resize")
def resize_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """tY = Resize(tX) with extrapolation_value 0 (the value written outside the roi is a constant)."""
    if ts[0] is None:
        return None
    return ctx.emit_like([ts[0], *ctx.inputs[1:]], extrapolation_value=0.0)


# -- DepthToSpace / SpaceToDepth ------------------------------------------------------------------
def _crd_from_dcr(ctx: GradContext, s: str, block: int) -> str:
    """Channels (b*b, C') -> (C', b*b): S's DCR channel layout k * C' + c re-ordered as CRD's
    c * b*b + k. Reshapes copy the batch and the flattened spatial axis (symbolic dims pass)."""
    n, c, *spatial = ctx.shape(ctx.input(0)) or [None] * 4  # s is shaped like X
    hw = math.prod(spatial) if all(isinstance(d, int) for d in spatial) else None
    planes = ctx.op.Transpose(reshape_fill(ctx, s, [0, 0, -1], [n, c, *spatial]), perm=[0, 2, 1])  # (N, HW, C)
    split = reshape_fill(ctx, planes, [0, 0, block * block, -1], [n, hw, c])  # (N, HW, b*b, C')
    grouped = [n, hw, None if c is None else c // (block * block), block * block]
    regrouped = reshape_fill(ctx, ctx.op.Transpose(split, perm=[0, 1, 3, 2]), [0, 0, -1], grouped)
    return ctx.op.Reshape(ctx.op.Transpose(regrouped, perm=[0, 2, 1]), ctx.shape_of(s))


@rule("", "DepthToSpace")
def depth_to_space_grad(ctx: GradContext, dy: str) -> Grads:
    """A permutation: dX = SpaceToDepth(dY) (DCR's inverse); CRD = DCR after the channel
    permutation c * b*b + k -> k * C' + c, so its dX permutes SpaceToDepth(dY)'s channels back."""
    block = int(ctx.attr("blocksize"))
    s = ctx.op.SpaceToDepth(dy, blocksize=block)
    if str(ctx.attr("mode", "DCR")) == "CRD":
        s = _crd_from_dcr(ctx, s, block)
    return (s,)


@rule("", "SpaceToDepth")
def space_to_depth_grad(ctx: GradContext, dy: str) -> Grads:
    """A permutation: dX = DepthToSpace(dY, mode=DCR), its inverse."""
    return (ctx.op.DepthToSpace(dy, blocksize=int(ctx.attr("blocksize")), mode="DCR"),)


jvp_rule("", "DepthToSpace", "SpaceToDepth")(same_op(0))


# -- CenterCropPad --------------------------------------------------------------------------------
@rule("", "CenterCropPad", nondiff=(1,))
def center_crop_pad_grad(ctx: GradContext, dy: str) -> Grads:
    """dX = CenterCropPad(dY, X's sizes on the axes): a crop starting at (in - out) // 2 and a
    pad with begin (out - in) // 2 are each the other's transpose, with the same offsets."""
    x = ctx.input(0)
    rank = ctx.require_rank(x)
    axes = [int(a) % rank for a in ctx.attr("axes", range(rank))]
    sizes = ctx.op.Gather(ctx.shape_of(x), ctx.ints(axes))
    return (ctx.op.CenterCropPad(dy, sizes, axes=axes), None)


jvp_rule("", "CenterCropPad")(same_op(0))


# -- AffineGrid -----------------------------------------------------------------------------------
@rule("", "AffineGrid", nondiff=(1,))
def affine_grid_grad(ctx: GradContext, dy: str) -> Grads:
    """grid[n, p] = theta[n] @ B[p], B[p] = (x, y[, z], 1) the base grid, so
    dtheta[n] = dgrid[n]^T @ B (a (d, P) x (P, d + 1) MatMul per batch item).

    B's coordinates are AffineGrid of the identity theta at batch 1 (the op's own facts,
    align_corners included; sizes read at run time).
    """
    theta, size = ctx.input(0), ctx.input(1)
    nd = ctx.require_shape(theta)[1]
    if not isinstance(nd, int):
        raise ctx.error(f"needs the static spatial rank, dim 1 of {theta!r}; declare theta's shape")
    identity = ctx.const(np.eye(nd, nd + 1)[None], like=theta)
    one_size = ctx.op.Concat(ctx.ints([1]), ctx.op.Slice(size, ctx.ints([1]), ctx.ints([nd + 2])), axis=0)
    coords = ctx.op.Reshape(
        ctx.op.AffineGrid(identity, one_size, align_corners=int(ctx.attr("align_corners", 0))),
        ctx.ints([1, -1, nd]),
    )
    first = ctx.op.Slice(coords, ctx.ints([0]), ctx.ints([1]), ctx.ints([2]))
    ones = ctx.op.Add(ctx.op.Mul(first, ctx.const(0.0, like=theta)), ctx.const(1.0, like=theta))
    base = ctx.op.Concat(coords, ones, axis=2)  # (1, P, d + 1)
    flat = ctx.op.Transpose(reshape_fill(ctx, dy, [0, -1, nd], ctx.shape(ctx.output(0))), perm=[0, 2, 1])  # (N, d, P)
    return (ctx.op.MatMul(flat, base), None)


jvp_rule("", "AffineGrid")(same_op(0))


# -- RoiAlign -------------------------------------------------------------------------------------
def _refuse_roi_align(ctx: GradContext, boxes_need: bool) -> None:
    """RoiAlign differentiates in X in average mode only, with the reason otherwise."""
    if str(ctx.attr("mode", "avg")) != "avg":
        raise ctx.error(
            "mode='max' takes, per output cell, the largest of its bilinear samples: not differentiated "
            "(export the model with mode='avg', or register a rule)"
        )
    if boxes_need:
        raise ctx.error(
            f"the boxes {ctx.input(1)!r} reach y: RoiAlign is not differentiated in its rois (the "
            "sampling grid's derivative is not defined at the cells' borders); detach the boxes"
        )


@rule("", "RoiAlign", nondiff=(2,))
def roi_align_grad(ctx: GradContext, dy: str) -> Grads:
    """Average mode is linear in X: Y[r, c, p] = sum_q W[r, p, q] X[b(r), c, q], so
    dX[b, c, q] = sum over the rois r of image b of sum_p W[r, p, q] dY[r, c, p].

    W is the op's own answer on a basis: RoiAlign of the (1, H*W, H, W) image whose channel
    q is the unit image of pixel q, every roi on image 0, gives W[r, q, p] (R, H*W, oh, ow);
    memory grows as R * (H*W) * oh * ow. A ScatterND-add sums the rois into their images.
    """
    x, rois, batch = ctx.input(0), ctx.input(1), ctx.input(2)
    _refuse_roi_align(ctx, ctx.needs_grad(1))
    spatial = ctx.op.Shape(x, start=2)
    cells = ctx.op.ReduceProd(spatial, keepdims=1)
    square = ctx.op.Expand(ctx.const(np.zeros((1, 1)), like=x), ctx.op.Concat(cells, cells, axis=0))
    basis = ctx.op.Reshape(ctx.op.EyeLike(square), ctx.op.Concat(ctx.ints([1]), cells, spatial, axis=0))
    on_first = ctx.op.Mul(batch, ctx.const(0, like=batch))
    weights = ctx.op.RoiAlign(basis, rois, on_first, **ctx.attrs)  # (R, Q, oh, ow)
    rois_n = (ctx.shape(rois) or [None])[0]
    image_shape = ctx.shape(x) or [None] * 4
    q = math.prod(image_shape[2:]) if all(isinstance(d, int) for d in image_shape[2:]) else None
    out_cells = [int(ctx.attr("output_height", 1)), int(ctx.attr("output_width", 1))]
    flat_w = reshape_fill(ctx, weights, [0, 0, -1], [rois_n, q, *out_cells])  # (R, Q, P)
    flat_dy = reshape_fill(ctx, dy, [0, 0, -1], ctx.shape(ctx.output(0)))  # (R, C, P)
    per_roi = ctx.op.MatMul(flat_dy, ctx.op.Transpose(flat_w, perm=[0, 2, 1]))  # (R, C, Q)
    images = reshape_fill(ctx, ctx.zeros_like(x), [0, 0, -1], ctx.shape(x))
    index = ctx.op.Unsqueeze(ctx.op.Cast(batch, to=7), ctx.ints([1]))
    summed = ctx.op.ScatterND(images, index, per_roi, reduction="add")
    return (ctx.op.Reshape(summed, ctx.shape_of(x)), None, None)


@jvp_rule("", "RoiAlign")
def roi_align_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """tY = RoiAlign(tX) (linear in X, average mode)."""
    _refuse_roi_align(ctx, len(ts) > 1 and ts[1] is not None)
    return same_op(0)(ctx, ts)


# -- Col2Im ---------------------------------------------------------------------------------------
@rule("", "Col2Im", nondiff=(1, 2))
def col2im_grad(ctx: GradContext, dy: str) -> Grads:
    """Col2Im sums block columns into the image; its transpose extracts them (im2col):
    dX[n, c * K + k, l] = dY[n, c, pos(l) + dilation * offset(k)], K = prod(block_shape),
    i.e. a Conv of each (n, c) plane by the one-hot kernels eye(K) shaped (K, 1, *block)
    with the node's strides, dilations and pads."""
    x = ctx.input(0)
    image, block = const_ints(ctx, ctx.input(1)), const_ints(ctx, ctx.input(2))
    if image is None or block is None:
        raise ctx.error("needs image_shape and block_shape known when the pass runs; give them as constants")
    k = int(np.prod(block))
    planes = ctx.op.Reshape(dy, ctx.ints([-1, 1, *image]))
    nd = len(image)
    one_hot = ctx.const(np.eye(k).reshape(k, 1, *block), like=x)
    columns = ctx.op.Conv(  # (N * C, K, *blocks)
        planes,
        one_hot,
        kernel_shape=block,
        dilations=[int(v) for v in ctx.attr("dilations", [1] * nd)],
        pads=[int(v) for v in ctx.attr("pads", [0] * (2 * nd))],
        strides=[int(v) for v in ctx.attr("strides", [1] * nd)],
    )
    return (ctx.op.Reshape(columns, ctx.shape_of(x)), None, None)


jvp_rule("", "Col2Im")(same_op(0))

refuses(
    "",
    "Resize",
    what="(and Upsample, upgraded to Resize) `roi`, `scales`, `sizes` (declared: no gradient); "
    "`keep_aspect_ratio_policy` not_larger/not_smaller with sizes",
    why="one scale shared by the axes cannot be reproduced per axis",
)
refuses(
    "",
    "RoiAlign",
    what='`mode="max"`; the boxes (`rois`)',
    why="max picks one of the bilinear samples; the sampling grid's derivative is undefined at the cells' borders",
)
refuses(
    "",
    "Col2Im",
    what="`image_shape` / `block_shape` known only at run time",
    why="the im2col kernel is built from them",
)
refuses("", "AffineGrid", what="theta of unknown shape", why="the spatial rank comes from it")
