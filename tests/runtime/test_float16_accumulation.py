"""Float16 means and norms accumulate in float32, as onnxruntime does.

A float16 sum of 2500 values of 100 overflows (250000 > 65504), so GlobalAveragePool
returned inf where the mean is 100; AveragePool's window sums and ReduceL2's squares
overflowed the same way. The results are float16 again.
"""

from __future__ import annotations

import numpy as np
import pytest

from onnx_light import TensorProto, helper, numpy_helper
from onnx_light.runtime import InferenceSession

H = TensorProto.FLOAT16


def _run(node: object, x: np.ndarray, opset: int = 18, inits: list | None = None) -> np.ndarray:
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", H, list(x.shape))],
        [helper.make_tensor_value_info("y", H, None)],
        initializer=inits or [],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    (y,) = InferenceSession(model).run(None, {"x": x})
    assert y.dtype == np.float16
    return y


def test_global_average_pool() -> None:
    y = _run(helper.make_node("GlobalAveragePool", ["x"], ["y"]), np.full((1, 2, 50, 50), 100, np.float16))
    np.testing.assert_array_equal(y, np.full((1, 2, 1, 1), 100, np.float16))


@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_average_pool(count_include_pad: int) -> None:
    x = np.full((1, 1, 4, 4), 30000, np.float16)
    node = helper.make_node(
        "AveragePool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=count_include_pad
    )
    y = _run(node, x)
    assert np.isfinite(y).all(), y
    if not count_include_pad:
        np.testing.assert_array_equal(y, x)


def test_reduce_l2() -> None:
    axes = numpy_helper.from_array(np.array([1], np.int64), "a")
    node = helper.make_node("ReduceL2", ["x", "a"], ["y"], keepdims=0)
    y = _run(node, np.full((2, 100), 1000, np.float16), 18, [axes])
    np.testing.assert_array_equal(y, np.full(2, 10000, np.float16))
