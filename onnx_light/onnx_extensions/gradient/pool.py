"""Rules for pooling: MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool.

* MaxPool routes each ``dy`` to the input cell its window took the max from: the
  forward node's ``Indices`` output (flat over N*C*D..., first max on ties; computed by
  the re-emitted forward node when the source omitted it) drives one
  ScatterElements-add into a flat zero tensor.
* AveragePool is linear: ``dX = ConvTranspose(dy / count, ones)`` depthwise, the
  window counts fixed by the geometry.
* GlobalAveragePool spreads ``dy / prod(spatial)``; GlobalMaxPool scatters ``dy``
  to the (first) ArgMax of each plane.
"""

from __future__ import annotations

import numpy as np

from ._table import rule
from ._tensor_common import zeros_of_shape
from .nn import conv_geometry, transpose_into


def _flat_scatter(ctx, x: str, index: str, dy: str, column_major: bool) -> str:  # type: ignore[no-untyped-def]
    """Zeros shaped like ``x`` with ``dy`` added at the flat positions ``index``.

    Column-major indices (``storage_order=1``) are row-major positions in X viewed with
    its spatial axes reversed, (N, C, ..., H) -> (N, C, W, ..., H), so the scatter fills
    that view and one Transpose puts the spatial axes back.
    """
    flat = ctx.ints([-1])
    shape = ctx.shape(x)
    if shape is not None and all(isinstance(d, int) for d in shape):
        zeros = zeros_of_shape(ctx, ctx.ints([int(np.prod(shape))]), x)
    else:
        zeros = ctx.op.Reshape(ctx.zeros_like(x), flat)
    summed = ctx.op.ScatterElements(zeros, ctx.op.Reshape(index, flat), ctx.op.Reshape(dy, flat), reduction="add")
    if not column_major:
        return ctx.op.Reshape(summed, ctx.shape_of(x))
    rank = len(shape)  # conv_geometry has checked the channel and spatial dims
    view = ctx.op.Reshape(summed, ctx.ints([-1, shape[1], *reversed(shape[2:])]))
    return ctx.op.Transpose(view, perm=[0, 1, *range(rank - 1, 1, -1)])


@rule("", "MaxPool")
def max_pool_grad(ctx, dy):  # type: ignore[no-untyped-def]
    """dX[I[o]] += dY[o], with I the forward's Indices output (flat over the N*C*D...
    elements, first max on ties), asked of the forward node when the source omitted it.

    ``storage_order=1`` Indices count column-major within each (n, c) plane; see
    ``_flat_scatter``.
    """
    if dy is None:
        return (None,)
    column_major = int(ctx.attr("storage_order", 0)) == 1
    if column_major:
        conv_geometry(ctx, [int(k) for k in ctx.attr("kernel_shape")])  # static dims, or a clear error
    return (_flat_scatter(ctx, ctx.input(0), ctx.forward_output(1), dy, column_major),)


@rule("", "AveragePool")
def average_pool_grad(ctx, dy):  # type: ignore[no-untyped-def]
    """dX = ConvTranspose(dY / count, ones(C, 1, k...), group=C) with the forward's strides,
    dilations and pads; count(o) is the cells window o averages over.

    With ``count_include_pad`` and ``ceil_mode`` the count of a window that overhangs the
    padding is read from the forward op itself: 1/count = AveragePool(ones) / valid(o).
    """
    x = ctx.input(0)
    kernel = [int(k) for k in ctx.attr("kernel_shape")]
    geo = conv_geometry(ctx, kernel, bool(ctx.attr("ceil_mode", 0)))
    channels = ctx.shape(x)[1]
    # valid(o): window cells inside the unpadded input, per spatial axis then outer product
    valid = np.ones((), dtype=np.int64)
    overhang = False
    for i, (n, k, s, d, b, o) in enumerate(zip(geo.size, kernel, geo.strides, geo.dilations, geo.begin, geo.out)):
        pos = np.arange(o)[:, None] * s + np.arange(k)[None, :] * d - b
        valid = np.multiply.outer(valid, ((pos >= 0) & (pos < n)).sum(axis=1))
        overhang |= bool(pos[-1, -1] >= n + geo.end[i])
    valid = valid.reshape((1, 1, *geo.out))
    include_pad = bool(ctx.attr("count_include_pad", 0))
    if not include_pad:
        scaled = ctx.op.Mul(dy, ctx.const(1.0 / valid, like=x))
    elif not overhang:
        scaled = ctx.op.Mul(dy, ctx.const(1.0 / float(np.prod(kernel)), like=x))
    else:
        ones = ctx.const(np.ones((1, 1, *geo.size)), like=x)
        inverse_count = ctx.op.Div(ctx.op.AveragePool(ones, **ctx.attrs), ctx.const(valid, like=x))
        scaled = ctx.op.Mul(dy, inverse_count)
    weights = ctx.const(np.ones((channels, 1, *kernel)), like=x)
    return (transpose_into(ctx, scaled, weights, geo, channels),)


@rule("", "GlobalAveragePool")
def global_average_pool_grad(ctx, dy):  # type: ignore[no-untyped-def]
    """dX = Expand(dY / prod(spatial dims), shape(X))."""
    x = ctx.input(0)
    shape = ctx.shape(x)
    if shape is not None and all(isinstance(d, int) for d in shape[2:]):
        inv = ctx.const(1.0 / float(np.prod(shape[2:])), like=x)
    else:
        spatial = ctx.op.Slice(ctx.shape_of(x), ctx.ints([2]), ctx.ints([1 << 62]))
        inv = ctx.op.Reciprocal(ctx.op.CastLike(ctx.op.ReduceProd(spatial, keepdims=0), x))
    return (ctx.op.Expand(ctx.op.Mul(dy, inv), ctx.shape_of(x)),)


@rule("", "GlobalMaxPool")
def global_max_pool_grad(ctx, dy):  # type: ignore[no-untyped-def]
    """dX[n, c, argmax over the plane (first on ties)] = dY[n, c]; zero elsewhere."""
    x = ctx.input(0)
    to_planes = ctx.ints([0, 0, -1])
    where = ctx.op.ArgMax(ctx.op.Reshape(x, to_planes), axis=2, keepdims=1)
    zeros = ctx.op.Reshape(ctx.zeros_like(x), to_planes)
    scattered = ctx.op.ScatterElements(zeros, where, ctx.op.Reshape(dy, to_planes), axis=2)
    return (ctx.op.Reshape(scattered, ctx.shape_of(x)),)
