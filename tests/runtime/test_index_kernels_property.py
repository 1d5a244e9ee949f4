"""The index kernels against onnxruntime on random shapes (issue 8: the GatherElements class of bug).

Gather, GatherElements, GatherND, ScatterElements, ScatterND and TopK over random data
shapes (size-1 dims included), axes (negative too), indices of int32 and int64 with
negative values, and indices SMALLER than data on the axes they do not index, where the
output takes the indices' shape. Derandomized, with a modest example count, so CI sees
the same cases every run.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.dirname(__file__))

from ort_reference import compare_with_ort  # noqa: E402

SETTINGS = settings(
    derandomize=True, max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)
INDEX_DTYPES = st.sampled_from([np.int32, np.int64])


def _shape(draw: Any, min_rank: int = 1, max_rank: int = 3) -> tuple[int, ...]:
    return tuple(draw(st.lists(st.integers(1, 4), min_size=min_rank, max_size=max_rank)))


def _data(draw: Any, shape: tuple[int, ...]) -> np.ndarray:
    seed = draw(st.integers(0, 2**16))
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _indices(draw: Any, shape: tuple[int, ...], n: int, dtype: Any) -> np.ndarray:
    """Indices in [-n, n) (negative ones count from the end)."""
    seed = draw(st.integers(0, 2**16))
    return np.random.default_rng(seed).integers(-n, n, shape).astype(dtype)


def _smaller(draw: Any, shape: tuple[int, ...], axis: int) -> tuple[int, ...]:
    """A shape no larger than ``shape`` on every axis but ``axis`` (any size 1-4 there)."""
    return tuple(draw(st.integers(1, 4)) if a == axis else draw(st.integers(1, d)) for a, d in enumerate(shape))


@SETTINGS
@given(st.data())
def test_gather(data: Any) -> None:
    shape = _shape(data.draw)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    idx_shape = tuple(data.draw(st.lists(st.integers(1, 3), max_size=2)))
    idx = _indices(data.draw, idx_shape, shape[axis], data.draw(INDEX_DTYPES))
    compare_with_ort("Gather", [_data(data.draw, shape), idx], {"axis": axis})


@SETTINGS
@given(st.data())
def test_gather_elements(data: Any) -> None:
    shape = _shape(data.draw)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    idx = _indices(data.draw, _smaller(data.draw, shape, axis % len(shape)), shape[axis], data.draw(INDEX_DTYPES))
    compare_with_ort("GatherElements", [_data(data.draw, shape), idx], {"axis": axis})


def test_gather_elements_smaller_indices_take_their_shape() -> None:
    """The issue's example: data [4, 3], indices [1, 2], axis 1 -> [1, 2]."""
    compare_with_ort("GatherElements", [np.arange(12, dtype=np.float32).reshape(4, 3), np.array([[2, 0]])], {"axis": 1})


@SETTINGS
@given(st.data())
def test_gather_nd(data: Any) -> None:
    shape = _shape(data.draw)
    b = data.draw(st.integers(0, len(shape) - 1))
    k = data.draw(st.integers(1, len(shape) - b))
    middle = tuple(data.draw(st.lists(st.integers(1, 3), max_size=2)))
    seed = data.draw(st.integers(0, 2**16))
    r = np.random.default_rng(seed)
    idx = np.stack([r.integers(-shape[b + j], shape[b + j], shape[:b] + middle) for j in range(k)], axis=-1)
    compare_with_ort("GatherND", [_data(data.draw, shape), idx.astype(np.int64)], {"batch_dims": b})


@SETTINGS
@given(st.data())
def test_scatter_elements(data: Any) -> None:
    shape = _shape(data.draw)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    a = axis % len(shape)
    idx_shape = tuple(data.draw(st.integers(1, d)) for d in shape)
    reduction = data.draw(st.sampled_from(["none", "add"]))
    r = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    if reduction == "none":  # distinct targets along the axis: the result is then defined
        picks = np.argsort(r.random(idx_shape[:a] + (shape[a],) + idx_shape[a + 1 :]), axis=a)
        idx = np.take(picks, range(idx_shape[a]), axis=a) - r.integers(0, 2) * shape[a]
    else:
        idx = r.integers(-shape[a], shape[a], idx_shape)
    idx = idx.astype(data.draw(INDEX_DTYPES))
    updates = _data(data.draw, idx_shape)
    compare_with_ort("ScatterElements", [_data(data.draw, shape), idx, updates], {"axis": axis, "reduction": reduction})


@SETTINGS
@given(st.data())
def test_scatter_nd(data: Any) -> None:
    shape = _shape(data.draw)
    k = data.draw(st.integers(1, len(shape)))
    slots = int(np.prod(shape[:k]))
    m = data.draw(st.integers(1, slots))
    reduction = data.draw(st.sampled_from(["none", "add"]))
    r = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    flat = r.permutation(slots)[:m] if reduction == "none" else r.integers(0, slots, m)
    idx = np.stack(np.unravel_index(flat, shape[:k]), axis=-1).astype(np.int64)
    idx = idx - r.integers(0, 2, idx.shape) * np.array(shape[:k])  # some negative
    updates = _data(data.draw, (m, *shape[k:]))
    compare_with_ort("ScatterND", [_data(data.draw, shape), idx, updates], {"reduction": reduction})


@SETTINGS
@given(st.data())
def test_topk(data: Any) -> None:
    shape = _shape(data.draw)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    k = data.draw(st.integers(0, shape[axis]))
    largest = data.draw(st.integers(0, 1))
    x = _data(data.draw, shape)
    compare_with_ort("TopK", [x, np.array([k], np.int64)], {"axis": axis, "largest": largest}, n_out=2)
