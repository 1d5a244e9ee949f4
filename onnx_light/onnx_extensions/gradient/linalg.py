"""Rules for products: MatMul, Gemm, Einsum; and Det.

The gradients here are not shaped like the output, so these rules sum broadcast
batch dimensions back with ``ctx.unbroadcast(..., shape=...)`` instead of registering
broadcast=True.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from ...onnx_core.gradient import GradContext, Grads, TangentContext, Tangents
from ._table import jvp_rule, refuses, rule


def _sum_to(ctx: GradContext, g: str, g_shape: tuple[Any, ...] | None, x: str) -> str:
    """Sums ``g`` (of shape ``g_shape``, None when unknown) back to the shape of ``x``."""
    return ctx.unbroadcast(g, x, frm=g, shape=g_shape)


def _swap_last(ctx: GradContext, v: str, rank: int) -> str:
    return ctx.op.Transpose(v, perm=[*range(rank - 2), rank - 1, rank - 2])


@rule("", "MatMul")
def matmul_grad(ctx: GradContext, dy: str) -> Grads:
    """dA = dY @ B^T, dB = A^T @ dY, summed over broadcast batch dims.

    A 1-D operand is promoted as numpy does (A to (1, k), B to (k, 1)) and dY gets the
    dropped axis back; the gradient is reduced to the operand's shape afterwards.
    """
    a, b = ctx.inputs
    ra, rb = ctx.require_rank(a), ctx.require_rank(b)
    need_a, need_b = ctx.needs_grad(0), ctx.needs_grad(1)
    if ra == 1 and rb == 1:  # dot product: dY is a scalar
        return (ctx.op.Mul(dy, b) if need_a else None, ctx.op.Mul(dy, a) if need_b else None)
    if ra == 2 and rb == 2:
        return (
            ctx.op.Gemm(dy, b, transB=1) if need_a else None,
            ctx.op.Gemm(a, dy, transA=1) if need_b else None,
        )
    a_shape, b_shape, y_shape = ctx.shape(a), ctx.shape(b), ctx.shape(ctx.output(0))
    ys = None if y_shape is None else tuple(y_shape)
    da = db = None
    if need_a:
        k = None if a_shape is None else a_shape[-1]
        if ra == 1 and rb == 2:
            # (k, m) @ (m,) as the Gemm (1, m) @ (k, m)^T: onnxruntime (1.32, all optimizations)
            # fuses a Transpose producing B into MatMul(B, dY) with a 1-D dY and gets it wrong
            row = ctx.op.Gemm(ctx.op.Unsqueeze(dy, ctx.ints([0])), b, transB=1)
            da = ctx.op.Reshape(row, ctx.ints([-1]))
        elif ra == 1:  # (..., 1, m) @ (..., m, k) -> (..., 1, k), summed to (k,)
            g = ctx.op.MatMul(ctx.op.Unsqueeze(dy, ctx.ints([-2])), _swap_last(ctx, b, rb))
            da = _sum_to(ctx, g, None if ys is None else (*ys[:-1], 1, k), a)
        elif rb == 1:  # (..., n, 1) @ (1, k) -> (..., n, k): A's batch is Y's batch
            da = ctx.op.MatMul(ctx.op.Unsqueeze(dy, ctx.ints([-1])), ctx.op.Unsqueeze(b, ctx.ints([0])))
        else:  # (..., n, m) @ (..., m, k)
            g = ctx.op.MatMul(dy, _swap_last(ctx, b, rb))
            da = _sum_to(ctx, g, None if ys is None else (*ys[:-1], k), a)
    if need_b:
        k = None if b_shape is None else b_shape[-2 if rb >= 2 else 0]
        if rb == 1 and ra == 2:
            db = ctx.op.MatMul(dy, a)  # (n,) @ (n, k)
        elif rb == 1:  # (..., 1, n) @ (..., n, k) -> (..., 1, k), summed to (k,)
            g = ctx.op.MatMul(ctx.op.Unsqueeze(dy, ctx.ints([-2])), a)
            db = _sum_to(ctx, g, None if ys is None else (*ys[:-1], 1, k), b)
        elif ra == 1:  # (k, 1) @ (..., 1, m) -> (..., k, m)
            g = ctx.op.MatMul(ctx.op.Unsqueeze(a, ctx.ints([1])), ctx.op.Unsqueeze(dy, ctx.ints([-2])))
            db = _sum_to(ctx, g, None if ys is None else (*ys[:-1], k, ys[-1]), b)
        elif rb == 2 and ra > 2 and isinstance(k, int) and ys is not None and isinstance(ys[-1], int):
            # (..., n, k) @ (k, m): dB = A^T dY over every row of every batch at once, one
            # Gemm of the flattened operands instead of a batched product summed afterwards
            rows_a = ctx.op.Reshape(a, ctx.ints([-1, k]))
            rows_dy = ctx.op.Reshape(dy, ctx.ints([-1, ys[-1]]))
            db = ctx.op.Gemm(rows_a, rows_dy, transA=1)
        else:  # (..., k, n) @ (..., n, m)
            g = ctx.op.MatMul(_swap_last(ctx, a, ra), dy)
            db = _sum_to(ctx, g, None if ys is None else (*ys[:-2], k, ys[-1]), b)
    return da, db


@rule("", "Gemm")
def gemm_grad(ctx: GradContext, dy: str) -> Grads:
    """Y = alpha * A' @ B' + beta * C, with A' = A^T if transA, B' = B^T if transB.

    dA = alpha * dY @ B'^T (transposed back if transA), dB = alpha * A'^T @ dY (likewise),
    dC = beta * dY summed to C's shape. Each product is itself one Gemm.
    """
    a, b, c = ctx.input(0), ctx.input(1), ctx.input(2)
    ta, tb = ctx.attr("transA", 0), ctx.attr("transB", 0)
    alpha, beta = ctx.attr("alpha", 1.0), ctx.attr("beta", 1.0)
    extra = {} if alpha == 1.0 else {"alpha": alpha}
    da = db = dc = None
    if ctx.needs_grad(0):
        da = ctx.op.Gemm(b, dy, transA=tb, transB=1, **extra) if ta else ctx.op.Gemm(dy, b, transB=1 - tb, **extra)
    if ctx.needs_grad(1):
        db = ctx.op.Gemm(dy, a, transA=1, transB=ta, **extra) if tb else ctx.op.Gemm(a, dy, transA=1 - ta, **extra)
    if c and ctx.needs_grad(2):
        scaled = dy if beta == 1.0 else ctx.op.Mul(dy, ctx.const(beta, like=c))
        dc = ctx.unbroadcast(scaled, c)
    return (da, db, dc)[: len(ctx.inputs)]


def _parse_einsum(ctx: GradContext, equation: str) -> tuple[list[str], str]:
    """(input terms, output term) of an equation, the implicit output made explicit."""
    eq = equation.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ctx.inputs):
        raise ctx.error(f"the equation {equation!r} has {len(terms)} terms for {len(ctx.inputs)} inputs")
    if not arrow:
        letters = [ch for t in terms for ch in t.replace("...", "")]
        once = sorted(ch for ch in set(letters) if letters.count(ch) == 1)
        out = ("..." if any("..." in t for t in terms) else "") + "".join(once)
    return terms, out


@rule("", "Einsum")
def einsum_grad(ctx: GradContext, dy: str) -> Grads:
    """dX_i = Einsum(dY, X_j for j != i) with the equation "out,t_j...->t_i".

    An index of t_i found neither in the output nor in another operand was summed
    over X_i alone: its gradient is constant along it, so a ones tensor shaped like X_i
    joins the operands to supply that axis. Broadcast ``...`` dims are summed back (all of
    them for an operand without ``...``). A broadcast letter (size 1 in X_i, more in
    another operand, as numpy allows) is summed back to 1; one the others broadcast
    (size 1 there, more in X_i) is expanded to X_i's size.
    Refused: a repeated index within one term (a diagonal, e.g. "ii->i"), and ``...``
    in the inputs but not in the output.
    """
    equation = ctx.attr("equation")
    terms, out = _parse_einsum(ctx, equation)
    y = ctx.output(0)
    dims = [_letter_dims(ctx.shape(x), t) for x, t in zip(ctx.inputs, terms)]
    grads: list[str | None] = []
    for i, (x, t) in enumerate(zip(ctx.inputs, terms)):
        if not ctx.needs_grad(i):
            grads.append(None)
            continue
        letters = t.replace("...", "")
        if len(set(letters)) != len(letters):
            raise ctx.error(
                f"the term {t!r} of equation {equation!r} repeats an index (a diagonal); its gradient "
                "is not implemented: rewrite the diagonal with explicit ops or register a rule"
            )
        if "..." in t and "..." not in out:
            raise ctx.error(
                f"the equation {equation!r} sums over '...' dims (absent from the output); its gradient "
                "is not implemented: name those dims with letters"
            )
        others = [j for j in range(len(terms)) if j != i]
        known = set(out.replace("...", "")).union(*(set(terms[j]) for j in others))
        operands = [dy, *(ctx.inputs[j] for j in others)]
        subs = [out, *(terms[j] for j in others)]
        # each letter's size in the gradient Einsum: Y's (all inputs broadcast) or the others'
        sizes = {ch: _broadcast_dim([d[ch] for d in dims if ch in d]) for ch in out if ch != "."}
        for j in others:
            for ch, d in dims[j].items():
                sizes[ch] = _broadcast_dim([sizes[ch], d]) if ch in sizes else d
        if any(ch not in known for ch in letters):
            operands.append(ctx.op.Expand(ctx.const(1.0, like=x), ctx.shape_of(x)))
            subs.append(t)
            for ch in letters:
                sizes.setdefault(ch, dims[i].get(ch))
        # without '...' of its own, X_i still gets Y's '...' dims, to be summed away
        t_grad = t if "..." in t or "..." not in out else "..." + t
        g = ctx.op.Einsum(*operands, equation=",".join(subs) + "->" + t_grad)
        grads.append(_fit_letters(ctx, g, x, t, t_grad, [sizes.get(ch) for ch in letters], y, out))
    return tuple(grads)


def _letter_dims(shape: tuple[Any, ...] | None, term: str) -> dict[str, Any]:
    """The dim of each letter of ``term`` in an operand of ``shape`` (None: rank unknown)."""
    if shape is None:
        return {}
    pre, _, post = term.partition("...")
    out = dict(zip(pre, shape))
    if post:
        out.update(zip(post, shape[len(shape) - len(post) :]))
    return out


def _broadcast_dim(dims: list[Any]) -> Any:
    """The size a letter takes over operands whose dims for it are ``dims`` (1 broadcasts;
    None when a symbolic or unknown dim leaves it open)."""
    sizes = {d for d in dims if d != 1}
    if not sizes:
        return 1 if dims else None
    if len(sizes) == 1 and None not in sizes:
        return sizes.pop()
    return None


def _fit_letters(ctx: GradContext, g: str, x: str, t: str, t_grad: str, g_letters: list[Any], y: str, out: str) -> str:
    """``g`` (X's gradient Einsum, lettered dims ``g_letters``) brought to X's shape: summed
    over a letter X broadcasts (size 1 in X, more in the others), expanded along a letter
    the others broadcast (more in X, size 1 in the gradient), ``...`` dims summed back."""
    xs = ctx.shape(x)
    letters = t.replace("...", "")
    x_letters: list[Any] = [None] * len(letters) if xs is None else [_letter_dims(xs, t).get(ch) for ch in letters]
    if "..." in t_grad:
        ys = ctx.shape(y)
        shape: tuple[Any, ...] | None = None
        if ys is not None and xs is not None:
            shape = (*ys[: len(ys) - len(out.replace("...", ""))], *g_letters)
        g = _sum_to(ctx, g, shape, x)  # sums the letters X broadcasts too
        summed = True
    else:
        summed = False
    known = xs is not None and all(isinstance(d, int) for d in (*x_letters, *g_letters))
    if not known and any(a != b or a is None for a, b in zip(x_letters, g_letters)):
        if summed:
            return ctx.op.Expand(g, ctx.shape_of(x))
        # expanded first along letters the others broadcast (1 in g, more in X), so that every
        # dim of g is at least X's; then summed where X has 1 (axes found at run time)
        return _sum_to(ctx, ctx.op.Expand(g, ctx.shape_of(x)), None, x)
    if not summed:
        lead = len(xs) - len(letters) if xs is not None else 0
        axes = [lead + k for k, (a, b) in enumerate(zip(x_letters, g_letters)) if a == 1 and b != 1]
        if axes:
            g = ctx.op.ReduceSum(g, ctx.ints(axes), keepdims=1)
    if any(b == 1 and a != 1 for a, b in zip(x_letters, g_letters)):
        g = ctx.op.Expand(g, ctx.shape_of(x))
    return g


# -- forward rules: products are multilinear --------------------------------------------------
@jvp_rule("", "MatMul", "Einsum")
def multilinear_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """tY = sum over inputs i of the op with input i replaced by its tangent."""
    terms = []
    for i, t in enumerate(ts):
        if t is not None:
            inputs = list(ctx.inputs)
            inputs[i] = t
            terms.append(cast(str, ctx.emit_like(inputs)))
    return ctx.add(*terms)


@jvp_rule("", "Gemm")
def gemm_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """tY = Gemm(tA, B) + Gemm(A, tB) + beta * tC (tC broadcast to Y's shape)."""
    a, b = ctx.inputs[:2]
    terms = [
        cast(str, ctx.emit_like([ts[0], b], beta=0.0)) if ts[0] is not None else None,
        cast(str, ctx.emit_like([a, ts[1]], beta=0.0)) if len(ts) > 1 and ts[1] is not None else None,
    ]
    tc = ts[2] if len(ts) > 2 else None
    if tc is not None:
        scaled = ctx.op.Mul(tc, ctx.const(float(ctx.attr("beta", 1.0)), like=tc))
        terms.append(ctx.op.Expand(scaled, ctx.shape_of(ctx.output(0))))
    return ctx.add(*terms)


# -- Det: the cofactor matrix, from the determinants of the minors ----------------------------
def _minor_gather(n: int) -> np.ndarray:
    """Flat indices into an n x n matrix picking, for each (i, j), its minor without row i
    and column j: shape ``[n, n, (n-1)^2]``."""
    rows = np.arange(n)
    out = np.empty((n, n, (n - 1) ** 2), np.int64)
    for i in range(n):
        for j in range(n):
            keep_r, keep_c = rows[rows != i], rows[rows != j]
            out[i, j] = (keep_r[:, None] * n + keep_c[None, :]).reshape(-1)
    return out


def _cofactors(ctx: GradContext, a: str) -> str:
    """C[..., i, j] = (-1)^(i+j) det(A without row i and column j) = det(A) A^-T where A is
    invertible, and the true derivative of det also where it is singular. Needs a static n;
    the batch dims may be symbolic. (1 x 1: C = 1.)"""
    shape = ctx.require_shape(a)
    n = shape[-1]
    if not isinstance(n, int):
        raise ctx.error(f"needs the static matrix size of {a!r} (its last two dims) to build the cofactors")
    if n == 1:
        return ctx.op.Expand(ctx.const(1.0, like=a), ctx.shape_of(a))
    batch = ctx.op.Shape(a, end=-2)
    flat = ctx.op.Reshape(a, ctx.op.Concat(batch, ctx.ints([n * n]), axis=0))
    picked = ctx.op.Gather(flat, ctx.ints(_minor_gather(n).reshape(-1).tolist()), axis=-1)
    minors = ctx.op.Reshape(picked, ctx.op.Concat(batch, ctx.ints([n, n, n - 1, n - 1]), axis=0))
    signs = np.array([[(-1.0) ** (i + j) for j in range(n)] for i in range(n)])
    return ctx.op.Mul(ctx.op.Det(minors), ctx.const(signs, like=a))


@rule("", "Det")
def det_grad(ctx: GradContext, dy: str) -> Grads:
    """dA = dY * C, C the cofactor matrix (``_cofactors``): det(A) A^-T computed without an
    inverse, so it is right for singular A too (a rank n-1 matrix has a non-zero gradient)."""
    return ctx.op.Mul(ctx.op.Unsqueeze(dy, ctx.ints([-2, -1])), _cofactors(ctx, ctx.inputs[0]))


@jvp_rule("", "Det")
def det_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """tY = Σ_ij C_ij tA_ij (Jacobi's formula, C the cofactor matrix)."""
    if ts[0] is None:
        return None
    return ctx.op.ReduceSum(ctx.op.Mul(_cofactors(ctx, ctx.inputs[0]), ts[0]), ctx.ints([-2, -1]), keepdims=0)


# -- what these rules refuse (the README's table) ----------------------------------------------
refuses(
    "",
    "Einsum",
    what="a repeated index inside one term (`ii->i`); `...` in inputs but not in the output",
    why="the diagonal / implicit-sum cases need an op ONNX lacks (or a scatter)",
)
refuses("", "MatMul", what="an operand of unknown rank", why="which axes to transpose and sum depends on the rank")
refuses(
    "",
    "Det",
    what="a matrix size known only at run time (the batch may be symbolic)",
    why="the cofactors are the determinants of minors gathered with static indices",
)
