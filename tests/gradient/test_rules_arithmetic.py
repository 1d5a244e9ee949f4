"""Rows for the broadcasting arithmetic rules (arithmetic.py)."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import Case, check_gradient
from onnx import helper as oh

_rng = np.random.default_rng(11)


def rnd(*shape: int) -> np.ndarray:
    return _rng.standard_normal(shape)


def away(*shape: int, lo: float = 0.5, hi: float = 2.0) -> np.ndarray:
    """Values with |v| in [lo, hi] and random signs (away from zero)."""
    return _rng.uniform(lo, hi, shape) * _rng.choice([-1.0, 1.0], shape)


def binary(op: str, a: np.ndarray, b: np.ndarray, name: str, **attrs: object) -> Case:
    return Case(name, [oh.make_node(op, ["a", "b"], ["y"], **attrs)], {"a": a, "b": b}, ["a", "b"])


ARITHMETIC = [
    binary("Add", rnd(2, 3), rnd(2, 3), "add"),
    binary("Add", rnd(2, 3), rnd(3), "add-bcast-rank"),
    binary("Add", rnd(2, 1, 4), rnd(1, 3, 1), "add-bcast-both"),
    binary("Sub", rnd(4, 1), rnd(3), "sub-bcast"),
    binary("Mul", rnd(2, 3), rnd(1, 3), "mul-bcast-size1"),
    binary("Mul", rnd(), rnd(2, 2), "mul-scalar"),
    binary("Div", rnd(2, 3), away(3), "div-bcast"),
    binary("Mod", away(2, 3, lo=1.0, hi=5.0) + 0.3, _rng.uniform(0.7, 1.3, (3,)), "mod-floor", fmod=0),
    binary("Mod", away(2, 3, lo=1.0, hi=5.0) + 0.3, _rng.uniform(0.7, 1.3, (3,)), "mod-trunc", fmod=1),
    binary("PRelu", away(2, 3, 4), _rng.uniform(0.1, 0.3, (3, 1)), "prelu-channel"),
    binary("PRelu", away(2, 5), _rng.uniform(0.1, 0.3, (1,)), "prelu-shared"),
    # a's first dim is symbolic ("N"), so b's size-1 dim is summed with run-time axes... or static ones
    Case(
        "mul-dynamic",
        [oh.make_node("Mul", ["a", "b"], ["y"])],
        {"a": rnd(3, 4), "b": rnd(1, 4)},
        ["a", "b"],
        dynamic=["a"],
    ),
    Case(
        "mul-dynamic-both",
        [oh.make_node("Mul", ["a", "b"], ["y"])],
        {"a": rnd(3, 4), "b": rnd(3, 1)},
        ["a", "b"],
        dynamic=["a", "b"],
    ),
    Case("add-self", [oh.make_node("Add", ["a", "a"], ["y"])], {"a": rnd(3)}, ["a"]),
]


@pytest.mark.parametrize("case", ARITHMETIC, ids=lambda c: c.name)
def test_arithmetic(case: Case) -> None:
    check_gradient(case)
