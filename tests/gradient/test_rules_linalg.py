"""Gradient rules of MatMul, Gemm and Einsum against finite differences and onnxruntime."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime  # noqa: F401  (a test extra)
import pytest
from gradcheck import Case, build_model, check_gradient, gradient, to_ours  # noqa: E402
from onnx import helper as oh  # noqa: E402
from test_rules_math import second_order  # noqa: E402

import onnx_light as ol  # noqa: E402

RNG = np.random.default_rng(4321)


def normal(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape)


def matmul(name: str, a: tuple[int, ...], b: tuple[int, ...], xs: str = "ab", **kw: Any) -> Case:
    return Case(name, [oh.make_node("MatMul", ["a", "b"], ["y"])], {"a": normal(*a), "b": normal(*b)}, list(xs), **kw)


def gemm(name: str, a: tuple[int, ...], b: tuple[int, ...], c: tuple[int, ...] | None, **attrs: Any) -> Case:
    inputs = {"a": normal(*a), "b": normal(*b)}
    if c is not None:
        inputs["c"] = normal(*c)
    node = oh.make_node("Gemm", list(inputs), ["y"], **attrs)
    return Case(name, [node], inputs, list(inputs))


def einsum(name: str, equation: str, *shapes: tuple[int, ...], **kw: Any) -> Case:
    names = [f"x{i}" for i in range(len(shapes))]
    node = oh.make_node("Einsum", names, ["y"], equation=equation)
    return Case(name, [node], {n: normal(*s) for n, s in zip(names, shapes)}, names, **kw)


def det(name: str, shape: tuple[int, ...], **kw: Any) -> Case:
    # onnxruntime's Det is float32 only
    return Case(name, [oh.make_node("Det", ["a"], ["y"])], {"a": normal(*shape)}, ["a"], ort_dtype=np.float32, **kw)


CASES: list[Case] = [
    matmul("MatMul-2d", (3, 4), (4, 5)),
    matmul("MatMul-2d-only-a", (3, 4), (4, 5), xs="a"),
    matmul("MatMul-2d-only-b", (3, 4), (4, 5), xs="b"),
    matmul("MatMul-batched-a", (2, 3, 4), (4, 5)),
    matmul("MatMul-batched4-a-2d-b", (2, 2, 3, 4), (4, 5)),
    matmul("MatMul-batched-b", (3, 4), (2, 4, 5)),
    matmul("MatMul-batched-both", (2, 3, 4), (2, 4, 5)),
    matmul("MatMul-broadcast-batch", (2, 1, 3, 4), (3, 4, 5)),
    matmul("MatMul-broadcast-batch-both", (2, 1, 3, 4), (1, 6, 4, 5)),
    matmul("MatMul-1d-2d", (4,), (4, 5)),
    # B from a Transpose, in float32: onnxruntime fused that Transpose into the backward's
    # MatMul(B, dY) with a 1-D dY and gave a wrong dA (its FusedMatMul; float64 is not fused)
    Case(
        "MatMul-1d-transposed-2d",
        [oh.make_node("Transpose", ["w"], ["b"], perm=[1, 0]), oh.make_node("MatMul", ["a", "b"], ["y"])],
        {"a": normal(4), "w": normal(5, 4)},
        ["a", "w"],
        ort_dtype=np.float32,
    ),
    matmul("MatMul-2d-1d", (3, 4), (4,)),
    matmul("MatMul-1d-1d", (4,), (4,)),
    matmul("MatMul-1d-3d", (4,), (2, 4, 5)),
    matmul("MatMul-3d-1d", (2, 3, 4), (4,)),
    matmul("MatMul-dynamic-batch", (5, 3, 4), (4, 2), dynamic=["a"]),
    matmul("MatMul-dynamic-both", (5, 3, 4), (5, 4, 2), dynamic=["a", "b"]),
    matmul("MatMul-dynamic-vs-1", (5, 3, 4), (1, 4, 2), dynamic=["a"]),
    matmul("MatMul-dynamic-1d", (4,), (5, 4, 2), dynamic=["b"]),
    Case("MatMul-same-input", [oh.make_node("MatMul", ["x", "x"], ["y"])], {"x": normal(4, 4)}, ["x"]),
    gemm("Gemm", (3, 4), (4, 5), (3, 5)),
    gemm("Gemm-no-c", (3, 4), (4, 5), None),
    gemm("Gemm-transA", (4, 3), (4, 5), (5,), transA=1),
    gemm("Gemm-transB", (3, 4), (5, 4), (1, 5), transB=1),
    gemm("Gemm-transAB-alpha-beta", (4, 3), (5, 4), (3, 1), transA=1, transB=1, alpha=0.5, beta=2.0),
    gemm("Gemm-scalar-c", (3, 4), (4, 5), (), alpha=1.5),
    einsum("Einsum-matmul", "ij,jk->ik", (3, 4), (4, 5)),
    einsum("Einsum-batched", "bij,bjk->bik", (2, 3, 4), (2, 4, 5)),
    einsum("Einsum-implicit", "ij,jk", (3, 4), (4, 5)),
    einsum("Einsum-transpose", "ij->ji", (3, 4)),
    einsum("Einsum-sum-free-index", "ij->i", (3, 4)),
    einsum("Einsum-sum-all", "ij->", (3, 4)),
    einsum("Einsum-dot", "i,i->", (4,), (4,)),
    einsum("Einsum-outer", "i,j->ij", (3,), (4,)),
    einsum("Einsum-three", "ij,jk,kl->il", (2, 3), (3, 4), (4, 5)),
    einsum("Einsum-free-index-with-others", "ij,k->ik", (3, 4), (5,)),
    einsum("Einsum-ellipsis", "...ij,jk->...ik", (2, 3, 4), (4, 5)),
    einsum("Einsum-ellipsis-both", "...ij,...jk->...ik", (2, 3, 4), (2, 4, 5)),
    einsum("Einsum-ellipsis-broadcast", "...ij,...jk->...ik", (1, 3, 4), (2, 4, 5)),
    einsum("Einsum-ellipsis-other-side", "ij,...jk->...ik", (3, 4), (2, 4, 5)),
    einsum("Einsum-dynamic", "bij,jk->bik", (5, 3, 4), (4, 2), dynamic=["x0"]),
    einsum("Einsum-ellipsis-dynamic", "...ij,jk->...ik", (5, 3, 4), (4, 2), dynamic=["x0"]),
    # a broadcast label (size 1 in one operand, more in another), as numpy allows
    einsum("Einsum-broadcast-label", "ij,jk->ik", (1, 1), (4, 1)),
    einsum("Einsum-broadcast-label-mixed", "ij,jk->ik", (3, 1), (4, 2)),
    einsum("Einsum-broadcast-label-batch", "bij,bjk->bik", (1, 2, 3), (4, 3, 2)),
    einsum("Einsum-broadcast-label-summed", "ij,j->i", (3, 1), (4,)),
    einsum("Einsum-broadcast-label-ellipsis", "...ij,jk->...ik", (2, 3, 1), (4, 2)),
    einsum("Einsum-broadcast-label-dynamic", "bij,jk->bik", (2, 3, 1), (4, 2), dynamic=["x0"]),
    # found by the property tests: the letter X has more of (j: 2 in x0, 1 in x1) on a symbolic x0
    einsum("Einsum-broadcast-label-other-side-dynamic", "ij,jk->ik", (1, 2), (1, 1), dynamic=["x0"]),
    det("Det-1x1", (1, 1)),
    det("Det-2x2", (2, 2)),
    det("Det-3x3-batched", (2, 3, 3)),
    det("Det-4x4-batch2", (2, 1, 4, 4)),
    det("Det-dynamic-batch", (3, 3, 3), dynamic=["a"]),
    # rank 2 of 3: det = 0, but its gradient (the cofactors) is not
    Case(
        "Det-singular",
        [oh.make_node("Det", ["a"], ["y"])],
        {"a": np.array([[1.0, 2, 3], [2, 4, 6], [0, 1, 5]])},
        ["a"],
        ort_dtype=np.float32,
    ),
    Case(
        "Einsum-same-input",
        [oh.make_node("Einsum", ["x", "x"], ["y"], equation="ij,jk->ik")],
        {"x": normal(4, 4)},
        ["x"],
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_rule(case: Case) -> None:
    check_gradient(case)


#: (row, differentiated w.r.t.): grad of the first x, a function of the listed inputs
SECOND = [
    ("MatMul-2d", ["b"]),
    ("MatMul-broadcast-batch-both", ["b"]),
    ("MatMul-1d-3d", ["b"]),
    ("MatMul-3d-1d", ["b"]),
    ("MatMul-same-input", ["x"]),
    ("Gemm-transAB-alpha-beta", ["b"]),
    ("Gemm-transA", ["b"]),
    ("Einsum-three", ["x1", "x2"]),
    ("Einsum-ellipsis-broadcast", ["x1"]),
    ("Einsum-same-input", ["x"]),
]


@pytest.mark.parametrize("name, wrt", SECOND, ids=[n for n, _ in SECOND])
def test_second_order(name: str, wrt: list[str]) -> None:
    case = next(c for c in CASES if c.name == name)
    check_gradient(second_order(case, wrt))


def test_matmul_2d_is_two_gemms() -> None:
    _, bwd = gradient(CASES[0])
    assert sorted(n.op_type for n in bwd.node if n.op_type != "Identity") == ["Gemm", "Gemm"]


def test_einsum_diagonal_is_refused() -> None:
    case = einsum("diag", "ii->i", (3, 3))
    with pytest.raises(ol.GradientError, match=r"ai.onnx::Einsum.*repeats an index"):
        gradient(case)


def test_einsum_summed_ellipsis_is_refused() -> None:
    case = einsum("ell", "...ij->ij", (2, 3, 4))
    with pytest.raises(ol.GradientError, match=r"sums over '\.\.\.' dims"):
        gradient(case)


def test_batched_times_matrix_weight_grad_is_one_gemm() -> None:
    """x[..., k] @ W[k, m]: dW is one Gemm of the flattened operands, no batched temporary."""
    from gradcheck import gradient

    _, bwd = gradient(matmul("dw", (2, 3, 4), (4, 5), xs="b"))
    ops = [n.op_type for n in bwd.node]
    assert "Gemm" in ops and "ReduceSum" not in ops and ops.count("MatMul") == 0, ops


def test_det_gradient_of_a_singular_matrix_is_its_cofactor_matrix() -> None:
    """A = [[1, 2], [2, 4]] (det 0): dDet/dA = [[4, -2], [-2, 1]], not zero (onnx-ad's answer)."""
    from gradcheck import backward_feeds

    row = Case("sing", [oh.make_node("Det", ["a"], ["y"])], {"a": np.array([[1.0, 2.0], [2.0, 4.0]])}, ["a"])
    model, bwd = gradient(row)
    (da,) = ol.runtime.InferenceSession(bwd).run(None, backward_feeds(bwd, row.inputs, np.array(1.0), model))
    np.testing.assert_allclose(da, [[4.0, -2.0], [-2.0, 1.0]])


def test_det_of_a_run_time_matrix_size_is_refused() -> None:
    import onnx

    row = det("dyn", (2, 3, 3))
    model = build_model(row, np.float64)
    model.graph.input[0].type.tensor_type.shape.dim[2].dim_param = "M"
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "M"
    ours = to_ours(onnx.shape_inference.infer_shapes(model), ol.ModelProto)
    with pytest.raises(ol.GradientError, match=r"ai.onnx::Det.*static matrix size"):
        ol.GradientOfFunction(ours, ["a"], "y")
