"""Property generators of the math, arithmetic and activation families (see propgen.py)."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from gradcheck import Case
from hypothesis import strategies as st
from onnx import helper as oh
from propgen import (
    Draw,
    Gen,
    away,
    axis,
    broadcast_shapes,
    broadcast_to,
    magnitude,
    make_case,
    normal,
    shape,
    subset,
    uniform,
)

Values = Any  # (rng, dims) -> np.ndarray


def _normal(rng: np.random.Generator, dims: list[int]) -> np.ndarray:
    return normal(rng, dims)


def _in(lo: float, hi: float) -> Values:
    return lambda rng, dims: uniform(rng, lo, hi, dims)


def _off(*kinks: float, scale: float = 2.0) -> Values:
    return lambda rng, dims: away(rng, dims, kinks, scale=scale)


def unary(values: Values = _normal, attrs: Any = None, opset: int = 21) -> Any:
    """A generator for a one-input elementwise op; ``attrs(draw)`` draws the attributes and
    returns (attrs, values) when the kinks depend on them."""

    def gen(draw: Draw, rng: np.random.Generator, op: str) -> Case:
        dims = shape(draw)
        drawn, vals = attrs(draw) if attrs else ({}, values)
        return make_case(op, {"x": vals(rng, dims)}, ["x"], attrs=drawn, opset=opset)

    return gen


def _named(table: dict[str, Any]) -> dict[str, Gen]:
    """Binds each op name into its generator (a table entry takes (draw, rng, op))."""
    return {op: functools.partial(f, op=op) for op, f in table.items()}


# -- math -------------------------------------------------------------------------------------
def _pow(draw: Draw, rng: np.random.Generator, op: str) -> Case:
    a, b = broadcast_shapes(draw, 2)
    if draw(st.booleans()):
        exponent = np.asarray(draw(st.integers(0, 3)), np.int64)
        return make_case(op, {"a": normal(rng, a), "b": exponent}, ["a"])
    inputs = {"a": uniform(rng, 0.5, 2.0, a), "b": normal(rng, b)}
    return make_case(op, inputs, subset(draw, ["a", "b"]))


def _variadic(draw: Draw, rng: np.random.Generator, op: str) -> Case:
    n = draw(st.integers(1, 3))
    shapes = broadcast_shapes(draw, n)
    inputs = {f"x{k}": normal(rng, s) for k, s in enumerate(shapes)}
    case = make_case(op, inputs, subset(draw, list(inputs)))
    if draw(st.booleans()):  # x0 once more: its contributions accumulate
        case.nodes[0].input.append("x0")
        case.name += " + x0 again"
    return case


def _where(draw: Draw, rng: np.random.Generator, op: str) -> Case:
    c, a, b = broadcast_shapes(draw, 3)
    inputs = {"c": np.asarray(rng.random(c) > 0.5), "a": normal(rng, a), "b": normal(rng, b)}
    return make_case(op, inputs, subset(draw, ["a", "b"]))


def _clip(draw: Draw, rng: np.random.Generator, op: str) -> Case:
    dims = shape(draw)
    lo, hi = sorted(rng.uniform(-1.5, 1.5, 2))
    hi = max(hi, lo + 0.3)
    if draw(st.booleans()):  # opset 6: bounds as attributes
        attrs = {"min": float(lo), "max": float(hi)}
        return make_case(op, {"x": away(rng, dims, (lo, hi))}, ["x"], attrs=attrs, opset=6)
    use_lo, use_hi = draw(st.booleans()), draw(st.booleans())
    bounds = {"lo": np.asarray(lo) if use_lo else None, "hi": np.asarray(hi) if use_hi else None}
    kinks = tuple(v for v, used in ((lo, use_lo), (hi, use_hi)) if used)
    inputs = {"x": away(rng, dims, kinks), **bounds}
    return make_case(op, inputs, subset(draw, [k for k, v in inputs.items() if v is not None]))


def _cast(draw: Draw, rng: np.random.Generator, op: str) -> Case:
    """float64 to float64 through Cast / CastLike, then squared (exact finite differences)."""
    dims = shape(draw)
    square = [oh.make_node("Mul", ["y", "y"], ["sq"])]
    if op == "Cast":
        return make_case(op, {"x": normal(rng, dims)}, ["x"], attrs={"to": 11}, extra=square)
    like = broadcast_to(draw, dims)
    return make_case(op, {"x": normal(rng, dims), "z": normal(rng, like)}, ["x"], extra=square)


def _dropout(draw: Draw, rng: np.random.Generator, op: str) -> Case:
    dims = shape(draw)
    x = normal(rng, dims)
    mode = draw(st.sampled_from(["inference", "opset10", "training"]))
    ratio = float(draw(st.sampled_from([0.0, 0.25, 0.5])))
    if mode == "opset10":
        return make_case(op, {"x": x}, ["x"], attrs={"ratio": ratio}, opset=10, outputs=2)
    if mode == "inference":
        return make_case(op, {"x": x, "r": np.asarray(ratio)}, ["x"])
    return make_case(
        op,
        {"x": x, "r": np.asarray(ratio), "t": np.asarray(True)},
        ["x"],
        attrs={"seed": 3},
        outputs=2,
        skip_ort="the random masks of onnxruntime and our runtime differ (same seed, other generator)",
    )


MATH: dict[str, Gen] = _named(
    {
        "Neg": unary(),
        "Identity": unary(),
        "Abs": unary(_off(0.0)),
        "Exp": unary(),
        "Log": unary(_in(0.5, 3.0)),
        "Sqrt": unary(_in(0.5, 3.0)),
        "Reciprocal": unary(magnitude),
        "Erf": unary(),
        "Sin": unary(),
        "Cos": unary(),
        "Tan": unary(_in(-1.2, 1.2)),
        "Sinh": unary(),
        "Cosh": unary(),
        "Asin": unary(_in(-0.8, 0.8)),
        "Acos": unary(_in(-0.8, 0.8)),
        "Atan": unary(),
        "Asinh": unary(),
        "Acosh": unary(_in(1.2, 3.0)),
        "Atanh": unary(_in(-0.8, 0.8)),
        "Pow": _pow,
        "Max": _variadic,
        "Min": _variadic,
        "Sum": _variadic,
        "Mean": _variadic,
        "Where": _where,
        "Clip": _clip,
        "Cast": _cast,
        "CastLike": _cast,
        "Dropout": _dropout,
    }
)


# -- arithmetic -------------------------------------------------------------------------------
def _binary(draw: Draw, rng: np.random.Generator, op: str) -> Case:
    a, b = broadcast_shapes(draw, 2)
    inputs = {"a": normal(rng, a), "b": magnitude(rng, b) if op == "Div" else normal(rng, b)}
    # symbolic first dims: all are "N", so only inputs whose first dims are equal
    dynamic = [n for n in ("a", "b") if inputs[n].ndim and draw(st.booleans()) and draw(st.booleans())]
    if len({inputs[n].shape[0] for n in dynamic}) > 1:
        dynamic = dynamic[:1]
    return make_case(op, inputs, subset(draw, ["a", "b"]), dynamic=dynamic)


def _mod(draw: Draw, rng: np.random.Generator, op: str) -> Case:
    """a = b (n + u), u in [0.15, 0.85]: a / b stays away from the integers (the jumps)."""
    full = shape(draw)
    b = broadcast_to(draw, full)
    fmod = int(draw(st.integers(0, 1)))
    bv = magnitude(rng, b, 0.7, 1.3)
    q = rng.integers(-3, 4, full) + rng.uniform(0.15, 0.85, full)
    a = np.asarray(bv * q)
    if fmod:  # truncation: the sign of a decides, keep q's fraction away from 0 as well
        a = np.where(np.abs(a) < 0.1, a + 0.3 * np.sign(bv), a)
    return make_case(op, {"a": a, "b": bv}, subset(draw, ["a", "b"]), attrs={"fmod": fmod})


def _prelu(draw: Draw, rng: np.random.Generator, op: str) -> Case:
    full = shape(draw, 1)
    slope = broadcast_to(draw, full)
    inputs = {"x": away(rng, full), "slope": uniform(rng, 0.1, 0.5, slope)}
    return make_case(op, inputs, subset(draw, ["x", "slope"]))


ARITHMETIC: dict[str, Gen] = _named({"Add": _binary, "Sub": _binary, "Mul": _binary, "Div": _binary})
ARITHMETIC.update(_named({"Mod": _mod, "PRelu": _prelu}))


# -- activation -------------------------------------------------------------------------------
def _alpha(kink: Any = None, default: tuple[float, float] = (0.1, 2.0), name: str = "alpha") -> Any:
    def attrs(draw: Draw) -> tuple[dict[str, Any], Values]:
        a = float(draw(st.floats(*default)))
        kinks = (0.0,) if kink is None else kink(a)
        return {name: a}, _off(*kinks)

    return attrs


def _hard_sigmoid(draw: Draw) -> tuple[dict[str, Any], Values]:
    alpha = float(draw(st.floats(0.1, 1.0)))
    beta = float(draw(st.floats(0.0, 1.0)))
    return {"alpha": alpha, "beta": beta}, _off(-beta / alpha, (1 - beta) / alpha, scale=3.0)


def _shrink(draw: Draw) -> tuple[dict[str, Any], Values]:
    lambd = float(draw(st.floats(0.0, 1.0)))
    bias = float(draw(st.floats(-0.5, 0.5)))
    return {"lambd": lambd, "bias": bias}, _off(-lambd, lambd)


def _selu(draw: Draw) -> tuple[dict[str, Any], Values]:
    return {"alpha": float(draw(st.floats(0.5, 2.0))), "gamma": float(draw(st.floats(0.5, 2.0)))}, _off(0.0)


def _gelu(draw: Draw) -> tuple[dict[str, Any], Values]:
    return {"approximate": draw(st.sampled_from(["none", "tanh"]))}, _normal


def _softmax(draw: Draw, rng: np.random.Generator, op: str) -> Case:
    opset = int(draw(st.sampled_from([11, 13, 21])))
    dims = shape(draw, 1)
    # before opset 13 the default axis is 1: a rank-1 input names its axis
    attrs = {"axis": axis(draw, len(dims))} if draw(st.booleans()) or len(dims) < 2 else {}
    return make_case(op, {"x": normal(rng, dims, 2.0)}, ["x"], attrs=attrs, opset=opset)


ACTIVATION: dict[str, Gen] = _named(
    {
        "Sigmoid": unary(),
        "Tanh": unary(),
        "Relu": unary(_off(0.0)),
        "LeakyRelu": unary(attrs=_alpha()),
        "Elu": unary(attrs=_alpha()),
        "Selu": unary(attrs=_selu),
        "Celu": unary(attrs=_alpha(default=(0.3, 2.0))),
        "Softplus": unary(),
        "Softsign": unary(_off(0.0)),
        "HardSigmoid": unary(attrs=_hard_sigmoid),
        "HardSwish": unary(_off(-3.0, 3.0, scale=3.0)),
        "ThresholdedRelu": unary(attrs=_alpha(lambda a: (a,))),
        "Shrink": unary(attrs=_shrink),
        "Mish": unary(),
        "Gelu": unary(attrs=_gelu, opset=20),
        "Softmax": _softmax,
        "LogSoftmax": _softmax,
    }
)
