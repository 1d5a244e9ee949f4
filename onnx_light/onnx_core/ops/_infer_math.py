"""Inference of elementwise, broadcasting, linear-algebra and reduction ops.

Small integer computations whose inputs are all known are folded with numpy; shape
values partly known (symbolic entries) go through the same arithmetic entry by entry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .._proto import NodeProto
from ..gradient._types import Dim, InferContext, Shape, ValueType, infer
from ..helper import make_node
from ._infer_common import (
    BOOL,
    INT64,
    axes_arg,
    axis_index,
    broadcast_shapes,
    finish,
    has_input,
    in_type,
    ints_of,
    length_of,
    merge_dim,
    np_dtype,
    partial,
    small,
    value,
)
from ._reduction import REDUCE_OPS, axes_input_since
from ._registries import upgrade
from ._traits import declare_traits
from ._upgrade import Upgrader, attr_value, clone, pad_inputs

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


@infer("ReverseSequence", "CumProd", "Swish")
def same_as_input(ctx: InferContext) -> list[ValueType]:
    """The input's type and shape (no value folded)."""
    return [in_type(ctx, 0)]


@infer("RandomUniformLike", "RandomNormalLike", "Bernoulli")
def random_like(ctx: InferContext) -> list[ValueType]:
    """The input's shape in ``dtype`` (default the input's type)."""
    x = in_type(ctx, 0)
    return [ValueType(int(ctx.attr("dtype", x.dtype)), x.shape)]


@infer("QuantizeLinear")
def quantize_linear(ctx: InferContext) -> list[ValueType]:
    """The input's shape in ``output_dtype``, else the zero point's type, else uint8."""
    zero_point = in_type(ctx, 2).dtype if has_input(ctx, 2) else 0
    dtype = int(ctx.attr("output_dtype", 0)) or zero_point or 2
    return [ValueType(dtype, in_type(ctx, 0).shape)]


@infer("DequantizeLinear")
def dequantize_linear(ctx: InferContext) -> list[ValueType]:
    """The input's shape in ``output_dtype``, else the scale's type (float before opset 19)."""
    scale = in_type(ctx, 1).dtype if ctx.opset >= 19 else 1
    return [ValueType(int(ctx.attr("output_dtype", 0)) or scale, in_type(ctx, 0).shape)]


@infer("Det")
def det(ctx: InferContext) -> list[ValueType]:
    """The batch dims: the input's shape without its last two."""
    x = in_type(ctx, 0)
    return [ValueType(x.dtype, None if x.shape is None else tuple(x.shape[:-2]))]


@infer("DFT")
def dft(ctx: InferContext) -> list[ValueType]:
    """The input's shape with ``dft_length`` bins along ``axis`` (``m // 2 + 1`` one-sided,
    the IRFFT's ``m`` real samples: a last dim of 1); the last dim 2 otherwise."""
    x = in_type(ctx, 0)
    if x.shape is None:
        return [ValueType(x.dtype, None)]
    rank = len(x.shape)
    if ctx.opset >= 20:
        axes = ints_of(ctx, 2) if has_input(ctx, 2) else [-2]
    else:
        axes = [int(ctx.attr("axis", 1))]
    inverse, onesided = int(ctx.attr("inverse", 0)), int(ctx.attr("onesided", 0))
    if axes is None:
        return [ValueType(x.dtype, (*(None,) * (rank - 1), 1 if inverse and onesided else 2))]
    axis = axis_index(axes[0], rank)
    given = ints_of(ctx, 1) if has_input(ctx, 1) else None
    n = x.shape[axis]
    m: Dim = given[0] if given else (2 * (n - 1) if inverse and onesided and isinstance(n, int) else n)
    if inverse and onesided:
        bins, last = m, 1
    elif onesided:
        bins, last = (m // 2 + 1 if isinstance(m, int) else None), 2
    else:
        bins, last = m, 2
    shape = list(x.shape)
    shape[axis], shape[-1] = bins, last
    return [ValueType(x.dtype, tuple(shape))]


@infer("STFT")
def stft(ctx: InferContext) -> list[ValueType]:
    """``[batch, frames, bins, 2]``: frames = (N - L) // step + 1, bins = L // 2 + 1 one-sided
    (the default) or L."""
    x = in_type(ctx, 0)
    batch, n = (x.shape[0], x.shape[1]) if x.shape is not None and len(x.shape) == 3 else (None, None)
    step = ints_of(ctx, 1)
    given = ints_of(ctx, 3) if has_input(ctx, 3) else None
    window = in_type(ctx, 2).shape if has_input(ctx, 2) else None
    if has_input(ctx, 3):  # frame_length given: known only when it is a constant
        length: Dim = given[0] if given else None
    else:
        length = window[0] if window else (n if not has_input(ctx, 2) else None)
    frames: Dim = None
    if isinstance(n, int) and isinstance(length, int) and step:
        frames = (n - length) // step[0] + 1
    bins: Dim = None
    if isinstance(length, int):
        bins = length // 2 + 1 if int(ctx.attr("onesided", 1)) else length
    return [ValueType(x.dtype, (batch, frames, bins, 2))]


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
    fmod = ctx.attr("fmod", 0)
    if a.size == 1 and b.size == 1:
        # one number each (what exporters compute): Python's ints, exact, without numpy's
        # ufunc dispatch (20-100 us per node, cold, in a transform)
        x, y = int(a.item()), int(b.item())
        if y == 0:
            return None
        r = x % y if not fmod else (abs(x) % abs(y)) * (-1 if x < 0 else 1)  # mod: divisor's sign; fmod: x's
        return np.array(r, a.dtype).reshape(a.shape if a.ndim >= b.ndim else b.shape)
    if not b.all():  # a zero divisor
        return None
    return np.asarray((np.fmod if fmod else np.mod)(a, b)).astype(a.dtype)


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
_REDUCE_FOLD: dict[str, Callable[..., Any]] = {
    "ReduceSum": np.sum,
    "ReduceProd": np.prod,
    "ReduceMax": np.max,
    "ReduceMin": np.min,
}


@infer(*REDUCE_OPS)
def reduce(ctx: InferContext) -> Result:
    """Axes from the attribute (older opsets) or input 1; keepdims; noop_with_empty_axes."""
    x = in_type(ctx, 0)
    keep = int(ctx.attr("keepdims", 1))
    given, axes = axes_arg(ctx, 1)
    if given and axes is None:  # axes computed at run time: the rank is known from their count
        k = length_of(ctx, 1)
        if x.shape is None:
            return [ValueType(x.dtype, None)], [None]
        if keep:
            return [ValueType(x.dtype, (None,) * len(x.shape))], [None]
        # (no axes reduce all of them, or none with noop_with_empty_axes)
        if not k or k > len(x.shape):
            return [ValueType(x.dtype, None)], [None]
        return [ValueType(x.dtype, (None,) * (len(x.shape) - k))], [None]
    if not axes:
        if ctx.attr("noop_with_empty_axes", 0):
            return [x], [value(ctx, 0)]
        axes = None
    if x.shape is None:
        return [ValueType(x.dtype, None)], [None]
    rank = len(x.shape)
    red = set(range(rank)) if axes is None else {axis_index(a, rank) for a in axes}
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
    a = axis_index(int(ctx.attr("axis", 0)), len(x.shape))
    keep = int(ctx.attr("keepdims", 1))
    shape = tuple(1 if i == a else d for i, d in enumerate(x.shape) if keep or i != a)
    return [ValueType(INT64, shape)]


@infer("TopK")
def topk(ctx: InferContext) -> list[ValueType]:
    """Values and int64 indices with ``k`` (attribute before opset 10, else input) on ``axis``."""
    x = in_type(ctx, 0)
    if x.shape is None:
        return [ValueType(x.dtype, None), ValueType(INT64, None)]
    a = axis_index(int(ctx.attr("axis", -1)), len(x.shape))
    k: Dim = None
    if "k" in ctx.attrs:
        k = int(ctx.attrs["k"])
    elif has_input(ctx, 1):
        ks = ints_of(ctx, 1)
        k = ks[0] if ks else None
    shape = tuple(k if i == a else d for i, d in enumerate(x.shape))
    return [ValueType(x.dtype, shape), ValueType(INT64, shape)]


# --------------------------------------------------------------------------- upgrades
def _reduce(u: Upgrader, node: NodeProto) -> None:
    since = axes_input_since(node.op_type)
    axes = attr_value(node, "axes")
    if u.source >= since or u.target < since or axes is None:
        u.out.append(node)
        return
    ax = u.ints(axes, f"{node.op_type}_axes")
    u.out.append(clone(node, [node.input[0], ax], drop=["axes"]))


for _op in REDUCE_OPS:
    upgrade(_op, until=axes_input_since(_op) - 1)(_reduce)


@upgrade("Clip", until=10)
def _clip(u: Upgrader, node: NodeProto) -> None:
    lo, hi = attr_value(node, "min"), attr_value(node, "max")
    if u.source >= 11 or u.target < 11 or (lo is None and hi is None):
        u.out.append(node)
        return
    inputs = [node.input[0], "", ""]
    if lo is not None:
        inputs[1] = u.scalar_like(float(lo), node.input[0], node, "min")
    if hi is not None:
        inputs[2] = u.scalar_like(float(hi), node.input[0], node, "max")
    while inputs[-1] == "":
        inputs.pop()
    u.out.append(clone(node, inputs, drop=["min", "max"]))


@upgrade("Dropout", until=11)
def _dropout(u: Upgrader, node: NodeProto) -> None:
    if u.source >= 12 or u.target < 12:
        u.out.append(node)
        return
    ratio = attr_value(node, "ratio")
    inputs = [node.input[0]]
    if ratio is not None:
        inputs.append(u.const(np.asarray(ratio, np.float32), "Dropout_ratio"))
    outputs = list(node.output)
    cast_to = None
    if u.source < 10 and len(outputs) > 1 and outputs[1]:
        # the mask was of the input's type before opset 10, bool since
        cast_to, outputs[1] = outputs[1], u.new_name("Dropout_mask")
    u.out.append(clone(node, inputs, outputs, drop=["ratio", "is_test"]))
    if cast_to is not None:
        dt = u.dtype(node.input[0])
        if not dt:
            raise u.error(node, f"the element type of {node.input[0]!r} is unknown, needed to convert the mask")
        u.out.append(make_node("Cast", [outputs[1]], [cast_to], to=dt))


@upgrade("Softmax", "LogSoftmax", "Hardmax", until=12)
def _softmax(u: Upgrader, node: NodeProto) -> None:
    if u.source >= 13 or u.target < 13:
        u.out.append(node)
        return
    x = node.input[0]
    axis = int(attr_value(node, "axis", 1))
    shape = u.shape(x)
    rank = None if shape is None else len(shape)
    if rank is not None and not -rank <= axis < rank:
        raise u.error(node, f"axis {axis} is outside [{-rank}, {rank - 1}] for an input of rank {rank}")
    if rank is not None and (axis + rank if axis < 0 else axis) == rank - 1:
        u.out.append(clone(node, axis=-1))
        return
    # flatten-to-2D semantics: the op runs on rows of prod(dims[axis:]) elements
    flat = u.emit("Flatten", [x], f"{node.op_type}_2d", axis=axis)[0]
    shp = u.emit("Shape", [x], f"{node.op_type}_shape")[0]
    res = u.new_name(f"{node.op_type}_out")
    u.out.append(clone(node, [flat], [res], axis=-1))
    u.out.append(make_node("Reshape", [res, shp], [node.output[0]]))


@upgrade("DFT", until=19)
def _dft(u: Upgrader, node: NodeProto) -> None:
    """DFT 20 takes ``axis`` as a scalar input (default -2) instead of an attribute (default 1)."""
    if u.source >= 20 or u.target < 20:
        u.out.append(node)
        return
    axis = u.const(np.asarray(int(attr_value(node, "axis", 1)), np.int64), "DFT_axis")
    u.out.append(clone(node, [*pad_inputs(node.input, 2)[:2], axis], drop=["axis"]))


@upgrade("TopK", until=9)
def _topk(u: Upgrader, node: NodeProto) -> None:
    k = attr_value(node, "k")
    if u.source >= 10 or u.target < 10 or k is None:
        u.out.append(node)
        return
    u.out.append(clone(node, [node.input[0], u.ints([k], "TopK_k")], drop=["k"]))


# --------------------------------------------------------------------------- traits
declare_traits("RandomNormal RandomNormalLike RandomUniform RandomUniformLike Bernoulli Multinomial", random=True)
declare_traits("Dropout", random_if_input=2)  # training_mode (opset 12+; no input 2 before)
# kernels that read and write the low-precision types (float8, int4, ...) as bit patterns themselves
declare_traits("QuantizeLinear DequantizeLinear QLinearMatMul QLinearConv BitCast", bit_exact=True)
declare_traits(
    "Abs Acos Acosh Add And Asin Asinh Atan Atanh BitShift BitwiseAnd BitwiseNot BitwiseOr BitwiseXor Cast "
    "CastLike Ceil Celu Clip Cos Cosh Div Elu Equal Erf Exp Floor Gelu Greater GreaterOrEqual HardSigmoid "
    "HardSwish IsInf IsNaN LeakyRelu Less LessOrEqual Log Max Mean Min Mish Mod Mul Neg Not Or PRelu Pow "
    "Reciprocal Relu Round Selu Shrink Sigmoid Sign Sin Sinh Softplus Softsign Sqrt Sub Sum Tan Tanh "
    "ThresholdedRelu Where Xor",
    elementwise=True,
)
