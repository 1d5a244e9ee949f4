"""Inference on symbolic shapes: declared types merged dim by dim, int32 constants
folded, partly known pads, ranks known from the count of run-time axes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as oh
from onnx import numpy_helper as onh

import onnx_light as ol
from onnx_light.onnx_core import NodeProto
from onnx_light.onnx_core.gradient._types import ValueType, infer_types


def ours(*nodes: Any) -> list[NodeProto]:
    return [NodeProto.FromString(n.SerializeToString()) for n in nodes]


def ints(name: str, *values: int, dtype: Any = np.int64) -> Any:
    return oh.make_node("Constant", [], [name], value=onh.from_array(np.array(values, dtype), name))


def test_declared_shape_completes_the_inferred_one_dim_by_dim() -> None:
    # Pad with pads known only at run time: inference knows the rank, not the dims
    nodes = ours(oh.make_node("Pad", ["x", "pads"], ["y"]), oh.make_node("Conv", ["x", "w"], ["z"]))
    known = {
        "x": ValueType(T.FLOAT, ("N", 3, "H", "W")),
        "pads": ValueType(T.INT64, (8,)),
        "w": ValueType(T.FLOAT, (4, 3, 3, 3)),
    }
    declared = {"y": ValueType(T.FLOAT, ("N", 3, 10, "W2")), "z": ValueType(T.FLOAT, ("batch", "c", 7, None))}
    types, _ = infer_types(nodes, known, {}, 21, declared=declared.get)
    assert types["y"].shape == ("N", 3, 10, "W2")
    # a known int beats a symbol, whichever side has it; a symbol beats None
    assert types["z"].shape == ("N", 4, 7, None)


def test_pads_computed_from_shape_keep_the_dims_they_leave_alone() -> None:
    nodes = ours(
        oh.make_node("Shape", ["x"], ["hw"], start=2),
        ints("three", 3, 3),
        oh.make_node("Mod", ["hw", "three"], ["ends"]),
        ints("head", 0, 0, 1, 2, 0, 0),
        oh.make_node("Concat", ["head", "ends"], ["pads"], axis=0),
        oh.make_node("Pad", ["x", "pads"], ["y"]),
    )
    types, _ = infer_types(nodes, {"x": ValueType(T.FLOAT, ("N", 3, "H", "W"))}, {}, 21)
    assert types["y"].shape == ("N", 3, None, None)


def test_run_time_axes_of_known_count_give_the_rank() -> None:
    nodes = ours(
        oh.make_node("Unsqueeze", ["x", "axes"], ["u"]),
        oh.make_node("Squeeze", ["u", "axes"], ["s"]),
        oh.make_node("ReduceSum", ["x", "axes"], ["r"], keepdims=0),
    )
    known = {"x": ValueType(T.FLOAT, ("N", 3)), "axes": ValueType(T.INT64, (1,))}
    types, _ = infer_types(nodes, known, {}, 21)
    assert types["u"].rank == 3 and types["s"].rank == 2 and types["r"].rank == 1


def _model(nodes: list[Any], inputs: list[Any], inits: tuple[Any, ...] | list[Any] = ()) -> Any:
    graph = oh.make_graph(nodes, "g", inputs, [oh.make_tensor_value_info("y", 0, None)], list(inits))
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)])
    model.ir_version = 10
    return ol.ModelProto.FromString(model.SerializeToString())


def test_int32_initializers_fold() -> None:
    # Slice bounds as int32 initializers (torch and TF exporters write either type): known,
    # so dY is padded back statically instead of scattered through a run-time index
    inits = [onh.from_array(np.array(v, np.int32), n) for n, v in (("s", [1]), ("e", [4]), ("a", [1]))]
    model = _model(
        [oh.make_node("Slice", ["x", "s", "e", "a"], ["y"])],
        [oh.make_tensor_value_info("x", T.FLOAT, ["N", 6])],
        inits,
    )
    bwd = ol.GradientOfFunction(model, ["x"], "y")
    assert not {"ScatterElements", "ScatterND", "Range"} & {n.op_type for n in bwd.node}
    dy = np.arange(6, dtype=np.float32).reshape(2, 3)
    feeds = {"x": np.zeros((2, 6), np.float32), "dy": dy, "s": np.array([1], np.int32)}
    feeds.update({"e": np.array([4], np.int32), "a": np.array([1], np.int32)})
    (dx,) = ol.runtime.InferenceSession(bwd).run(None, {n: feeds[n] for n in bwd.input})
    want = np.zeros((2, 6), np.float32)
    want[:, 1:4] = dy
    np.testing.assert_array_equal(dx, want)


def test_matmul_on_a_rank_known_from_the_count_of_run_time_axes() -> None:
    # axes = [N - N] = [0], only known at run time: Unsqueeze still gives rank 3
    model = _model(
        [
            oh.make_node("Shape", ["x"], ["n"], start=0, end=1),
            oh.make_node("Sub", ["n", "n"], ["axes"]),
            oh.make_node("Unsqueeze", ["x", "axes"], ["u"]),
            oh.make_node("MatMul", ["u", "w"], ["y"]),
        ],
        [oh.make_tensor_value_info("x", T.FLOAT, ["N", 3]), oh.make_tensor_value_info("w", T.FLOAT, [3, 2])],
    )
    bwd = ol.GradientOfFunction(model, ["x", "w"], "y")
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((3, 2)).astype(np.float32)
    dy = rng.standard_normal((1, 4, 2)).astype(np.float32)
    dx, dw = ol.runtime.InferenceSession(bwd).run(None, {"x": x, "w": w, "dy": dy})
    np.testing.assert_allclose(dx, dy[0] @ w.T, rtol=1e-5)
    np.testing.assert_allclose(dw, x.T @ dy[0], rtol=1e-5)


def test_a_data_dependent_rank_is_refused_and_says_where_it_comes_from() -> None:
    # Reshape to a target whose length is data-dependent (NonZero's count): no rank for MatMul
    model = _model(
        [
            oh.make_node("NonZero", ["m"], ["nz"]),
            oh.make_node("Reshape", ["nz", "flat"], ["s"]),
            oh.make_node("Reshape", ["x", "s"], ["r"]),
            oh.make_node("MatMul", ["r", "w"], ["y"]),
        ],
        [
            oh.make_tensor_value_info("x", T.FLOAT, [6]),
            oh.make_tensor_value_info("m", T.FLOAT, [None]),
            oh.make_tensor_value_info("w", T.FLOAT, [3, 3]),
        ],
        [onh.from_array(np.array([-1], np.int64), "flat")],
    )
    with pytest.raises(ol.GradientError, match=r"rank of 'r', the output of the node \(ai.onnx::Reshape\).*run time"):
        ol.GradientOfFunction(model, ["x"], "y")
