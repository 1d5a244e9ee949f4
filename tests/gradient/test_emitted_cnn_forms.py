"""The CNN rules' emitted forms on the shapes real models have (issue 15 §2/§3).

The values are checked by the rule tables (test_rules_nn / test_rules_normalization, against
finite differences and onnxruntime); these tests pin the cheaper forms themselves.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

import onnx_light as ol
from onnx_light import helper

FLOAT = ol.TensorProto.FLOAT


def _backward(node: ol.NodeProto, shapes: dict[str, list[int]], xs: list[str]) -> ol.FunctionProto:
    inputs = [helper.make_tensor_value_info(k, FLOAT, v) for k, v in shapes.items()]
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    return ol.GradientOfFunction(model, xs, "y")


def _conv(x: list[int], w: list[int], **attrs: object) -> ol.FunctionProto:
    return _backward(helper.make_node("Conv", ["x", "w"], ["y"], **attrs), {"x": x, "w": w}, ["w"])


def test_weight_gradient_on_a_batch_of_one_is_one_gemm() -> None:
    ops = Counter(n.op_type for n in _conv([1, 4, 6, 6], [5, 4, 3, 3], pads=[1, 1, 1, 1]).node)
    assert ops["Gemm"] == 1 and ops["MatMul"] == 0, ops
    assert ops["ReduceSum"] == 0 and ops["Transpose"] == 0, ops


def test_weight_gradient_on_a_batch_keeps_the_batched_product() -> None:
    ops = Counter(n.op_type for n in _conv([3, 4, 6, 6], [5, 4, 3, 3]).node)
    assert ops["MatMul"] == 1 and ops["ReduceSum"] == 1, ops


@pytest.mark.parametrize("batch", [1, 2])
def test_pointwise_weight_gradient_reads_x_as_its_columns(batch: int) -> None:
    bwd = _conv([batch, 4, 5, 5], [6, 4, 1, 1])
    assert "Conv" not in [n.op_type for n in bwd.node]  # no one-hot im2col Conv
    strided = _conv([batch, 4, 5, 5], [6, 4, 1, 1], strides=[2, 2])
    assert [n.op_type for n in strided.node].count("Conv") == 1  # the strided columns


def test_depthwise_weight_gradient_on_a_batch_of_one_has_no_transpose() -> None:
    bwd = _conv([1, 6, 7, 7], [6, 1, 3, 3], group=6, pads=[1, 1, 1, 1])
    ops = [n.op_type for n in bwd.node]
    assert "Transpose" not in ops and ops.count("Conv") == 1, ops


@pytest.mark.parametrize("batch", [1, 2])
def test_conv_transpose_weight_gradient_is_a_product_over_the_columns_of_dy(batch: int) -> None:
    """DBNet's 2x2/2 head: dW[c, m, i, j] = sum_(n, h, w) X[n, c, h, w] dY[n, m, 2h + i, 2w + j],
    one Gemm over dY's im2col columns on a batch of one (not a Conv whose kernel is X)."""
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2])
    shapes = {"x": [batch, 3, 4, 5], "w": [3, 2, 2, 2]}
    bwd = _backward(node, shapes, ["w"])
    ops = Counter(n.op_type for n in bwd.node)
    assert ops["Gemm" if batch == 1 else "MatMul"] == 1 and ops["Conv"] == 1, ops  # the columns
    assert all(len(n.input) == 2 and n.input[1] != "x" for n in bwd.node if n.op_type == "Conv")
    rng = np.random.default_rng(0)
    feeds = {k: rng.standard_normal(v).astype(np.float32) for k, v in shapes.items()}
    feeds["dy"] = rng.standard_normal((batch, 2, 8, 10)).astype(np.float32)
    (got,) = ol.runtime.InferenceSession(bwd).run(None, feeds)
    phases = feeds["dy"].astype(np.float64).reshape(batch, 2, 4, 2, 5, 2)  # (n, m, h, i, w, j)
    np.testing.assert_allclose(got, np.einsum("nchw,nmhiwj->cmij", feeds["x"], phases), rtol=1e-5, atol=1e-5)


def test_batch_norm_divides_the_channel_sum_not_every_cell() -> None:
    shapes = {"x": [2, 3, 4, 4], "s": [3], "b": [3], "m": [3], "v": [3]}
    node = helper.make_node("BatchNormalization", list(shapes), ["y"])
    bwd = _backward(node, shapes, list(shapes))
    centered = {n.output[0] for n in bwd.node if n.op_type == "Sub" and n.input[0] == "x"}
    assert len(centered) == 1
    divs = [n for n in bwd.node if n.op_type == "Div"]
    assert not any(set(n.input) & centered for n in divs)  # X - mean is never divided cell by cell
    # and the values: dScale = sum(dY (X - mean) / std), dX = dY s / std
    rng = np.random.default_rng(0)
    feeds = {k: rng.standard_normal(v).astype(np.float32) for k, v in shapes.items()}
    feeds["v"] = np.abs(feeds["v"]) + 0.5
    feeds["dy"] = rng.standard_normal(shapes["x"]).astype(np.float32)
    got = dict(zip(bwd.output, ol.runtime.InferenceSession(bwd).run(None, feeds)))
    std = np.sqrt(feeds["v"].astype(np.float64) + 1e-5)[:, None, None]
    xhat = (feeds["x"] - feeds["m"][:, None, None]) / std
    np.testing.assert_allclose(got["grad_s"], (feeds["dy"] * xhat).sum(axis=(0, 2, 3)), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got["grad_x"], feeds["dy"] * feeds["s"][:, None, None] / std, rtol=1e-5, atol=1e-6)


def _conv_bn(
    extra: list[ol.NodeProto], y: str = "y", xs: tuple[str, ...] = ("w", "s", "b", "m", "v"), **bn: object
) -> ol.FunctionProto:
    shapes = {"x": [1, 3, 6, 6], "w": [4, 3, 3, 3], "s": [4], "b": [4], "m": [4], "v": [4]}
    inputs = [helper.make_tensor_value_info(k, FLOAT, v) for k, v in shapes.items()]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["y"], **bn),
        *extra,
    ]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info(y, FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    return ol.GradientOfFunction(model, list(xs), y)


def test_inference_batch_norm_after_a_conv_folds_into_it() -> None:
    ops = Counter(n.op_type for n in _conv_bn([]).node)
    assert ops["BatchNormalization"] == 0, ops  # no BatchNormalization over the map, recomputed or differentiated
    read_twice = Counter(n.op_type for n in _conv_bn([helper.make_node("Mul", ["y", "c"], ["z"])], y="z").node)
    assert read_twice["BatchNormalization"] == 1, read_twice  # the Conv's own output is read: not folded
    training = Counter(n.op_type for n in _conv_bn([], training_mode=1).node)
    assert training["ReduceMean"] > 0, training  # batch statistics: not folded, the rule takes them
    cut = _conv_bn([], xs=("c", "s"))  # the Conv's output is an x (a cut point): kept, BN's rule gives grad_c
    assert "c" in cut.input and Counter(n.op_type for n in cut.node)["Conv"] == 0, [n.op_type for n in cut.node]
