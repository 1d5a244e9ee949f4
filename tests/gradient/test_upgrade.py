"""Old-opset nodes upgraded by ``upgrade_nodes`` compute what they did, checked in onnxruntime.

For each row the one-node model is built with ``onnx.helper`` at its old opset and run
in onnxruntime; our upgraded nodes run as an opset-21 model on the same random inputs;
the outputs must be equal.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any, NamedTuple

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper as oh

from onnx_light.onnx_core import GradientError, NodeProto
from onnx_light.onnx_core.gradient._types import ValueType, infer_types
from onnx_light.onnx_core.ops._upgrade import upgrade_nodes

TARGET = 21


class Row(NamedTuple):
    op: str
    inputs: list[np.ndarray | None]
    attrs: dict[str, Any]
    opset: int
    n_out: int = 1
    id: str = ""
    #: what the upgrader is told: "full" (dtype and shape), "rank" (dtype and rank) or "none"
    known: str = "full"


def _rand(*shape: int, dtype: Any = np.float32) -> np.ndarray:
    rng = np.random.default_rng(abs(hash(shape)) % 2**32)
    return rng.standard_normal(shape).astype(dtype)


X = _rand(2, 3, 4, 5)
X3 = _rand(2, 3, 4)
ROWS = [
    Row("ReduceSum", [X], {"axes": [1], "keepdims": 0}, 11),
    Row("ReduceSum", [X], {"keepdims": 1}, 12, id="ReduceSum-all"),
    Row("ReduceMean", [X], {"axes": [-1]}, 17),
    Row("ReduceMax", [X], {"axes": [0, 2], "keepdims": 0}, 13),
    Row("ReduceMin", [X], {"axes": [3]}, 11),
    Row("ReduceProd", [X3], {"axes": [2]}, 17),
    Row("ReduceL1", [X], {"axes": [1]}, 17),
    Row("ReduceL2", [X], {"axes": [1, 2]}, 11),
    Row("ReduceLogSum", [np.abs(X) + 0.5], {"axes": [1]}, 13),
    Row("ReduceLogSumExp", [X], {"axes": [2]}, 17),
    Row("ReduceSumSquare", [X], {"axes": [0]}, 17),
    Row("Split", [X], {"axis": 3, "split": [2, 3]}, 11, n_out=2),
    Row("Split", [_rand(6, 2)], {}, 11, n_out=3, id="Split-equal-11"),
    Row("Split", [_rand(2, 8)], {"axis": -1}, 13, n_out=4, id="Split-equal-13"),
    Row("Squeeze", [_rand(2, 1, 3, 1)], {"axes": [1, -1]}, 11),
    Row("Unsqueeze", [X3], {"axes": [0, 4]}, 11),
    Row("Slice", [X], {"starts": [1, -3], "ends": [3, 100], "axes": [1, 3]}, 9),
    Row("Slice", [X3], {"starts": [1, 0], "ends": [2, 2]}, 9, id="Slice-noaxes"),
    Row("Pad", [X3], {"pads": [0, 1, 2, 0, 2, 1], "value": 1.5}, 10),
    Row("Pad", [X3], {"pads": [0, 1, 2, 0, 2, 1], "mode": "reflect"}, 10, id="Pad-reflect"),
    Row("Pad", [_rand(3, 4, dtype=np.float64)], {"pads": [1, 1, 1, 1]}, 7, id="Pad-7"),
    Row("Clip", [X], {"min": -0.5, "max": 0.7}, 10),
    Row("Clip", [_rand(3, 4)], {"max": 0.1}, 10, id="Clip-max-only"),
    Row("Clip", [X3], {"min": -0.2}, 6 + 1, id="Clip-min-only"),
    Row("Dropout", [X], {"ratio": 0.3}, 11, n_out=2),
    Row("Dropout", [X3], {}, 10, id="Dropout-noratio"),
    Row("Dropout", [X3], {"ratio": 0.5}, 7, n_out=2, id="Dropout-7-mask"),
    Row("Softmax", [X], {}, 11, id="Softmax-default-axis"),
    Row("Softmax", [X3], {"axis": 2}, 12, id="Softmax-last"),
    Row("Softmax", [X3], {"axis": -1}, 12, known="none", id="Softmax-last-rank-unknown"),
    Row("LogSoftmax", [X], {"axis": 2}, 11),
    Row("LogSoftmax", [X3], {"axis": 0}, 9, known="rank", id="LogSoftmax-axis0"),
    Row("Hardmax", [X3], {"axis": 1}, 11),
    Row("Hardmax", [X3], {"axis": -1}, 11, id="Hardmax-last"),
    Row("GroupNormalization", [_rand(2, 6, 3, 3), _rand(3), _rand(3)], {"num_groups": 3}, 18),
    Row(
        "GroupNormalization",
        [_rand(2, 4, 5), _rand(2), _rand(2)],
        {"num_groups": 2, "epsilon": 1e-3},
        18,
        known="rank",
        id="GroupNormalization-C-unknown",
    ),
    Row("BatchNormalization", [X, _rand(3), _rand(3), _rand(3), np.abs(_rand(3)) + 0.5], {"spatial": 1}, 7),
    Row(
        "BatchNormalization",
        [X, _rand(3), _rand(3), _rand(3), np.abs(_rand(3)) + 0.5],
        {"epsilon": 1e-3},
        9,
        id="BatchNormalization-9",
    ),
    Row("TopK", [X3], {"k": 2, "axis": 1}, 9, n_out=2),
    Row("Scatter", [np.zeros((3, 4), np.float32), np.array([[1, 0], [2, 3]], np.int64), _rand(2, 2)], {"axis": 1}, 9),
    Row("Upsample", [X, np.array([1, 1, 2, 3], np.float32)], {"mode": "nearest"}, 9),
    Row("Upsample", [X, np.array([1, 1, 2, 2], np.float32)], {"mode": "linear"}, 9, id="Upsample-linear"),
    Row("Upsample", [X], {"scales": [1.0, 1.0, 3.0, 2.0]}, 7, id="Upsample-7"),
    Row("Resize", [X, np.array([1, 1, 2, 1.5], np.float32)], {"mode": "nearest"}, 10),
    Row("Resize", [X, np.array([1, 1, 2, 3], np.float32)], {"mode": "linear"}, 10, id="Resize-10-linear"),
    Row("Relu", [X], {}, 11, id="Relu-unchanged"),
]


def _model(nodes: list[Any], names: list[str], inputs: list[np.ndarray | None], outs: list[str], opset: int) -> Any:
    graph_in = [
        oh.make_tensor_value_info(n, oh.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for n, a in zip(names, inputs)
        if a is not None
    ]
    graph = oh.make_graph(nodes, "g", graph_in, [oh.make_empty_tensor_value_info(o) for o in outs])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
    model.ir_version = 8
    inferred = onnx.shape_inference.infer_shapes(model)
    known = {v.name: v for v in inferred.graph.value_info}
    like_x0 = graph_in[0].type  # onnx infers nothing for some function ops and old opsets: typed like x0
    del model.graph.output[:]
    model.graph.output.extend(known.get(o) or oh.make_value_info(o, like_x0) for o in outs)
    return model


def _run(model: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _upgrade(row: Row, node: Any) -> tuple[list[NodeProto], NodeProto]:
    ours = NodeProto.FromString(node.SerializeToString())
    before = copy.deepcopy(ours)
    types = {f"x{i}": a for i, a in enumerate(row.inputs) if a is not None}
    counter = itertools.count()

    def dtype_of(name: str) -> int:
        a = types.get(name)
        return 0 if a is None or row.known == "none" else oh.np_dtype_to_tensor_dtype(a.dtype)

    def rank_of(name: str) -> int | None:
        a = types.get(name)
        return None if a is None or row.known == "none" else a.ndim

    def shape_of(name: str) -> Any:
        a = types.get(name)
        return None if a is None or row.known != "full" else a.shape

    new = upgrade_nodes(
        [ours],
        row.opset,
        TARGET,
        lambda prefix: f"{prefix}_{next(counter)}",
        dtype_of=dtype_of,
        rank_of=rank_of,
        shape_of=shape_of,
    )
    assert ours == before, "the input node was mutated"
    return new, ours


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.id or f"{r.op}-{r.opset}")
def test_upgraded_node_matches_old_opset(row: Row) -> None:
    names = ["" if a is None else f"x{i}" for i, a in enumerate(row.inputs)]
    outs = [f"y{k}" for k in range(row.n_out)]
    node = oh.make_node(row.op, names, outs, **row.attrs)
    feeds = {n: a for n, a in zip(names, row.inputs) if a is not None}
    expected = _run(_model([node], names, row.inputs, outs, row.opset), feeds)

    new, ours = _upgrade(row, node)
    if row.op == "Relu":
        assert new[0] is ours
    onnx_nodes = [onnx.NodeProto.FromString(n.SerializeToString()) for n in new]
    got = _run(_model(onnx_nodes, names, row.inputs, outs, TARGET), feeds)
    if row.op == "Dropout" and row.n_out > 1:
        # onnxruntime's kernels before opset 12 return an all-False mask in inference mode;
        # the spec (and the onnx reference) keep every element: an all-True mask at 12+
        assert got[1].all() and got[1].dtype == (bool if row.opset >= 10 else row.inputs[0].dtype)
        expected, got = expected[:1], got[:1]
    for e, g in zip(expected, got):
        assert e.dtype == g.dtype and e.shape == g.shape
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)

    # our inference reads the old form and the upgraded one alike
    known = {n: ValueType(oh.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in feeds.items()}
    params = {n: a for n, a in feeds.items() if n != "x0"}  # scales, indices...: known when the pass runs
    old_types, _ = infer_types([ours], known, params, row.opset)
    new_types, _ = infer_types(new, known, params, TARGET)
    for o, e in zip(outs, expected):
        assert new_types[o].shape == e.shape, (o, new_types[o])
        assert old_types[o].shape == e.shape, (o, old_types[o])


def test_spatial_zero_batch_norm_is_a_clear_error() -> None:
    node = oh.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], spatial=0)
    with pytest.raises(GradientError, match="spatial=0"):
        upgrade_nodes([NodeProto.FromString(node.SerializeToString())], 7, TARGET, lambda p: p + "_1")


def test_clip_without_dtype_is_a_clear_error() -> None:
    node = oh.make_node("Clip", ["x"], ["y"], min=0.0)
    with pytest.raises(GradientError, match="element type of 'x'"):
        upgrade_nodes([NodeProto.FromString(node.SerializeToString())], 10, TARGET, lambda p: p + "_1")


def test_dtype_of_intermediate_is_inferred() -> None:
    """A Clip on a value produced by an earlier node learns its type from our inference."""
    nodes = [
        oh.make_node("Cast", ["x"], ["xd"], to=onnx.TensorProto.DOUBLE),
        oh.make_node("Clip", ["xd"], ["y"], min=0.0, max=0.5),
    ]
    ours = [NodeProto.FromString(n.SerializeToString()) for n in nodes]
    counter = itertools.count()
    new = upgrade_nodes(ours, 10, TARGET, lambda p: f"{p}_{next(counter)}", dtype_of=lambda n: 1 if n == "x" else 0)
    x = _rand(3, 4)
    got = _run(
        _model([onnx.NodeProto.FromString(n.SerializeToString()) for n in new], ["x"], [x], ["y"], TARGET), {"x": x}
    )[0]
    np.testing.assert_allclose(got, np.clip(x.astype(np.float64), 0.0, 0.5))


def test_same_or_newer_opset_passes_through() -> None:
    node = NodeProto.FromString(oh.make_node("ReduceSum", ["x"], ["y"], axes=[1]).SerializeToString())
    assert upgrade_nodes([node], 21, 21, lambda p: p)[0] is node


def _conv_transpose_10(**attrs: Any) -> NodeProto:
    return NodeProto.FromString(oh.make_node("ConvTranspose", ["x", "w"], ["y"], **attrs).SerializeToString())


def test_conv_transpose_odd_padding_gets_explicit_pads() -> None:
    """ConvTranspose-1 put SAME_UPPER's odd cell at the start; at 11+ explicit pads say so."""
    shapes = {"x": (1, 1, 3), "w": (1, 1, 3)}
    node = _conv_transpose_10(strides=[2], auto_pad="SAME_UPPER")
    (new,) = upgrade_nodes([node], 10, TARGET, lambda p: p + "_1", shape_of=shapes.get)
    attrs = {a.name: list(a.ints) if a.ints else a.s for a in new.attribute}
    # full = (3 - 1) * 2 + 3 = 7 cells, 6 kept: the one padded cell at the start
    assert attrs["pads"] == [1, 0] and "auto_pad" not in attrs
    even = _conv_transpose_10(strides=[1], auto_pad="SAME_UPPER")
    shapes_even = {"x": (1, 1, 4), "w": (1, 1, 3)}
    assert upgrade_nodes([even], 10, TARGET, lambda p: p, shape_of=shapes_even.get)[0] is even


def test_conv_transpose_odd_padding_without_shapes_is_a_clear_error() -> None:
    node = _conv_transpose_10(strides=[2], auto_pad="SAME_LOWER")
    with pytest.raises(GradientError, match="spatial dims of 'x' and 'w'"):
        upgrade_nodes([node], 10, TARGET, lambda p: p + "_1")


def test_nodes_inside_branches_are_upgraded() -> None:
    """An If (as silero-vad's opset-16 export holds, its whole model in two branches) keeps
    Reduce* nodes with an ``axes`` attribute in its branches: the backward model at opset 21
    upgrades them too, in the forward If and in the reverse one."""
    import onnx_light as ol

    def branch(op: str) -> Any:
        out = oh.make_tensor_value_info(op, onnx.TensorProto.FLOAT, [2, 1])
        return oh.make_graph([oh.make_node(op, ["x"], [op], axes=[1])], op, [], [out])

    nodes = [
        oh.make_node("If", ["c"], ["a"], then_branch=branch("ReduceMean"), else_branch=branch("ReduceSum")),
        oh.make_node("Mul", ["a", "a"], ["b"]),
        oh.make_node("ReduceSum", ["b"], ["loss"], keepdims=0),
    ]
    inputs = [oh.make_tensor_value_info("c", onnx.TensorProto.BOOL, []), oh.make_tensor_value_info("x", 1, [2, 3])]
    graph = oh.make_graph(nodes, "g", inputs, [oh.make_tensor_value_info("loss", 1, [])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 12)])
    bwd = ol.gradient_model(ol.load_from_string(model.SerializeToString()), ["x"], "loss")
    x = _rand(2, 3)
    for c, want in ((True, 2 * x.mean(1, keepdims=True) / 3), (False, 2 * x.sum(1, keepdims=True))):
        feeds = {"c": np.array(c), "x": x}
        ours = ol.runtime.InferenceSession(bwd).run(None, feeds)[0]
        np.testing.assert_allclose(ours, np.broadcast_to(want, x.shape), rtol=1e-5)
        np.testing.assert_allclose(_run(onnx.ModelProto.FromString(bwd.SerializeToString()), feeds)[0], ours, rtol=1e-6)
