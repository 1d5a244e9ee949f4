"""Rules for pooling: MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool.

* MaxPool routes each ``dy`` to the input cell its window took the max from (the first
  in kernel raster order on ties). Windows that share no cell (float32/float16, static
  spatial dims) take one MaxUnpool of ``dy`` at the forward's Indices: onnxruntime's
  MaxPool is ~5x slower when it must also output them, but the pair still costs less
  than the Indices-free forms in both runtimes. Otherwise, when the source computes
  ``Indices`` they drive one ScatterElements-add into a flat zero tensor; without them
  (float64, which onnxruntime's MaxUnpool lacks, and the other types), for windows that
  tile the input (kernel == strides, no dilation, no window reading padding) the cell is
  found without Indices: windows of up to 4 cells by pools over their leading sub-boxes
  and pooled-size arithmetic (``_prefix_max_pool_grad``), larger ones by element-wise ops
  and a second pool (``_tiled_max_pool_grad``); other geometries ask the re-emitted
  forward node for Indices.
* AveragePool is linear: ``dX = ConvTranspose(dy / count, ones)`` depthwise, the
  window counts fixed by the geometry.
* GlobalAveragePool spreads ``dy / prod(spatial)``; GlobalMaxPool scatters ``dy``
  to the (first) ArgMax of each plane.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from ...onnx_core.gradient import GradContext, Grads, TangentContext, Tangents, same_op
from ._table import jvp_rule, refuses, rule
from ._tensor_common import reshape_fill, zeros_of_shape
from .nn import Geometry, conv_geometry, same_padded, transpose_into, valid_geometry

#: spatial cells above which the window-rank map is tiled at run time, not stored
_RANK_MAP_CONST_CELLS = 1 << 14
#: largest tiling window (cells) whose gradient takes the K - 1 prefix pools; larger
#: windows take the rank score (each prefix pool reads all of X, and onnxruntime's
#: float64 and 3-D MaxPools are slow: at 3x3 float64 the prefix pools lose 11.0 to 7.0 ms)
_PREFIX_POOL_MAX_CELLS = 4


def _flat_scatter(ctx: GradContext, x: str, index: str, dy: str, column_major: bool) -> str:
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
    rank = 2 + len(ctx.attr("kernel_shape"))
    if shape is not None and all(isinstance(d, int) for d in shape[1:]):
        view_shape = ctx.ints([-1, shape[1], *reversed(shape[2:])])
    else:  # (N, C, W, ..., H) read from Shape(X) at run time
        view_shape = ctx.op.Gather(ctx.shape_of(x), ctx.ints([0, 1, *range(rank - 1, 1, -1)]))
    view = ctx.op.Reshape(summed, view_shape)
    return ctx.op.Transpose(view, perm=[0, 1, *range(rank - 1, 1, -1)])


def _tiling_geometry(ctx: GradContext) -> Geometry | None:
    """The geometry when the windows tile the input: kernel == strides, dilations 1, and
    no window reads padding (a remainder the windows skip is allowed); else None."""
    shape = ctx.shape(ctx.input(0))
    if shape is None or len(shape) < 3 or not all(isinstance(d, int) for d in shape[1:]):
        return None
    kernel = [int(k) for k in ctx.attr("kernel_shape")]
    geo = conv_geometry(ctx, kernel, bool(ctx.attr("ceil_mode", 0)))
    if geo.strides != kernel or any(d != 1 for d in geo.dilations) or any(geo.begin):
        return None
    if any(o * k > n for o, k, n in zip(geo.out, kernel, geo.size)):
        return None
    return geo


def _window_shapes(geo: Geometry, channels: int) -> tuple[list[int], list[int]]:
    """The window layout (N, C, o_1, k_1, ..., o_d, k_d) and its one-cell-per-window form
    (N, C, o_1, 1, ..., o_d, 1), the batch copied (0) so that it may be symbolic."""
    cells, windows = [0, channels], [0, channels]
    for o, k in zip(geo.out, geo.kernel):
        cells += [o, k]
        windows += [o, 1]
    return cells, windows


def _spread(ctx: GradContext, v: str, geo: Geometry) -> str:
    """``v`` in the one-cell form repeated over each window's cells (window layout).

    One Concat of copies per spatial axis: onnxruntime runs it 5x faster than Tile and
    15x faster than Expand or a broadcasting Mul onto a trailing size-k axis.
    """
    for i in reversed(range(geo.nd)):
        if geo.kernel[i] > 1:
            v = ctx.op.Concat(*[v] * geo.kernel[i], axis=3 + 2 * i)
    return v


def _rank_map(ctx: GradContext, x: str, geo: Geometry) -> str:
    """K - r at the cell with raster position r in its window of K cells (window layout)."""
    cells = int(np.prod(geo.kernel))
    window = (cells - np.arange(cells)).reshape([1, 1, *[d for k in geo.kernel for d in (1, k)]])
    if int(np.prod(geo.out)) * cells <= _RANK_MAP_CONST_CELLS:
        return ctx.const(np.tile(window, [1, 1, *[d for o in geo.out for d in (o, 1)]]), like=x)
    return ctx.op.Tile(ctx.const(window, like=x), ctx.ints([1, 1, *[d for o in geo.out for d in (o, 1)]]))


def _in_windows(ctx: GradContext, dy: str, geo: Geometry, grad: Callable[..., str]) -> str:
    """``grad(ctx, dy, geo, x, full)`` on X cut to the cells the tiling windows cover,
    padded back with zeros over the cells past the last window."""
    x, nd = ctx.input(0), geo.nd
    full = [o * k for o, k in zip(geo.out, geo.kernel)]
    cut = [n - f for n, f in zip(geo.size, full)]
    if any(cut):
        x = ctx.op.Slice(x, ctx.ints([0] * nd), ctx.ints(full), ctx.ints(list(range(2, 2 + nd))))
    dx = grad(ctx, dy, geo, x, full)
    if any(cut):
        dx = ctx.op.Pad(dx, ctx.ints([0] * (2 + nd) + [0, 0, *cut]))
    return dx


def _tiled_max_pool_grad(ctx: GradContext, dy: str, geo: Geometry, x: str, full: list[int]) -> str:
    """dX = up(dY) * [S == up(max_w S)], S = [X == up(Y)] * rank, for windows that tile X.

    X is viewed with each window's cells on their own axes (a Reshape, no copy) and
    ``up`` repeats a per-window value over its cells. S is positive exactly at the
    window's maxima and largest at the first of them in raster order, so its window max
    (a second MaxPool) picks MaxPool's own tie winner. ``x`` is X cut to the ``full``
    cells the windows cover (see ``_in_windows``).
    """
    y = ctx.output(0)
    channels = ctx.require_shape(ctx.input(0))[1]
    dtype = ctx.dtype(ctx.input(0))
    cells, windows = _window_shapes(geo, channels)
    to_windows, to_cells, to_full = ctx.ints(windows), ctx.ints(cells), ctx.ints([0, channels, *full])

    def indicator(condition: str) -> str:
        return ctx.op.Cast(condition, to=dtype) if dtype else ctx.op.CastLike(condition, x)

    y_up = _spread(ctx, ctx.op.Reshape(y, to_windows), geo)
    score = ctx.op.Mul(indicator(ctx.op.Equal(ctx.op.Reshape(x, to_cells), y_up)), _rank_map(ctx, x, geo))
    best = ctx.op.MaxPool(ctx.op.Reshape(score, to_full), kernel_shape=geo.kernel, strides=geo.kernel)
    chosen = indicator(ctx.op.Equal(score, _spread(ctx, ctx.op.Reshape(best, to_windows), geo)))
    return ctx.op.Reshape(ctx.op.Mul(chosen, _spread(ctx, ctx.op.Reshape(dy, to_windows), geo)), to_full)


def _prefix_max_pool_grad(ctx: GradContext, dy: str, geo: Geometry, x: str, full: list[int]) -> str:
    """dX for windows that tile X: dY routed to the first maximum in raster order by
    pools over the windows' leading sub-boxes, without a full-size comparison.

    Q(b) = MaxPool(X, kernel b, strides = the window) is the max over the box b at the
    start of each window, so [Q(b) == Y] says whether b holds one of its maxima. Axis by
    axis, the part u of dY whose first maximum sits at (p_0, ..., p_{l-1}) on the
    leading axes is split along axis l: s_v = u * [Q(p_0+1, ..., p_{l-1}+1, v+1,
    k_{l+1}, ...) == Y] for v < k_l - 1 and s_{k_l - 1} = u (the box's cells before
    p on the leading axes come before the first maximum, so they are below Y), and
    the part at v is s_v - s_{v-1} (s_{-1} = 0): exactly u or 0. The K parts, one per
    window cell, are interleaved into the window layout by Concats. Besides the K - 1
    pools and those Concats everything runs on pooled tensors; onnxruntime runs this
    ~1.5x faster than the rank score of ``_tiled_max_pool_grad`` for 2x2 windows.
    ``x`` is X cut to the ``full`` cells the windows cover (see ``_in_windows``).
    """
    y = ctx.output(0)
    channels = ctx.require_shape(ctx.input(0))[1]
    dtype = ctx.dtype(ctx.input(0))
    nd = geo.nd

    def holds_max(box: list[int]) -> str:
        at = ctx.op.Equal(ctx.op.MaxPool(x, kernel_shape=box, strides=geo.kernel), y)
        return ctx.op.Cast(at, to=dtype) if dtype else ctx.op.CastLike(at, x)

    def split(u: str, axis: int, prefix: list[int]) -> list[str]:
        if axis == nd:
            return [u]
        k = geo.kernel[axis]
        parts: list[str] = []
        below = None
        for v in range(k):
            box = [p + 1 for p in prefix] + [v + 1] + geo.kernel[axis + 1 :]
            s = u if v == k - 1 else ctx.op.Mul(u, holds_max(box))
            parts += split(s if below is None else ctx.op.Sub(s, below), axis + 1, [*prefix, v])
            below = s
        return parts

    _, windows = _window_shapes(geo, channels)
    to_windows = ctx.ints(windows)
    pieces = [ctx.op.Reshape(part, to_windows) for part in split(dy, 0, [])]
    for axis in reversed(range(nd)):
        k = geo.kernel[axis]
        if k > 1:
            pieces = [ctx.op.Concat(*pieces[i : i + k], axis=3 + 2 * axis) for i in range(0, len(pieces), k)]
    return ctx.op.Reshape(pieces[0], ctx.ints([0, channels, *full]))


def _unpool_attrs(ctx: GradContext) -> tuple[list[int], list[int]] | None:
    """MaxUnpool's (kernel_shape, strides) under which ``MaxUnpool(dY, I)`` is dX, or None.

    MaxUnpool writes each dY at its index, so it is the gradient only when no two windows
    share a cell (a cell is then the Indices of at most one output). It counts the flat
    indices in its inferred shape ``(o - 1) * s - pads + k`` per axis, which is X's when
    the unpool kernel is ``n - (o - 1) * s`` (the attributes only size the output).
    Row-major Indices only, static spatial dims, and float32/float16 (onnxruntime has no
    float64 MaxUnpool; the Indices-free or ScatterElements forms serve the other types).
    """
    if int(ctx.attr("storage_order", 0)) != 0 or ctx.dtype(ctx.input(0)) not in _UNPOOL_TYPES:
        return None
    shape = ctx.shape(ctx.input(0))
    kernel = [int(k) for k in ctx.attr("kernel_shape")]
    if shape is None or len(shape) != 2 + len(kernel) or not all(isinstance(d, int) for d in shape[2:]):
        return None
    geo = conv_geometry(ctx, kernel, bool(ctx.attr("ceil_mode", 0)))
    unpool = []
    for n, k, s, d, o in zip(geo.size, geo.kernel, geo.strides, geo.dilations, geo.out):
        if windows_share(k, s, d, o):
            return None
        if n - (o - 1) * s < 1:
            return None
        unpool.append(n - (o - 1) * s)
    return unpool, geo.strides


def windows_share(k: int, s: int, d: int, o: int) -> bool:
    """Whether two of ``o`` windows (kernel ``k``, stride ``s``, dilation ``d``) on one axis
    share a cell.

    Windows o1 < o2 share a cell iff ``m * s == j * d`` for m = o2 - o1 in [1, o - 1] and some
    0 < j < k. With g = gcd(s, d), ``m * s`` is a multiple of d iff m is a multiple of d / g,
    and j = m * s / d grows with m: the smallest m, d / g, decides (j = s / g there).
    """
    g = math.gcd(s, d)
    return d // g < o and s // g < k


#: element types onnxruntime's MaxUnpool takes (FLOAT, FLOAT16)
_UNPOOL_TYPES = (1, 10)


@rule("", "MaxPool")
def max_pool_grad(ctx: GradContext, dy: str) -> Grads:
    """dX[I[o]] += dY[o], with I the forward's Indices output (flat over the N*C*D...
    elements, first max on ties).

    Windows that share no cell take one ``MaxUnpool(dY, I)`` (``_unpool_attrs``), I the
    source's Indices or asked of the re-emitted forward node: with the pool itself 15.6 vs
    18.7 ms for the prefix pools in onnxruntime, 16.1 vs 27.9 ms in ours, on 16x32x62x62
    (benchmarks/bench_cnn_rules.py; 2.4 vs 2.1 ms in onnxruntime on 16x16x32x32).
    Otherwise Indices the source computes are used as they are; without them, tiling
    windows take ``_prefix_max_pool_grad`` (up to 4 cells) or ``_tiled_max_pool_grad``,
    and other geometries ask the re-emitted forward node for Indices. ``storage_order=1``
    Indices count column-major within each (n, c) plane; see
    ``_flat_scatter``.
    """
    if dy is None:
        return (None,)
    dy = _without_empty_windows(ctx, dy)
    unpool = _unpool_attrs(ctx)
    if unpool is not None:
        kernel, strides = unpool
        return (ctx.op.MaxUnpool(dy, ctx.forward_output(1), kernel_shape=kernel, strides=strides),)
    if not ctx.output(1):
        geo = _tiling_geometry(ctx)
        if geo is not None and int(np.prod(geo.kernel)) <= _PREFIX_POOL_MAX_CELLS:
            return (_in_windows(ctx, dy, geo, _prefix_max_pool_grad),)
        if geo is not None:
            return (_in_windows(ctx, dy, geo, _tiled_max_pool_grad),)
    column_major = int(ctx.attr("storage_order", 0)) == 1
    return (_flat_scatter(ctx, ctx.input(0), ctx.forward_output(1), dy, column_major),)


def _without_empty_windows(ctx: GradContext, dy: str) -> str:
    """dY (or tY), zero where a window holds no input cell.

    Such a window (a dilation that steps over X, or pads at least the kernel) reads only
    padding: its Y is the lowest value and its Indices point at no cell of X (onnxruntime
    gives -(width + 1) plus the plane's offset, a cell of the previous plane), so its dY
    must reach no cell. Possible only with dilations > 1 or pads >= kernel; static spatial
    dims take a constant mask, symbolic ones ``MaxPool`` of a ones plane (1 where a window
    reads X, the lowest value where it reads none).
    """
    kernel = [int(k) for k in ctx.attr("kernel_shape")]
    nd = len(kernel)
    dilations = [int(d) for d in ctx.attr("dilations", [1] * nd)]
    pads = [int(p) for p in ctx.attr("pads", [0] * 2 * nd)]
    if str(ctx.attr("auto_pad", "NOTSET")) != "NOTSET":
        pads = [0] * 2 * nd  # SAME_* pads are under the kernel, VALID has none
    if all(d == 1 for d in dilations) and all(p < k for p, k in zip(pads, kernel + kernel)):
        return dy
    x = ctx.input(0)
    geo = conv_geometry(ctx, kernel, bool(ctx.attr("ceil_mode", 0)))
    if geo.is_static:
        reads = geo.counts() > 0
        if reads.all():
            return dy
        return ctx.op.Mul(dy, ctx.const(reads.reshape((1, 1, *geo.out)), like=x))
    plane = _ones_plane(ctx, x, nd)
    pooled = ctx.op.MaxPool(plane, **{k: v for k, v in ctx.attrs.items() if k != "storage_order"})
    zero = ctx.const(0.0, like=x)
    masked: str = ctx.op.Where(ctx.op.Greater(pooled, zero), dy, zero)
    return masked


def _ones_plane(ctx: GradContext, like: str, nd: int, spatial: str | None = None) -> str:
    """Ones of ``like``'s element type shaped (1, 1, *spatial): ``spatial`` a 1-D shape of ``nd``
    dims, by default ``like``'s spatial dims."""
    ones = ctx.ints([1, 1])
    plane_shape = ctx.op.Concat(ones, ctx.op.Shape(like, start=2) if spatial is None else spatial, axis=0)
    plane: str = ctx.op.Expand(ctx.const(np.ones((1,) * (2 + nd)), like=like), plane_shape)
    return plane


def _window_input(ctx: GradContext) -> tuple[str, list[int], int]:
    """(X, kernel_shape, channels) of a pooling node whose rule needs static channels."""
    x = ctx.input(0)
    kernel = [int(k) for k in ctx.attr("kernel_shape")]
    shape = ctx.shape(x)
    channels = shape[1] if shape is not None and len(shape) == 2 + len(kernel) else None
    if not isinstance(channels, int):
        raise ctx.error(f"needs the channel count, dim 1 of {x!r} (got {shape}); give the input static channels")
    return x, kernel, channels


@rule("", "AveragePool")
def average_pool_grad(ctx: GradContext, dy: str) -> Grads:
    """dX = ConvTranspose(dY / count, ones(C, 1, k...), group=C) with the forward's strides,
    dilations and pads; count(o) is the cells window o averages over.

    With ``count_include_pad`` and ``ceil_mode`` the count of a window that overhangs the
    padding is read from the forward op itself: 1/count = AveragePool(ones) / valid(o).
    Symbolic spatial dims take the counts from the same ops run on a ones plane shaped
    like X (``_inverse_counts``).
    """
    x, kernel, channels = _window_input(ctx)
    padded = same_padded(ctx, x, kernel)
    if padded is not None:
        return (_same_average_pool_grad(ctx, dy, kernel, channels, padded),)
    geo = conv_geometry(ctx, kernel, bool(ctx.attr("ceil_mode", 0)))
    if not geo.is_static:
        scaled = ctx.op.Mul(dy, _inverse_counts(ctx, geo, dy))
        weights = ctx.const(np.ones((channels, 1, *kernel)), like=x)
        return (transpose_into(ctx, scaled, weights, geo, channels),)
    # valid(o): window cells inside the unpadded input
    valid = geo.counts().reshape((1, 1, *geo.out))
    overhang = geo.overhangs()
    include_pad = bool(ctx.attr("count_include_pad", 0))
    if not include_pad:
        scaled = ctx.op.Mul(dy, ctx.const(1.0 / valid, like=x))
    elif not overhang:
        scaled = ctx.op.Mul(dy, ctx.const(1.0 / float(np.prod(kernel)), like=x))
    else:
        ones = ctx.const(np.ones((1, 1, *geo.size)), like=x)
        counted = ctx.op.AveragePool(ones, **ctx.attrs)
        # onnx's shape inference keeps a last window starting in the end padding, which the
        # spec and the runtimes drop: the Slice (a no-op at run time) keeps onnx.checker consistent
        spatial = list(range(2, 2 + len(kernel)))
        counted = ctx.op.Slice(counted, ctx.ints([0] * len(kernel)), ctx.ints(list(geo.out)), ctx.ints(spatial))
        inverse_count = ctx.op.Div(counted, ctx.const(valid, like=x))
        scaled = ctx.op.Mul(dy, inverse_count)
    weights = ctx.const(np.ones((channels, 1, *kernel)), like=x)
    return (transpose_into(ctx, scaled, weights, geo, channels),)


def _same_average_pool_grad(
    ctx: GradContext, dy: str, kernel: list[int], channels: int, padded: tuple[str, ...]
) -> str:
    """AveragePool with ``auto_pad=SAME_*``, strides > 1 and symbolic dims: the VALID pool
    of X padded at run time (``nn.same_padded``), whose gradient is cropped back to X.

    Every window lies inside the padded X, so with ``count_include_pad`` count = prod(k);
    without it, count = Conv(Pad(ones plane, pads), ones(1, 1, k...)), the cells of X read.
    """
    x = ctx.input(0)
    x_p, begin, spatial, pads = padded
    geo = valid_geometry(ctx, kernel)
    nd = geo.nd
    if bool(ctx.attr("count_include_pad", 0)):
        inverse = ctx.const(1.0 / float(np.prod(kernel)), like=x)
    else:
        plane = _ones_plane(ctx, x, nd, spatial)
        valid = ctx.op.Conv(
            ctx.op.Pad(plane, pads),
            ctx.const(np.ones((1, 1, *kernel)), like=x),
            strides=geo.strides,
            dilations=geo.dilations,
        )
        inverse = ctx.op.Reciprocal(valid)
    weights = ctx.const(np.ones((channels, 1, *kernel)), like=x)
    dx_p = transpose_into(ctx, ctx.op.Mul(dy, inverse), weights, geo, channels, like=x_p)
    dx: str = ctx.op.Slice(dx_p, begin, ctx.op.Add(begin, spatial), ctx.ints(list(range(2, 2 + nd))))
    return dx


def _inverse_counts(ctx: GradContext, geo: Geometry, dy: str) -> str:
    """1 / count(o), shaped (1, 1, o...), computed at run time on a ones plane P (1, 1, X's spatial).

    valid(o) = Conv(P, ones(1, 1, k...)) with the forward's strides, dilations and pads
    (with ``ceil_mode`` the end pads grow by s - 1 for the extra windows, and the result is
    cropped to dY's spatial dims, which are Y's: onnx's shape inference of Y keeps a last
    window that starts in the end padding, which the kernels drop, and onnxruntime folds
    ``Shape(Y)`` from that inference); without ``count_include_pad`` count = valid, with it
    1/count = AveragePool(P) / valid as in the static rule.
    """
    x, nd = ctx.input(0), geo.nd
    plane = _ones_plane(ctx, x, nd)
    ceil_mode = bool(ctx.attr("ceil_mode", 0))
    end = [e + s - 1 for e, s in zip(geo.end, geo.strides)] if ceil_mode else geo.end
    valid = ctx.op.Conv(
        plane,
        ctx.const(np.ones((1, 1, *geo.kernel)), like=x),
        strides=geo.strides,
        dilations=geo.dilations,
        pads=geo.begin + end,
    )
    if ceil_mode:
        spatial = ctx.op.Shape(dy, start=2)
        starts, axes = ctx.ints([0] * nd), ctx.ints(list(range(2, 2 + nd)))
        valid = ctx.op.Slice(valid, starts, spatial, axes)
    if not bool(ctx.attr("count_include_pad", 0)):
        inverse: str = ctx.op.Reciprocal(valid)
        return inverse
    pooled = ctx.op.AveragePool(plane, **ctx.attrs)
    if ceil_mode:
        # a no-op at run time, but onnxruntime's load-time inference of this pool keeps
        # the window the kernel drops (see above) and would reject the Div
        pooled = ctx.op.Slice(pooled, starts, spatial, axes)
    ratio: str = ctx.op.Div(pooled, valid)
    return ratio


@rule("", "GlobalAveragePool")
def global_average_pool_grad(ctx: GradContext, dy: str) -> Grads:
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
def global_max_pool_grad(ctx: GradContext, dy: str) -> Grads:
    """dX[n, c, argmax over the plane (first on ties)] = dY[n, c]; zero elsewhere."""
    x = ctx.input(0)
    shape = ctx.shape(x)
    where = ctx.op.ArgMax(reshape_fill(ctx, x, [0, 0, -1]), axis=2, keepdims=1)
    zeros = reshape_fill(ctx, ctx.zeros_like(x), [0, 0, -1], shape)
    picked = reshape_fill(ctx, dy, [0, 0, -1], ctx.shape(ctx.output(0)))
    scattered = ctx.op.ScatterElements(zeros, where, picked, axis=2)
    return (ctx.op.Reshape(scattered, ctx.shape_of(x)),)


# -- forward rules ------------------------------------------------------------------------------
jvp_rule("", "AveragePool", "GlobalAveragePool")(same_op(0))


@jvp_rule("", "MaxPool")
def max_pool_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """tY[o] = tX[I[o]], I the cell of window o the reverse rule routes dY to (its first
    maximum in kernel raster order, the forward's Indices), found the way the reverse rule
    finds it.

    Where the reverse rule takes MaxUnpool at the forward's Indices (windows sharing no
    cell, float32/float16: ``_unpool_attrs``), or the source computes Indices, those
    Indices (flat over N*C*D..., ``storage_order=1``: column-major within each (n, c)
    plane, so the spatial axes of tX are reversed first) drive one GatherElements on the
    flat tX, which onnxruntime runs ~3x faster than the equivalent Gather: 4 nodes, the
    same cell as the reverse rule's on ties and NaN in every runtime (onnxruntime's float32
    pools treat NaN by SIMD lane, unlike its Indices). On the CNN of bench_jvp.py that
    costs onnxruntime ~0.7 ms more than the Indices-free form (its MaxPool is ~10x slower
    with Indices; the JVP/forward ratio is 2.8-2.9 there) and saves ~0.8 ms in ours and 40%
    of the transform (benchmarks/RESULTS.md, h-jvp session 9). Otherwise (float64, which
    onnxruntime's MaxUnpool lacks, and the other types) tiling windows of up to 4 cells
    find I from pools over the windows' leading sub-boxes (``_prefix_max_pool_jvp``), as
    the reverse rule does; other geometries ask the re-emitted forward node for Indices.
    (No form is faster in both runtimes: the prefix pools for float32 too take onnxruntime
    from 2.8-2.9 to 2.3-2.5x the forward on that CNN and ours from 2.2 to 2.8-3.0x, whose
    MaxPool gives Indices almost for free: benchmarks/bench_max_pool_jvp.py. SpaceToDepth
    cells for 2x2 windows were no better: h-jvp's session 12 notes.)
    """
    if ts[0] is None:
        return None
    return _without_empty_windows(ctx, _max_pool_tangent(ctx, ts[0])), None


def _max_pool_tangent(ctx: TangentContext, t: str) -> str:
    """tX at each window's first maximum (``max_pool_jvp``), whatever empty windows read."""
    if not ctx.output(1) and _unpool_attrs(ctx) is None:  # the reverse rule finds the cell without Indices
        geo = _tiling_geometry(ctx)
        if geo is not None and math.prod(geo.kernel) <= _PREFIX_POOL_MAX_CELLS and _plane_cells(geo) < _EXACT_F32:
            return _prefix_max_pool_jvp(ctx, t, geo)
    if int(ctx.attr("storage_order", 0)) == 1:
        rank = ctx.require_rank(ctx.inputs[0])
        t = ctx.op.Transpose(t, perm=[0, 1, *range(rank - 1, 1, -1)])
    flat = ctx.ints([-1])
    index = ctx.op.Reshape(ctx.forward_output(1), flat)
    picked = ctx.op.GatherElements(ctx.op.Reshape(t, flat), index, axis=0)
    tangent: str = ctx.op.Reshape(picked, ctx.shape_of(ctx.output(0)))
    return tangent


#: integers up to this are exact in float32 (the window offsets are summed in float32)
_EXACT_F32 = 1 << 24


def _plane_cells(geo: Geometry) -> int:
    return math.prod(geo.size)


def _prefix_max_pool_jvp(ctx: TangentContext, t: str, geo: Geometry) -> str:
    """tY = tX at each window's first maximum, for tiling windows of K <= 4 cells.

    Q(b) = MaxPool(X, kernel b, strides = the window) is the max over the box b at the
    start of each window (for b = 1x...x1 a strided Slice, cheaper in numpy) and
    n(b) = [Q(b) < Y] says b holds no maximum. The kernel has at most two axes longer
    than 1: along one axis a of length k the first maximum lies sum_{v < k - 1} n(v + 1)
    steps in; for a 2x2 window (cells 00, 01, 10, 11 in raster order) its offset is
    n(1, 1) * (c + n(1, 2) * (r - c + n(2, 1) * c)), r and c the flat steps of the two
    axes. The offsets are summed in float32 on pooled tensors (exact: a plane holds fewer
    than 2^24 cells), then ``_gather_at_offsets`` reads tX there. X is cut to the cells
    the windows cover (the pools' output counts then equal Y's).
    """
    x, y, nd = ctx.input(0), ctx.output(0), geo.nd
    full = [o * k for o, k in zip(geo.out, geo.kernel)]
    if full != list(geo.size):
        x = ctx.op.Slice(x, ctx.ints([0] * nd), ctx.ints(full), ctx.ints(list(range(2, 2 + nd))))
    step = [math.prod(geo.size[a + 1 :]) for a in range(nd)]  # flat step of each spatial axis

    def lacks_max(box: list[int]) -> str:
        if all(d == 1 for d in box):
            axes = ctx.ints(list(range(2, 2 + nd)))
            q = ctx.op.Slice(x, ctx.ints([0] * nd), ctx.ints(full), axes, ctx.ints(geo.kernel))
        else:
            q = ctx.op.MaxPool(x, kernel_shape=box, strides=geo.kernel)
        return ctx.op.Cast(ctx.op.Less(q, y), to=_FLOAT)

    def f32(v: float) -> str:
        return ctx.const(float(v), dtype=_FLOAT)

    long_axes = [a for a, k in enumerate(geo.kernel) if k > 1]
    if not long_axes:  # one-cell windows with strides 1 tile X: Y is X
        return t
    if len(long_axes) == 1:
        (a,) = long_axes
        boxes = [[v + 1 if i == a else 1 for i in range(nd)] for v in range(geo.kernel[a] - 1)]
        count = lacks_max(boxes[0])
        for box in boxes[1:]:
            count = ctx.op.Add(count, lacks_max(box))
        offset = ctx.op.Mul(count, f32(step[a]))
    else:  # K <= 4 cells: two long axes are a 2x2 window
        (a, b) = long_axes
        r, c = step[a], step[b]
        n11 = lacks_max([1] * nd)
        n12 = lacks_max([2 if i == b else 1 for i in range(nd)])
        n21 = lacks_max([2 if i == a else 1 for i in range(nd)])
        inner = ctx.op.Add(n21 if c == 1 else ctx.op.Mul(n21, f32(c)), f32(r - c))
        offset = ctx.op.Mul(n11, ctx.op.Add(ctx.op.Mul(n12, inner), f32(c)))
    return _gather_at_offsets(ctx, t, geo, offset, step)


def _gather_at_offsets(ctx: TangentContext, t: str, geo: Geometry, offset: str, step: list[int]) -> str:
    """tX at each window's first cell plus ``offset`` (float32, shaped like Y): one
    GatherElements on the flat tX (onnxruntime runs it as fast as per (n, c) plane,
    numpy 4x faster), the flat index in int64."""
    nd = geo.nd
    first = np.zeros([1, 1, *geo.out], dtype=np.float32)  # each window's first cell in its plane
    for a in range(nd):
        shape = [1] * (2 + nd)
        shape[2 + a] = geo.out[a]
        first = first + (np.arange(geo.out[a]) * geo.kernel[a] * step[a]).reshape(shape)
    start = ctx.op.Cast(ctx.op.Add(offset, ctx.const(first, dtype=_FLOAT)), to=_INT64)
    # plane (n, c) starts at (n C + c) * cells
    batch, channels = ctx.require_shape(ctx.input(0))[:2]
    if isinstance(batch, int):
        planes = np.arange(batch * channels).reshape(batch, channels, *[1] * nd) * _plane_cells(geo)
        index = ctx.op.Add(start, ctx.const(planes, dtype=_INT64))
    else:  # a CumSum of the plane sizes, one per plane
        start = ctx.op.Reshape(start, ctx.ints([-1, math.prod(geo.out)]))
        count = ctx.op.Concat(ctx.op.Shape(start, end=1), ctx.ints([1]), axis=0)
        planes = ctx.op.CumSum(ctx.op.Expand(ctx.ints([_plane_cells(geo)]), count), ctx.ints(0), exclusive=1)
        index = ctx.op.Add(start, planes)
    flat = ctx.ints([-1])
    picked = ctx.op.GatherElements(ctx.op.Reshape(t, flat), ctx.op.Reshape(index, flat), axis=0)
    return ctx.op.Reshape(picked, ctx.ints([-1, channels, *geo.out]))


#: TensorProto.FLOAT, TensorProto.INT64
_FLOAT, _INT64 = 1, 7


@jvp_rule("", "GlobalMaxPool")
def global_max_pool_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """tY[n, c] = tX[n, c, argmax over the plane (first on ties)], as in reverse."""
    if ts[0] is None:
        return None
    shape = ctx.shape(ctx.inputs[0])
    where = ctx.op.ArgMax(reshape_fill(ctx, ctx.inputs[0], [0, 0, -1]), axis=2, keepdims=1)
    picked = ctx.op.GatherElements(reshape_fill(ctx, ts[0], [0, 0, -1], shape), where, axis=2)
    return ctx.op.Reshape(picked, ctx.op.Shape(ctx.output(0)))


@rule("", "MaxUnpool", nondiff=(1, 2))
def max_unpool_grad(ctx: GradContext, dy: str) -> Grads:
    """Y = zeros with Y[I[k]] = X[k] (I flat over the unpooled shape MaxPool saw, placed by
    coordinates into a larger ``output_shape``), so dX[k] = dY[I[k]] where X[k] was written
    last (overlapping windows repeat an index; the kernels keep the last write) and 0 elsewhere.

    dY is cut to the unpooled shape, (in - 1) * s - pad_begin - pad_end + k per spatial axis.
    """
    x, index = ctx.input(0), ctx.input(1)
    rank = ctx.require_rank(x)
    nd = rank - 2
    g = dy
    if ctx.input(2):
        kernel = [int(k) for k in ctx.attr("kernel_shape")]
        strides = [int(s) for s in ctx.attr("strides", [1] * nd)]
        pads = [int(p) for p in ctx.attr("pads", [0] * (2 * nd))]
        spatial = ctx.op.Shape(x, start=2)
        trimmed = [k - pads[d] - pads[d + nd] - strides[d] for d, k in enumerate(kernel)]
        ends = ctx.op.Add(ctx.op.Mul(spatial, ctx.ints(strides)), ctx.ints(trimmed))
        g = ctx.op.Slice(dy, ctx.ints([0] * nd), ends, ctx.ints(list(range(2, rank))))
    flat_index = ctx.op.Reshape(index, ctx.ints([-1]))
    flat_dy = ctx.op.Reshape(g, ctx.ints([-1]))
    # 0, 1, ... as an exclusive CumSum of ones (Range has no forward rule: forward over reverse)
    order = ctx.op.CumSum(ctx.op.Expand(ctx.ints([1]), ctx.op.Shape(flat_index)), ctx.ints(0), exclusive=1)
    unwritten = ctx.op.Expand(ctx.ints([-1]), ctx.op.Shape(flat_dy))
    last = ctx.op.ScatterElements(unwritten, flat_index, order, reduction="max")
    written = ctx.op.Equal(ctx.op.Gather(last, flat_index), order)
    picked = ctx.op.Where(written, ctx.op.Gather(flat_dy, flat_index), ctx.const(0.0, like=x))
    return (ctx.op.Reshape(picked, ctx.shape_of(x)), None, None)


jvp_rule("", "MaxUnpool")(same_op(0))


# -- LpPool, GlobalLpPool -------------------------------------------------------------------------
def _lp_slope(ctx: GradContext, x: str, p: float) -> str:
    """d|x|^p / dx / p = sign(x) |x|^(p - 1) (x itself for p = 2)."""
    if p == 2.0:
        return x
    if p == 1.0:
        sign: str = ctx.op.Sign(x)
        return sign
    slope: str = ctx.op.Mul(ctx.op.Sign(x), ctx.op.Pow(ctx.op.Abs(x), ctx.const(p - 1.0, like=x)))
    return slope


def _lp_scale(ctx: GradContext, y: str, like: str, p: float) -> str:
    """Y^(1-p), 0 where Y = 0: a window whose cells are all 0 (or that holds no cell) has the
    subgradient 0, as torch's; Y^(1-p) alone made its cells' gradients 0 * inf = NaN."""
    zero = ctx.const(0.0, like=like)
    scale: str = ctx.op.Where(ctx.op.Equal(y, zero), zero, ctx.op.Pow(y, ctx.const(1.0 - p, like=like)))
    return scale


def _lp_geometry(ctx: GradContext) -> tuple[Geometry, int, str]:
    """(geometry, channels, ones(C, 1, k...)) of an LpPool node: the window sum W is the
    depthwise Conv by the ones, its transpose the ConvTranspose by them."""
    x, kernel, channels = _window_input(ctx)
    if same_padded(ctx, x, kernel) is not None:
        raise ctx.error(
            "auto_pad=SAME_* with strides > 1 on a symbolic spatial axis pads by a run-time amount; "
            "export with explicit pads or give the input static spatial dims"
        )
    geo = conv_geometry(ctx, kernel, bool(ctx.attr("ceil_mode", 0)))
    return geo, channels, ctx.const(np.ones((channels, 1, *kernel)), like=x)


@rule("", "LpPool")
def lp_pool_grad(ctx: GradContext, dy: str) -> Grads:
    """Y = W(|X|^p)^(1/p), W the window sum (zero padding): dX = sign(X) |X|^(p-1) W^T(dY Y^(1-p))."""
    x, y = ctx.input(0), ctx.output(0)
    p = float(ctx.attr("p", 2))
    geo, channels, ones = _lp_geometry(ctx)
    scaled = ctx.op.Mul(dy, _lp_scale(ctx, y, x, p))
    return (ctx.op.Mul(_lp_slope(ctx, x, p), transpose_into(ctx, scaled, ones, geo, channels)),)


@jvp_rule("", "LpPool")
def lp_pool_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """tY = Y^(1-p) W(sign(X) |X|^(p-1) tX), W the depthwise Conv by ones with the pool's
    window (its end pads those that make the last window, ``ceil_mode`` included)."""
    if ts[0] is None:
        return None
    x, y = ctx.input(0), ctx.output(0)
    p = float(ctx.attr("p", 2))
    geo, channels, ones = _lp_geometry(ctx)
    if not geo.is_static and bool(ctx.attr("ceil_mode", 0)):
        raise ctx.error("forward mode of LpPool with ceil_mode needs static spatial dims; declare them")
    end = geo.end
    if geo.is_static:
        spans = zip(geo.size, geo.kernel, geo.strides, geo.dilations, geo.begin, geo.out)
        end = [max((o - 1) * s + (k - 1) * d + 1 - n - b, 0) for n, k, s, d, b, o in spans]
    window = ctx.op.Conv(
        ctx.op.Mul(_lp_slope(ctx, x, p), ts[0]),
        ones,
        strides=geo.strides,
        dilations=geo.dilations,
        pads=geo.begin + end,
        group=channels,
    )
    return ctx.op.Mul(window, _lp_scale(ctx, y, x, p))


@rule("", "GlobalLpPool")
def global_lp_pool_grad(ctx: GradContext, dy: str) -> Grads:
    """Y = (sum over the plane of |X|^p)^(1/p): dX = sign(X) |X|^(p-1) dY Y^(1-p) (broadcast)."""
    x, y = ctx.input(0), ctx.output(0)
    p = float(ctx.attr("p", 2))
    return (ctx.op.Mul(_lp_slope(ctx, x, p), ctx.op.Mul(dy, _lp_scale(ctx, y, x, p))),)


@jvp_rule("", "GlobalLpPool")
def global_lp_pool_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """tY = Y^(1-p) sum over the plane of sign(X) |X|^(p-1) tX."""
    if ts[0] is None:
        return None
    x, y = ctx.input(0), ctx.output(0)
    p = float(ctx.attr("p", 2))
    axes = ctx.ints(list(range(2, ctx.require_rank(x))))
    total = ctx.op.ReduceSum(ctx.op.Mul(_lp_slope(ctx, x, p), ts[0]), axes, keepdims=1)
    return ctx.op.Mul(total, _lp_scale(ctx, y, x, p))


refuses(
    "",
    "LpPool",
    what="unknown channels; SAME_* with strides > 1 on a symbolic axis",
    why="the window sums are depthwise convolutions",
)
