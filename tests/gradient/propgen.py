"""Drawing helpers for the property tests (test_properties.py): random shapes, broadcast
pairs, axes and values away from kinks, and a ``Case`` builder whose name says the op,
the opset, every input's shape (integer inputs' values) and the attributes.

A family module (prop_*.py) maps each op to a strategy ``draw -> Case``. Shapes and
attributes are drawn by hypothesis (so it can shrink them); values come from a numpy
generator seeded by a drawn integer (fast, and reproducible from the seed).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from gradcheck import Case
from hypothesis import strategies as st
from onnx import helper as oh

Draw = Callable[[st.SearchStrategy[Any]], Any]
# an op's generator: (draw, rng) -> Case
Gen = Callable[[Draw, np.random.Generator], Case]


def side(draw: Draw, lo: int = 1, hi: int = 4) -> int:
    """One dimension, size 1 about a third of the time."""
    return int(draw(st.one_of(st.just(lo), st.integers(lo, hi))))


def shape(draw: Draw, rank_lo: int = 0, rank_hi: int = 4, lo: int = 1, hi: int = 4) -> list[int]:
    """A shape of rank in [rank_lo, rank_hi] with sides in [lo, hi], size-1 sides frequent."""
    rank = draw(st.integers(rank_lo, rank_hi))
    return [side(draw, lo, hi) for _ in range(rank)]


def broadcast_to(draw: Draw, full: list[int], min_rank: int = 0) -> list[int]:
    """A shape that broadcasts to ``full``: a suffix of it with some sides set to 1."""
    rank = draw(st.integers(min(min_rank, len(full)), len(full)))
    suffix = full[len(full) - rank :]
    return [1 if draw(st.booleans()) else d for d in suffix]


def broadcast_shapes(draw: Draw, n: int, rank_hi: int = 4) -> list[list[int]]:
    """``n`` shapes broadcasting to a common one, e.g. [3, 1, 4] and [5, 1]; one has the full rank."""
    full = shape(draw, 0, rank_hi)
    shapes = [broadcast_to(draw, full) for _ in range(n)]
    shapes[draw(st.integers(0, n - 1))] = list(full)
    return shapes


def axis(draw: Draw, rank: int) -> int:
    """An axis of a rank-``rank`` tensor, negative or positive."""
    return int(draw(st.integers(-rank, rank - 1)))


def axes(draw: Draw, rank: int, min_size: int = 0) -> list[int]:
    """Distinct axes (each written negative or positive), in random order."""
    picked = draw(st.lists(st.integers(0, rank - 1), min_size=min(min_size, rank), max_size=rank, unique=True))
    return [a - rank if draw(st.booleans()) else a for a in picked]


def subset(draw: Draw, names: list[str]) -> list[str]:
    """A non-empty subset of ``names``, in their order."""
    keep = draw(st.lists(st.booleans(), min_size=len(names), max_size=len(names)))
    chosen = [n for n, k in zip(names, keep) if k]
    return chosen or [names[draw(st.integers(0, len(names) - 1))]]


def normal(rng: np.random.Generator, dims: list[int], scale: float = 1.0) -> np.ndarray:
    return np.asarray(rng.standard_normal(dims) * scale)


def uniform(rng: np.random.Generator, lo: float, hi: float, dims: list[int]) -> np.ndarray:
    return np.asarray(rng.uniform(lo, hi, dims))


def away(
    rng: np.random.Generator, dims: list[int], kinks: tuple[float, ...] = (0.0,), gap: float = 0.1, scale: float = 2.0
) -> np.ndarray:
    """Normal values at least ``gap`` away from every kink (finite differences stay on one side)."""
    v = np.asarray(rng.standard_normal(dims) * scale)
    for _ in range(3):
        for k in kinks:
            near = np.abs(v - k) < gap
            v[near] = k + np.where(v[near] >= k, 2 * gap, -2 * gap)
    return v


def magnitude(rng: np.random.Generator, dims: list[int], lo: float = 0.5, hi: float = 2.0) -> np.ndarray:
    """Values with |v| in [lo, hi] and random signs (away from zero)."""
    return np.asarray(rng.uniform(lo, hi, dims) * rng.choice([-1.0, 1.0], dims))


def i64(values: Any) -> np.ndarray:
    return np.asarray(values, np.int64)


def _describe(v: np.ndarray) -> str:
    if v.dtype.kind in "iub" and v.size <= 12:
        return f"={v.tolist()}"
    return str(list(v.shape))


def make_case(
    op: str,
    inputs: dict[str, np.ndarray | None],
    xs: list[str],
    *,
    attrs: dict[str, Any] | None = None,
    opset: int = 21,
    consts: tuple[str, ...] = (),
    outputs: int = 1,
    extra: list[Any] | None = None,
    y: str | None = None,
    **case_kw: Any,
) -> Case:
    """A one-op ``Case`` (plus ``extra`` nodes after it); ``None`` inputs are omitted optional ones.

    Its name is ``op@opset x[2, 1] i=[0, 2] {attrs}``: a failure message says the op, the shapes
    and the attributes.
    """
    attrs = attrs or {}
    names = [k if v is not None else "" for k, v in inputs.items()]
    while names and not names[-1]:
        names.pop()
    feeds = {k: v for k, v in inputs.items() if v is not None}
    outs = ["y"] + [f"y{k}" for k in range(1, outputs)]
    nodes = [oh.make_node(op, names, outs, **attrs), *(extra or [])]
    described = " ".join(f"{k}{_describe(v)}" for k, v in feeds.items())
    name = f"{op}@{opset} {described} {attrs} wrt {xs}" + (f" ({outputs} outputs)" if outputs > 1 else "")
    if case_kw.get("dynamic"):
        name += f" symbolic first dim of {case_kw['dynamic']}"
    initializers = [k for k in consts if k in feeds]
    return Case(name, nodes, feeds, xs, y=y, initializers=initializers, opset=opset, **case_kw)


def sum_of_squares(outputs: list[str]) -> list[Any]:
    """Nodes reducing several outputs to one scalar ``total``: sum of ReduceSumSquare of each."""
    nodes = [oh.make_node("ReduceSumSquare", [o], [f"sq_{o}"], keepdims=0) for o in outputs]
    nodes.append(oh.make_node("Sum", [f"sq_{o}" for o in outputs], ["total"]))
    return nodes
