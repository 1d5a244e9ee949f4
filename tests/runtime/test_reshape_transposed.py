"""Reshape of a Transpose's view by the extension's blocked copy (``src/transpose.cpp``,
``_native.contiguous_transposed``): bitwise numpy's copy (the twin) over odd sizes, batches,
NaN/inf, views that need no copy, other layouts and dtypes, and yolo's detection-head chain in a
session against the unoptimised plan."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto
from onnx import helper as H
from onnx import numpy_helper as NH

import onnx_light
from onnx_light.runtime import InferenceSession, _native
from onnx_light.runtime.kernels.shape import reshape_14

SHAPES = [(1, 3, 85, 1600), (3, 85, 400), (2, 2, 17, 2053), (256, 257), (1, 1, 65536, 1), (5, 13109), (3, 7)]


def _need_native() -> None:
    if _native.EXTENSION is None or not hasattr(_native.EXTENSION, "transpose_rows_f32"):
        pytest.skip("an extension without transpose_rows_f32")


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_native_transposed_copy_is_numpys(shape: tuple[int, ...]) -> None:
    _need_native()
    rng = np.random.default_rng(len(shape))
    base = rng.standard_normal(shape).astype(np.float32)
    base.reshape(-1)[::97] = np.nan
    base.reshape(-1)[5::101] = np.inf
    x = base.swapaxes(-1, -2)
    got = _native.EXTENSION.transpose_rows_f32(base.reshape(-1, *shape[-2:]))  # type: ignore[union-attr]
    np.testing.assert_array_equal(got.reshape(x.shape), np.ascontiguousarray(x))
    want = np.ascontiguousarray(x).reshape(-1, shape[-2])
    np.testing.assert_array_equal(reshape_14(x, np.array([-1, shape[-2]])), want)


def test_reshape_keeps_views_and_other_layouts() -> None:
    base = np.arange(3 * 85 * 400, dtype=np.float32).reshape(1, 3, 85, 400)
    x = base.transpose(0, 1, 3, 2)
    view = reshape_14(x, np.array([3, 400, 85]))  # only drops an axis of 1: numpy's view
    assert np.shares_memory(view, base)
    for y in (base.transpose(0, 2, 1, 3), base[..., ::2], base.astype(np.float64).transpose(0, 1, 3, 2)):
        np.testing.assert_array_equal(reshape_14(y, np.array([-1])), np.ascontiguousarray(y).reshape(-1))
    if _native.TRANSPOSE:
        assert _native.contiguous_transposed(base.transpose(0, 2, 1, 3)) is None  # not the last two axes
        assert _native.contiguous_transposed(x) is not None
    empty = np.zeros((0, 85, 100), np.float32).swapaxes(-1, -2)
    assert reshape_14(empty, np.array([0, 1700, 5])).shape == (0, 1700, 5)


def test_yolo_head_chain_matches_the_unoptimised_plan() -> None:
    nodes = [
        H.make_node("Reshape", ["X", "s4"], ["a"]),
        H.make_node("Transpose", ["a"], ["b"], perm=[0, 1, 3, 2]),
        H.make_node("Reshape", ["b", "s3"], ["c"]),
        H.make_node("Sigmoid", ["c"], ["Y"]),
    ]
    inits = [NH.from_array(np.array([1, 3, 85, 400]), "s4"), NH.from_array(np.array([1, -1, 85]), "s3")]
    x = H.make_tensor_value_info("X", TensorProto.FLOAT, [1, 255, 20, 20])
    y = H.make_tensor_value_info("Y", TensorProto.FLOAT, None)
    model = H.make_model(H.make_graph(nodes, "g", [x], [y], inits), opset_imports=[H.make_opsetid("", 17)])
    data = onnx_light.load_from_string(model.SerializeToString())
    feed = np.random.default_rng(1).standard_normal((1, 255, 20, 20)).astype(np.float32)
    got = InferenceSession(data).run(None, {"X": feed})[0]
    want = InferenceSession(data, optimize=False).run(None, {"X": feed})[0]
    np.testing.assert_array_equal(got, want)
    assert got.shape == (1, 1200, 85)
