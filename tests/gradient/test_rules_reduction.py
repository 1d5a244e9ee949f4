"""Gradient rules for the Reduce* family, checked by ``gradcheck.check_gradient``.

One row per rule and per way of giving the axes (input known or fed at run time,
attribute at older opsets, absent = all, empty with ``noop_with_empty_axes``) and
keepdims 0/1, with a symbolic batch dim on some rows. Inputs avoid the points where
the reductions are not differentiable (ties for Max/Min, zeros for Prod/L1/L2/LogSum);
ties are checked separately against the documented even split.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx  # noqa: F401  (a test extra)
import onnxruntime  # noqa: F401  (a test extra)
import pytest
from gradcheck import Case, check_gradient, gradient  # noqa: E402
from onnx import helper as oh  # noqa: E402

_rng = np.random.default_rng(5)


def rnd(*shape: int) -> np.ndarray:
    return _rng.standard_normal(shape)


def positive(*shape: int) -> np.ndarray:
    return _rng.uniform(0.5, 2.0, shape)


def away_from_zero(*shape: int) -> np.ndarray:
    return _rng.uniform(0.3, 1.5, shape) * _rng.choice([-1.0, 1.0], shape)


def red(
    op: str,
    x: np.ndarray,
    axes: list[int] | None = None,
    *,
    how: str = "const",
    dynamic: bool = False,
    opset: int = 21,
    tag: str = "",
    **attrs: Any,
) -> Case:
    """A one-node Reduce row; ``how``: "const" (initializer), "input" (fed at run time) or "attr"."""
    inputs: dict[str, np.ndarray] = {"x": x}
    names = ["x"]
    if axes is not None and how == "attr":
        attrs["axes"] = axes
    elif axes is not None:
        inputs["a"] = np.array(axes, np.int64)
        names.append("a")
    name = f"{op}-{tag or how}" + "".join(f"-{k}{v}" for k, v in attrs.items() if k != "axes")
    return Case(
        name,
        [oh.make_node(op, names, ["y"], **attrs)],
        inputs,
        ["x"],
        initializers=["a"] if how == "const" and axes is not None else [],
        dynamic=["x"] if dynamic else [],
        opset=opset,
    )


def with_zeros(*shape: int) -> np.ndarray:
    """Away from zero but for exact zeros: one in row 0 and two in row 1 of the last axis
    (ReduceProd is multilinear, so finite differences hold at them)."""
    x = away_from_zero(*shape)
    x[..., 0, 1] = 0.0
    x[..., 1, 0] = x[..., 1, -1] = 0.0
    return x


def family(op: str, gen: Any) -> list[Case]:
    """The axes/keepdims combinations every reduction is checked with."""
    return [
        red(op, gen(2, 3, 4), [1]),
        red(op, gen(2, 3, 4), [0, -1], keepdims=0),
        red(op, gen(3, 4), tag="all", keepdims=0),
        red(op, gen(3, 4), tag="all-keep"),
        red(op, gen(2, 3), [1], how="input", keepdims=0),
        red(op, gen(2, 3, 2), [-1], dynamic=True, tag="dynamic", keepdims=0),
        red(op, gen(3, 2), [0], how="attr", opset=13 if op != "ReduceSum" else 11, keepdims=0),
    ]


ROWS = [
    *family("ReduceSum", rnd),
    *family("ReduceMean", rnd),
    *family("ReduceMax", rnd),
    *family("ReduceMin", rnd),
    *family("ReduceProd", away_from_zero),
    *family("ReduceL1", away_from_zero),
    *family("ReduceL2", rnd),
    *family("ReduceSumSquare", rnd),
    *family("ReduceLogSumExp", rnd),
    *family("ReduceLogSum", positive),
    red("ReduceSum", rnd(2, 3), [], tag="noop", noop_with_empty_axes=1),
    red("ReduceMean", rnd(2, 3), [], tag="noop", keepdims=0, noop_with_empty_axes=1),
    red("ReduceMax", rnd(2, 3), [], tag="noop", noop_with_empty_axes=1),
    red("ReduceL2", rnd(2, 3), tag="noop-absent", keepdims=0, noop_with_empty_axes=1),
    red("ReduceSumSquare", rnd(2, 2), [], tag="noop", noop_with_empty_axes=1),
    red("ReduceLogSum", positive(3, 2), [], tag="noop", noop_with_empty_axes=1),
    red("ReduceMean", rnd(3, 2, 2), [1, 2], how="input", dynamic=True, tag="input-dynamic", keepdims=0),
    red("ReduceMax", rnd(3, 4), [1], how="input", dynamic=True, tag="input-dynamic"),
    # exact zeros: one zero in a group, two zeros in a group, and a group without
    red("ReduceProd", with_zeros(2, 3, 4), [2], tag="zeros"),
    red("ReduceProd", with_zeros(3, 3), [1], tag="zeros-input", how="input", keepdims=0),
    red("ReduceProd", with_zeros(3, 4), tag="zeros-all", keepdims=0),
    Case(
        "ArgMax-then-ReduceMax",
        [
            oh.make_node("ArgMax", ["x"], ["i"], axis=1),
            oh.make_node("Cast", ["i"], ["f"], to=11),
            oh.make_node("ReduceMax", ["x"], ["m"], keepdims=0),
            oh.make_node("Mul", ["m", "f"], ["y"]),
        ],
        {"x": rnd(2, 3)},
        ["x"],
    ),
]


@pytest.mark.parametrize("case", ROWS, ids=[c.name for c in ROWS])
def test_rule(case: Case) -> None:
    check_gradient(case)


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
def test_ties_share_the_gradient(op: str) -> None:
    x = np.array([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0]]) * (1 if op == "ReduceMax" else -1)
    case = red(op, x, [1], keepdims=0)
    import onnx_light as ol

    model, bwd = gradient(case)
    dy = np.array([6.0, 8.0])
    (g,) = ol.runtime.InferenceSession(bwd).run(None, {"x": x, "a": np.array([1], np.int64), "dy": dy})
    np.testing.assert_allclose(g, [[0, 3, 3, 0], [2, 2, 2, 2]])


def test_l2_norm_of_zeros_has_zero_gradient() -> None:
    # not differentiable at 0: the subgradient 0 (as torch), and the other group unchanged
    import onnx_light as ol

    x = np.array([[0.0, 0.0, 0.0], [3.0, -4.0, 12.0]])
    model, bwd = gradient(red("ReduceL2", x, [1], keepdims=0))
    (g,) = ol.runtime.InferenceSession(bwd).run(
        None, {"x": x, "a": np.array([1], np.int64), "dy": np.array([5.0, 2.0])}
    )
    np.testing.assert_allclose(g, [[0, 0, 0], [6 / 13, -8 / 13, 24 / 13]])


def test_l2_norm_of_zeros_has_zero_tangent() -> None:
    """Forward mode at a zero norm: torch.func.jvp's 0 (it gave NaN, while reverse gave 0)."""
    import onnx_light as ol

    x = np.array([[0.0, 0.0, 0.0], [3.0, -4.0, 12.0]])
    t = np.array([[0.3, -1.0, 2.0], [1.0, 2.0, -1.0]])
    case = red("ReduceL2", x, [1], keepdims=0)
    model, _ = gradient(case)
    fwd = ol.TangentOfFunction(model, ["x"], ["y"])
    feeds = {"x": x, "a": np.array([1], np.int64), "fwd_x": t}
    (jt,) = ol.runtime.InferenceSession(fwd).run(None, {n: feeds[n] for n in fwd.input})
    # d||x|| . t = <x, t> / ||x||: 0 for the zero row (the subgradient), (3 - 8 - 12) / 13 else
    np.testing.assert_allclose(jt, [0.0, -17 / 13])


def test_keepdims_rows_are_small() -> None:
    def ops(case: Case) -> list[str]:
        return [n.op_type for n in gradient(case)[1].node if n.op_type not in ("Constant", "Identity")]

    assert ops(red("ReduceSum", rnd(2, 3), [1])) == ["Expand"]
    assert ops(red("ReduceSum", rnd(2, 3), [1], keepdims=0)) == ["Unsqueeze", "Expand"]
    assert ops(red("ReduceMean", rnd(2, 3), [0])) == ["Div", "Expand"]
    assert ops(red("ReduceLogSumExp", rnd(2, 3), [1])) == ["ReduceLogSumExp", "Sub", "Exp", "Mul"]


SECOND = [c for c in ROWS if "noop" not in c.name and "ArgMax" not in c.name]


@pytest.mark.parametrize("case", SECOND, ids=[c.name for c in SECOND])
def test_backward_is_differentiable(case: Case) -> None:
    """The backward graph differentiated again w.r.t. dy and, where it depends on it, x."""
    from test_rules_tensor import backward_case

    nonlinear = case.name.split("-")[0] not in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceL1")
    check_gradient(backward_case(case, wrt_inputs=nonlinear))
