"""Reduction kernels (Reduce*, ArgMax/ArgMin, CumSum, TopK, Einsum): backend cases and onnxruntime."""

from __future__ import annotations

import kernel_harness
import numpy as np
import pytest
from ort_reference import Row, check_row, params

# One table of expected failures, keyed by test id ("ort-<op>-<dtype>" or a backend case name).
XFAIL: dict[str, str] = {
    "ort-ReduceMean_empty_set-float32": "the spec leaves the mean of no values undefined; we give"
    " NaN (0/0) like numpy, onnxruntime gives 0",
}

REDUCE = (
    "ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp ReduceMax ReduceMean ReduceMin ReduceProd"
    " ReduceSum ReduceSumSquare".split()
)
OPS = set(REDUCE) | {"ArgMax", "ArgMin", "CumSum", "TopK", "Einsum"}

F = ("float32", "float64")
FI = F + ("int32", "int64")
X = ("any", (2, 3, 4))


def i64(*v: int) -> np.ndarray:
    return np.array(v, np.int64)


def _dtypes(op: str) -> tuple[str, ...]:
    return F if op in ("ReduceLogSum", "ReduceLogSumExp") else FI


def _domain(op: str) -> str:
    # small factors keep integer products from overflowing, which the spec leaves undefined
    return {"ReduceLogSum": "pos", "ReduceProd": "ties"}.get(op, "any")


def _reduce_rows(op: str) -> list[Row]:
    x = (_domain(op), (2, 3, 4))
    dts = _dtypes(op)
    return [
        Row(op, dts, (x, i64(1))),
        Row(op, dts, (x, i64(-1, 0)), {"keepdims": 0}, label=f"{op}_neg_axes"),
        Row(op, dts, (x,), {"keepdims": 0}, label=f"{op}_all"),
        Row(op, dts[:1], (x, i64()), {"noop_with_empty_axes": 1}, label=f"{op}_noop"),
        Row(op, dts[:1], ((_domain(op), (2, 0, 4)), i64(1)), label=f"{op}_empty_set"),
        Row(op, dts[:1], (x,), {"axes": [0, 2], "keepdims": 0}, opset=11, label=f"{op}@11"),
    ]


ROWS: list[Row] = [
    *(row for op in REDUCE for row in _reduce_rows(op)),
    Row("ReduceMax", ("uint8", "int8"), (X, i64(2))),
    Row("ReduceSum", ("float32",), (X, i64(0, 2)), opset=13, label="ReduceSum@13"),
    *(Row(op, FI, (("ties", (3, 5)),), {"axis": 1}) for op in ("ArgMax", "ArgMin")),
    *(
        Row(op, FI, (("ties", (3, 5)),), {"keepdims": 0, "select_last_index": 1}, label=f"{op}_last")
        for op in ("ArgMax", "ArgMin")
    ),
    Row("ArgMax", ("float32",), (("ties", (3, 5)),), {"axis": -1}, opset=11, label="ArgMax@11"),
    Row("CumSum", FI, (X, i64(1))),
    Row("CumSum", FI, (X, np.array(-1, np.int32)), {"exclusive": 1}, label="CumSum_excl"),
    Row("CumSum", FI, (X, i64(0)), {"reverse": 1}, label="CumSum_rev"),
    Row("CumSum", FI, (X, i64(2)), {"exclusive": 1, "reverse": 1}, label="CumSum_excl_rev"),
    Row("TopK", FI, (("ties", (3, 6)), i64(3)), n_out=2),
    Row("TopK", FI, (("ties", (3, 6)), i64(2)), {"largest": 0, "axis": 0}, n_out=2, label="TopK_min"),
    Row("TopK", ("float32",), (("ties", (3, 6)), i64(2)), opset=10, n_out=2, label="TopK@10"),
    Row("TopK", ("float32",), (("ties", (3, 6)),), {"k": 2, "axis": 0}, opset=7, n_out=2, label="TopK@7"),
    Row("Einsum", FI, (("any", (3, 4)), ("any", (4, 5))), {"equation": "ij,jk->ik"}),
    Row(
        "Einsum",
        F,
        (("any", (2, 3, 4)), ("any", (2, 4, 5))),
        {"equation": "bij, bjk -> bik"},
        label="Einsum_batch",
    ),
    Row("Einsum", FI, (("any", (2, 3, 4)),), {"equation": "...ij->...ji"}, label="Einsum_ellipsis"),
    Row("Einsum", F, (("any", (4, 4)),), {"equation": "ii->i"}, label="Einsum_diag"),
    Row("Einsum", F, (("any", (3, 4)), ("any", (4,))), {"equation": "ij,j"}, label="Einsum_implicit"),
]

ORT_PARAMS = params(ROWS, XFAIL)
BACKEND = kernel_harness.backend_params(OPS, XFAIL)


@pytest.mark.parametrize("case", BACKEND)
def test_backend_case(case: object) -> None:
    kernel_harness.check_case(case)


@pytest.mark.parametrize(("row", "dtype"), ORT_PARAMS)
def test_matches_onnxruntime(row: Row, dtype: str) -> None:
    check_row(row, dtype)


def test_exclusions_are_not_stale() -> None:
    assert kernel_harness.stale_exclusions(XFAIL, ORT_PARAMS, BACKEND) == []
