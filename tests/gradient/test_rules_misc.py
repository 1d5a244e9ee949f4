"""Gradient rules of CumProd and DequantizeLinear, and the ops declared without gradient
(Hardmax, BitCast, QuantizeLinear, the random ops): float64 finite differences, onnxruntime
agreement and the full checker (``check_gradient``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime  # noqa: F401  (a test extra)
import pytest
from gradcheck import Case, backward_feeds, check_gradient, forward_values, gradient
from onnx import helper as oh

import onnx_light as ol

_rng = np.random.default_rng(77)
ORT_NO_CUMPROD = "onnxruntime 1.32 has no CumProd kernel (opset 26)"


def rnd(*shape: int) -> np.ndarray:
    return _rng.standard_normal(shape)


def i64(*v: Any) -> np.ndarray:
    return np.array(v, np.int64)


def cumprod(name: str, x: np.ndarray, axis: int, **attrs: Any) -> Case:
    node = oh.make_node("CumProd", ["x", "axis"], ["y"], **attrs)
    return Case(
        name, [node], {"x": x, "axis": i64(axis)}, ["x"], initializers=["axis"], opset=26, skip_ort=ORT_NO_CUMPROD
    )


WITH_ZEROS = np.array([[0.7, 0.0, -1.3, 2.0], [1.5, -0.8, 0.0, 0.0], [0.0, 1.1, 0.9, -0.6]])

CUMPROD: list[Case] = [
    cumprod("CumProd", rnd(5), 0),
    cumprod("CumProd-axis1", rnd(2, 4, 3), 1),
    cumprod("CumProd-negative-axis", rnd(3, 4), -1),
    cumprod("CumProd-exclusive", rnd(3, 4), 1, exclusive=1),
    cumprod("CumProd-reverse", rnd(4, 3), 0, reverse=1),
    cumprod("CumProd-exclusive-reverse", rnd(2, 5), 1, exclusive=1, reverse=1),
    cumprod("CumProd-zeros", WITH_ZEROS, 1),
    cumprod("CumProd-zeros-exclusive-reverse", WITH_ZEROS, 1, exclusive=1, reverse=1),
]


def dequantize(name: str, x: np.ndarray, scale: np.ndarray, zp: np.ndarray | None, **attrs: Any) -> Case:
    inputs = {"x": x, "scale": scale} if zp is None else {"x": x, "scale": scale, "zp": zp}
    node = oh.make_node("DequantizeLinear", list(inputs), ["y"], **attrs)
    ints = [k for k in inputs if k != "scale"]
    return Case(name, [node], inputs, ["scale"], initializers=ints)


Q8 = _rng.integers(-128, 127, (4, 6)).astype(np.int8)
ZP43 = _rng.integers(-3, 3, (4, 3)).astype(np.int8)
DEQUANTIZE: list[Case] = [
    dequantize("DequantizeLinear-per-tensor", Q8, np.array(0.05), np.array(3, np.int8)),
    dequantize("DequantizeLinear-per-tensor-no-zp", Q8.astype(np.int32), np.array(0.02), None),
    dequantize(
        "DequantizeLinear-per-axis",
        Q8.astype(np.uint8),
        np.array([0.1, 0.2, 0.3, 0.4]),
        np.full(4, 7, np.uint8),
        axis=0,
    ),
    dequantize("DequantizeLinear-per-axis-last", Q8, rnd(6) ** 2 + 0.1, np.zeros(6, np.int8), axis=-1),
    dequantize(
        "DequantizeLinear-blocked",
        Q8,
        rnd(4, 3) ** 2 + 0.1,
        _rng.integers(-3, 3, (4, 3)).astype(np.int8),
        axis=1,
        block_size=2,
    ),
    dequantize("DequantizeLinear-blocked-ragged", Q8, rnd(2, 6) ** 2 + 0.1, None, axis=0, block_size=3),
]


@pytest.mark.parametrize("case", CUMPROD + DEQUANTIZE, ids=lambda c: c.name)
def test_rule(case: Case) -> None:
    check_gradient(case)


def _grads(row: Case, dy: np.ndarray) -> list[np.ndarray]:
    model, bwd = gradient(row)
    return ol.runtime.InferenceSession(bwd).run(None, backward_feeds(bwd, row.inputs, dy, model))


def test_cumprod_gradient_at_zero_is_the_product_of_the_others() -> None:
    """x = [2, 0, 3]: Y = [2, 0, 0]; dY = 1: dX = [1 + 0 + 0, 2 + 2*3, 0] = [1, 8, 0]."""
    (dx,) = _grads(cumprod("z", np.array([2.0, 0.0, 3.0]), 0), np.ones(3))
    np.testing.assert_allclose(dx, [1.0, 8.0, 0.0])


NO_GRAD = (
    "Hardmax BitCast MatMulInteger ConvInteger QLinearMatMul QLinearConv RandomNormal RandomUniform "
    "RandomNormalLike RandomUniformLike Bernoulli Multinomial HannWindow HammingWindow BlackmanWindow MelWeightMatrix"
).split()


@pytest.mark.parametrize("op", NO_GRAD)
def test_declared_without_gradient(op: str) -> None:
    rule = ol.DefaultGradRegistry().lookup("", op, 26)
    assert rule is not None and rule.no_grad, op


def test_hardmax_is_piecewise_constant() -> None:
    """y = Hardmax(x) * x: only the Mul's x path contributes, dX = Hardmax(x) * dY (FD agrees away from ties)."""
    nodes = [oh.make_node("Hardmax", ["x"], ["h"]), oh.make_node("Mul", ["h", "x"], ["y"])]
    x = np.array([[0.3, 1.2, -0.5], [2.0, 0.1, 0.4]])
    grads = check_gradient(Case("hardmax", nodes, {"x": x}, ["x"], ort_dtype=np.float32))  # ORT: float32 only
    assert np.count_nonzero(grads["x"]) <= 2


def test_random_like_passes_nothing_to_its_input() -> None:
    nodes = [oh.make_node("RandomUniformLike", ["x"], ["r"], seed=3.0), oh.make_node("Mul", ["r", "x"], ["y"])]
    row = Case("rand", nodes, {"x": rnd(2, 3)}, ["x"])
    model, bwd = gradient(row)
    (dx,) = ol.runtime.InferenceSession(bwd).run(None, backward_feeds(bwd, row.inputs, np.ones((2, 3)), model))
    sample = forward_values(model, row.inputs, ["r"])["r"]
    np.testing.assert_allclose(dx, sample)  # dX = r * dY: nothing through the random op


def test_cumprod_axis_computed_at_run_time_is_refused() -> None:
    row = cumprod("dyn", rnd(3, 4), 1)
    row.initializers = []
    with pytest.raises(ol.GradientError, match=r"ai.onnx::CumProd.*axis"):
        gradient(row)


# -- QuantizeLinear: the straight-through estimator (a documented choice, checked against torch) --
def fake_quant(name: str, x: np.ndarray, scale: np.ndarray, zp: np.ndarray, xs: str = "x", **attrs: Any) -> Case:
    nodes = [
        oh.make_node("QuantizeLinear", ["x", "scale", "zp"], ["q"], **attrs),
        oh.make_node("DequantizeLinear", ["q", "scale", "zp"], ["y"], **attrs),
    ]
    inputs = {"x": x.astype(np.float32), "scale": scale.astype(np.float32), "zp": zp}
    return Case(name, nodes, inputs, xs.split(","), dtype=np.float32, ort_dtype=np.float32)


#: not FD-checkable (the estimator is not the derivative): a tuple, so the FD tables skip it
STRAIGHT_THROUGH_ROWS = (
    fake_quant(
        "QDQ-per-tensor", np.array([0.26, -0.7, 5.0, 1.0, -3.0]), np.array(0.02), np.array(3, np.int8), "x,scale"
    ),
    fake_quant(
        "QDQ-per-axis",
        _rng.standard_normal((3, 4)) * 2,
        np.array([0.01, 0.02, 0.05]),
        np.array([0, 10, 250], np.uint8),
        "x,scale",
        axis=0,
    ),
)


def _torch_fake_quant(row: Case, dy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    torch = pytest.importorskip("torch")
    zp_dtype = row.inputs["zp"].dtype
    qmin, qmax = int(np.iinfo(zp_dtype).min), int(np.iinfo(zp_dtype).max)
    x = torch.tensor(row.inputs["x"], requires_grad=True)
    s = torch.tensor(np.atleast_1d(row.inputs["scale"]), requires_grad=True)
    zp = torch.tensor(np.atleast_1d(row.inputs["zp"]).astype(np.float32))
    if row.inputs["scale"].ndim == 0:
        y = torch._fake_quantize_learnable_per_tensor_affine(x, s, zp, qmin, qmax, 1.0)
    else:
        y = torch._fake_quantize_learnable_per_channel_affine(x, s, zp, 0, qmin, qmax, 1.0)
    y.backward(torch.tensor(dy))
    return x.grad.numpy(), s.grad.numpy().reshape(row.inputs["scale"].shape)


@pytest.mark.parametrize("row", STRAIGHT_THROUGH_ROWS, ids=lambda c: c.name)
def test_quantize_linear_is_straight_through_as_torch_fake_quantize(row: Case) -> None:
    """dX = dY where X was not clipped (0 where it saturated), dScale the LSQ gradient: torch's
    learnable fake quantization, which QAT users train with."""
    from gradcheck import check_in_onnxruntime

    dy = _rng.standard_normal(row.inputs["x"].shape).astype(np.float32)
    dx, ds = _grads(row, dy)
    want_dx, want_ds = _torch_fake_quant(row, dy)
    np.testing.assert_allclose(dx, want_dx, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ds, want_ds, rtol=1e-4, atol=1e-3)
    assert (dx == 0).any() and (dx != 0).any()  # some saturated, some passed
    check_in_onnxruntime(row)


@pytest.mark.parametrize("row", STRAIGHT_THROUGH_ROWS, ids=lambda c: c.name)
def test_quantize_linear_forward_rule_is_the_adjoint(row: Case) -> None:
    """<J^T u, t> = <u, J t> for the estimator's reverse and forward rules (both straight through)."""
    from gradcheck import tangent, tangent_feeds

    u = _rng.standard_normal(row.inputs["x"].shape)
    t = {x: _rng.standard_normal(row.inputs[x].shape) for x in row.xs}
    feeds = {k: v.astype(np.float64) if v.dtype.kind == "f" else v for k, v in row.inputs.items()}
    model, bwd = gradient(row, np.float64)
    _, fwd = tangent(row, np.float64)
    grads = ol.runtime.InferenceSession(bwd).run(None, backward_feeds(bwd, feeds, u, model))
    (jt,) = ol.runtime.InferenceSession(fwd).run(None, tangent_feeds(fwd, feeds, {f"fwd_{x}": t[x] for x in t}, model))
    left = sum(float(np.sum(g * t[x])) for x, g in zip(row.xs, grads))
    np.testing.assert_allclose(left, float(np.sum(u * jt)), rtol=1e-10)


def test_qat_weight_gets_a_gradient_through_the_fake_quantization() -> None:
    """y = x @ DQ(Q(W)): dW = x^T dY where W was not clipped (before: a silent zero)."""
    w = np.array([[0.5, -0.2], [3.0, 0.1]], np.float32)  # 3.0 saturates int8 at scale 0.01
    nodes = [
        oh.make_node("QuantizeLinear", ["w", "s", "zp"], ["wq"]),
        oh.make_node("DequantizeLinear", ["wq", "s", "zp"], ["wd"]),
        oh.make_node("MatMul", ["x", "wd"], ["y"]),
    ]
    x = np.array([[1.0, 2.0]], np.float32)
    row = Case(
        "qat",
        nodes,
        {"w": w, "s": np.array(0.01, np.float32), "zp": np.array(0, np.int8), "x": x},
        ["w"],
        dtype=np.float32,
    )
    (dw,) = _grads(row, np.ones((1, 2), np.float32))
    np.testing.assert_allclose(dw, [[1.0, 1.0], [0.0, 2.0]])


def test_other_readers_of_the_quantized_value_pass_nothing() -> None:
    """Cast(Q(x)) is not the estimator's pair: no gradient goes through the integer value."""
    nodes = [
        oh.make_node("QuantizeLinear", ["x", "s"], ["q"]),
        oh.make_node("Cast", ["q"], ["c"], to=1),
        oh.make_node("Add", ["c", "x"], ["y"]),
    ]
    row = Case(
        "cast", nodes, {"x": np.array([0.5, 1.5], np.float32), "s": np.array(0.1, np.float32)}, ["x"], dtype=np.float32
    )
    (dx,) = _grads(row, np.ones(2, np.float32))
    np.testing.assert_allclose(dx, [1.0, 1.0])  # only the Add's direct path


@pytest.mark.parametrize("row", STRAIGHT_THROUGH_ROWS, ids=lambda c: c.name)
def test_straight_through_output_has_rules(row: Case) -> None:
    """Closure: what the estimator's rules emit can be differentiated again."""
    reg = ol.DefaultGradRegistry()
    for node in gradient(row)[1].node:
        assert reg.lookup(node.domain, node.op_type, 21) is not None, node.op_type
