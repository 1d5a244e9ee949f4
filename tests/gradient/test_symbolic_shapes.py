"""Rules on symbolic shapes: one backward graph, checked at two input sizes.

Each row's graph declares batch and spatial (or class) dims symbolic, as exporters do
with ``dynamic_axes``. The pass runs ONCE; its backward function then runs at two
different input sizes, each checked against float64 central finite differences along
a random direction, and in onnxruntime (after ``onnx.checker`` with ``full_check``).
Rows run with and without onnx's shape inference (value_info written, or not).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from gradcheck import _NP_TO_ONNX, backward_feeds, backward_model, run_forward, to_ours
from onnx import helper as oh
from onnx import numpy_helper as onh

import onnx_light as ol

Feeds = Callable[[np.random.Generator, int], dict[str, np.ndarray]]


@dataclass
class Row:
    """A graph with symbolic dims and how to feed it at size 0 and size 1.

    Attributes:
        name: test id.
        nodes: forward nodes (``y`` is the last node's first output).
        feeds: ``feeds(rng, size)`` -> the graph inputs at that size.
        symbolic: per input, its axes declared symbolic (others are declared as fed at size 0).
        weights: weight inputs of static shape (the same at both sizes).
        xs: what to differentiate.
    """

    name: str
    nodes: list[Any]
    feeds: Feeds
    symbolic: dict[str, list[int]]
    weights: dict[str, np.ndarray] = field(default_factory=dict)
    xs: list[str] = field(default_factory=lambda: ["x"])


_W = np.random.default_rng(11)


def w(*shape: int) -> np.ndarray:
    return _W.standard_normal(shape)


def node(op: str, inputs: list[str], outputs: list[str] | None = None, **attrs: Any) -> Any:
    return oh.make_node(op, inputs, outputs or ["y"], **attrs)


def image(*sizes: tuple[int, ...]) -> Feeds:
    """Feeds of one float input ``x`` of ``sizes[size]``."""
    return lambda rng, size: {"x": rng.standard_normal(sizes[size])}


def ints(name: str, values: list[int]) -> Any:
    return node("Constant", [], [name], value=onh.from_array(np.array(values, np.int64), name))


NCHW = {"x": [0, 2, 3]}

CONV: list[Row] = [
    Row(
        "conv-s2-im2col",
        [node("Conv", ["x", "W", "B"], strides=[2, 2], pads=[1, 1, 1, 1])],
        image((2, 3, 9, 7), (1, 3, 6, 10)),
        NCHW,
        {"W": w(4, 3, 3, 3), "B": w(4)},
        ["x", "W", "B"],
    ),
    Row(
        "conv-grouped-s2",
        [node("Conv", ["x", "W"], strides=[2, 2], pads=[1, 0, 1, 2], group=2)],
        image((2, 4, 7, 8), (1, 4, 10, 5)),
        NCHW,
        {"W": w(6, 2, 3, 3)},
        ["x", "W"],
    ),
    Row(
        "conv-big-kernel-s3",
        [node("Conv", ["x", "W"], strides=[3, 2], pads=[1, 2, 0, 1])],
        image((1, 2, 13, 11), (2, 2, 9, 16)),
        NCHW,
        {"W": w(3, 2, 6, 5)},
        ["x", "W"],
    ),
    Row(
        "conv-same-dilated",
        [node("Conv", ["x", "W"], auto_pad="SAME_UPPER", dilations=[2, 1])],
        image((2, 2, 7, 6), (1, 2, 5, 9)),
        NCHW,
        {"W": w(3, 2, 3, 2)},
        ["x", "W"],
    ),
    Row(
        "conv-same-upper-s2",
        [node("Conv", ["x", "W", "B"], auto_pad="SAME_UPPER", strides=[2, 3])],
        image((2, 3, 7, 8), (1, 3, 10, 5)),
        NCHW,
        {"W": w(4, 3, 3, 2), "B": w(4)},
        ["x", "W", "B"],
    ),
    Row(
        "conv-same-lower-s2-grouped",
        [node("Conv", ["x", "W"], auto_pad="SAME_LOWER", strides=[2, 2], group=2)],
        image((1, 4, 8, 7), (2, 4, 5, 6)),
        NCHW,
        {"W": w(2, 2, 4, 3)},
        ["x", "W"],
    ),
    Row(
        "conv1d-s3-dilated",
        [node("Conv", ["x", "W"], strides=[3], dilations=[2], pads=[2, 1])],
        image((2, 2, 11), (3, 2, 16)),
        {"x": [0, 2]},
        {"W": w(2, 2, 3)},
        ["x", "W"],
    ),
    Row(
        "convtranspose-s2-k2",
        [node("ConvTranspose", ["x", "W", "B"], strides=[2, 2])],
        image((2, 3, 4, 3), (1, 3, 3, 5)),
        NCHW,
        {"W": w(3, 2, 2, 2), "B": w(2)},
        ["x", "W", "B"],
    ),
    Row(
        "convtranspose-grouped-outpad",
        [node("ConvTranspose", ["x", "W"], strides=[2, 3], pads=[1, 0, 0, 1], output_padding=[1, 2], group=2)],
        image((1, 4, 3, 4), (2, 4, 5, 2)),
        NCHW,
        {"W": w(4, 1, 3, 3)},
        ["x", "W"],
    ),
    Row(
        "convtranspose-same",
        [node("ConvTranspose", ["x", "W"], strides=[2, 2], auto_pad="SAME_UPPER")],
        image((2, 2, 3, 4), (1, 2, 5, 3)),
        NCHW,
        {"W": w(2, 3, 3, 3)},
        ["x", "W"],
    ),
]

POOL: list[Row] = [
    Row(
        "avgpool-ceil-exclude-pad",
        [node("AveragePool", ["x"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)],
        image((2, 2, 8, 7), (1, 2, 5, 10)),
        NCHW,
    ),
    Row(
        "avgpool-ceil-include-pad",
        [
            node(
                "AveragePool",
                ["x"],
                kernel_shape=[2, 3],
                strides=[2, 2],
                pads=[0, 0, 1, 1],
                ceil_mode=1,
                count_include_pad=1,
            )
        ],
        image((1, 3, 7, 8), (2, 3, 6, 5)),
        NCHW,
    ),
    Row(
        "avgpool-same-upper-s2",
        [node("AveragePool", ["x"], kernel_shape=[3, 2], strides=[2, 2], auto_pad="SAME_UPPER")],
        image((2, 2, 7, 6), (1, 2, 4, 9)),
        NCHW,
    ),
    Row(
        "avgpool-same-lower-s2-include-pad",
        [node("AveragePool", ["x"], kernel_shape=[3, 3], strides=[2, 3], auto_pad="SAME_LOWER", count_include_pad=1)],
        image((1, 2, 8, 7), (2, 2, 5, 10)),
        NCHW,
    ),
    Row(
        "avgpool-s1",
        [node("AveragePool", ["x"], kernel_shape=[2, 2])],
        image((2, 2, 5, 4), (1, 2, 3, 6)),
        NCHW,
    ),
    Row(
        "maxpool-s2-p1",
        [node("MaxPool", ["x"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])],
        image((2, 2, 7, 6), (1, 2, 9, 5)),
        NCHW,
    ),
    Row(
        "maxpool-tiling-cut",
        [node("MaxPool", ["x"], kernel_shape=[2, 2], strides=[2, 2])],
        image((2, 2, 7, 6), (1, 2, 4, 9)),
        NCHW,
    ),
    Row(
        "maxpool-column-major-indices",
        [node("MaxPool", ["x"], ["y", "idx"], kernel_shape=[2, 2], strides=[1, 2], storage_order=1)],
        image((2, 2, 5, 6), (1, 2, 4, 9)),
        NCHW,
    ),
]


def _runtime_pads(mode: str) -> list[Any]:
    """Pad whose end pads are Shape(x)[2:] mod 3 (begin pads 1, 2): known only at run time."""
    return [
        node("Shape", ["x"], ["hw"], start=2),
        ints("three", [3, 3]),
        node("Mod", ["hw", "three"], ["ends"]),
        ints("head", [0, 0, 1, 2, 0, 0]),
        node("Concat", ["head", "ends"], ["pads"], axis=0),
        node("Pad", ["x", "pads"], mode=mode),
    ]


PAD: list[Row] = [
    Row(f"pad-{mode}-runtime-pads", _runtime_pads(mode), image((2, 2, 5, 7), (1, 2, 8, 4)), NCHW)
    for mode in ("constant", "reflect", "edge", "wrap")
] + [
    Row(
        "pad-edge-static-pads-symbolic-size",
        [ints("pads", [0, 0, 2, 1, 0, 0, 1, 3]), node("Pad", ["x", "pads"], mode="edge")],
        image((2, 1, 5, 4), (1, 1, 3, 6)),
        NCHW,
    ),
]


def _scores_labels(shapes: tuple[tuple[int, int], ...], ignore: int | None, dtype: Any) -> Feeds:
    def feeds(rng: np.random.Generator, size: int) -> dict[str, np.ndarray]:
        n, c = shapes[size]
        labels = rng.integers(0, c, (n,))
        if ignore is not None:
            labels[::3] = ignore
        return {"x": rng.standard_normal((n, c)), "l": labels.astype(dtype)}

    return feeds


LOSS: list[Row] = [
    Row(
        f"sce-symbolic-classes-{tag}",
        [node("SoftmaxCrossEntropyLoss", ["x", "l"], **({} if ignore is None else {"ignore_index": ignore}))],
        _scores_labels(((5, 4), (3, 7)), ignore, dtype),
        {"x": [0, 1], "l": [0]},
    )
    for tag, ignore, dtype in (("plain", None, np.int64), ("ignore-int32", 1, np.int32))
] + [
    Row(
        "nll-symbolic-classes",
        [node("LogSoftmax", ["x"], ["lp"], axis=1), node("NegativeLogLikelihoodLoss", ["lp", "l"], reduction="sum")],
        _scores_labels(((4, 3), (6, 5)), None, np.int64),
        {"x": [0, 1], "l": [0]},
    ),
]

MODELS: list[Row] = [
    Row(
        "detector-upsample-pad-concat",
        [
            node("Conv", ["x", "W1"], ["f1"], strides=[2, 2], pads=[1, 1, 1, 1]),
            node("Conv", ["f1", "W2"], ["f2"], strides=[2, 2], pads=[1, 1, 1, 1]),
            node("ConvTranspose", ["f2", "Wu"], ["u"], strides=[2, 2]),
            node("Shape", ["f1"], ["s1"], start=2),
            node("Shape", ["u"], ["su"], start=2),
            node("Sub", ["s1", "su"], ["diff"]),
            ints("zeros6", [0, 0, 0, 0, 0, 0]),
            node("Concat", ["zeros6", "diff"], ["pads"], axis=0),
            node("Pad", ["u", "pads"], ["up"]),
            node("Concat", ["f1", "up"], ["cat"], axis=1),
            node("Conv", ["cat", "Wh"]),
        ],
        image((2, 3, 11, 9), (1, 3, 8, 13)),
        NCHW,
        {"W1": w(4, 3, 3, 3), "W2": w(5, 4, 3, 3), "Wu": w(5, 3, 2, 2), "Wh": w(2, 7, 1, 1)},
        ["x", "W1", "W2", "Wu", "Wh"],
    ),
    Row(
        "ocr-shape-gather-concat-reshape-matmul",
        [
            node("Conv", ["x", "W"], ["f"], strides=[2, 1], pads=[1, 1, 1, 1]),
            node("Shape", ["f"], ["s"]),
            ints("i0", [0]),
            ints("i3", [3]),
            node("Gather", ["s", "i0"], ["n"]),
            node("Gather", ["s", "i3"], ["t"]),
            ints("ch", [-1]),
            node("Concat", ["n", "ch", "t"], ["target"], axis=0),
            node("Reshape", ["f", "target"], ["seq"]),
            node("Transpose", ["seq"], ["steps"], perm=[0, 2, 1]),
            node("MatMul", ["steps", "head"]),
        ],
        image((2, 1, 8, 6), (1, 1, 8, 11)),
        {"x": [0, 3]},
        {"W": w(3, 1, 3, 3), "head": w(12, 5)},
        ["x", "W", "head"],
    ),
]

ROWS = CONV + POOL + PAD + LOSS + MODELS


def _cast(feeds: dict[str, np.ndarray], dtype: Any) -> dict[str, np.ndarray]:
    return {k: v.astype(dtype) if v.dtype.kind == "f" else v for k, v in feeds.items()}


def _model(row: Row, infer_shapes: bool, dtype: Any) -> Any:
    import onnx

    # weights are graph inputs of static shape, so that the finite differences can move them
    at_first = _cast({**row.feeds(np.random.default_rng(0), 0), **row.weights}, dtype)
    inputs = []
    for name, value in at_first.items():
        dims: list[Any] = list(value.shape)
        for axis in row.symbolic.get(name, []):
            dims[axis] = f"{name}_{axis}"
        inputs.append(oh.make_tensor_value_info(name, _NP_TO_ONNX[value.dtype], dims))
    y = row.nodes[-1].output[0]
    graph = oh.make_graph(row.nodes, row.name, inputs, [oh.make_tensor_value_info(y, 0, None)])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)])
    model.ir_version = 10
    if infer_shapes:
        model = onnx.shape_inference.infer_shapes(model)
    return to_ours(model, ol.ModelProto)


def _check_size(row: Row, model: Any, bwd: Any, size: int) -> None:
    """Float64: our runtime's backward graph against central finite differences."""
    rng = np.random.default_rng(size + 5)
    y = row.nodes[-1].output[0]
    feeds = {**row.feeds(rng, size), **row.weights}
    y_val = run_forward(model, feeds, y)
    dy = rng.standard_normal(np.shape(y_val))
    grads = ol.runtime.InferenceSession(bwd).run(None, backward_feeds(bwd, feeds, dy, model))
    for x, g in zip(row.xs, grads):
        assert g.shape == feeds[x].shape, f"{row.name} size {size}: grad_{x} {g.shape} != {feeds[x].shape}"
    direction = {x: rng.standard_normal(feeds[x].shape) for x in row.xs}
    h = 1e-6

    def objective(t: float) -> float:
        moved = {**feeds, **{x: feeds[x] + t * direction[x] for x in row.xs}}
        return float(np.sum(dy * run_forward(model, moved, y)))

    numeric = (objective(h) - objective(-h)) / (2 * h)
    analytic = float(sum(np.sum(g * direction[x]) for x, g in zip(row.xs, grads)))
    scale = max(1.0, abs(numeric), abs(analytic))
    assert abs(numeric - analytic) <= 1e-5 * scale, f"{row.name} size {size}: FD {numeric!r} vs ours {analytic!r}"


def _check_ort(row: Row, model: Any, bwd: Any, size: int) -> None:
    """Float32 (onnxruntime has no float64 Conv): the full checker, then onnxruntime against us."""
    import onnx
    import onnxruntime as ort

    rng = np.random.default_rng(size + 9)
    feeds = _cast({**row.feeds(rng, size), **row.weights}, np.float32)
    y_val = run_forward(model, feeds, row.nodes[-1].output[0])
    bfeeds = backward_feeds(bwd, feeds, rng.standard_normal(np.shape(y_val)).astype(np.float32), model)
    wrapped = backward_model(bwd, bfeeds)
    onnx.checker.check_model(wrapped, full_check=True)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(wrapped.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    ours = ol.runtime.InferenceSession(bwd).run(None, bfeeds)
    for x, a, b in zip(row.xs, ours, sess.run(None, bfeeds)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4, err_msg=f"{row.name} size {size}: grad_{x} vs ORT")


@pytest.mark.parametrize("infer_shapes", [False, True], ids=["own-inference", "onnx-value-info"])
@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.name)
def test_one_backward_graph_two_sizes(row: Row, infer_shapes: bool) -> None:
    y = row.nodes[-1].output[0]
    model64, model32 = _model(row, infer_shapes, np.float64), _model(row, infer_shapes, np.float32)
    bwd64 = ol.GradientOfFunction(model64, row.xs, y)  # once per dtype, run at both sizes
    bwd32 = ol.GradientOfFunction(model32, row.xs, y)
    for size in (0, 1):
        _check_size(row, model64, bwd64, size)
        _check_ort(row, model32, bwd32, size)
