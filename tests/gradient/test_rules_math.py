"""Gradient rules of the math and activation families against finite differences and onnxruntime.

One row per rule (several for rules with attributes, optional inputs or broadcasting);
inputs are drawn away from kinks and outside the domain edges of each op.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime  # noqa: F401  (a test extra)
import pytest
from gradcheck import Case, check_gradient, gradient  # noqa: E402
from onnx import helper as oh  # noqa: E402

import onnx_light as ol  # noqa: E402

F32 = np.float32
RNG = np.random.default_rng(1234)


def node(op: str, inputs: list[str], outputs: list[str] | None = None, **attrs: Any) -> Any:
    return oh.make_node(op, inputs, outputs or ["y"], **attrs)


def normal(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape)


def uniform(lo: float, hi: float, *shape: int) -> np.ndarray:
    return RNG.uniform(lo, hi, shape)


def away(*shape: int, gap: float = 0.1, kinks: tuple[float, ...] = (0.0,), scale: float = 2.0) -> np.ndarray:
    """Normal values moved at least ``gap`` away from every kink."""
    v = RNG.standard_normal(shape) * scale
    for k in kinks:
        near = np.abs(v - k) < gap
        v[near] = k + np.where(v[near] >= k, gap, -gap) * 2
    return v


def unary(op: str, x: np.ndarray, name: str | None = None, ort_dtype: Any = np.float64, **attrs: Any) -> Case:
    return Case(name or op, [node(op, ["x"], **attrs)], {"x": x}, ["x"], ort_dtype=ort_dtype)


# --------------------------------------------------------------------------------------------
CASES: list[Case] = [
    # math
    unary("Neg", normal(3, 4)),
    unary("Identity", normal(3, 4)),
    unary("Abs", away(3, 4)),
    unary("Exp", normal(3, 4)),
    unary("Log", uniform(0.5, 3.0, 3, 4)),
    unary("Sqrt", uniform(0.5, 3.0, 3, 4)),
    unary("Reciprocal", uniform(0.5, 2.0, 3, 4) * np.sign(away(3, 4))),
    unary("Erf", normal(3, 4)),
    unary("Sin", normal(3, 4)),
    unary("Cos", normal(3, 4)),
    unary("Tan", uniform(-1.2, 1.2, 3, 4), ort_dtype=F32),
    unary("Sinh", normal(3, 4), ort_dtype=F32),
    unary("Cosh", normal(3, 4), ort_dtype=F32),
    unary("Asin", uniform(-0.8, 0.8, 3, 4)),
    unary("Acos", uniform(-0.8, 0.8, 3, 4)),
    unary("Atan", normal(3, 4)),
    unary("Asinh", normal(3, 4)),
    unary("Acosh", uniform(1.2, 3.0, 3, 4)),
    unary("Atanh", uniform(-0.8, 0.8, 3, 4)),
    Case("Pow", [node("Pow", ["a", "b"])], {"a": uniform(0.5, 2.0, 3, 4), "b": normal(3, 4)}, ["a", "b"]),
    Case(
        "Pow-broadcast-base",
        [node("Pow", ["a", "b"])],
        {"a": uniform(0.5, 2.0, 4), "b": normal(2, 3, 4)},
        ["a", "b"],
    ),
    Case(
        "Pow-broadcast-exponent",
        [node("Pow", ["a", "b"])],
        {"a": uniform(0.5, 2.0, 2, 3, 4), "b": normal(3, 1)},
        ["a", "b"],
    ),
    Case("Pow-int-exponent", [node("Pow", ["a", "b"])], {"a": normal(3, 4), "b": np.array(3, np.int64)}, ["a"]),
    Case("Pow-exponent-only", [node("Pow", ["a", "b"])], {"a": uniform(0.5, 2.0, 3), "b": normal(3)}, ["b"]),
    # a zero base (fixed values: the rows after these draw from RNG): A^0 is flat in A and
    # 0^B flat in B for B > 0, so finite differences hold there; the rule gave 0 * inf = NaN
    Case(
        "Pow-zero-base",
        [node("Pow", ["a", "b"])],
        {"a": np.array([0.0, 0.0, 0.0, 1.5, -0.7]), "b": np.array([2.0, 1.0, 0.0, 0.0, 2.0])},
        ["a"],
    ),
    Case(
        "Pow-zero-base-exponent",
        [node("Pow", ["a", "b"])],
        {"a": np.array([0.0, 0.0, 2.0]), "b": np.array([2.0, 1.0, 0.5])},
        ["b"],
    ),
    # arithmetic (the lead's rules), with the broadcast/dynamic/repeated-input shapes
    Case("Mul-same-input", [node("Mul", ["x", "x"])], {"x": normal(3, 4)}, ["x"]),
    Case("Mul-broadcast-both", [node("Mul", ["a", "b"])], {"a": normal(3, 1), "b": normal(1, 4)}, ["a", "b"]),
    Case(
        "Div-rank-difference",
        [node("Div", ["a", "b"])],
        {"a": normal(2, 3, 4), "b": uniform(0.5, 2.0, 4)},
        ["a", "b"],
    ),
    Case(
        "Sub-dynamic-batch",
        [node("Sub", ["a", "b"])],
        {"a": normal(5, 3), "b": normal(1, 3)},
        ["a", "b"],
        dynamic=["a"],
    ),
    Case(
        "Add-dynamic-both",
        [node("Add", ["a", "b"])],
        {"a": normal(5, 3), "b": normal(5, 1)},
        ["a", "b"],
        dynamic=["a", "b"],
    ),
    # selection
    Case(
        "Where",
        [node("Where", ["c", "a", "b"])],
        {"c": RNG.random((3, 4)) > 0.5, "a": normal(3, 4), "b": normal(3, 4)},
        ["a", "b"],
    ),
    Case(
        "Where-broadcast",
        [node("Where", ["c", "a", "b"])],
        {"c": RNG.random((2, 3, 4)) > 0.5, "a": normal(3, 1), "b": normal(4)},
        ["a", "b"],
    ),
    Case(
        "Where-dynamic",
        [node("Where", ["c", "a", "b"])],
        {"c": RNG.random((5, 4)) > 0.5, "a": normal(5, 4), "b": normal(1)},
        ["a", "b"],
        dynamic=["a", "c"],
    ),
    Case("Max", [node("Max", ["a", "b"])], {"a": normal(3, 4), "b": normal(3, 4)}, ["a", "b"]),
    Case("Max-one", [node("Max", ["a"])], {"a": normal(3, 4)}, ["a"]),
    Case(
        "Max-three-broadcast",
        [node("Max", ["a", "b", "c"])],
        {"a": normal(2, 3, 4), "b": normal(3, 1), "c": normal(4)},
        ["a", "b", "c"],
    ),
    Case("Min", [node("Min", ["a", "b"])], {"a": normal(3, 4), "b": normal(1, 4)}, ["a", "b"]),
    Case("Min-same-input", [node("Min", ["a", "a"])], {"a": normal(3, 4)}, ["a"]),
    Case(
        "Sum",
        [node("Sum", ["a", "b", "c"])],
        {"a": normal(2, 3, 4), "b": normal(3, 1), "c": normal(4)},
        ["a", "b", "c"],
    ),
    Case("Sum-same-input", [node("Sum", ["a", "a", "b"])], {"a": normal(3, 4), "b": normal(4)}, ["a", "b"]),
    Case(
        "Mean", [node("Mean", ["a", "b", "c"])], {"a": normal(3, 4), "b": normal(4), "c": normal(3, 1)}, ["a", "b", "c"]
    ),
    Case(
        "Clip",
        [node("Clip", ["x", "lo", "hi"])],
        {"x": away(3, 4, kinks=(-0.5, 0.7)), "lo": np.array(-0.5), "hi": np.array(0.7)},
        ["x", "lo", "hi"],
    ),
    Case(
        "Clip-min-only",
        [node("Clip", ["x", "lo"])],
        {"x": away(3, 4, kinks=(-0.5,)), "lo": np.array(-0.5)},
        ["x", "lo"],
    ),
    Case(
        "Clip-max-only",
        [node("Clip", ["x", "", "hi"])],
        {"x": away(3, 4, kinks=(0.3,)), "hi": np.array(0.3)},
        ["x", "hi"],
    ),
    Case("Clip-none", [node("Clip", ["x"])], {"x": normal(3, 4)}, ["x"]),
    # min > max: ONNX (and numpy, torch) output max everywhere, so max takes every gradient
    Case(
        "Clip-min-above-max",
        [node("Clip", ["x", "lo", "hi"])],
        {"x": np.array([[-1.3, 0.4, 2.1], [0.2, 0.9, -0.2]]), "lo": np.array(0.8), "hi": np.array(0.1)},
        ["x", "lo", "hi"],
    ),
    Case(
        "Clip-opset6-attrs",
        [node("Clip", ["x"], min=-0.5, max=0.5)],
        {"x": away(3, 4, kinks=(-0.5, 0.5))},
        ["x"],
        opset=6,
    ),
    # types
    # float32 in, float64 out: the gradient must come back as float32 (quadratic, so exact FD)
    Case(
        "Cast",
        [node("Cast", ["x"], ["t"], to=11), node("Mul", ["t", "t"])],
        {"x": normal(3, 4)},
        ["x"],
        dtype=F32,
        ort_dtype=F32,
        rtol=1e-4,
    ),
    Case(
        "Cast-to-int-stops",
        [node("Cast", ["x"], ["t"], to=7), node("Cast", ["t"], ["u"], to=11), node("Add", ["u", "x"])],
        {"x": normal(3, 4) * 3},
        ["x"],
    ),
    Case(
        "CastLike",
        [
            node("Constant", [], ["z"], value=oh.make_tensor("z", onnx.TensorProto.DOUBLE, [], [0.0])),
            node("CastLike", ["x", "z"], ["t"]),
            node("Mul", ["t", "t"]),
        ],
        {"x": normal(3, 4)},
        ["x"],
        dtype=F32,
        ort_dtype=F32,
        rtol=1e-4,
    ),
    Case("CastLike-target-from-x", [node("CastLike", ["x", "x"])], {"x": normal(3, 4)}, ["x"]),
    Case("Dropout-inference", [node("Dropout", ["x", "r"])], {"x": normal(3, 4), "r": np.array(0.3, F32)}, ["x"]),
    Case("Dropout-opset10", [node("Dropout", ["x"], ["y", "m"], ratio=0.3)], {"x": normal(3, 4)}, ["x"], opset=10),
    Case(
        "Dropout-training",
        [node("Dropout", ["x", "r", "t"], ["y", "m"], seed=3)],
        {"x": normal(5, 6), "r": np.array(0.4), "t": np.array(True)},
        ["x"],
        skip_ort="the random masks of onnxruntime and our runtime differ (same seed, other generator)",
    ),
    Case(
        "Dropout-training-ratio0",
        [node("Dropout", ["x", "r", "t"], ["y", "m"])],
        {"x": normal(5, 6), "r": np.array(0.0, F32), "t": np.array(True)},
        ["x"],
    ),
    Case(
        "Dropout-not-training",
        [node("Dropout", ["x", "r", "t"], ["y", "m"])],
        {"x": normal(5, 6), "r": np.array(0.4, F32), "t": np.array(False)},
        ["x"],
    ),
    # activations
    unary("Sigmoid", normal(3, 4)),
    unary("Tanh", normal(3, 4)),
    unary("Relu", away(3, 4)),
    unary("LeakyRelu", away(3, 4), alpha=0.2),
    unary("Elu", away(3, 4), alpha=0.7, ort_dtype=F32),
    unary("Selu", away(3, 4), ort_dtype=F32),
    unary("Celu", away(3, 4), alpha=1.5),
    unary("Softplus", normal(3, 4)),
    unary("Softsign", away(3, 4)),
    unary("HardSigmoid", away(3, 4, kinks=(-2.5, 2.5)), ort_dtype=F32),
    unary("HardSigmoid", away(3, 4, kinks=(-1.0, 1.0)), "HardSigmoid-attrs", alpha=0.5, beta=0.5, ort_dtype=F32),
    unary("HardSwish", away(4, 5, kinks=(-3.0, 3.0), scale=3.0)),
    unary("ThresholdedRelu", away(3, 4, kinks=(0.5,)), alpha=0.5),
    unary("Shrink", away(3, 4, kinks=(-0.5, 0.5))),
    unary("Mish", normal(3, 4), ort_dtype=F32),
    Case("Gelu", [node("Gelu", ["x"])], {"x": normal(3, 4)}, ["x"], opset=20, ort_dtype=F32),
    Case("Gelu-tanh", [node("Gelu", ["x"], approximate="tanh")], {"x": normal(3, 4)}, ["x"], opset=20),
    unary("Softmax", normal(2, 3, 4)),
    unary("Softmax", normal(2, 3, 4), "Softmax-axis1", axis=1),
    unary("LogSoftmax", normal(2, 3, 4)),
    unary("LogSoftmax", normal(2, 3, 4), "LogSoftmax-axis0", axis=0),
    Case("Softmax-dynamic", [node("Softmax", ["x"], axis=-1)], {"x": normal(5, 4)}, ["x"], dynamic=["x"]),
    Case("Softmax-opset11-flatten", [node("Softmax", ["x"], axis=1)], {"x": normal(2, 3, 4)}, ["x"], opset=11),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_rule(case: Case) -> None:
    check_gradient(case)


# -- second order: the backward graph differentiated again (closure of the emitted ops) --------
def second_order(case: Case, wrt: list[str] | None = None) -> Case:
    """A row differentiating ``grad_<x0>`` of ``case``'s backward function w.r.t. ``wrt``
    (default: the same xs).

    The backward nodes become a forward graph with typed inputs; the first pass's ``dy``
    is renamed ``dy1`` and fed a fixed random tensor, so the check is a Hessian-vector product.
    The first backward is built in the row's onnxruntime dtype (its constants are typed), so
    float32 rows are checked in float32 throughout, with a tolerance to match.
    """
    dtype = case.ort_dtype
    model, bwd = gradient(case, dtype)
    fn = onnx.FunctionProto.FromString(bwd.SerializeToString())
    nodes = []
    for n in fn.node:
        n.input[:] = ["dy1" if i == "dy" else i for i in n.input]
        nodes.append(n)
    y0 = case.y or case.nodes[-1].output[0]
    graph_inputs = {i.name for i in model.graph.input}
    feeds = {k: v.astype(dtype) if v.dtype.kind == "f" else v for k, v in case.inputs.items() if k in graph_inputs}
    y_val = ol.runtime.InferenceSession(model).run([y0], feeds)[0]
    inputs = {n: case.inputs[n] for n in fn.input if n != "dy"}
    inputs["dy1"] = RNG.standard_normal(np.shape(y_val))
    f64 = np.dtype(dtype) == np.float64
    return Case(
        f"{case.name}-2nd",
        nodes,
        inputs,
        wrt or case.xs,
        y=f"grad_{case.xs[0]}",
        dtype=dtype,
        ort_dtype=dtype,
        rtol=1e-4 if f64 else 2e-2,
        atol=1e-6 if f64 else 1e-3,
    )


SECOND = [
    "Exp",
    "Log",
    "Sqrt",
    "Reciprocal",
    "Erf",
    "Sin",
    "Cos",
    "Tan",
    "Atan",
    "Pow",
    "Pow-broadcast-exponent",
    "Sigmoid",
    "Tanh",
    "Relu",
    "Elu",
    "Softplus",
    "Softsign",
    "Mish",
    "Gelu",
    "Gelu-tanh",
    "Softmax-axis1",
    "LogSoftmax",
    "Max",
    "Max-three-broadcast",
    "Clip",
    "HardSwish",
    "Celu",
]


@pytest.mark.parametrize("name", SECOND)
def test_second_order(name: str) -> None:
    case = next(c for c in CASES if c.name == name)
    check_gradient(second_order(case))


# -- conventions and refusals --------------------------------------------------------------------
@pytest.mark.parametrize("op", ["Max", "Min"])
def test_ties_split_evenly(op: str) -> None:
    a = np.array([1.0, 2.0, 3.0, 4.0])
    b = np.array([1.0, 5.0, 3.0, 0.0])
    c = np.array([1.0, 0.0, 9.0, 4.0])
    case = Case(op, [node(op, ["a", "b", "c"])], {"a": a, "b": b, "c": c}, ["a", "b", "c"])
    _, bwd = gradient(case)
    dy = np.array([6.0, 6.0, 6.0, 6.0])
    got = ol.runtime.InferenceSession(bwd).run(None, {"a": a, "b": b, "c": c, "dy": dy})
    y = np.maximum(np.maximum(a, b), c) if op == "Max" else np.minimum(np.minimum(a, b), c)
    hits = [v == y for v in (a, b, c)]
    for g, h in zip(got, hits):
        np.testing.assert_allclose(g, np.where(h, dy / sum(hits), 0.0))
    two = Case(op, [node(op, ["a", "b"])], {"a": a, "b": b}, ["a", "b"])
    _, bwd = gradient(two)
    ga, gb = ol.runtime.InferenceSession(bwd).run(None, {"a": a, "b": b, "dy": dy})
    np.testing.assert_allclose(ga + gb, dy)
    np.testing.assert_allclose(ga[[0, 2]], [3.0, 3.0])


def test_dropout_training_without_mask_is_refused() -> None:
    case = Case(
        "d", [node("Dropout", ["x", "r", "t"])], {"x": normal(3), "r": np.array(0.5), "t": np.array(True)}, ["x"]
    )
    with pytest.raises(ol.GradientError, match=r"ai.onnx::Dropout.*needs its mask output"):
        gradient(case)


def test_integer_exponent_and_stopped_paths_need_no_rule() -> None:
    """Integer values carry no gradient: Pow's int exponent and ops after Cast-to-int are skipped."""
    case = next(c for c in CASES if c.name == "Pow-int-exponent")
    _, bwd = gradient(case)
    assert "Log" not in {n.op_type for n in bwd.node}


def test_no_grad_ops_pass_nothing() -> None:
    reg = ol.DefaultGradRegistry()
    for op in (
        "Floor Ceil Round Sign Equal Less LessOrEqual Greater GreaterOrEqual And Or Xor Not IsNaN IsInf "
        "ArgMax ArgMin BitShift BitwiseAnd BitwiseOr BitwiseXor BitwiseNot"
    ).split():
        rule = reg.lookup("", op, 21)
        assert rule is not None and rule.no_grad, op
    # Floor(x) + x: only the identity path contributes
    case = Case("floor", [node("Floor", ["x"], ["f"]), node("Add", ["f", "x"])], {"x": normal(3)}, ["x"])
    _, bwd = gradient(case)
    (g,) = ol.runtime.InferenceSession(bwd).run(None, {"x": case.inputs["x"], "dy": np.ones(3)})
    np.testing.assert_allclose(g, np.ones(3))


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize(("opset", "attrs"), [(11, {}), (13, {"axis": 1}), (21, {"axis": -2})])
def test_softmax_axis_out_of_range_is_refused(op: str, opset: int, attrs: dict[str, int]) -> None:
    """Found by the property tests: a rank-1 input at opset 11 (default axis 1) gave a zero gradient."""
    case = Case(op, [node(op, ["x"], **attrs)], {"x": normal(2)}, ["x"], opset=opset)
    with pytest.raises(ol.GradientError, match=rf"ai.onnx::{op}.*axis -?\d is outside \[-1, 0\]"):
        gradient(case)
