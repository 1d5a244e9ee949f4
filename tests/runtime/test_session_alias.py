"""Outputs never alias the caller's feeds, constants or each other (issue 14 §4)."""

from __future__ import annotations

import numpy as np
import pytest

from onnx_light import TensorProto, helper, numpy_helper
from onnx_light.runtime import InferenceSession


def _session(nodes: list, outputs: list[str]) -> InferenceSession:
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [3, 2])
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [
            shape,
            numpy_helper.from_array(np.ones((2, 3), np.float32), "c"),
            numpy_helper.from_array(np.array(1, np.int64), "one"),
        ],
    )
    return InferenceSession(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]))


@pytest.mark.parametrize(
    "node",
    [
        helper.make_node("Identity", ["x"], ["y"]),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
        helper.make_node("Flatten", ["x"], ["y"]),
        helper.make_node("Transpose", ["x"], ["y"]),
        helper.make_node("Identity", ["c"], ["y"]),
        helper.make_node("Gather", ["x", "one"], ["y"]),
        helper.make_node("Gather", ["x", "one"], ["y"], axis=1),
    ],
    ids=["Identity", "Reshape", "Flatten", "Transpose", "Identity-of-initializer", "Gather-scalar", "Gather-scalar-1"],
)
def test_writing_an_output_leaves_the_feed_alone(node: object) -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    sess = _session([node], ["y"])
    (y,) = sess.run(None, {"x": x})
    y[...] = -1.0
    np.testing.assert_array_equal(x, np.arange(6, dtype=np.float32).reshape(2, 3))
    (again,) = sess.run(None, {"x": x})
    assert (again != -1.0).all()  # neither the initializer nor a cached value changed


def test_two_outputs_are_two_arrays() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Reshape", ["r", "shape"], ["y"])]
    r, y = _session(nodes, ["r", "y"]).run(None, {"x": np.ones((2, 3), np.float32)})
    y[...] = 5.0
    assert (r == 1.0).all()


@pytest.mark.parametrize("kind", ["array", "bytes", "bytearray", "memoryview-of-array", "base-less"])
def test_a_view_of_a_feed_over_any_memory_is_copied(kind: str) -> None:
    """The feed's memory from an array, ``np.frombuffer`` of bytes / a bytearray, a memoryview
    of another array, or a pointer without a base: the Reshape's view of it is copied."""
    values = np.arange(6, dtype=np.float32)
    owner = values.copy()
    if kind == "array":
        x = owner.reshape(2, 3)
    elif kind == "memoryview-of-array":
        x = np.frombuffer(memoryview(owner), np.float32).reshape(2, 3)
    elif kind == "base-less":
        x = np.ctypeslib.as_array(np.ctypeslib.as_ctypes(owner)).reshape(2, 3)
    else:
        raw = values.tobytes() if kind == "bytes" else bytearray(values.tobytes())
        x = np.frombuffer(raw, np.float32).reshape(2, 3)
    sess = _session([helper.make_node("Reshape", ["x", "shape"], ["y"])], ["y"])
    (y,) = sess.run(None, {"x": x})
    assert not np.may_share_memory(y, x)


def test_outputs_viewing_one_array_are_copied_apart() -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Reshape", ["r", "shape"], ["y"]),
        helper.make_node("Flatten", ["r"], ["z"]),
    ]
    y, z, r = _session(nodes, ["y", "z", "r"]).run(None, {"x": np.ones((2, 3), np.float32)})
    assert not np.may_share_memory(y, z) and not np.may_share_memory(r, y) and not np.may_share_memory(r, z)
