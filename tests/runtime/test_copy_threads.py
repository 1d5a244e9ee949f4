"""The native copies on several threads (src/transpose.cpp): the transposed copy behind a
Reshape of a Transpose's view (yolo's detection heads) gives numpy's bits on any thread count,
from the kernel and from an ``InferenceSession`` asked for ``intra_op_num_threads``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from onnx_light import TensorProto, helper
from onnx_light.runtime import InferenceSession, _native

_TRANSPOSE = _native.EXTENSION is not None and hasattr(_native.EXTENSION, "transpose_rows_f32")


@pytest.mark.skipif(not _TRANSPOSE, reason="no native transpose_rows_f32 (pure-Python twins)")
@pytest.mark.parametrize("shape", [(3, 85, 1600), (3, 85, 400), (2, 13, 129), (1, 7, 64), (4, 8, 8), (1, 1, 200)])
def test_transpose_rows_threads_give_numpys_copy(shape: tuple[int, ...]) -> None:
    """Each element is one load and one store whichever worker copies its column band."""
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    want = np.ascontiguousarray(x.swapaxes(1, 2))
    ext: Any = _native.EXTENSION
    for threads in (1, 2, 3):
        got = ext.transpose_rows_f32(x, threads=threads)
        assert got.flags.c_contiguous
        np.testing.assert_array_equal(got, want)


@pytest.mark.skipif(not _TRANSPOSE, reason="no native transpose_rows_f32 (pure-Python twins)")
def test_transpose_rows_threads_argument_is_checked() -> None:
    ext: Any = _native.EXTENSION
    for bad in (0, 65):
        with pytest.raises(ValueError, match="threads"):
            ext.transpose_rows_f32(np.zeros((1, 8, 8), np.float32), threads=bad)


def _head_model(c: int, h: int, w: int) -> Any:
    """yolo's detection head: Reshape (1, 3, c/3, h*w), Transpose the last two axes, Reshape."""
    shape1 = helper.make_tensor("s1", TensorProto.INT64, [4], [1, 3, c // 3, h * w])
    shape2 = helper.make_tensor("s2", TensorProto.INT64, [3], [1, 3 * h * w, c // 3])
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Reshape", ["r", "s1"], ["a"]),
        helper.make_node("Transpose", ["a"], ["t"], perm=[0, 1, 3, 2]),
        helper.make_node("Reshape", ["t", "s2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "head",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, w])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[shape1, shape2],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("hw", [(40, 40), (20, 20), (10, 10)])
def test_session_transposed_reshape_threads_keep_the_bits(hw: tuple[int, int]) -> None:
    m = _head_model(255, *hw)
    x = np.random.default_rng(hw[0]).standard_normal((1, 255, *hw)).astype(np.float32)
    want = np.ascontiguousarray(np.maximum(x, 0).reshape(1, 3, 85, -1).swapaxes(-1, -2)).reshape(1, -1, 85)
    for threads in (1, 2):
        got = InferenceSession(m, intra_op_num_threads=threads).run(None, {"x": x})[0]
        np.testing.assert_array_equal(got, want)
