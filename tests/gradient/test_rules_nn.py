"""Gradient rules for convolutions, pooling and losses, checked by ``gradcheck.check_gradient``.

One row per rule and per attribute combination that changes the backward graph.
Tensors are tiny so that finite differences stay fast. onnxruntime has no float64
Conv, ConvTranspose, AveragePool or GlobalAveragePool kernels: those rows compare
with onnxruntime in float32 (``ort_dtype``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from gradcheck import Case, backward_feeds, backward_model, build_model, check_gradient, gradient
from onnx import helper as oh

import onnx_light as ol

F32 = np.float32
_rng = np.random.default_rng(7)


def rnd(*shape: int, rng: np.random.Generator | None = None) -> np.ndarray:
    return (rng or _rng).standard_normal(shape)


#: the rows added for issue 15 draw from their own generator: the rows after them keep their inputs
_rng15 = np.random.default_rng(15)


def node(op: str, inputs: list[str], outputs: list[str] | None = None, **attrs: Any) -> Any:
    return oh.make_node(op, inputs, outputs or ["y"], **attrs)


def conv(
    name: str,
    x: tuple[int, ...],
    w: tuple[int, ...],
    bias: bool = True,
    op: str = "Conv",
    opset: int = 21,
    rng: np.random.Generator | None = None,
    **attrs: Any,
) -> Case:
    """A Conv / ConvTranspose row differentiated w.r.t. every operand."""
    inputs = {"x": rnd(*x, rng=rng), "w": rnd(*w, rng=rng)}
    if bias:
        inputs["b"] = rnd(w[0] if op == "Conv" else w[1] * attrs.get("group", 1), rng=rng)
    return Case(name, [node(op, list(inputs), **attrs)], inputs, list(inputs), opset=opset, ort_dtype=F32)


CONV = [
    conv("conv2d", (2, 3, 5, 5), (4, 3, 3, 3)),
    conv("conv2d-nobias", (1, 2, 4, 4), (3, 2, 2, 2), bias=False),
    conv("conv2d-stride2", (1, 2, 6, 5), (3, 2, 3, 3), strides=[2, 2]),
    conv("conv2d-stride2-unused", (1, 2, 6, 6), (2, 2, 2, 3), strides=[2, 3]),
    conv("conv2d-dil2", (1, 2, 6, 6), (2, 2, 2, 2), dilations=[2, 2]),
    conv("conv2d-pads", (1, 2, 4, 5), (3, 2, 3, 3), pads=[1, 0, 2, 1]),
    conv("conv2d-s2-d2-pads", (2, 2, 7, 6), (2, 2, 2, 2), strides=[2, 2], dilations=[2, 1], pads=[1, 1, 0, 1]),
    conv("conv2d-same-upper", (1, 2, 5, 4), (2, 2, 2, 3), auto_pad="SAME_UPPER", strides=[2, 1]),
    conv("conv2d-same-lower", (1, 2, 5, 4), (2, 2, 2, 2), auto_pad="SAME_LOWER", strides=[1, 2]),
    conv("conv2d-valid", (1, 2, 5, 5), (2, 2, 3, 2), auto_pad="VALID", strides=[2, 2]),
    conv("conv2d-group2", (2, 4, 4, 4), (6, 2, 2, 2), group=2, pads=[1, 1, 1, 1]),
    conv("conv2d-depthwise", (2, 3, 5, 5), (3, 1, 3, 3), group=3, strides=[2, 2], pads=[1, 1, 1, 1]),
    conv("conv2d-depthwise-batch1", (1, 3, 5, 6), (3, 1, 3, 3), group=3, strides=[2, 1], pads=[1, 0, 1, 1], rng=_rng15),
    conv("conv2d-depthwise-mult", (1, 2, 4, 4), (4, 1, 2, 2), group=2, dilations=[2, 2]),
    conv("conv1d", (2, 2, 7), (3, 2, 3), strides=[2], pads=[1, 2]),
    # 1x1 windows: the im2col columns are X itself (stride 1, no pads), or a strided one-hot Conv
    conv("conv2d-1x1", (1, 3, 3, 4), (2, 3, 1, 1), rng=_rng15),
    conv("conv2d-1x1-batch2", (2, 3, 3, 3), (4, 3, 1, 1), bias=False, rng=_rng15),
    conv("conv2d-1x1-stride2", (1, 3, 5, 4), (2, 3, 1, 1), strides=[2, 2], rng=_rng15),
    conv("conv2d-1x1-pads", (2, 2, 3, 3), (3, 2, 1, 1), pads=[1, 0, 0, 1], rng=_rng15),
    conv("conv1d-batch1", (1, 2, 6), (3, 2, 2), pads=[0, 1], rng=_rng15),
    # a window over 25 cells: dW by the correlation Conv instead of im2col
    conv("conv2d-large-window", (1, 2, 8, 7), (2, 2, 6, 5), pads=[1, 0, 0, 1]),
    Case(
        "conv2d-dynamic-batch",
        [node("Conv", ["x", "w", "b"], pads=[1, 1, 1, 1], strides=[1, 2])],
        {"x": rnd(3, 2, 5, 4), "w": rnd(3, 2, 3, 2), "b": rnd(3)},
        ["x", "w", "b"],
        dynamic=["x"],
        ort_dtype=F32,
    ),
    conv("conv1d-group", (1, 4, 6), (2, 2, 2), group=2, dilations=[2]),
    conv("conv3d", (1, 2, 4, 3, 4), (2, 2, 2, 2, 2), strides=[2, 1, 2], pads=[1, 0, 0, 0, 1, 1]),
    conv("conv3d-depthwise", (1, 2, 3, 4, 3), (2, 1, 2, 2, 2), group=2, dilations=[1, 2, 1]),
    conv("convT2d", (1, 3, 3, 3), (3, 2, 3, 3), op="ConvTranspose"),
    conv("convT2d-stride2", (2, 2, 3, 2), (2, 3, 3, 2), op="ConvTranspose", strides=[2, 2], pads=[1, 0, 1, 1]),
    conv("convT2d-outpad", (1, 2, 3, 3), (2, 2, 2, 3), op="ConvTranspose", strides=[2, 3], output_padding=[1, 2]),
    conv(
        "convT2d-dil-outpad",
        (1, 2, 3, 3),
        (2, 1, 2, 2),
        op="ConvTranspose",
        strides=[2, 2],
        dilations=[2, 1],
        output_padding=[1, 1],
    ),
    conv("convT2d-group2", (1, 4, 3, 3), (4, 2, 2, 2), op="ConvTranspose", group=2, strides=[2, 1]),
    conv("convT2d-depthwise", (2, 3, 3, 3), (3, 1, 3, 3), op="ConvTranspose", group=3, pads=[1, 1, 1, 1]),
    conv("convT2d-same-upper", (1, 2, 3, 3), (2, 2, 3, 2), op="ConvTranspose", strides=[2, 2], auto_pad="SAME_UPPER"),
    conv("convT2d-same-lower", (1, 2, 3, 3), (2, 2, 2, 2), op="ConvTranspose", strides=[2, 1], auto_pad="SAME_LOWER"),
    conv("convT2d-output-shape", (1, 2, 3, 3), (2, 2, 3, 3), op="ConvTranspose", strides=[2, 2], output_shape=[6, 7]),
    conv("convT1d", (1, 2, 4), (2, 3, 3), op="ConvTranspose", strides=[3], dilations=[2], pads=[1, 0]),
    conv(
        "convT3d",
        (1, 2, 2, 3, 2),
        (2, 2, 2, 2, 2),
        op="ConvTranspose",
        strides=[2, 1, 2],
        group=2,
        output_padding=[1, 0, 0],
    ),
]


# An odd total of SAME_* padding (and of padding imposed by output_shape) at the opsets
# where ConvTranspose's split changed (issue 8: opset 10 gave a wrong gradient).
CONV_AUTO_PAD = [
    conv(f"{op}-{ap}-opset{opset}", (1, 1, 3), (1, 1, 3), op=op, opset=opset, strides=[2], auto_pad=ap)
    for op in ("Conv", "ConvTranspose")
    for ap in ("SAME_UPPER", "SAME_LOWER")
    for opset in (10, 11)
] + [
    conv(
        "ConvTranspose-2d-SAME_UPPER-opset10",
        (1, 2, 3, 2),
        (2, 1, 3, 2),
        op="ConvTranspose",
        opset=10,
        strides=[2, 3],
        auto_pad="SAME_UPPER",
    ),
    conv(
        "ConvTranspose-output_shape-opset10",
        (1, 1, 3),
        (1, 1, 3),
        op="ConvTranspose",
        opset=10,
        strides=[2],
        output_shape=[6],
    ),
    conv(
        "ConvTranspose-output_shape-opset11",
        (1, 1, 3),
        (1, 1, 3),
        op="ConvTranspose",
        opset=11,
        strides=[2],
        output_shape=[6],
    ),
]


@pytest.mark.parametrize("case", CONV + CONV_AUTO_PAD, ids=lambda c: c.name)
def test_conv(case: Case) -> None:
    check_gradient(case)


def pool(name: str, op: str, x: tuple[int, ...], ort_dtype: Any = np.float64, n_out: int = 1, **attrs: Any) -> Case:
    outputs = ["y", "idx"] if n_out == 2 else ["y"]
    return Case(name, [node(op, ["x"], outputs, **attrs)], {"x": rnd(*x)}, ["x"], y="y", ort_dtype=ort_dtype)


POOL = [
    pool("maxpool2d", "MaxPool", (2, 2, 4, 4), kernel_shape=[2, 2], strides=[2, 2]),
    pool("maxpool2d-overlap-pads", "MaxPool", (1, 2, 5, 5), kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    pool("maxpool2d-indices-out", "MaxPool", (1, 2, 4, 5), n_out=2, kernel_shape=[2, 3], strides=[1, 2]),
    pool("maxpool2d-storage-order", "MaxPool", (1, 2, 4, 4), n_out=2, kernel_shape=[2, 2], storage_order=1),
    # Indices asked of the forward node (column-major), non-square planes
    pool("maxpool2d-storage-order-hidden", "MaxPool", (2, 2, 5, 4), kernel_shape=[2, 2], storage_order=1),
    pool(
        "maxpool3d-storage-order",
        "MaxPool",
        (1, 2, 3, 4, 5),
        kernel_shape=[2, 2, 2],
        strides=[1, 2, 2],
        storage_order=1,
    ),
    pool(
        "maxpool2d-ceil-dil",
        "MaxPool",
        (1, 2, 6, 5),
        kernel_shape=[2, 2],
        strides=[2, 2],
        dilations=[2, 1],
        ceil_mode=1,
    ),
    pool("maxpool2d-same", "MaxPool", (1, 1, 5, 4), kernel_shape=[3, 2], strides=[2, 2], auto_pad="SAME_UPPER"),
    # ceil mode drops a last window that would start in the end padding (onnx's own
    # shape inference keeps it; onnxruntime and our runtime drop it)
    pool("maxpool1d-ceil-asym", "MaxPool", (1, 2, 4), kernel_shape=[3], strides=[2], pads=[0, 2], ceil_mode=1),
    pool("maxpool1d", "MaxPool", (2, 3, 7), kernel_shape=[3], strides=[2], pads=[1, 1]),
    pool("maxpool3d", "MaxPool", (1, 2, 3, 4, 4), kernel_shape=[2, 2, 2], strides=[1, 2, 2]),
    # windows that tile the input: no Indices (see test_max_pool_tiled_ties for ties);
    # up to 4 cells by prefix pools, larger windows by the rank score
    pool("maxpool2d-tiled-cut", "MaxPool", (2, 3, 5, 7), kernel_shape=[2, 3], strides=[2, 3]),
    pool("maxpool2d-tiled-2x2-cut", "MaxPool", (2, 3, 5, 7), kernel_shape=[2, 2], strides=[2, 2]),
    pool("maxpool3d-tiled-4cells", "MaxPool", (1, 2, 4, 3, 6), kernel_shape=[2, 1, 2], strides=[2, 1, 2]),
    pool("maxpool1d-tiled-4", "MaxPool", (2, 2, 9), kernel_shape=[4], strides=[4]),
    pool("maxpool2d-tiled-ceil-exact", "MaxPool", (1, 2, 4, 6), kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
    pool("maxpool2d-tiled-same", "MaxPool", (1, 2, 4, 6), kernel_shape=[2, 3], strides=[2, 3], auto_pad="SAME_UPPER"),
    pool("maxpool2d-tiled-k1", "MaxPool", (1, 2, 3, 4), kernel_shape=[1, 2], strides=[1, 2]),
    pool("maxpool1d-tiled", "MaxPool", (2, 3, 7), kernel_shape=[3], strides=[3]),
    pool("maxpool3d-tiled", "MaxPool", (1, 2, 4, 5, 6), kernel_shape=[2, 2, 3], strides=[2, 2, 3]),
    # rank map over 2**14 cells: tiled at run time instead of stored
    pool("maxpool1d-tiled-long", "MaxPool", (1, 1, 16390), kernel_shape=[5], strides=[5]),
    pool("avgpool2d", "AveragePool", (2, 2, 4, 4), F32, kernel_shape=[2, 2], strides=[2, 2]),
    pool("avgpool2d-pads-excl", "AveragePool", (1, 2, 5, 4), F32, kernel_shape=[3, 3], pads=[1, 1, 1, 0]),
    pool(
        "avgpool2d-pads-incl",
        "AveragePool",
        (1, 2, 5, 4),
        F32,
        kernel_shape=[3, 2],
        pads=[1, 0, 1, 1],
        count_include_pad=1,
    ),
    pool("avgpool2d-ceil", "AveragePool", (1, 2, 5, 5), F32, kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
    pool(
        "avgpool2d-ceil-pads-incl",
        "AveragePool",
        (1, 1, 6, 5),
        F32,
        kernel_shape=[3, 3],
        strides=[2, 2],
        pads=[1, 1, 1, 1],
        ceil_mode=1,
        count_include_pad=1,
    ),
    pool(
        "avgpool2d-dil-same",
        "AveragePool",
        (1, 2, 5, 5),
        F32,
        kernel_shape=[2, 2],
        dilations=[2, 1],
        auto_pad="SAME_LOWER",
    ),
    pool(
        "avgpool1d-ceil-asym",
        "AveragePool",
        (1, 2, 4),
        F32,
        kernel_shape=[3],
        strides=[2],
        pads=[0, 2],
        ceil_mode=1,
        count_include_pad=1,
    ),
    pool("avgpool1d", "AveragePool", (2, 2, 7), F32, kernel_shape=[3], strides=[2]),
    # found by the property tests: onnx's checker saw the dropped last window of the count
    pool(
        "avgpool3d-ceil-incl-dropped-window",
        "AveragePool",
        (1, 1, 3, 1, 1),
        F32,
        kernel_shape=[2, 1, 3],
        strides=[2, 1, 2],
        pads=[0, 0, 1, 0, 0, 2],
        ceil_mode=1,
        count_include_pad=1,
    ),
    pool("avgpool3d", "AveragePool", (1, 2, 3, 4, 4), F32, kernel_shape=[2, 2, 2], pads=[0, 1, 0, 1, 0, 1]),
    pool("globalavgpool", "GlobalAveragePool", (2, 3, 3, 4), F32),
    pool("globalavgpool1d", "GlobalAveragePool", (2, 3, 5), F32),
    pool("globalmaxpool", "GlobalMaxPool", (2, 3, 3, 4), F32),
    pool("globalmaxpool3d", "GlobalMaxPool", (1, 2, 2, 3, 2), F32),
]
# float32: windows sharing no cell take MaxUnpool (float64 has no onnxruntime kernel)
POOL += [
    Case(
        f"maxpool-unpool-{name}",
        [node("MaxPool", ["x"], **attrs)],
        {"x": rnd(*x)},
        ["x"],
        dtype=F32,
        ort_dtype=F32,
        rtol=1e-3,
        atol=1e-4,
    )
    for name, x, attrs in [
        ("2d", (2, 2, 4, 6), {"kernel_shape": [2, 2], "strides": [2, 2]}),
        (
            "2d-pads-ceil",
            (1, 2, 5, 7),
            {"kernel_shape": [2, 3], "strides": [2, 3], "pads": [1, 0, 0, 1], "ceil_mode": 1},
        ),
        ("3d-gap", (1, 2, 4, 5, 7), {"kernel_shape": [1, 2, 2], "strides": [2, 2, 3]}),
    ]
]
POOL.append(
    Case(
        "maxpool2d-tiled-dynamic",
        [node("MaxPool", ["x"], kernel_shape=[2, 2], strides=[2, 2])],
        {"x": rnd(3, 2, 4, 5)},
        ["x"],
        dynamic=["x"],
    )
)
POOL.append(
    Case(
        "globalavgpool-dynamic",
        [node("GlobalAveragePool", ["x"])],
        {"x": rnd(2, 3, 4, 3)},
        ["x"],
        ort_dtype=F32,
        dynamic=["x"],
    )
)


@pytest.mark.parametrize("case", POOL, ids=lambda c: c.name)
def test_pool(case: Case) -> None:
    check_gradient(case)


# MaxPool with tiling windows on inputs full of ties (finite differences do not apply):
# the Indices-free gradients (prefix pools up to 4 cells, the rank score above) must
# route dY to the first maximum in kernel raster order, exactly as the Indices path and
# onnxruntime's own Indices do.
# (name, x shape, attributes, symbolic batch)
TIES: list[tuple[str, tuple[int, ...], dict[str, Any], bool]] = [
    ("2d", (2, 3, 4, 6), {"kernel_shape": [2, 2], "strides": [2, 2]}, False),
    ("2d-2x2-cut-dynamic", (3, 2, 5, 7), {"kernel_shape": [2, 2], "strides": [2, 2]}, True),
    ("2d-1x3", (2, 2, 3, 7), {"kernel_shape": [1, 3], "strides": [1, 3]}, False),
    ("2d-cut", (2, 2, 5, 7), {"kernel_shape": [2, 3], "strides": [2, 3]}, False),
    ("2d-dynamic", (3, 2, 6, 4), {"kernel_shape": [3, 2], "strides": [3, 2]}, True),
    ("1d", (2, 3, 9), {"kernel_shape": [3], "strides": [3]}, False),
    ("1d-4", (2, 3, 13), {"kernel_shape": [4], "strides": [4]}, False),
    ("3d", (1, 2, 4, 4, 6), {"kernel_shape": [2, 2, 3], "strides": [2, 2, 3]}, False),
    ("3d-4cells", (2, 2, 4, 3, 5), {"kernel_shape": [2, 1, 2], "strides": [2, 1, 2]}, False),
]


def _tied_windows(x: np.ndarray, y: np.ndarray, kernel: list[int]) -> int:
    """How many windows hold their maximum more than once."""
    cut = x[(..., *[slice(0, o * k) for o, k in zip(y.shape[2:], kernel)])]
    split = [d for o, k in zip(y.shape[2:], kernel) for d in (o, k)]
    windows = cut.reshape(*x.shape[:2], *split)
    at_max = windows == y.reshape(*y.shape[:2], *[d for o in y.shape[2:] for d in (o, 1)])
    return int(np.count_nonzero(at_max.sum(axis=tuple(range(3, 3 + 2 * len(kernel), 2))) > 1))


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize(("name", "shape", "attrs", "dynamic"), TIES, ids=[t[0] for t in TIES])
def test_max_pool_tiled_ties(
    name: str, shape: tuple[int, ...], attrs: dict[str, Any], dynamic: bool, dtype: Any
) -> None:
    import onnxruntime as ort

    rng = np.random.default_rng(3)
    # a Relu'd integer grid: all-zero windows and repeated maxima everywhere
    x = np.maximum(rng.integers(-2, 3, shape), 0).astype(dtype)
    dyn = ["x"] if dynamic else []
    tiled = Case(f"ties-{name}", [node("MaxPool", ["x"], **attrs)], {"x": x}, ["x"], dtype=dtype, dynamic=dyn)
    indexed = Case(
        f"ties-{name}-indices", [node("MaxPool", ["x"], ["y", "idx"], **attrs)], {"x": x}, ["x"], y="y", dtype=dtype
    )
    _, bwd_tiled = gradient(tiled)
    _, bwd_indexed = gradient(indexed)
    tiled_ops = [n.op_type for n in bwd_tiled.node]
    assert "ScatterElements" not in tiled_ops
    if dtype == np.float32:  # windows sharing no cell: one MaxUnpool at the forward's Indices
        assert tiled_ops.count("MaxPool") == 1 and tiled_ops.count("MaxUnpool") == 1
        assert "MaxUnpool" in {n.op_type for n in bwd_indexed.node}
    else:  # onnxruntime has no float64 MaxUnpool: the Indices-free forms
        cells = int(np.prod(attrs["kernel_shape"]))
        # the forward's, then the K - 1 prefix pools or one score pool
        assert tiled_ops.count("MaxPool") == (cells if cells <= 4 else 2)
        assert "ScatterElements" in {n.op_type for n in bwd_indexed.node}

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    forward = build_model(indexed, dtype)
    forward.graph.output.append(oh.make_tensor_value_info("idx", 7, None))  # INT64
    y, idx = ort.InferenceSession(forward.SerializeToString(), opts).run(["y", "idx"], {"x": x})
    assert _tied_windows(x, y, attrs["kernel_shape"]) > 0
    dy = rng.standard_normal(y.shape).astype(dtype)
    expected = np.zeros(x.size, dtype)
    np.add.at(expected, idx.reshape(-1), dy.reshape(-1))  # onnxruntime's Indices
    expected = expected.reshape(x.shape)

    feeds = backward_feeds(bwd_tiled, {"x": x}, dy)
    (ours,) = ol.runtime.InferenceSession(bwd_tiled).run(None, feeds)
    (via_indices,) = ol.runtime.InferenceSession(bwd_indexed).run(None, backward_feeds(bwd_indexed, {"x": x}, dy))
    wrapped = backward_model(bwd_tiled, feeds)
    (in_ort,) = ort.InferenceSession(wrapped.SerializeToString(), opts).run(None, feeds)
    np.testing.assert_array_equal(ours, expected)
    np.testing.assert_array_equal(via_indices, expected)
    np.testing.assert_array_equal(in_ort, expected)


# MaxPool geometries whose windows share no cell (MaxUnpool at the Indices) and some that
# overlap (ScatterElements-add), on Relu'd integer grids full of ties: dX must be dY summed
# at onnxruntime's own Indices, in our runtime and in onnxruntime.
# (name, x shape, attributes, dtype, symbolic batch, MaxUnpool expected)
UNPOOL: list[tuple[str, tuple[int, ...], dict[str, Any], Any, bool, bool]] = [
    ("2d-pads", (2, 3, 7, 6), {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [1, 0, 0, 1]}, F32, False, True),
    ("2d-ceil", (2, 2, 7, 5), {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}, F32, True, True),
    ("2d-gap", (1, 2, 9, 8), {"kernel_shape": [2, 2], "strides": [3, 3]}, F32, False, True),
    ("2d-dilated", (1, 2, 8, 8), {"kernel_shape": [2, 2], "strides": [2, 4], "dilations": [3, 1]}, F32, False, True),
    ("2d-k1", (1, 2, 5, 6), {"kernel_shape": [1, 3], "strides": [1, 3]}, F32, False, True),
    (
        "1d-ceil-pads",
        (2, 2, 10),
        {"kernel_shape": [3], "strides": [3], "pads": [1, 1], "ceil_mode": 1},
        F32,
        False,
        True,
    ),
    ("3d", (1, 2, 4, 5, 6), {"kernel_shape": [2, 2, 3], "strides": [2, 2, 3]}, np.float16, False, True),
    ("2d-same", (1, 2, 5, 7), {"kernel_shape": [2, 2], "strides": [2, 2], "auto_pad": "SAME_UPPER"}, F32, False, True),
    ("2d-overlap", (1, 2, 6, 6), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, F32, False, False),
    (
        "2d-dilated-overlap",
        (1, 2, 8, 8),
        {"kernel_shape": [2, 2], "strides": [2, 2], "dilations": [2, 2]},
        F32,
        False,
        False,
    ),
    (
        "2d-f64",
        (2, 2, 7, 6),
        {"kernel_shape": [2, 2], "strides": [3, 2], "pads": [1, 0, 0, 1]},
        np.float64,
        False,
        False,
    ),
    ("2d-col-major", (1, 2, 6, 4), {"kernel_shape": [2, 2], "strides": [2, 2], "storage_order": 1}, F32, False, False),
]


def _random_pools(count: int) -> list[tuple[str, tuple[int, ...], dict[str, Any], Any, bool, bool]]:
    """Seeded random MaxPool geometries (1-3-D, strides, dilations, pads, ceil_mode) for the
    test below; whether MaxUnpool is expected is decided from its definition, cell by cell."""
    rng = np.random.default_rng(11)
    rows = []
    for i in range(count):
        nd = int(rng.integers(1, 4))
        k = [int(v) for v in rng.integers(1, 4, nd)]
        s = [int(v) for v in rng.integers(1, 5, nd)]
        d = [int(v) for v in rng.integers(1, 3, nd)]
        pads = [int(rng.integers(0, kk)) for kk in k] + [int(rng.integers(0, kk)) for kk in k]
        sizes = [(kk - 1) * dd + 1 + int(rng.integers(0, 6)) for kk, dd in zip(k, d)]
        attrs = {"kernel_shape": k, "strides": s, "dilations": d, "pads": pads, "ceil_mode": int(rng.integers(0, 2))}
        geo = ol.onnx_core.ops.window(sizes, k, s, d, pads, "NOTSET", bool(attrs["ceil_mode"]))
        # two windows differing on one axis only share a cell when their positions on it
        # overlap, and then MaxUnpool would drop a sum
        shared = any(
            set(range(a * ss, a * ss + kk * dd, dd)) & set(range(b * ss, b * ss + kk * dd, dd))
            for kk, ss, dd, o in zip(k, s, d, geo.out)
            for a in range(o)
            for b in range(a)
        )
        fits = all(n - (o - 1) * ss >= 1 for n, o, ss in zip(sizes, geo.out, s))
        rows.append((f"random-{i}", (2, 2, *sizes), attrs, F32, False, not shared and fits))
    return rows


UNPOOL += _random_pools(24)


@pytest.mark.parametrize(("name", "shape", "attrs", "dtype", "dynamic", "unpool"), UNPOOL, ids=[t[0] for t in UNPOOL])
def test_max_pool_unpool_ties(
    name: str, shape: tuple[int, ...], attrs: dict[str, Any], dtype: Any, dynamic: bool, unpool: bool
) -> None:
    import onnxruntime as ort

    rng = np.random.default_rng(5)
    x = np.maximum(rng.integers(-2, 3, shape), 0).astype(dtype)
    case = Case(
        f"unpool-{name}",
        [node("MaxPool", ["x"], **attrs)],
        {"x": x},
        ["x"],
        dtype=dtype,
        dynamic=["x"] if dynamic else [],
    )
    _, bwd = gradient(case)
    ops = [n.op_type for n in bwd.node]
    assert ("MaxUnpool" in ops) == unpool, ops
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    forward = build_model(Case(name, [node("MaxPool", ["x"], ["y", "idx"], **attrs)], {"x": x}, ["x"], y="y"), dtype)
    forward.graph.output.append(oh.make_tensor_value_info("idx", 7, None))  # INT64
    y, idx = ort.InferenceSession(forward.SerializeToString(), opts).run(["y", "idx"], {"x": x})
    dy = rng.standard_normal(y.shape).astype(dtype)
    if attrs.get("storage_order"):  # column-major within each plane: spatial axes reversed
        flat_shape = (*x.shape[:2], *reversed(x.shape[2:]))
        expected = np.zeros(flat_shape, np.float64)
        np.add.at(expected.reshape(-1), idx.reshape(-1), dy.reshape(-1))
        expected = expected.transpose(0, 1, *range(x.ndim - 1, 1, -1))
    else:
        expected = np.zeros(x.size, np.float64)
        np.add.at(expected, idx.reshape(-1), dy.reshape(-1).astype(np.float64))
        expected = expected.reshape(x.shape)
    feeds = backward_feeds(bwd, {"x": x}, dy)
    (ours,) = ol.runtime.InferenceSession(bwd).run(None, feeds)
    (in_ort,) = ort.InferenceSession(backward_model(bwd, feeds).SerializeToString(), opts).run(None, feeds)
    # overlapping windows sum in a different order than np.add.at: rounding only
    tol = 0 if unpool else 1e-6
    np.testing.assert_allclose(ours, expected.astype(dtype), rtol=tol, atol=0)
    np.testing.assert_allclose(in_ort, expected.astype(dtype), rtol=tol, atol=0)


def labels(*shape: int, classes: int, ignore: int | None = None) -> np.ndarray:
    out = _rng.integers(0, classes, shape).astype(np.int64)
    if ignore is not None:
        out.flat[:: max(1, out.size // 2)] = ignore
    return out


def loss(
    name: str,
    op: str,
    scores: tuple[int, ...],
    xs: list[str],
    weights: bool = False,
    ignore: int | None = None,
    log_prob: bool = False,
    init_labels: bool = False,
    dynamic: bool = False,
    **attrs: Any,
) -> Case:
    """One loss row; ``log_prob`` sums SCE's second output into y as well; ``dynamic``
    declares the batch dim of scores and labels symbolic."""
    inputs = {"s": rnd(*scores), "l": labels(scores[0], *scores[2:], classes=scores[1], ignore=ignore)}
    if weights:
        inputs["w"] = np.abs(rnd(scores[1])) + 0.5
    if ignore is not None:
        attrs["ignore_index"] = ignore
    if op == "NegativeLogLikelihoodLoss":
        inputs["s"] = np.log(np.exp(inputs["s"]) / np.exp(inputs["s"]).sum(axis=1, keepdims=True))
    nodes = [node(op, list(inputs), ["y", "lp"] if log_prob else ["y"], **attrs)]
    if log_prob:
        nodes[0].output[0] = "loss"
        nodes += [
            node("Mul", ["lp", "s"], ["lps"]),
            node("ReduceSum", ["lps"], ["lpsum"], keepdims=0),
            node("ReduceSum", ["loss"], ["lsum"], keepdims=0),
            node("Add", ["lpsum", "lsum"]),
        ]
    return Case(
        name,
        nodes,
        inputs,
        xs,
        y="y",
        initializers=["l"] if init_labels else [],
        dynamic=["s", "l"] if dynamic else [],
    )


SCE, NLL = "SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"
LOSS = [
    loss("sce-mean", SCE, (4, 3), ["s"]),
    loss("sce-sum-weights", SCE, (4, 3), ["s", "w"], weights=True, reduction="sum"),
    loss("sce-mean-weights-ignore", SCE, (3, 4, 2), ["s", "w"], weights=True, ignore=1, init_labels=True),
    loss("sce-mean-ignore-out-of-range", SCE, (4, 3), ["s"], ignore=-100),
    loss("sce-mean-ignore", SCE, (5, 3), ["s"], ignore=2),
    loss("sce-mean-dynamic", SCE, (4, 3, 2), ["s"], dynamic=True),
    loss("sce-sum", SCE, (4, 3), ["s"], reduction="sum"),
    loss("sce-none-ignore", SCE, (3, 4), ["s"], ignore=1, reduction="none"),
    loss("sce-none-weights-ignore", SCE, (2, 3, 2, 2), ["s", "w"], weights=True, ignore=0, reduction="none"),
    loss("sce-log-prob", SCE, (3, 4), ["s"], log_prob=True, weights=True, reduction="mean"),
    loss("sce-log-prob-none", SCE, (2, 3, 3), ["s"], log_prob=True, reduction="none"),
    loss("nll-mean", NLL, (4, 3), ["s"]),
    loss("nll-mean-weights-ignore", NLL, (3, 4, 2), ["s", "w"], weights=True, ignore=2),
    loss("nll-sum-weights", NLL, (2, 3, 2, 2), ["s", "w"], weights=True, reduction="sum", init_labels=True),
    loss("nll-none-ignore", NLL, (4, 3), ["s"], ignore=-1, reduction="none"),
]


def _int32_labels(case: Case) -> Case:
    """The row with int32 labels (the other index dtype the losses allow)."""
    case.inputs["l"] = case.inputs["l"].astype(np.int32)
    case.name += "-int32"
    return case


LOSS += [
    _int32_labels(loss("sce-mean-weights-ignore", SCE, (3, 4, 2), ["s", "w"], weights=True, ignore=1)),
    _int32_labels(loss("sce-mean-dynamic", SCE, (4, 3, 2), ["s"], dynamic=True)),
    _int32_labels(loss("nll-sum-weights", NLL, (2, 3, 2), ["s", "w"], weights=True, reduction="sum", init_labels=True)),
]


@pytest.mark.parametrize("case", LOSS, ids=lambda c: c.name)
def test_loss(case: Case) -> None:
    check_gradient(case)
