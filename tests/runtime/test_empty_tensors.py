"""Tensors with a zero-size dimension through the session, against onnxruntime.

Each row is one node whose input (or output) has no elements: reductions with and without
keepdims, softmax along an empty axis, matrix products with ``k = 0`` (zeros) or an empty
batch, convolutions of an empty batch or with no output channels, gathers, pads and scatters
of nothing. A kernel that reshapes with ``-1`` beside a 0 fails on such inputs (numpy cannot
infer the -1), so these rows hold the session to what onnxruntime returns.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from ort_reference import make_node_model

import onnx_light as ol
from onnx_light.runtime import InferenceSession

F = np.float32
E = np.zeros((2, 0, 3), F)


def i64(*v: int) -> np.ndarray:
    return np.array(v, np.int64)


def ones(*shape: int, dtype: Any = F) -> np.ndarray:
    return np.ones(shape, dtype)


# (id, op, inputs, attributes, number of outputs)
Case = tuple[str, str, list[np.ndarray | None], dict[str, Any], int]


def _reductions() -> list[Case]:
    rows: list[Case] = []
    for op in "ReduceSum ReduceMax ReduceMin ReduceProd ReduceL1 ReduceL2 ReduceLogSumExp ReduceSumSquare".split():
        for axes in ([1], [0], [2]):
            for keep in (0, 1):
                rows.append((f"{op}-axes{axes}-keep{keep}", op, [E, i64(*axes)], {"keepdims": keep}, 1))
        rows.append((f"{op}-noop", op, [E, i64()], {"noop_with_empty_axes": 1}, 1))
    for op in ("ArgMax", "ArgMin"):
        rows += [(f"{op}-axis{a}", op, [E], {"axis": a}, 1) for a in (0, 2)]
    return rows


def _softmax_family() -> list[Case]:
    rows: list[Case] = []
    for op in ("Softmax", "LogSoftmax", "Hardmax"):
        rows += [(f"{op}-axis{a}", op, [E], {"axis": a}, 1) for a in (0, 1, 2)]
        rows.append((f"{op}-last-axis-empty", op, [np.zeros((3, 0), F)], {"axis": -1}, 1))
    return rows


def _products() -> list[Case]:
    rows: list[Case] = []
    shapes: list[tuple[tuple[int, ...], tuple[int, ...]]] = [
        ((3, 0), (0, 4)),
        ((2, 3, 0), (0, 5)),
        ((0, 3), (3, 4)),
        ((3, 4), (4, 0)),
        ((2, 0, 3, 0), (0, 4)),
    ]
    shapes += [((2, 3, 4), (4, 0)), ((0, 3, 4), (4, 5)), ((2, 3, 0), (2, 0, 5)), ((0,), (0,))]
    for a, b in shapes:
        rows.append((f"MatMul-{a}x{b}", "MatMul", [ones(*a), ones(*b)], {}, 1))
        rows.append((f"MatMul-f64-{a}x{b}", "MatMul", [ones(*a, dtype=np.float64), ones(*b, dtype=np.float64)], {}, 1))
    rows.append(("Gemm-k0", "Gemm", [ones(3, 0), ones(0, 4), ones(4)], {}, 1))
    rows.append(("Gemm-k0-transA", "Gemm", [ones(0, 3), ones(0, 4), ones(4)], {"transA": 1, "alpha": 2.0}, 1))
    rows.append(("Gemm-m0", "Gemm", [ones(0, 3), ones(3, 4), ones(4)], {}, 1))
    rows.append(("Einsum-k0", "Einsum", [ones(3, 0), ones(0, 4)], {"equation": "ij,jk->ik"}, 1))
    return rows


def _nn() -> list[Case]:
    x0 = np.zeros((0, 2, 5, 5), F)
    w = np.full((3, 2, 3, 3), 0.5, F)
    rows: list[Case] = [
        ("Conv-empty-batch", "Conv", [x0, w], {}, 1),
        ("Conv-empty-batch-bias-pads", "Conv", [x0, w, ones(3)], {"pads": [1, 1, 1, 1]}, 1),
        ("Conv-empty-batch-1x1", "Conv", [x0, ones(3, 2, 1, 1)], {}, 1),
        ("Conv-no-output-channels", "Conv", [ones(1, 2, 5, 5), ones(0, 2, 3, 3)], {}, 1),
        ("Conv-no-output-channels-1x1", "Conv", [ones(1, 2, 5, 5), ones(0, 2, 1, 1)], {}, 1),
        ("Conv-no-input-channels", "Conv", [ones(1, 0, 5, 5), ones(3, 0, 3, 3), ones(3)], {}, 1),
        ("Conv-empty-batch-grouped", "Conv", [np.zeros((0, 4, 5, 5), F), ones(4, 2, 3, 3)], {"group": 2}, 1),
        ("Conv-empty-batch-depthwise", "Conv", [np.zeros((0, 4, 5, 5), F), ones(4, 1, 3, 3)], {"group": 4}, 1),
        ("Conv-1d-empty-batch", "Conv", [np.zeros((0, 2, 7), F), ones(3, 2, 3)], {}, 1),
        ("ConvTranspose-empty-batch", "ConvTranspose", [x0, ones(2, 3, 3, 3)], {}, 1),
        ("MaxPool-empty-batch", "MaxPool", [x0], {"kernel_shape": [2, 2]}, 1),
        ("AveragePool-empty-batch", "AveragePool", [x0], {"kernel_shape": [2, 2]}, 1),
        ("LayerNormalization-empty-batch", "LayerNormalization", [np.zeros((0, 4), F), ones(4), ones(4)], {}, 3),
        ("BatchNormalization-empty-batch", "BatchNormalization", [np.zeros((0, 2, 3), F), *[ones(2)] * 4], {}, 1),
        ("InstanceNormalization-empty-batch", "InstanceNormalization", [np.zeros((0, 2, 3), F), *[ones(2)] * 2], {}, 1),
        ("Resize-empty-batch", "Resize", [x0, None, np.array([1, 1, 2, 2], F)], {}, 1),
        ("LRN-empty-batch", "LRN", [np.zeros((0, 4, 2, 2), F)], {"size": 3}, 1),
    ]
    return rows


def _tensor() -> list[Case]:
    rows: list[Case] = []
    for a in (0, 1, 2):
        other = ones(2, 4, 3) if a == 1 else np.ones((2, 0, 3), F)
        rows.append((f"Concat-axis{a}", "Concat", [E, other], {"axis": a}, 1))
        rows.append((f"Gather-axis{a}-no-indices", "Gather", [ones(2, 4, 3), np.zeros(0, np.int64)], {"axis": a}, 1))
        rows.append((f"CumSum-axis{a}", "CumSum", [E, np.array(a, np.int64)], {}, 1))
        rows.append((f"Flatten-axis{a}", "Flatten", [E], {"axis": a}, 1))
    rows += [
        ("Transpose", "Transpose", [E], {"perm": [2, 0, 1]}, 1),
        ("Tile", "Tile", [E, i64(1, 3, 2)], {}, 1),
        ("Expand", "Expand", [np.zeros((1, 0, 1), F), i64(4, 0, 3)], {}, 1),
        ("Pad-constant", "Pad", [np.zeros((2, 0), F), i64(1, 1, 1, 1)], {}, 1),
        ("Pad-edge", "Pad", [np.zeros((0, 3), F), i64(0, 1, 0, 1)], {"mode": "edge"}, 1),
        ("ScatterND-no-updates", "ScatterND", [ones(4, 3), np.zeros((0, 1), np.int64), np.zeros((0, 3), F)], {}, 1),
        ("ScatterElements-none", "ScatterElements", [ones(4, 3), np.zeros((0, 3), np.int64), E[0]], {}, 1),
        ("GatherElements-no-indices", "GatherElements", [ones(4, 3), np.zeros((0, 3), np.int64)], {}, 1),
        ("GatherND-no-indices", "GatherND", [ones(4, 3), np.zeros((0, 1), np.int64)], {}, 1),
        ("TopK-k0", "TopK", [ones(4, 3), i64(0)], {}, 2),
        ("TopK-no-rows", "TopK", [np.zeros((0, 3), F), i64(2)], {}, 2),
        ("Slice-to-empty", "Slice", [ones(4, 3), i64(2), i64(1), i64(0)], {}, 1),
        ("Compress-none", "Compress", [ones(4, 3), np.zeros(4, np.bool_)], {"axis": 0}, 1),
        ("Reshape-allowzero", "Reshape", [E, i64(0, 5)], {"allowzero": 1}, 1),
        ("NonZero-empty", "NonZero", [np.zeros((2, 0, 3), np.int32)], {}, 1),
        ("Where-empty", "Where", [np.zeros((0, 3), np.bool_), ones(1, 3), ones(0, 1)], {}, 1),
        ("Add-broadcast-empty", "Add", [np.zeros((0, 1), F), ones(1, 3)], {}, 1),
    ]
    return rows


CASES = _reductions() + _softmax_family() + _products() + _nn() + _tensor()


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_empty_tensor_matches_onnxruntime(case: Case) -> None:
    import onnxruntime

    name, op, inputs, attrs, n_out = case
    model, _ = make_node_model(op, inputs, attrs, n_out, 21)
    feeds = {f"in{i}": a for i, a in enumerate(inputs) if a is not None}
    data = model.SerializeToString()
    expected = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = InferenceSession(ol.load_model_from_string(data)).run(None, feeds)
    for k, (g, e) in enumerate(zip(got, expected)):
        assert g.dtype == e.dtype and g.shape == e.shape, f"{name} output {k}: {g.dtype}{g.shape} != {e.dtype}{e.shape}"
        np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-6, err_msg=f"{name} output {k}")


def test_reshape_minus_one_beside_a_zero_is_a_clear_error() -> None:
    """[0, 6, 3] to [0, 3, -1] (torch's GroupNorm export on an empty batch): -1 cannot be
    inferred from 0 elements; onnxruntime refuses it too. The error says so (it was numpy's
    "cannot reshape array of size 0 into shape (0,3,newaxis)")."""
    model, _ = make_node_model("Reshape", [np.zeros((0, 6, 3), F), i64(0, 3, -1)], {}, 1, 21)
    with pytest.raises(ol.OnnxLightError, match="-1 is ambiguous beside a 0"):
        InferenceSession(model).run(None, {"in0": np.zeros((0, 6, 3), F), "in1": i64(0, 3, -1)})


@pytest.mark.parametrize(
    ("op", "inputs", "attrs", "opset", "shape"),
    [
        ("GroupNormalization", [np.zeros((0, 4, 5, 5), F), ones(4), ones(4)], {"num_groups": 2}, 21, (0, 4, 5, 5)),
        (
            "Attention",
            [np.zeros((0, 3, 8), F), np.zeros((0, 5, 8), F), np.zeros((0, 5, 8), F)],
            {"q_num_heads": 2, "kv_num_heads": 2},
            23,
            (0, 3, 8),
        ),
    ],
    ids=["GroupNormalization", "Attention-3d"],
)
def test_empty_batch_where_onnxruntime_fails(
    op: str, inputs: list[np.ndarray], attrs: dict[str, Any], opset: int, shape: tuple[int, ...]
) -> None:
    """onnxruntime 1.32 fails on these (its GroupNormalization reshapes by [0, G, -1]; its
    Attention asks for a batch > 0); the spec's output shapes are (N, C, ...) and
    (N, q_sequence, q_num_heads * v_head_size), empty. Our kernels reshaped by -1 beside the 0."""
    from onnx import helper

    names = [f"in{i}" for i in range(len(inputs))]
    graph = helper.make_graph(
        [helper.make_node(op, names, ["y"], **attrs)],
        "g",
        [helper.make_tensor_value_info(n, 1, a.shape) for n, a in zip(names, inputs)],
        [helper.make_tensor_value_info("y", 1, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    (y,) = InferenceSession(model).run(None, dict(zip(names, inputs)))
    assert y.shape == shape and y.dtype == F
