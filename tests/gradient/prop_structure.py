"""Property generators of the linalg and reduction families (see propgen.py)."""

from __future__ import annotations

import functools

import numpy as np
from gradcheck import Case
from hypothesis import strategies as st
from propgen import Draw, Gen, axes, broadcast_shapes, broadcast_to, magnitude, make_case, normal, shape, side, subset

# -- linalg -----------------------------------------------------------------------------------


def _matmul(draw: Draw, rng: np.random.Generator) -> Case:
    batch_a, batch_b = broadcast_shapes(draw, 2, rank_hi=2)
    m, k, n = side(draw), side(draw), side(draw)
    a = [k] if draw(st.booleans()) and draw(st.booleans()) else [*batch_a, m, k]
    b = [k] if draw(st.booleans()) and draw(st.booleans()) else [*batch_b, k, n]
    return make_case("MatMul", {"a": normal(rng, a), "b": normal(rng, b)}, subset(draw, ["a", "b"]))


def _gemm(draw: Draw, rng: np.random.Generator) -> Case:
    m, k, n = side(draw), side(draw), side(draw)
    ta, tb = int(draw(st.integers(0, 1))), int(draw(st.integers(0, 1)))
    attrs = {"transA": ta, "transB": tb}
    if draw(st.booleans()):
        attrs.update(alpha=float(draw(st.floats(-2.0, 2.0))), beta=float(draw(st.floats(-2.0, 2.0))))
    inputs = {"a": normal(rng, [k, m] if ta else [m, k]), "b": normal(rng, [n, k] if tb else [k, n])}
    inputs["c"] = normal(rng, broadcast_to(draw, [m, n])) if draw(st.booleans()) else None
    xs = subset(draw, [x for x, v in inputs.items() if v is not None])
    return make_case("Gemm", inputs, xs, attrs=attrs, opset=int(draw(st.sampled_from([11, 13, 21]))))


# equations whose labels have one size in every operand (a label of size 1 in one operand and
# more in another is the broadcast-label case, engineer i8-wrong's)
EINSUM = [
    "ij,jk->ik",
    "bij,bjk->bik",
    "bij,jk->bik",
    "ij,kj->ik",
    "i,i->",
    "i,j->ij",
    "ij->ji",
    "ij->",
    "ij->j",
    "ij,ij->ij",
    "ijk->kij",
    "...ij,...jk->...ik",
]


def _einsum(draw: Draw, rng: np.random.Generator) -> Case:
    equation = draw(st.sampled_from(EINSUM))
    sizes = {label: side(draw) for label in "bijk"}
    batch = [side(draw) for _ in range(draw(st.integers(0, 2)))]
    operands = equation.split("->")[0].split(",")
    inputs = {}
    for n, labels in enumerate(operands):
        dims = [sizes[c] for c in labels.replace("...", "")]
        inputs[f"x{n}"] = normal(rng, batch + dims if labels.startswith("...") else dims)
    return make_case("Einsum", inputs, subset(draw, list(inputs)), attrs={"equation": equation})


def _einsum_broadcast_label(draw: Draw, rng: np.random.Generator) -> Case:
    """``ij,jk->ik`` with j of size 1 in one operand and more in the other (numpy and torch broadcast it)."""
    i, j, k = side(draw), side(draw, 2, 4), side(draw)
    a, b = ([i, 1], [j, k]) if draw(st.booleans()) else ([i, j], [1, k])
    inputs = {"x0": normal(rng, a), "x1": normal(rng, b)}
    return make_case("Einsum", inputs, subset(draw, list(inputs)), attrs={"equation": "ij,jk->ik"})


LINALG: dict[str, Gen] = {"MatMul": _matmul, "Gemm": _gemm, "Einsum": _einsum}
# a variant that hits a known bug of a rule another engineer owns (xfail in test_properties.py)
BROADCAST_LABEL = "(broadcast label)"
LINALG[f"Einsum {BROADCAST_LABEL}"] = _einsum_broadcast_label


# -- reduction --------------------------------------------------------------------------------
def _values(op: str, rng: np.random.Generator, dims: list[int]) -> np.ndarray:
    if op == "ReduceLogSum":
        return np.asarray(rng.uniform(0.5, 2.0, dims))
    if op in ("ReduceL1", "ReduceProd"):
        return magnitude(rng, dims, 0.5, 1.5)
    return normal(rng, dims)


def _reduce(draw: Draw, rng: np.random.Generator, op: str) -> Case:
    """Axes as an attribute (before 18; ReduceSum before 13) or an input, present or not,
    empty or not; keepdims; noop_with_empty_axes where the opset has it."""
    opset = int(draw(st.sampled_from([11, 13, 18, 21])))
    as_input = opset >= 18 or (op == "ReduceSum" and opset >= 13)
    dims = shape(draw, 0, 4)
    picked = axes(draw, len(dims)) if dims and draw(st.booleans()) else None
    attrs: dict[str, int | list[int]] = {"keepdims": int(draw(st.integers(0, 1)))}
    if as_input and not picked and draw(st.booleans()):
        attrs["noop_with_empty_axes"] = int(draw(st.integers(0, 1)))
    inputs: dict[str, np.ndarray | None] = {"x": _values(op, rng, dims)}
    consts: tuple[str, ...] = ()
    if as_input:
        inputs["axes"] = np.asarray(picked, np.int64) if picked is not None else None
        consts = () if draw(st.booleans()) and draw(st.booleans()) else ("axes",)
    elif picked:
        attrs["axes"] = picked
    return make_case(op, inputs, ["x"], attrs=attrs, opset=opset, consts=consts)


REDUCE_OPS = "ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp ReduceMax ReduceMean ReduceMin ReduceProd ReduceSum"
REDUCTION: dict[str, Gen] = {op: functools.partial(_reduce, op=op) for op in (REDUCE_OPS + " ReduceSumSquare").split()}
