"""GridSample's rule, in X and in the grid, every mode, padding_mode and align_corners, 2-D and 3-D.

Along each spatial axis ``a`` (size S_a) the op reads, at every output point p, the taps
``idx_k`` around the pixel coordinate ``x_a(p)`` (denormalised from the grid and folded into
the image by the padding mode) with weights ``w_k(t)``, ``t = x - floor(x)``. Written as a
per-axis weight table ``T_a[n, p, q] = sum_k w_k(t) [idx_k == q]`` (taps outside the image
match no q: zero padding), the op is

    Y[n, c, p] = sum_q prod_a T_a[n, p, q_a] X[n, c, q]

so ``dX = dY @ A`` with ``A = prod_a T_a`` (N, P, Q), and with ``Z = dY^T @ X`` (N, P, Q)
``dgrid_a = sum_q Z * D_a * prod_{b != a} T_b`` where ``D_a = dT_a / dgrid_a`` takes the
weights' derivatives, times the padding's slope (0 where border clamps the coordinate, -1 on
reflected stretches) and the denormalisation's scale. Nearest sampling is constant in the grid.

The tables are dense over the image: memory and work grow as N * P * Q, fine for the
spatial transformers' small maps. Symbolic sizes stay symbolic: a dim of X known only at
run time enters the coordinate arithmetic as a value read from Shape(X).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...onnx_core.gradient import GradContext, Grads, TangentContext, Tangents
from ._table import jvp_rule, rule
from ._tensor_common import merge_axes

#: the Keys cubic coefficient GridSample uses
_A = -0.75
_MODES = {"bilinear": "linear", "bicubic": "cubic", "linear": "linear", "cubic": "cubic", "nearest": "nearest"}


#: a size or coordinate bound: a Python number when X's dim is static, else a scalar value
_Num = float | str


class _Arith:
    """+, -, *, / on numbers and scalar values: folded in Python where both are numbers."""

    def __init__(self, ctx: GradContext, like: str) -> None:
        self.ctx, self.like = ctx, like

    def v(self, a: _Num) -> str:
        return a if isinstance(a, str) else self.ctx.const(float(a), like=self.like)

    def sub(self, a: _Num, b: _Num) -> _Num:
        return a - b if not isinstance(a, str) and not isinstance(b, str) else self.ctx.op.Sub(self.v(a), self.v(b))

    def div(self, a: _Num, b: _Num) -> _Num:
        return a / b if not isinstance(a, str) and not isinstance(b, str) else self.ctx.op.Div(self.v(a), self.v(b))


def _reflect(ctx: GradContext, v: str, lo: _Num, hi: _Num) -> tuple[str, str]:
    """(v mirrored at lo and hi into [lo, hi], its slope: -1 after an even number of
    mirrorings, else 1), as the kernel folds coordinates (a zero span maps to lo; a
    run-time span is kept above 1e-6, which maps within 1e-6 of lo)."""
    ar = _Arith(ctx, v)
    span = ar.sub(hi, lo)
    if not isinstance(span, str) and span <= 0:
        return ctx.op.Mul(v, ctx.const(0.0, like=v)), ctx.op.Mul(v, ctx.const(0.0, like=v))
    if isinstance(span, str):
        span = ctx.op.Max(span, ctx.const(1e-6, like=v))
    c = ar.v
    below, above = ctx.op.Less(v, c(lo)), ctx.op.Greater(v, c(hi))
    dx = ctx.op.Where(below, ctx.op.Sub(c(lo), v), ctx.op.Sub(v, c(hi)))
    n = ctx.op.Floor(ctx.op.Div(dx, c(span)))
    r = ctx.op.Sub(dx, ctx.op.Mul(n, c(span)))
    even = ctx.op.Equal(ctx.op.Sub(n, ctx.op.Mul(ctx.op.Floor(ctx.op.Div(n, c(2.0))), c(2.0))), c(0.0))
    from_lo, from_hi = ctx.op.Add(c(lo), r), ctx.op.Sub(c(hi), r)
    inside = ctx.op.Where(below, ctx.op.Where(even, from_lo, from_hi), ctx.op.Where(even, from_hi, from_lo))
    outside = ctx.op.Or(below, above)
    slope = ctx.op.Where(ctx.op.And(outside, even), c(-1.0), c(1.0))
    return ctx.op.Where(outside, inside, v), slope


def _one_hot(ctx: GradContext, index: str, size: _Num | tuple[str, str]) -> str:
    """[index == q] over q < size, a trailing axis (indices outside the image match none);
    a run-time size comes as (its value, the 0..size-1 positions)."""
    if isinstance(size, tuple):
        positions = size[1]
    else:
        positions = ctx.const(np.arange(int(float(size)), dtype=np.float64), like=index)
    hot: str = ctx.op.CastLike(ctx.op.Equal(ctx.op.Unsqueeze(index, ctx.ints([-1])), positions), index)
    return hot


#: Keys' cubic filter as polynomials in u = |d| (highest power first) and their derivatives
_NEAR = (_A + 2, -(_A + 3), 0.0, 1.0)  # |d| <= 1
_FAR = (_A, -5 * _A, 8 * _A, -4 * _A)  # 1 < |d| < 2
_NEAR_D = (3 * (_A + 2), -2 * (_A + 3), 0.0)
_FAR_D = (3 * _A, -10 * _A, 8 * _A)


def _poly(ctx: GradContext, u: str, coeffs: Sequence[float]) -> str:
    """sum_i coeffs[i] u^(len - 1 - i), by Horner's rule."""
    out = ctx.const(coeffs[0], like=u)
    for k in coeffs[1:]:
        out = ctx.op.Add(ctx.op.Mul(out, u), ctx.const(k, like=u))
    return out


def _cubic_taps(ctx: GradContext, t: str) -> list[tuple[int, str, str]]:
    """(offset k, w_k(t), dw_k/dt) of the four cubic taps: u = |k - t| is t + 1, t, 1 - t, 2 - t."""
    out = []
    for k, sign, near in ((-1, 1.0, False), (0, 1.0, True), (1, -1.0, True), (2, -1.0, False)):
        u = ctx.op.Add(ctx.op.Mul(t, ctx.const(sign, like=t)), ctx.const(float(abs(k)), like=t))
        w = _poly(ctx, u, _NEAR if near else _FAR)
        dw = _poly(ctx, u, _NEAR_D if near else _FAR_D)
        out.append((k, w, ctx.op.Mul(dw, ctx.const(sign, like=t))))
    return out


def _axis_tables(ctx: GradContext, g: str, dims: _Num | tuple[str, str]) -> tuple[str, str | None]:
    """(T, D) of one spatial axis for its normalised coordinates ``g`` (N, P): T[n, p, q] the
    tap weights on pixel q, D = dT/dg (None for nearest). ``dims``: the axis' size, or its
    run-time (value, positions)."""
    size: _Num = dims[0] if isinstance(dims, tuple) else dims
    mode = _MODES.get(str(ctx.attr("mode", "linear")), "")
    padding = str(ctx.attr("padding_mode", "zeros"))
    align = bool(ctx.attr("align_corners", 0))
    ar = _Arith(ctx, g)
    c = ar.v
    last = ar.sub(size, 1.0)
    scale = ar.div(last, 2.0) if align else ar.div(size, 2.0)
    x = ctx.op.Add(ctx.op.Mul(g, c(scale)), c(ar.div(last, 2.0)))
    lo, hi = (0.0, last) if align else (-0.5, ar.sub(size, 0.5))
    slope: str | None = None
    if mode == "nearest":
        x = ctx.op.Round(x)
    if padding == "border" and mode != "cubic":
        inside = ctx.op.And(ctx.op.GreaterOrEqual(x, c(lo)), ctx.op.LessOrEqual(x, c(hi)))
        x = ctx.op.Where(inside, x, ctx.op.Clip(x, c(0.0), c(last)))
        slope = ctx.op.CastLike(inside, g)
    elif padding == "reflection":
        x, slope = _reflect(ctx, x, lo, hi)
    if mode == "nearest":
        return _one_hot(ctx, x, dims), None
    i0 = ctx.op.Floor(x)
    t = ctx.op.Sub(x, i0)
    taps = [(0, ctx.op.Sub(c(1.0), t), c(-1.0)), (1, t, c(1.0))] if mode == "linear" else _cubic_taps(ctx, t)
    table: str | None = None
    deriv: str | None = None
    for k, w, dw in taps:
        idx = ctx.op.Add(i0, c(float(k)))
        if padding == "border":
            idx = ctx.op.Clip(idx, c(0.0), c(last))
        elif padding == "reflection":
            idx = _reflect(ctx, idx, lo, hi)[0]
        hot = _one_hot(ctx, idx, dims)
        unsq = ctx.ints([-1])
        tw = ctx.op.Mul(hot, ctx.op.Unsqueeze(w, unsq))
        td = ctx.op.Mul(hot, ctx.op.Unsqueeze(dw, unsq))
        table = tw if table is None else ctx.op.Add(table, tw)
        deriv = td if deriv is None else ctx.op.Add(deriv, td)
    assert table is not None and deriv is not None
    factor = c(scale) if slope is None else ctx.op.Mul(ctx.op.Unsqueeze(slope, ctx.ints([-1])), c(scale))
    return table, ctx.op.Mul(deriv, factor)


def _runtime_size(ctx: GradContext, x: str, axis: int, like: str) -> tuple[str, str]:
    """(dim ``axis`` of x as a scalar of like's type, the positions 0..dim-1): the positions
    are CumSum(ones(dim), exclusive), ones expanded to Shape(x)[axis] (no Range: its forward
    rule is not written)."""
    dim = ctx.op.Shape(x, start=axis, end=axis + 1)
    ones = ctx.op.Expand(ctx.const(np.ones(1), like=like), dim)
    positions = ctx.op.CumSum(ones, ctx.ints(0), exclusive=1)
    return ctx.op.CastLike(ctx.op.Squeeze(dim), like), positions


class _Tables:
    """The per-axis tables of a GridSample node, each shaped to broadcast to (N, P, *S)."""

    def __init__(self, ctx: GradContext) -> None:
        x, grid = ctx.input(0), ctx.input(1)
        spatial = ctx.require_shape(x)[2:]
        nd = len(spatial)
        self.nd = nd
        self.grid_shape = _shape_or_rank(ctx, grid, nd + 2)
        n, *cells_dims, _ = self.grid_shape
        cells = math.prod(cells_dims) if all(isinstance(d, int) for d in cells_dims) else None
        self.shape = [n, cells, *spatial]  # of the products: (N, P, S...)
        points = merge_axes(ctx, grid, 1, 1 + nd, shape=self.grid_shape)
        self.t: list[str] = []
        self.d: list[str | None] = []
        for i, dim in enumerate(spatial):
            g = ctx.op.Squeeze(ctx.op.Gather(points, ctx.ints([nd - 1 - i]), axis=2), ctx.ints([2]))
            size: _Num | tuple[str, str] = float(dim) if isinstance(dim, int) else _runtime_size(ctx, x, 2 + i, g)
            t, d = _axis_tables(ctx, g, size)
            self.t.append(self._placed(ctx, t, i))
            self.d.append(None if d is None else self._placed(ctx, d, i))

    def _placed(self, ctx: GradContext, table: str, i: int) -> str:
        """(N, P, S_i) -> (N, P, 1, .., S_i, .., 1)."""
        others = [2 + j for j in range(self.nd) if j != i]
        return ctx.op.Unsqueeze(table, ctx.ints(others)) if others else table

    def product(self, ctx: GradContext, first: str | None = None, skip: int = -1) -> str:
        """prod_a T_a (with ``first`` in place of T_skip), flattened to (N, P, Q)."""
        out = first
        for i, t in enumerate(self.t):
            if i != skip:
                out = t if out is None else ctx.op.Mul(out, t)
        assert out is not None
        return merge_axes(ctx, out, 2, shape=self.shape)


def _shape_or_rank(ctx: GradContext, name: str, rank: int) -> list[Any]:
    """``name``'s inferred shape, or ``rank`` unknown dims: the spec fixes the rank of
    GridSample's grid and output (N, spatial..., nd) and (N, C, spatial...)."""
    shape = ctx.shape(name)
    return [None] * rank if shape is None else list(shape)


@rule("", "GridSample")
def grid_sample_grad(ctx: GradContext, dy: str) -> Grads:
    """dX = dY @ prod_a T_a; dgrid_a = sum_q (dY^T @ X) * D_a prod_{b != a} T_b (see the module)."""
    x, grid = ctx.input(0), ctx.input(1)
    tables = _Tables(ctx)
    flat_dy = merge_axes(ctx, dy, 2, shape=_shape_or_rank(ctx, ctx.output(0), tables.nd + 2))  # (N, C, P)
    dx = None
    if ctx.needs_grad(0):
        dx = ctx.op.Reshape(ctx.op.MatMul(flat_dy, tables.product(ctx)), ctx.shape_of(x))
    dgrid = None
    if ctx.needs_grad(1):
        if tables.d[0] is None:  # nearest: piecewise constant in the grid
            return dx, ctx.zeros_like(grid)
        z = ctx.op.MatMul(ctx.op.Transpose(flat_dy, perm=[0, 2, 1]), merge_axes(ctx, x, 2))
        parts: list[str] = ["" for _ in range(tables.nd)]
        for i, d in enumerate(tables.d):
            assert d is not None
            weighted = ctx.op.Mul(z, tables.product(ctx, d, skip=i))
            parts[tables.nd - 1 - i] = ctx.op.ReduceSum(weighted, ctx.ints([2]), keepdims=1)
        dgrid = ctx.op.Reshape(ctx.op.Concat(*parts, axis=2), ctx.shape_of(grid))
    return dx, dgrid


@jvp_rule("", "GridSample")
def grid_sample_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """tY = GridSample(tX, grid) + X @ (sum_a tgrid_a D_a prod_{b != a} T_b)^T."""
    x, grid = ctx.input(0), ctx.input(1)
    terms: list[str | None] = []
    if ts[0] is not None:
        sampled = ctx.emit_like([ts[0], grid])
        terms.append(sampled if isinstance(sampled, str) else sampled[0])
    if len(ts) > 1 and ts[1] is not None:
        tables = _Tables(ctx)
        if tables.d[0] is not None:
            tpoints = merge_axes(ctx, ts[1], 1, 1 + tables.nd, shape=tables.grid_shape)
            mix: str | None = None
            for i, d in enumerate(tables.d):
                assert d is not None
                tg = ctx.op.Gather(tpoints, ctx.ints([tables.nd - 1 - i]), axis=2)  # (N, P, 1)
                term = ctx.op.Mul(tables.product(ctx, d, skip=i), tg)
                mix = term if mix is None else ctx.op.Add(mix, term)
            assert mix is not None
            through = ctx.op.MatMul(merge_axes(ctx, x, 2), ctx.op.Transpose(mix, perm=[0, 2, 1]))
            terms.append(ctx.op.Reshape(through, ctx.shape_of(ctx.output(0))))
    return ctx.add(*terms)
