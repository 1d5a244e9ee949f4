"""Sequence/optional values in the session, and the sequence-related tensor kernels, against onnxruntime.

The backend node cases of these ops run in ``test_conformance.py``; here: hand-built models
that move sequences through Loop, SplitToSequence/ConcatFromSequence and SequenceMap, the
feed checks for sequence and optional inputs, and single-node comparisons on random inputs
for ReverseSequence, Unique, Scatter, CenterCropPad, TensorScatter and Upsample.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper

sys.path.insert(0, os.path.dirname(__file__))
from ort_reference import compare_with_ort, rng  # noqa: E402

import onnx_light as ol  # noqa: E402
from onnx_light.onnx_core import InvalidFeed  # noqa: E402
from onnx_light.runtime import InferenceSession  # noqa: E402

FLOAT_SEQ = helper.make_sequence_type_proto(helper.make_tensor_type_proto(T.FLOAT, None))


def _model(nodes: list[Any], inputs: list[Any], outputs: list[Any], opset: int = 21) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def _both(model: onnx.ModelProto, feeds: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    """(ours, onnxruntime's) outputs of ``model`` on ``feeds``."""
    import onnxruntime

    ours = InferenceSession(ol.ModelProto.FromString(model.SerializeToString())).run(None, feeds)
    ort = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return ours, ort.run(None, feeds)


def _assert_same(got: Any, want: Any, where: str = "") -> None:
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{where}: {got!r} vs {want!r}"
        for i, (g, w) in enumerate(zip(got, want)):
            _assert_same(g, w, f"{where}[{i}]")
        return
    assert got.dtype == want.dtype and got.shape == want.shape, (
        f"{where}: {got.dtype}{got.shape} vs {want.dtype}{want.shape}"
    )
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=where)


def test_loop_builds_a_sequence_with_sequence_insert() -> None:
    """A Loop carries a sequence and appends ``x * i`` each iteration; ConcatFromSequence stacks it."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Cast", ["i"], ["fi"], to=T.FLOAT),
            helper.make_node("Mul", ["x", "fi"], ["xi"]),
            helper.make_node("SequenceInsert", ["seq_in", "xi"], ["seq_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", T.INT64, []),
            helper.make_tensor_value_info("cond_in", T.BOOL, []),
            helper.make_value_info("seq_in", FLOAT_SEQ),
        ],
        [helper.make_tensor_value_info("cond_out", T.BOOL, []), helper.make_value_info("seq_out", FLOAT_SEQ)],
    )
    model = _model(
        [
            helper.make_node("SequenceEmpty", [], ["empty"], dtype=T.FLOAT),
            helper.make_node("Loop", ["n", "", "empty"], ["seq"], body=body),
            helper.make_node("ConcatFromSequence", ["seq"], ["stacked"], axis=0, new_axis=1),
            helper.make_node("SequenceLength", ["seq"], ["length"]),
        ],
        [helper.make_tensor_value_info("n", T.INT64, []), helper.make_tensor_value_info("x", T.FLOAT, [2, 3])],
        [
            helper.make_value_info("seq", FLOAT_SEQ),
            helper.make_tensor_value_info("stacked", T.FLOAT, None),
            helper.make_tensor_value_info("length", T.INT64, []),
        ],
    )
    x = rng().standard_normal((2, 3)).astype(np.float32)
    ours, ort = _both(model, {"n": np.array(4, np.int64), "x": x})
    _assert_same(ours, ort)
    assert len(ours[0]) == 4 and ours[1].shape == (4, 2, 3)


@pytest.mark.parametrize(
    ("split", "axis", "new_axis"),
    [
        (None, -1, 1),
        (None, 0, 1),
        (None, 1, 0),
        (np.array(2, np.int64), 1, 0),
        (np.array([1, 3, 1], np.int64), 1, 0),
        (np.array([5], np.int64), 3, 1),
    ],
)
def test_split_to_sequence_then_concat_from_sequence(split: np.ndarray | None, axis: int, new_axis: int) -> None:
    x = rng().standard_normal((3, 5, 2)).astype(np.float32)
    inputs = [helper.make_tensor_value_info("x", T.FLOAT, [3, 5, 2])]
    names = ["x"]
    if split is not None:
        inputs.append(helper.make_tensor_value_info("split", T.INT64, list(split.shape)))
        names.append("split")
    model = _model(
        [
            helper.make_node("SplitToSequence", names, ["seq"], axis=1),
            helper.make_node("ConcatFromSequence", ["seq"], ["y"], axis=axis, new_axis=new_axis),
        ],
        inputs,
        [helper.make_value_info("seq", FLOAT_SEQ), helper.make_tensor_value_info("y", T.FLOAT, None)],
    )
    feeds = {"x": x} if split is None else {"x": x, "split": split}
    ours, ort = _both(model, feeds)
    _assert_same(ours, ort)


def test_sequence_map_over_a_split() -> None:
    """SequenceMap applies Mul-by-an-outer-value and ReduceSum to each chunk of a split."""
    body = helper.make_graph(
        [
            helper.make_node("Mul", ["chunk", "w"], ["scaled"]),
            helper.make_node("ReduceSum", ["scaled"], ["total"], keepdims=0),
        ],
        "body",
        [helper.make_tensor_value_info("chunk", T.FLOAT, None), helper.make_tensor_value_info("w", T.FLOAT, [4])],
        [helper.make_tensor_value_info("scaled", T.FLOAT, None), helper.make_tensor_value_info("total", T.FLOAT, [])],
    )
    model = _model(
        [
            helper.make_node("SplitToSequence", ["x", "split"], ["seq"], axis=0),
            helper.make_node("SequenceMap", ["seq", "w"], ["scaled_seq", "totals"], body=body),
        ],
        [
            helper.make_tensor_value_info("x", T.FLOAT, [6, 4]),
            helper.make_tensor_value_info("split", T.INT64, [3]),
            helper.make_tensor_value_info("w", T.FLOAT, [4]),
        ],
        [helper.make_value_info("scaled_seq", FLOAT_SEQ), helper.make_value_info("totals", FLOAT_SEQ)],
    )
    r = rng()
    feeds = {
        "x": r.standard_normal((6, 4)).astype(np.float32),
        "split": np.array([1, 2, 3], np.int64),
        "w": r.standard_normal(4).astype(np.float32),
    }
    ours, ort = _both(model, feeds)
    _assert_same(ours, ort)
    assert [t.shape for t in ours[0]] == [(1, 4), (2, 4), (3, 4)]


def _seq_identity_session() -> InferenceSession:
    model = _model(
        [helper.make_node("Identity", ["s"], ["t"])],
        [helper.make_value_info("s", FLOAT_SEQ)],
        [helper.make_value_info("t", FLOAT_SEQ)],
    )
    return InferenceSession(ol.ModelProto.FromString(model.SerializeToString()))


def test_sequence_feed_checks() -> None:
    sess = _seq_identity_session()
    with pytest.raises(InvalidFeed, match=r"'s'.*seq\(tensor\(float\)\).*list"):
        sess.run(None, {"s": np.zeros(3, np.float32)})
    with pytest.raises(InvalidFeed, match=r"'s\[1\]'.*float"):
        sess.run(None, {"s": [np.zeros(2, np.float32), np.zeros(2, np.int64)]})
    assert sess.run(None, {"s": []}) == [[]]


def test_sequence_output_does_not_alias_the_feed() -> None:
    fed = [np.ones(2, np.float32), np.zeros(3, np.float32)]
    (out,) = _seq_identity_session().run(None, {"s": fed})
    assert isinstance(out, list) and all(o is not f for o, f in zip(out, fed))
    out[0][0] = 5.0
    assert fed[0][0] == 1.0


def test_optional_feed_none_or_value() -> None:
    opt = helper.make_optional_type_proto(helper.make_tensor_type_proto(T.FLOAT, [2]))
    model = _model(
        [helper.make_node("OptionalHasElement", ["o"], ["has"])],
        [helper.make_value_info("o", opt)],
        [helper.make_tensor_value_info("has", T.BOOL, [])],
        opset=18,
    )
    sess = InferenceSession(ol.ModelProto.FromString(model.SerializeToString()))
    assert sess.run(None, {"o": None})[0].item() is False
    assert sess.run(None, {"o": np.zeros(2, np.float32)})[0].item() is True
    with pytest.raises(InvalidFeed, match="'o'.*dimension 0 must be 2"):
        sess.run(None, {"o": np.zeros(3, np.float32)})


def test_sequence_at_out_of_range_is_a_clear_error() -> None:
    model = _model(
        [helper.make_node("SequenceAt", ["s", "p"], ["t"])],
        [helper.make_value_info("s", FLOAT_SEQ), helper.make_tensor_value_info("p", T.INT64, [])],
        [helper.make_tensor_value_info("t", T.FLOAT, None)],
    )
    sess = InferenceSession(ol.ModelProto.FromString(model.SerializeToString()))
    with pytest.raises(ol.OnnxLightError, match=r"SequenceAt.*position 2 is out of range \[-2, 1\]"):
        sess.run(None, {"s": [np.zeros(1, np.float32)] * 2, "p": np.array(2, np.int64)})


def _r(*shape: int, dtype: str = "float32") -> np.ndarray:
    return rng().standard_normal(shape).astype(dtype)


# (label, op, inputs, attrs, n_out, opset): one onnxruntime comparison on random inputs each
ORT_ROWS: list[tuple[str, str, list[Any], dict[str, Any], int, int]] = [
    ("reverse-time", "ReverseSequence", [_r(5, 3, 2), np.array([5, 2, 0], np.int64)], {}, 1, 10),
    (
        "reverse-batch",
        "ReverseSequence",
        [_r(4, 6, dtype="float64"), np.array([1, 6, 3, 4], np.int64)],
        {"batch_axis": 0, "time_axis": 1},
        1,
        10,
    ),
    ("unique-flat", "Unique", [rng().integers(0, 5, (4, 5)).astype(np.float32)], {}, 4, 11),
    ("unique-unsorted", "Unique", [rng().integers(-3, 3, (12,)).astype(np.int64)], {"sorted": 0}, 4, 11),
    ("unique-axis", "Unique", [rng().integers(0, 2, (5, 3)).astype(np.float32)], {"axis": 0}, 4, 11),
    (
        "unique-axis-unsorted",
        "Unique",
        [rng().integers(0, 2, (3, 6)).astype(np.int64)],
        {"axis": -1, "sorted": 0},
        4,
        11,
    ),
    (
        "scatter",
        "Scatter",
        [_r(3, 4), np.array([[1, 0, 2, 1], [0, 2, 1, 0]], np.int64), _r(2, 4)],
        {"axis": 0},
        1,
        9,
    ),
    ("center-crop-pad", "CenterCropPad", [_r(5, 4, 3), np.array([2, 7], np.int64)], {"axes": [0, -1]}, 1, 18),
    ("center-crop-pad-all", "CenterCropPad", [_r(3, 6), np.array([6, 3], np.int64)], {}, 1, 18),
    ("upsample-nearest", "Upsample", [_r(1, 2, 3, 2), np.array([1, 1, 2, 3], np.float32)], {}, 1, 9),
    (
        "upsample-nearest-fractional",
        "Upsample",
        [_r(1, 1, 3, 4), np.array([1, 1, 1.5, 2.5], np.float32)],
        {},
        1,
        9,
    ),
    (
        "upsample-linear",
        "Upsample",
        [_r(2, 1, 3, 4), np.array([1, 1, 2, 1.5], np.float32)],
        {"mode": "linear"},
        1,
        9,
    ),
    ("upsample-7-nearest", "Upsample", [_r(1, 1, 2, 3)], {"scales": [1.0, 1.0, 3.0, 2.0]}, 1, 7),
    (
        "tensor-scatter",
        "TensorScatter",
        [_r(2, 3, 6, 4), _r(2, 3, 2, 4), np.array([1, 4], np.int64)],
        {},
        1,
        24,
    ),
    (
        "tensor-scatter-circular",
        "TensorScatter",
        [_r(2, 5, 3), _r(2, 3, 3), np.array([3, 4], np.int64)],
        {"mode": "circular", "axis": 1},
        1,
        24,
    ),
]


@pytest.mark.parametrize("row", ORT_ROWS, ids=[f"ort-{r[0]}" for r in ORT_ROWS])
def test_kernel_matches_onnxruntime(row: tuple[str, str, list[Any], dict[str, Any], int, int]) -> None:
    _, op, inputs, attrs, n_out, opset = row
    compare_with_ort(op, inputs, attrs, n_out, opset)


def test_bfloat16_sequences_keep_their_meaning() -> None:
    """bfloat16 travels as tagged bit patterns: through a sequence feed, SplitToSequence,
    ConcatFromSequence and SequenceAt into an Add, the values stay bfloat16 numbers."""
    import ml_dtypes

    bf_seq = helper.make_sequence_type_proto(helper.make_tensor_type_proto(T.BFLOAT16, None))
    model = _model(
        [
            helper.make_node("SplitToSequence", ["x"], ["parts"], axis=1),
            helper.make_node("ConcatFromSequence", ["parts"], ["joined"], axis=1),
            helper.make_node("SequenceAt", ["s", "one"], ["picked"]),
            helper.make_node("Add", ["picked", "picked"], ["doubled"]),
        ],
        [
            helper.make_tensor_value_info("x", T.BFLOAT16, [2, 3]),
            helper.make_value_info("s", bf_seq),
            helper.make_tensor_value_info("one", T.INT64, []),
        ],
        [
            helper.make_tensor_value_info("joined", T.BFLOAT16, None),
            helper.make_tensor_value_info("doubled", T.BFLOAT16, None),
        ],
    )
    x = np.array([[1.5, 2.25, -3.0], [4.0, 5.0, 6.0]], np.float32)
    xb = x.astype(ml_dtypes.bfloat16)
    sess = InferenceSession(ol.ModelProto.FromString(model.SerializeToString()))
    joined, doubled = sess.run(None, {"x": xb, "s": [xb, 2 * xb], "one": np.array(1, np.int64)})
    as_float = [np.asarray(v).view(ml_dtypes.bfloat16).astype(np.float32) for v in (joined, doubled)]
    np.testing.assert_array_equal(as_float[0], x)
    np.testing.assert_array_equal(as_float[1], 4 * x)


def test_sequence_insert_of_another_type_is_a_clear_error() -> None:
    """A float64 tensor inserted into a float32 sequence is refused (numpy would promote it silently)."""
    model = _model(
        [
            helper.make_node("SequenceInsert", ["s", "t"], ["u"]),
            helper.make_node("ConcatFromSequence", ["u"], ["y"], axis=0),
        ],
        [helper.make_value_info("s", FLOAT_SEQ), helper.make_tensor_value_info("t", T.DOUBLE, [2])],
        [helper.make_tensor_value_info("y", T.FLOAT, None)],
    )
    sess = InferenceSession(ol.ModelProto.FromString(model.SerializeToString()))
    with pytest.raises(ol.OnnxLightError, match=r"SequenceInsert.*share one type.*float32.*float64"):
        sess.run(None, {"s": [np.zeros(2, np.float32)], "t": np.zeros(2, np.float64)})


def test_sequence_at_of_a_fed_sequence_returns_a_copy() -> None:
    model = _model(
        [helper.make_node("SequenceAt", ["s", "p"], ["t"])],
        [helper.make_value_info("s", FLOAT_SEQ), helper.make_tensor_value_info("p", T.INT64, [])],
        [helper.make_tensor_value_info("t", T.FLOAT, None)],
    )
    fed = [np.ones(2, np.float32)]
    (out,) = InferenceSession(ol.ModelProto.FromString(model.SerializeToString())).run(
        None, {"s": fed, "p": np.array(0, np.int64)}
    )
    out[0] = 7.0
    assert fed[0][0] == 1.0


def _random_row(op: str, seed: int) -> tuple[list[Any], dict[str, Any], int, int]:
    """Random shapes and attributes for ``op``: (inputs, attrs, n_out, opset)."""
    r = np.random.default_rng(seed)
    if op == "Unique":
        shape = tuple(int(d) for d in r.integers(1, 5, r.integers(1, 4)))
        x = r.integers(-2, 3, shape).astype(r.choice(["float32", "int64"]))
        attrs: dict[str, Any] = {"sorted": int(r.integers(0, 2))}
        if r.integers(0, 2):
            attrs["axis"] = int(r.integers(-x.ndim, x.ndim))
        return [x], attrs, 4, 11
    if op == "ReverseSequence":
        t, b = (int(d) for d in r.integers(1, 6, 2))
        batch_axis = int(r.integers(0, 2))
        shape = [b, t, 2] if batch_axis == 0 else [t, b, 2]
        lens = r.integers(0, t + 1, b).astype(np.int64)
        return (
            [r.standard_normal(shape).astype(np.float32), lens],
            {"batch_axis": batch_axis, "time_axis": 1 - batch_axis},
            1,
            10,
        )
    if op == "CenterCropPad":
        x = r.standard_normal(tuple(int(d) for d in r.integers(1, 7, 3))).astype(np.float32)
        return [x, r.integers(1, 8, 3).astype(np.int64)], {}, 1, 18
    # TensorScatter: batch 2, cache length 6 on axis 2
    update_len = int(r.integers(1, 4))
    mode = str(r.choice(["linear", "circular"]))
    high = 6 - update_len + 1 if mode == "linear" else 6
    cache, update = r.standard_normal((2, 3, 6, 2)), r.standard_normal((2, 3, update_len, 2))
    starts = r.integers(0, high, 2).astype(np.int64)
    return [cache.astype(np.float32), update.astype(np.float32), starts], {"mode": mode, "axis": 2}, 1, 24


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("op", ["Unique", "ReverseSequence", "CenterCropPad", "TensorScatter"])
def test_random_inputs_match_onnxruntime(op: str, seed: int) -> None:
    inputs, attrs, n_out, opset = _random_row(op, seed)
    compare_with_ort(op, inputs, attrs, n_out, opset)
