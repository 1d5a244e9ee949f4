"""Shape-only chains run once per input shape (``runtime/_shape_chain.py``), checked against the
unoptimised plan: a torch-style ``Shape -> Gather -> Unsqueeze -> Concat -> Reshape`` and an
``Expand`` of a constant (an LSTM's zero state), fed several shapes in turn, chains read before
their last step, chains writing graph outputs, and a failing kernel inside a chain."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto
from onnx import helper as H
from onnx import numpy_helper as NH

import onnx_light
from onnx_light import OnnxLightError
from onnx_light.runtime import InferenceSession

F = TensorProto.FLOAT


def _session(nodes: list[Any], outputs: list[str], inits: list[Any], **kw: Any) -> InferenceSession:
    x = H.make_tensor_value_info("X", F, None)
    graph = H.make_graph(nodes, "g", [x], [H.make_tensor_value_info(o, F, None) for o in outputs], inits)
    model = H.make_model(graph, opset_imports=[H.make_opsetid("", 17)])
    return InferenceSession(onnx_light.load_from_string(model.SerializeToString()), **kw)


def _ints(name: str, *values: int) -> Any:
    return NH.from_array(np.array(values, np.int64), name)


# X (n, c, w) -> Reshape(X, [n, -1]) and Expand(zeros (2, 1, 4), [2, n, 4]) + 1 (a run-time Add)
CHAIN = [
    H.make_node("Shape", ["X"], ["s"]),
    H.make_node("Gather", ["s", "zero"], ["n"], axis=0),
    H.make_node("Unsqueeze", ["n", "axis0"], ["n1"]),
    H.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
    H.make_node("Reshape", ["X", "shape"], ["R"]),
    H.make_node("Concat", ["two", "n1", "four"], ["eshape"], axis=0),
    H.make_node("Expand", ["zeros", "eshape"], ["E"]),
    H.make_node("Add", ["E", "one"], ["Y"]),
]
INITS = [
    NH.from_array(np.array(0, np.int64), "zero"),
    _ints("axis0", 0),
    _ints("minus1", -1),
    _ints("two", 2),
    _ints("four", 4),
    NH.from_array(np.zeros((2, 1, 4), np.float32), "zeros"),
    NH.from_array(np.ones((), np.float32), "one"),
]


def _labels(sess: InferenceSession) -> list[str]:
    return [step.label for step in sess._plan.steps]


def test_a_shape_chain_is_one_step_and_follows_each_new_shape() -> None:
    fast, plain = _session(CHAIN, ["R", "Y"], INITS), _session(CHAIN, ["R", "Y"], INITS, optimize=False)
    assert "Shape+Gather+Unsqueeze+Concat+Concat+Expand" in _labels(fast)
    assert "Shape" not in _labels(fast)
    rng = np.random.default_rng(0)
    for shape in [(3, 2, 5), (1, 4, 2), (3, 2, 5), (7, 1, 1), (2, 0, 3)]:
        x = rng.standard_normal(shape).astype(np.float32)
        for _ in range(2):  # the second run takes the kept outputs
            got, want = fast.run(None, {"X": x}), plain.run(None, {"X": x})
            for g, w in zip(got, want):
                assert g.shape == w.shape
                np.testing.assert_array_equal(g, w)
        assert got[1].shape == (2, shape[0], 4)


def test_a_chain_writing_a_graph_output_or_read_early_is_left_alone() -> None:
    nodes = [*CHAIN[:4], H.make_node("Cast", ["shape"], ["S"], to=F), *CHAIN[4:]]
    fast = _session(nodes, ["R", "S", "Y"], INITS)
    labels = _labels(fast)
    assert "Cast" in labels  # the graph output S stays a step of its own
    x = np.ones((2, 3, 4), np.float32)
    got = fast.run(None, {"X": x})
    np.testing.assert_array_equal(got[1], [2, -1])
    assert got[1].flags.writeable
    # measuring XR, made after the first reader of the chain's "s": left as it is; the same
    # chain with XR made first is one step, placed before that reader
    late = [
        H.make_node("Shape", ["X"], ["s"]),
        H.make_node("Reshape", ["X", "s"], ["R2"]),
        H.make_node("Relu", ["R2"], ["XR"]),
        H.make_node("Shape", ["XR"], ["s2"]),
        H.make_node("Concat", ["s", "s2"], ["ss"], axis=0),
        H.make_node("Cast", ["ss"], ["SS"], to=F),
    ]
    soon = [H.make_node("Relu", ["X"], ["XR"]), late[0], late[1], late[3], late[4], late[5]]
    for nodes, fused in ((late, False), (soon, True)):
        fast, plain = _session(nodes, ["R2", "SS"], INITS), _session(nodes, ["R2", "SS"], INITS, optimize=False)
        assert ("Shape+Shape+Concat" in _labels(fast)) is fused
        for g, w in zip(fast.run(None, {"X": x}), plain.run(None, {"X": x})):
            np.testing.assert_array_equal(g, w)


def test_a_failing_kernel_in_a_chain_names_its_node() -> None:
    nodes = [
        H.make_node("Shape", ["X"], ["s"]),
        H.make_node("Gather", ["s", "nine"], ["n"], axis=0, name="bad_gather"),
        H.make_node("Unsqueeze", ["n", "axis0"], ["n1"]),
        H.make_node("Reshape", ["X", "n1"], ["R"]),
    ]
    inits = [NH.from_array(np.array(9, np.int64), "nine"), _ints("axis0", 0)]
    fast = _session(nodes, ["R"], inits)
    assert "Shape+Gather+Unsqueeze" in _labels(fast)
    with pytest.raises(OnnxLightError, match="bad_gather"):
        fast.run(None, {"X": np.ones((2, 3), np.float32)})


def test_a_shape_of_a_value_the_chain_makes_is_read_inside_it() -> None:
    """(The chain once took that value as an input too: the generated code read it unset.)"""
    nodes = [
        H.make_node("Shape", ["X"], ["s"]),
        H.make_node("ConstantOfShape", ["s"], ["z"]),
        H.make_node("Shape", ["z"], ["s2"]),
        H.make_node("Gather", ["s2", "zero"], ["n"], axis=0),
        H.make_node("Unsqueeze", ["n", "axis0"], ["n1"]),
        H.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
        H.make_node("Reshape", ["X", "shape"], ["R"]),
    ]
    fast, plain = _session(nodes, ["R"], INITS), _session(nodes, ["R"], INITS, optimize=False)
    assert "Shape+ConstantOfShape+Shape+Gather+Unsqueeze+Concat" in _labels(fast)
    for shape in [(2, 3, 4), (5, 1, 2)]:
        x = np.ones(shape, np.float32)
        np.testing.assert_array_equal(fast.run(None, {"X": x})[0], plain.run(None, {"X": x})[0])
