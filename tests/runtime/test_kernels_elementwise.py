"""Element-wise kernels: the ONNX backend node cases, and onnxruntime on random inputs."""

from __future__ import annotations

import kernel_harness
import onnx.defs
import pytest
from ort_reference import Row, check_row, params

from onnx_light.runtime._registry import lookup_kernel

# One table of expected failures, keyed by test id ("ort-<op>-<dtype>" or a backend case name).
_NO_DOUBLE = "onnxruntime (CPU, 1.32) has no float64 kernel for this op"
XFAIL: dict[str, str] = {
    **{
        f"ort-{op}-float64": _NO_DOUBLE
        for op in (
            "Acos Acosh Asin Asinh Atan Atanh Cosh Sinh Tan Elu Erf Gelu Gelu_tanh HardSigmoid"
            " HardSwish LeakyRelu Mean Mish PRelu Selu Softplus Softsign ThresholdedRelu"
        ).split()
    },
    "ort-Relu-int64": "onnxruntime (CPU, 1.32) has no int64 Relu kernel",
    "ort-Shrink-float64": "onnxruntime computes Shrink on double through float32 (x - bias rounds)",
}

OPS = set(
    "Abs Acos Acosh Add Asin Asinh Atan Atanh Ceil Celu Clip Cos Cosh Div Elu Erf Exp Floor Gelu"
    " HardSigmoid HardSwish LeakyRelu Log Max Mean Min Mish Mod Mul Neg Pow PRelu Reciprocal Relu"
    " Round Selu Shrink Sigmoid Sign Sin Sinh Softplus Softsign Sqrt Sub Sum Tan Tanh"
    " ThresholdedRelu".split()
)

F = ("float32", "float64")
FI = F + ("int32", "int64")
X = (("any", (3, 4)),)
AB = (("any", (3, 4)), ("any", (4,)))

ROWS: list[Row] = [
    Row("Abs", FI + ("int8", "uint8", "float16"), X),
    Row("Neg", FI + ("int8",), X),
    Row("Sign", FI + ("uint8",), X),
    Row("Relu", FI + ("int8",), X),
    Row("Ceil", F, X),
    Row("Floor", F, X),
    Row("Round", F, (("halves", (3, 4)),)),
    Row("Reciprocal", F, (("nonzero", (3, 4)),)),
    Row("Sqrt", F, (("pos", (3, 4)),)),
    Row("Log", F, (("pos", (3, 4)),)),
    Row("Acosh", F, (("ge1", (3, 4)),)),
    *(Row(op, F, (("unit", (3, 4)),)) for op in ("Acos", "Asin", "Atanh")),
    *(
        Row(op, F, X)
        for op in "Asinh Atan Cos Cosh Sin Sinh Tan Tanh Exp Sigmoid Erf Softplus Softsign Mish"
        " HardSwish Selu Elu HardSigmoid LeakyRelu ThresholdedRelu".split()
    ),
    Row("Celu", ("float32",), X, {"alpha": 0.5}),
    Row("Elu", ("float32",), X, {"alpha": 0.7}, label="Elu_alpha"),
    Row("Gelu", F, X),
    Row("Gelu", F, X, {"approximate": "tanh"}, label="Gelu_tanh"),
    Row("HardSigmoid", ("float32",), X, {"alpha": 0.3, "beta": 0.4}, label="HardSigmoid_ab"),
    Row("LeakyRelu", ("float32",), X, {"alpha": 0.2}, label="LeakyRelu_alpha"),
    Row("Selu", ("float32",), X, {"alpha": 1.5, "gamma": 2.0}, label="Selu_ag"),
    Row("ThresholdedRelu", ("float32",), X, {"alpha": 0.5}, label="ThresholdedRelu_alpha"),
    Row("Shrink", FI + ("uint8",), X, {"bias": 2.0, "lambd": 1.5}),
    Row("PRelu", F, AB),
    Row("Clip", FI + ("uint8",), (("any", (3, 4)), ("any", ()), ("any", ()))),
    Row("Clip", FI, (("any", (3, 4)), None, ("any", ())), label="Clip_max_only"),
    Row("Clip", ("float32",), X, {"min": -1.0, "max": 2.0}, opset=7, label="Clip@7"),
    *(Row(op, FI + ("uint8", "int8", "float16"), AB) for op in ("Add", "Sub", "Mul")),
    Row("Div", FI + ("int8", "uint32"), (("any", (3, 4)), ("nonzero", (4,)))),
    Row("Div", ("float32", "int32"), (("any", (3, 4)), ("nonzero", (4,))), opset=7, label="Div@7"),
    Row("Mod", ("int32", "int64", "int8", "uint16"), (("any", (3, 4)), ("nonzero", (4,)))),
    Row("Mod", FI, (("any", (3, 4)), ("nonzero", (4,))), {"fmod": 1}, label="Mod_fmod"),
    Row("Pow", F, (("pos", (3, 4)), ("exp", (4,)))),
    Row("Pow", ("int32", "int64"), (("any", (3, 4)), ("exp", (4,)))),
    Row("Pow", F, (("any", (3, 4)), ("exp", (4,), "int64")), label="Pow_int_exponent"),
    Row("Pow", ("int32", "int64"), (("pos", (3, 4)), ("exp", (4,), "float32")), label="Pow_fexp"),
    Row("Pow", ("float32",), (("pos", (3, 4)), ("exp", (4,))), opset=7, label="Pow@7"),
    *(Row(op, FI + ("uint8",), (("any", (3, 4)), ("any", (4,)), ("any", (3, 1)))) for op in ("Max", "Min")),
    Row("Max", ("float32",), (("any", (3, 4)), ("any", (4,))), opset=8, label="Max@8"),
    Row("Sum", F, (("any", (3, 4)), ("any", (4,)), ("any", (3, 1)))),
    Row("Mean", F, (("any", (3, 4)), ("any", (4,)), ("any", (3, 1)))),
]

ORT_PARAMS = params(ROWS, XFAIL)
BACKEND = [
    pytest.param(c, id=c.name, marks=[pytest.mark.xfail(reason=XFAIL[c.name])] if c.name in XFAIL else [])
    for c in kernel_harness.cases_for(OPS)
]


@pytest.mark.parametrize("case", BACKEND)
def test_backend_case(case: object) -> None:
    kernel_harness.check_case(case)


@pytest.mark.parametrize(("row", "dtype"), ORT_PARAMS)
def test_matches_onnxruntime(row: Row, dtype: str) -> None:
    check_row(row, dtype)


def test_exclusions_are_not_stale() -> None:
    ids = [p.id for p in ORT_PARAMS] + [p.id for p in BACKEND]
    assert sorted(set(XFAIL) - set(ids)) == []


def test_onnxruntime_rows_cover_float_and_int() -> None:
    tested = {(r.op, d) for r in ROWS for d in r.dtypes}
    for op in OPS:
        assert (op, "float32") in tested, op


@pytest.mark.parametrize("op", sorted(OPS))
def test_registered_for_every_version(op: str) -> None:
    """From opset 7 (or the op's birth) to the newest, the kernel in force is the schema's."""
    for opset in range(7, onnx.defs.onnx_opset_version() + 1):
        try:
            since = onnx.defs.get_schema(op, opset, "").since_version
        except onnx.defs.SchemaError:
            continue
        info = lookup_kernel("", op, opset)
        assert info is not None and info.since == since, f"{op} at opset {opset}: schema {since}"
