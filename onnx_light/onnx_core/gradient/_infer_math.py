"""Inference of elementwise, broadcasting, linear-algebra and reduction ops.

Small integer computations whose inputs are all known are folded with numpy; shape
values partly known (symbolic entries) go through the same arithmetic entry by entry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ._infer_common import (
    BOOL,
    INT64,
    axes_arg,
    broadcast_shapes,
    finish,
    has_input,
    in_type,
    ints_of,
    merge_dim,
    norm_axis,
    np_dtype,
    partial,
    small,
    value,
)
from ._types import Dim, InferContext, Shape, ValueType, infer

Result = tuple[list[ValueType], list[np.ndarray | None]]

_UNARY = (
    "Abs Acos Acosh Asin Asinh Atan Atanh Cos Cosh Sin Sinh Tan Tanh Relu Sigmoid Erf Gelu "
    "LeakyRelu Elu Selu Softplus Softsign HardSigmoid HardSwish Mish Celu ThresholdedRelu Shrink "
    "Clip Neg Reciprocal Sqrt Exp Log Floor Ceil Round Sign Not BitwiseNot Softmax LogSoftmax "
    "Hardmax CumSum Trilu LRN LpNormalization MeanVarianceNormalization"
).split()
_UNARY_FOLD: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "Neg": np.negative,
    "Abs": np.abs,
    "Sign": np.sign,
    "Not": np.logical_not,
}


@infer(*_UNARY, same_type=True)  # folding needs a known value; an absent input 0 is not "all the same type"
def unary(ctx: InferContext) -> Result:
    """Same type and shape as the first input."""
    x = value(ctx, 0)
    fold = _UNARY_FOLD.get(ctx.node.op_type)
    out = fold(x) if fold is not None and x is not None and small(x) else None
    return [in_type(ctx, 0)], [out]


@infer("Identity")
def identity(ctx: InferContext) -> Result:
    """Same type, shape and value (known or partial) as the input."""
    v = value(ctx, 0)
    return [in_type(ctx, 0)], [v if v is not None else partial(ctx, 0)]


@infer("IsNaN", "IsInf")
def is_special(ctx: InferContext) -> list[ValueType]:
    """A bool mask shaped like the input."""
    return [ValueType(BOOL, in_type(ctx, 0).shape)]


@infer("Dropout")
def dropout(ctx: InferContext) -> list[ValueType]:
    """The output as the input; the mask bool (opset 10+) or the input's type."""
    x = in_type(ctx, 0)
    return [x, ValueType(BOOL if ctx.opset >= 10 else x.dtype, x.shape)]


# --------------------------------------------------------------------------- broadcasting
def _trunc_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        q = np.abs(a) // np.abs(b)
        return np.where((a < 0) ^ (b < 0), -q, q).astype(np.result_type(a, b))
    return np.divide(a, b)


_BINARY_FOLD: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "Div": _trunc_div,
    "Equal": np.equal,
    "Less": np.less,
    "LessOrEqual": np.less_equal,
    "Greater": np.greater,
    "GreaterOrEqual": np.greater_equal,
    "And": np.logical_and,
    "Or": np.logical_or,
    "Xor": np.logical_xor,
    "Max": np.maximum,
    "Min": np.minimum,
    "Sum": np.add,
}
_BOOL_OUT = {"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor"}


def _sym_entry(op: str, a: Dim, b: Dim) -> Dim:
    """One entry of integer arithmetic on partly known shape values."""
    if isinstance(a, int) and isinstance(b, int):
        r = _BINARY_FOLD[op](np.array(a), np.array(b))
        return bool(r) if r.dtype == bool else int(r)
    if op in ("Mul", "Div") and b == 1:
        return a
    if op == "Mul" and a == 1:
        return b
    if op in ("Add", "Sub") and b == 0:
        return a
    if op == "Add" and a == 0:
        return b
    if op == "Equal" and isinstance(a, str) and a == b:
        return True
    return None


def _nothing_known(ctx: InferContext) -> bool:
    """True when no input has a known or partly known value (plain loops: the common case)."""
    for v in ctx.values:
        if v is not None:
            return False
    for p in ctx.partial:
        if p is not None:
            return False
    return True


def _fold_binary(ctx: InferContext, op: str) -> np.ndarray | None:
    n = len(ctx.node.input)
    if n and _nothing_known(ctx):
        return None  # nothing known to fold (the common case, answered without the machinery)
    vals = [v for v in (value(ctx, i) for i in range(n)) if v is not None]
    if len(vals) == n and small(*vals):
        res = vals[0]
        for v in vals[1:]:
            res = _BINARY_FOLD[op](res, v)
        res = np.asarray(res)
        if op in _BOOL_OUT:
            return res.astype(bool)
        return res if op == "Div" else res.astype(vals[0].dtype)
    if n != 2 or op not in ("Add", "Sub", "Mul", "Div", "Equal"):
        return None
    pa, pb = partial(ctx, 0), partial(ctx, 1)
    if pa is None or pb is None or pa.ndim > 1 or pb.ndim > 1:
        return None
    a, b = np.broadcast_arrays(pa, pb)
    out = np.empty(a.shape, dtype=object)
    for i, (x, y) in enumerate(zip(a.reshape(-1), b.reshape(-1))):
        out.reshape(-1)[i] = _sym_entry(op, x, y)
    if op == "Equal":
        flat = list(out.reshape(-1))
        return np.array(flat, dtype=bool).reshape(out.shape) if all(isinstance(x, bool) for x in flat) else None
    first = value(ctx, 0)
    return finish(out, first.dtype if first is not None else np.int64)


@infer(*sorted(_BOOL_OUT))
@infer(  # same_type: equal shapes broadcast to themselves, the dtype is input 0's, folding needs values
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Mod",
    "Max",
    "Min",
    "Sum",
    "Mean",
    "PRelu",
    "BitShift",
    "BitwiseAnd",
    "BitwiseOr",
    "BitwiseXor",
    same_type=True,
)
def broadcasting(ctx: InferContext) -> Result:
    """The numpy broadcast of all inputs; bool for comparisons, else the first input's type."""
    op = ctx.node.op_type
    ins = ctx.inputs
    shape: Shape
    if len(ins) == 2 and ins[0].shape == ins[1].shape and ins[0].shape is not None:
        shape = ins[0].shape  # equal shapes broadcast to themselves (broadcast_shapes' answer, directly)
    else:
        shape = broadcast_shapes(*(t.shape for t in ins))
    dtype = BOOL if op in _BOOL_OUT else in_type(ctx, 0).dtype
    if op == "PRelu":
        shape = in_type(ctx, 0).shape  # slope broadcasts to X, never the other way
    if op in _BINARY_FOLD:
        out = _fold_binary(ctx, op)
    elif op == "Mod":
        out = _fold_mod(ctx)
    else:
        out = None
    return [ValueType(dtype, shape)], [out]


def _fold_mod(ctx: InferContext) -> np.ndarray | None:
    """Integer ``Mod`` of two known values (torch's attention export computes a slice end so)."""
    a, b = value(ctx, 0), value(ctx, 1)
    if a is None or b is None or not small(a, b) or a.dtype.kind not in "iu" or b.dtype.kind not in "iu":
        return None
    if np.any(b == 0):
        return None
    return np.asarray((np.fmod if ctx.attr("fmod", 0) else np.mod)(a, b)).astype(a.dtype)


@infer("Where")
def where(ctx: InferContext) -> Result:
    """The broadcast of condition, X and Y; X's type."""
    shape = broadcast_shapes(*(in_type(ctx, i).shape for i in range(3)))
    c, x, y = value(ctx, 0), value(ctx, 1), value(ctx, 2)
    out: np.ndarray | None = None
    if c is not None and x is not None and y is not None and small(c, x, y):
        out = np.where(c, x, y)
    elif c is not None and c.ndim <= 1:
        px, py = partial(ctx, 1), partial(ctx, 2)
        if px is not None and py is not None and px.ndim <= 1 and py.ndim <= 1:
            out = finish(np.where(c, px, py))
    return [ValueType(in_type(ctx, 1).dtype, shape)], [out]


#: types whose numpy dtype holds the values themselves (not a bit pattern nor strings)
_NATIVE = {1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13}


def _cast_value(x: np.ndarray | None, to: int) -> np.ndarray | None:
    if x is None or to not in _NATIVE or x.dtype.kind not in "biuf" or not small(x):
        return None
    return x.astype(np_dtype(to))


@infer("Cast")
def cast(ctx: InferContext) -> Result:
    """The input's shape in type ``to``; folds known values and keeps partly known integer ones."""
    to = int(ctx.attr("to", 0))
    out = _cast_value(value(ctx, 0), to)
    if out is None and value(ctx, 0) is None and to in (INT64, 6):
        out = partial(ctx, 0)
    return [ValueType(to, in_type(ctx, 0).shape)], [out]


@infer("CastLike")
def cast_like(ctx: InferContext) -> Result:
    """The input's shape in the second input's type."""
    to = in_type(ctx, 1).dtype
    return [ValueType(to, in_type(ctx, 0).shape)], [_cast_value(value(ctx, 0), to)]


# --------------------------------------------------------------------------- linear algebra
@infer("MatMul", "MatMulInteger")
def matmul(ctx: InferContext) -> list[ValueType]:
    """numpy.matmul shapes: 1-D operands promoted then squeezed, batch dims broadcast."""
    a, b = in_type(ctx, 0), in_type(ctx, 1)
    dtype = 6 if ctx.node.op_type == "MatMulInteger" else a.dtype
    if a.shape is None or b.shape is None or not a.shape or not b.shape:
        return [ValueType(dtype, None)]
    sa, sb = list(a.shape), list(b.shape)
    vec_a, vec_b = len(sa) == 1, len(sb) == 1
    if vec_a:
        sa = [1, *sa]
    if vec_b:
        sb = [*sb, 1]
    batch = broadcast_shapes(tuple(sa[:-2]), tuple(sb[:-2]))
    assert batch is not None
    out = [*batch, *([] if vec_a else [sa[-2]]), *([] if vec_b else [sb[-1]])]
    return [ValueType(dtype, tuple(out))]


@infer("Gemm")
def gemm(ctx: InferContext) -> list[ValueType]:
    """``(M, N)`` from A (transA) and B (transB)."""
    a, b = in_type(ctx, 0), in_type(ctx, 1)
    m: Dim = None
    n: Dim = None
    if a.shape is not None and len(a.shape) == 2:
        m = a.shape[1] if ctx.attr("transA", 0) else a.shape[0]
    if b.shape is not None and len(b.shape) == 2:
        n = b.shape[0] if ctx.attr("transB", 0) else b.shape[1]
    return [ValueType(a.dtype or b.dtype, (m, n))]


def _einsum_terms(eq: str, ranks: list[int | None]) -> tuple[list[str], str] | None:
    eq = eq.replace(" ", "")
    lhs, _, rhs = eq.partition("->")
    terms = lhs.split(",")
    if "->" not in eq:
        letters = [c for c in lhs if c.isalpha()]
        rhs = ("..." if "..." in lhs else "") + "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    return terms, rhs


def _merge_label(old: Dim, new: Dim) -> Dim:
    if old is None or (old == 1 and new is not None):
        return new
    if new is None or new == 1:
        return old
    return merge_dim(old, new)


@infer("Einsum")
def einsum(ctx: InferContext) -> list[ValueType]:
    """Output dims from the equation's labels (``...`` broadcast across operands)."""
    dtype = in_type(ctx, 0).dtype
    parsed = _einsum_terms(str(ctx.attr("equation", "")), [t.rank for t in ctx.inputs])
    if parsed is None:
        return [ValueType(dtype, None)]
    terms, rhs = parsed
    labels: dict[str, Dim] = {}
    ell: list[tuple[Dim, ...]] = []
    for term, t in zip(terms, ctx.inputs):
        if t.shape is None:
            if "..." in term:
                return [ValueType(dtype, None)]
            for c in term:
                labels.setdefault(c, None)
            continue
        head, dots, tail = term.partition("...")
        n_ell = len(t.shape) - len(head) - len(tail) if dots else 0
        dims = list(t.shape)
        ell.append(tuple(dims[len(head) : len(head) + n_ell]))
        for c, d in zip(head + tail, dims[: len(head)] + dims[len(dims) - len(tail) :]):
            labels[c] = _merge_label(labels.get(c), d) if c in labels else d
    out: list[Dim] = []
    head, dots, tail = rhs.partition("...")
    for c in head:
        out.append(labels.get(c))
    if dots:
        b = broadcast_shapes(*ell) if ell else ()
        if b is None:
            return [ValueType(dtype, None)]
        out.extend(b)
    for c in tail:
        out.append(labels.get(c))
    return [ValueType(dtype, tuple(out))]


# --------------------------------------------------------------------------- reductions
_REDUCE = (
    "ReduceSum ReduceMean ReduceMax ReduceMin ReduceProd ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp ReduceSumSquare"
).split()
_REDUCE_FOLD: dict[str, Callable[..., Any]] = {
    "ReduceSum": np.sum,
    "ReduceProd": np.prod,
    "ReduceMax": np.max,
    "ReduceMin": np.min,
}


@infer(*_REDUCE)
def reduce(ctx: InferContext) -> Result:
    """Axes from the attribute (older opsets) or input 1; keepdims; noop_with_empty_axes."""
    x = in_type(ctx, 0)
    keep = int(ctx.attr("keepdims", 1))
    given, axes = axes_arg(ctx, 1)
    if given and axes is None:  # axes computed at run time
        return [ValueType(x.dtype, None if not keep or x.shape is None else (None,) * len(x.shape))], [None]
    if not axes:
        if ctx.attr("noop_with_empty_axes", 0):
            return [x], [value(ctx, 0)]
        axes = None
    if x.shape is None:
        return [ValueType(x.dtype, None)], [None]
    rank = len(x.shape)
    red = set(range(rank)) if axes is None else {norm_axis(a, rank) for a in axes}
    shape = tuple(1 if i in red else d for i, d in enumerate(x.shape) if keep or i not in red)
    out: np.ndarray | None = None
    v = value(ctx, 0)
    fold = _REDUCE_FOLD.get(ctx.node.op_type)
    if fold is not None and v is not None and small(v) and v.dtype.kind in "iub":
        out = np.asarray(fold(v, axis=tuple(sorted(red)), keepdims=bool(keep))).astype(v.dtype)
    return [ValueType(x.dtype, shape)], [out]


@infer("ArgMax", "ArgMin")
def arg_reduce(ctx: InferContext) -> list[ValueType]:
    """int64 indices along ``axis`` (kept as 1 when keepdims)."""
    x = in_type(ctx, 0)
    if x.shape is None:
        return [ValueType(INT64, None)]
    a = norm_axis(int(ctx.attr("axis", 0)), len(x.shape))
    keep = int(ctx.attr("keepdims", 1))
    shape = tuple(1 if i == a else d for i, d in enumerate(x.shape) if keep or i != a)
    return [ValueType(INT64, shape)]


@infer("TopK")
def topk(ctx: InferContext) -> list[ValueType]:
    """Values and int64 indices with ``k`` (attribute before opset 10, else input) on ``axis``."""
    x = in_type(ctx, 0)
    if x.shape is None:
        return [ValueType(x.dtype, None), ValueType(INT64, None)]
    a = norm_axis(int(ctx.attr("axis", -1)), len(x.shape))
    k: Dim = None
    if "k" in ctx.attrs:
        k = int(ctx.attrs["k"])
    elif has_input(ctx, 1):
        ks = ints_of(ctx, 1)
        k = ks[0] if ks else None
    shape = tuple(k if i == a else d for i, d in enumerate(x.shape))
    return [ValueType(x.dtype, shape), ValueType(INT64, shape)]
