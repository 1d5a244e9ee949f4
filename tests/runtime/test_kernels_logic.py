"""Logical, comparison, bitwise and Where kernels: backend node cases and onnxruntime."""

from __future__ import annotations

import kernel_harness
import pytest
from ort_reference import Row, check_row, params

# One table of expected failures, keyed by test id ("ort-<op>-<dtype>" or a backend case name).
XFAIL: dict[str, str] = {
    "ort-Where-bool": "onnxruntime (CPU, 1.32) has no bool Where kernel",
}

OPS = set(
    "And Equal Greater GreaterOrEqual IsInf IsNaN Less LessOrEqual Not Or Xor Where"
    " BitwiseAnd BitwiseOr BitwiseNot BitwiseXor".split()
)

FI = ("float32", "float64", "int32", "int64")
INTS = ("int8", "uint8", "int16", "int32", "int64", "uint64")
AB = (("ties", (3, 4)), ("ties", (4,)))
BOOL_AB = (("bool", (3, 4)), ("bool", (4,)))

ROWS: list[Row] = [
    *(Row(op, ("bool",), BOOL_AB) for op in ("And", "Or", "Xor")),
    Row("Not", ("bool",), (("bool", (3, 4)),)),
    Row("Equal", FI + ("bool", "uint8", "float16"), AB),
    Row("Equal", ("object",), (("str", (3, 4)), ("str", (4,))), label="Equal_string"),
    Row("Equal", ("int32", "int64"), AB, opset=7, label="Equal@7"),
    *(Row(op, FI + ("uint8", "int8", "float16"), AB) for op in ("Greater", "GreaterOrEqual", "Less", "LessOrEqual")),
    Row("Greater", ("float32", "float64"), AB, opset=7, label="Greater@7"),
    Row("Less", ("float64", "int64"), AB, opset=9, label="Less@9"),
    Row("IsNaN", ("float32", "float64", "float16"), (("special", (3, 4)),)),
    Row("IsInf", ("float32", "float64"), (("special", (3, 4)),)),
    Row("IsInf", ("float32",), (("special", (3, 4)),), {"detect_negative": 0}, label="IsInf_pos"),
    Row("IsInf", ("float64",), (("special", (3, 4)),), {"detect_positive": 0}, label="IsInf_neg"),
    Row(
        "Where",
        FI + ("bool", "uint8", "float16"),
        (("bool", (3, 4), "bool"), ("any", (4,)), ("any", (3, 1))),
    ),
    # the native float32 pass (a condition of the result's shape, each branch that shape or one value)
    Row("Where", ("float32",), (("bool", (64, 40), "bool"), ("special", (64, 40)), ("any", ())), label="Where_0d_y"),
    Row("Where", ("float32",), (("bool", (64, 40), "bool"), ("any", ()), ("special", (64, 40))), label="Where_0d_x"),
    Row(
        "Where",
        ("object",),
        (("bool", (3, 4), "bool"), ("str", (4,)), ("str", (3, 1))),
        label="Where_string",
    ),
    *(Row(op, INTS, (("any", (3, 4)), ("any", (4,)))) for op in ("BitwiseAnd", "BitwiseOr")),
    Row("BitwiseXor", INTS, (("any", (3, 4)), ("any", (4,)))),
    Row("BitwiseNot", INTS, (("any", (3, 4)),)),
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
