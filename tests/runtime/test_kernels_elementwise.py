"""Element-wise kernels: the ONNX backend node cases, and onnxruntime on random inputs."""

from __future__ import annotations

import kernel_harness
import numpy as np
import pytest
from ort_reference import Row, check_row, params

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
BACKEND = kernel_harness.backend_params(OPS, XFAIL)


@pytest.mark.parametrize("case", BACKEND)
def test_backend_case(case: object) -> None:
    kernel_harness.check_case(case)


@pytest.mark.parametrize(("row", "dtype"), ORT_PARAMS)
def test_matches_onnxruntime(row: Row, dtype: str) -> None:
    check_row(row, dtype)


def test_exclusions_are_not_stale() -> None:
    assert kernel_harness.stale_exclusions(XFAIL, ORT_PARAMS, BACKEND) == []


def test_onnxruntime_rows_cover_float_and_int() -> None:
    tested = {(r.op, d) for r in ROWS for d in r.dtypes}
    for op in OPS:
        assert (op, "float32") in tested, op


# --- fast paths: same answers as the plain formulas ------------------------------------------------


def test_erf_float64_within_2_ulp_of_math_erf() -> None:
    import math

    from onnx_light.runtime.kernels._erf import erf_float64

    grid = np.linspace(-7.0, 7.0, 400_001)
    rand = np.random.default_rng(7).standard_normal(100_000) * 3
    edges = np.array([0.0, 1e-300, 5e-324, -1e-10, 0.25, 0.75, np.nextafter(0.75, 0), 5.999999999999999, 6.0, 30.0])
    xs = np.concatenate([grid, rand, edges, -edges])
    got = erf_float64(xs)
    want = np.array([math.erf(v) for v in xs.tolist()])
    nonzero = want != 0
    ulps = np.abs(got - want)[nonzero] / np.spacing(np.abs(want[nonzero]))
    assert ulps.max() <= 2.0
    assert np.array_equal(got[~nonzero], want[~nonzero])
    assert np.signbit(erf_float64(np.array([-0.0]))[0])
    special = erf_float64(np.array([np.inf, -np.inf, np.nan]))
    assert special[0] == 1.0 and special[1] == -1.0 and np.isnan(special[2])


def test_erf_kernel_keeps_dtype_and_shape() -> None:
    from onnx_light.runtime.kernels.elementwise import erf

    x = np.random.default_rng(1).standard_normal((3, 4, 5)).astype(np.float32)
    y = erf(x)
    assert y.dtype == np.float32 and y.shape == x.shape
    import math

    np.testing.assert_allclose(y, np.array([math.erf(v) for v in x.ravel().tolist()]).reshape(x.shape), rtol=1e-6)
    assert erf(np.array(0.5, np.float64)).shape == ()


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int32, np.int8])
@pytest.mark.parametrize("shape", [(), (5,), (4096,), (2, 4096), (3, 7, 11)])
def test_relu_and_sigmoid_match_plain_formulas(dtype: type, shape: tuple[int, ...]) -> None:
    from onnx_light.runtime.kernels.elementwise import relu, relu_inplace, sigmoid

    rng = np.random.default_rng(3)
    x = np.asarray((rng.standard_normal(shape) * 4).astype(dtype))
    if x.dtype.kind == "f" and x.size > 3:
        x.ravel()[:3] = [np.nan, -0.0, np.inf]
    want = np.asarray(np.maximum(x, 0)).astype(x.dtype)
    got = relu(x)
    assert type(got) is np.ndarray and got.dtype == x.dtype
    assert np.array_equal(got.reshape(-1).view(np.uint8), want.reshape(-1).view(np.uint8))
    y = x.copy()
    got_inplace = relu_inplace(y)
    assert np.array_equal(np.asarray(got_inplace).reshape(-1).view(np.uint8), want.reshape(-1).view(np.uint8))
    if x.dtype.kind == "f":
        with np.errstate(all="ignore"):
            want_s = np.asarray(1 / (1 + np.exp(-x))).astype(x.dtype)
            got_s = sigmoid(x)
        assert type(got_s) is np.ndarray and got_s.dtype == x.dtype
        from onnx_light.runtime import _native

        if x.dtype == np.float32 and x.size >= _native._ELEMENTWISE_MIN and _native.NATIVE is not None:
            # the native pass (src/elementwise.cpp): its own exp, within 2 ulp of numpy's
            np.testing.assert_allclose(got_s, want_s, rtol=3e-7, atol=0)
        else:
            assert np.array_equal(got_s.reshape(-1).view(np.uint8), want_s.reshape(-1).view(np.uint8))


def test_compiled_plan_never_writes_into_feeds_or_constants() -> None:
    """Relu written in place only over a dying intermediate (runtime/_codegen.py)."""
    from onnx import helper as H
    from onnx import numpy_helper

    import onnx_light
    from onnx_light.runtime import InferenceSession

    x = np.random.default_rng(0).standard_normal((2, 4096)).astype(np.float32)
    c = np.full((2, 4096), -0.5, np.float32)
    nodes = [
        H.make_node("Relu", ["x"], ["r0"]),
        H.make_node("Add", ["x", "c"], ["a"]),
        H.make_node("Relu", ["a"], ["r1"]),
        H.make_node("Relu", ["c"], ["r2"]),
        H.make_node("Mul", ["x", "c"], ["b"]),
        H.make_node("Relu", ["b"], ["r3"]),  # b dies here: computed in place
    ]
    graph = H.make_graph(
        nodes,
        "g",
        [H.make_tensor_value_info("x", 1, [2, 4096])],
        [H.make_tensor_value_info(n, 1, None) for n in ("r0", "r1", "r2", "a", "r3")],
        [numpy_helper.from_array(c, "c")],
    )
    model = H.make_model(graph, opset_imports=[H.make_opsetid("", 18)])
    sess = InferenceSession(onnx_light.load_from_string(model.SerializeToString()))
    before = x.copy()
    r0, r1, r2, a, r3 = sess.run(None, {"x": x})
    assert np.array_equal(r3, np.maximum(x * c, 0))
    assert np.array_equal(x, before)
    assert np.array_equal(r0, np.maximum(x, 0)) and np.array_equal(a, x + c)
    assert np.array_equal(r1, np.maximum(x + c, 0)) and not r2.any()
    # twice: the constant is intact
    assert np.array_equal(sess.run(None, {"x": x})[3], x + c)
