"""Invalid graphs and nodes the session refuses with a clear error instead of an answer.

* a value written twice (two nodes with one output name, or a node writing a graph input):
  the later write silently won;
* Split-2/11/13 without sizes on a dimension the outputs do not divide: the spec asks for
  equal parts (only Split-18's ``num_outputs`` allows a smaller last part); ours returned
  ``[3, 2]`` for 5 into 2, where onnxruntime refuses.
"""

from __future__ import annotations

import numpy as np
import pytest

from onnx_light import OnnxLightError, RuntimeFailure, TensorProto, helper, numpy_helper
from onnx_light.runtime import InferenceSession

F = TensorProto.FLOAT


def _model(nodes: list, outputs: list[str], opset: int = 18, inits: list | None = None) -> object:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F, [2, 5])],
        [helper.make_tensor_value_info(o, F, None) for o in outputs],
        initializer=inits or [],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_a_value_written_by_two_nodes_is_an_error() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["x"], ["a"], name="second")]
    with pytest.raises(OnnxLightError, match=r"'second'.*writes 'a'.*SSA"):
        InferenceSession(_model(nodes, ["a"]))


def test_a_node_writing_a_graph_input_is_an_error() -> None:
    nodes = [helper.make_node("Neg", ["x"], ["y"]), helper.make_node("Relu", ["y"], ["x"], name="over")]
    with pytest.raises(OnnxLightError, match=r"'over'.*writes 'x'"):
        InferenceSession(_model(nodes, ["y"]))


@pytest.mark.parametrize("opset", [11, 13])
def test_split_without_sizes_needs_equal_parts(opset: int) -> None:
    node = helper.make_node("Split", ["x"], ["a", "b"], axis=1)
    sess = InferenceSession(_model([node], ["a", "b"], opset))
    with pytest.raises(RuntimeFailure, match="equal parts"):
        sess.run(None, {"x": np.zeros((2, 5), np.float32)})
    a, b = InferenceSession(_model([helper.make_node("Split", ["x"], ["a", "b"], axis=0)], ["a", "b"], opset)).run(
        None, {"x": np.arange(10, dtype=np.float32).reshape(2, 5)}
    )
    np.testing.assert_array_equal(np.concatenate([a, b]), np.arange(10).reshape(2, 5))
    assert a.shape == b.shape == (1, 5)


def test_split_18_num_outputs_keeps_a_smaller_last_part() -> None:
    node = helper.make_node("Split", ["x"], ["a", "b"], axis=1, num_outputs=2)
    a, b = InferenceSession(_model([node], ["a", "b"], 18)).run(None, {"x": np.zeros((2, 5), np.float32)})
    assert (a.shape, b.shape) == ((2, 3), (2, 2))


def test_split_13_with_sizes_still_runs() -> None:
    split = numpy_helper.from_array(np.array([4, 1], np.int64), "s")
    node = helper.make_node("Split", ["x", "s"], ["a", "b"], axis=1)
    a, b = InferenceSession(_model([node], ["a", "b"], 13, [split])).run(None, {"x": np.zeros((2, 5), np.float32)})
    assert (a.shape, b.shape) == ((2, 4), (2, 1))


def test_an_opset_newer_than_known_is_refused() -> None:
    """Opset 99's Relu may not be opset 14's: the newest kernel would be a guess."""
    from onnx_light.helper import OPSET_VERSION

    from onnx_light import NotImplementedOp

    newer = rf"opset 99, newer than the newest onnx-light knows \({OPSET_VERSION}\)"
    with pytest.raises(NotImplementedOp, match=newer):
        InferenceSession(_model([helper.make_node("Relu", ["x"], ["y"])], ["y"], 99))
    InferenceSession(_model([helper.make_node("Relu", ["x"], ["y"])], ["y"], OPSET_VERSION))


def test_an_attribute_of_the_wrong_type_fails_when_run_not_at_plan_time() -> None:
    """Transpose perm=1.5: the plan's shape pass raised TypeError; now the run names the node."""
    node = helper.make_node("Transpose", ["x"], ["y"], perm=1.5, name="t")
    sess = InferenceSession(_model([node], ["y"]))
    with pytest.raises(RuntimeFailure, match="'t'"):
        sess.run(None, {"x": np.zeros((2, 5), np.float32)})


@pytest.mark.parametrize("what", ["raw_data size", "data_type"])
def test_a_malformed_initializer_is_an_onnx_light_error(what: str) -> None:
    from onnx_light import TensorProto as T

    c = T(name="c", dims=[5], data_type=T.FLOAT, raw_data=b"\0" * 8)
    if what == "data_type":
        c.data_type = 99
        c.raw_data = b"\0" * 20
    node = helper.make_node("Add", ["x", "c"], ["y"])
    with pytest.raises(OnnxLightError, match="tensor 'c'"):
        InferenceSession(_model([node], ["y"], inits=[c])).run(None, {"x": np.zeros((2, 5), np.float32)})
