"""Rules for ops that move elements without computing: Reshape, Transpose, Concat, Tile, ...

Each is linear, so its gradient is the adjoint applied to ``dY``: a Reshape back to
the input's shape, the inverse permutation, a Split of a Concat, a sum over the
copies of a Tile or an Expand. Integer inputs (shapes, repeats, axes, split sizes)
carry no gradient. Ops whose outputs are integers or constants are declared
``no_grad`` here too.
"""

from __future__ import annotations

from ._table import linear, no_grad, rule
from ._tensor_common import arg_ints, dim_of, norm_axis

no_grad("", "Shape", "Size", "Constant", "ConstantOfShape", "Range", "EyeLike", "NonZero", "OneHot")


def _reshape_back(ctx, dy):  # type: ignore[no-untyped-def]
    """dX = Reshape(dY, Shape(X)): the op only reinterprets the element order."""
    return ctx.op.Reshape(dy, ctx.shape_of(ctx.inputs[0]))


for _op in ("Reshape", "Flatten", "Squeeze", "Unsqueeze"):
    linear("", _op, _reshape_back)


@rule("", "Transpose")
def transpose_grad(ctx, dy):  # type: ignore[no-untyped-def]
    """dX = Transpose(dY, perm⁻¹); the default perm (reversal) is its own inverse."""
    perm = ctx.attr("perm")
    if perm is None:
        return ctx.op.Transpose(dy)
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[int(p)] = i
    if inverse == list(range(len(perm))):
        return dy
    return ctx.op.Transpose(dy, perm=inverse)


@rule("", "Expand")
def expand_grad(ctx, dy):  # type: ignore[no-untyped-def]
    """dX = dY summed over the axes the broadcast created or stretched."""
    return ctx.unbroadcast(dy, ctx.inputs[0])


@rule("", "Tile")
def tile_grad(ctx, dy):  # type: ignore[no-untyped-def]
    """dX[j] = Σ_k dY[k·d + j] per axis: view dY as ``[r0, d0, r1, d1, ...]``, sum the r axes.

    The view is static when the repeats are known and at most one dimension of X is
    not (it becomes -1); otherwise it is interleaved from ``repeats`` and ``Shape(X)``
    at run time.
    """
    x, repeats = ctx.inputs[0], ctx.inputs[1]
    rank = ctx.require_rank(x)
    reps = arg_ints(ctx, 1, "repeats")[1]
    shape = ctx.shape(x)
    unknown = sum(1 for d in shape if not isinstance(d, int)) if shape is not None else rank
    if reps is not None and unknown <= 1:
        if all(r == 1 for r in reps):
            return dy
        target: list[int] = []
        axes: list[int] = []
        for r, d in zip(reps, shape):  # type: ignore[arg-type]
            if r != 1:
                axes.append(len(target))
                target.append(r)
            target.append(d if isinstance(d, int) else -1)
        view = ctx.op.Reshape(dy, ctx.ints(target))
        return ctx.op.ReduceSum(view, ctx.ints(axes), keepdims=0)
    col = ctx.ints([-1, 1])
    pairs = ctx.op.Concat(ctx.op.Reshape(repeats, col), ctx.op.Reshape(ctx.shape_of(x), col), axis=1)
    view = ctx.op.Reshape(dy, ctx.op.Reshape(pairs, ctx.ints([-1])))
    return ctx.op.ReduceSum(view, ctx.ints(list(range(0, 2 * rank, 2))), keepdims=0)


@rule("", "Concat")
def concat_grad(ctx, dy):  # type: ignore[no-untyped-def]
    """dX_i = the i-th piece of Split(dY, [size_0, size_1, ...], axis).

    Sizes known when the pass runs become a constant; the others are read with
    ``Shape(X_i, start=axis, end=axis+1)`` at run time.
    """
    axis = norm_axis(int(ctx.attr("axis", 0)), ctx.require_rank(ctx.output(0)))
    xs = ctx.inputs
    if len(xs) == 1:
        return (dy,)
    dims = [ctx.shape(x)[axis] if ctx.shape(x) is not None else None for x in xs]  # type: ignore[index]
    if all(isinstance(d, int) for d in dims):
        sizes = ctx.ints(dims)
    else:
        sizes = ctx.op.Concat(*[dim_of(ctx, x, axis) for x in xs], axis=0)
    return tuple(ctx.op.Split(dy, sizes, axis=axis, _outputs=len(xs)))


@rule("", "Split")
def split_grad(ctx, dy):  # type: ignore[no-untyped-def]
    """dX = Concat(dY_0, dY_1, ..., axis), zeros for an output that has no gradient."""
    pieces = [g if g is not None else ctx.zeros_like(out) for g, out in zip(ctx.output_grads, ctx.outputs)]
    if len(pieces) == 1:
        return pieces[0]
    return ctx.op.Concat(*pieces, axis=int(ctx.attr("axis", 0)))


@rule("", "CumSum")
def cumsum_grad(ctx, dy):  # type: ignore[no-untyped-def]
    """dX = CumSum(dY) in the other direction, same ``exclusive``.

    Y_i = Σ_{j≤i} X_j gives dX_j = Σ_{i≥j} dY_i (and strict inequalities when exclusive).
    """
    reverse = int(ctx.attr("reverse", 0))
    return ctx.op.CumSum(dy, ctx.inputs[1], exclusive=int(ctx.attr("exclusive", 0)), reverse=1 - reverse)
