"""Gradient rules for the image ops (Resize, Upsample, DepthToSpace, SpaceToDepth,
CenterCropPad, AffineGrid, GridSample), checked by ``gradcheck.check_gradient``.

One row per mode and attribute that changes the backward graph. Tensors are tiny so that
finite differences stay fast; onnxruntime has no float64 Resize: those rows compare with it
in float32 (``ort_dtype``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from gradcheck import Case, check_gradient, gradient
from onnx import helper as oh

import onnx_light as ol

F32 = np.float32
_rng = np.random.default_rng(23)


def rnd(*shape: int) -> np.ndarray:
    return _rng.standard_normal(shape)


def f32(*v: float) -> np.ndarray:
    return np.array(v, np.float32)


def resize(
    name: str,
    x: tuple[int, ...],
    scales: list[float] | None = None,
    sizes: list[int] | None = None,
    roi: list[float] | None = None,
    opset: int = 19,
    dynamic: bool = False,
    **attrs: Any,
) -> Case:
    """A Resize row by scales or by sizes (initializers), differentiated in X."""
    inputs: dict[str, np.ndarray] = {"x": rnd(*x)}
    names = ["x", "", "", ""]
    if roi is not None:
        inputs["roi"] = f32(*roi)
        names[1] = "roi"
    if scales is not None:
        inputs["scales"] = f32(*scales)
        names[2] = "scales"
    if sizes is not None:
        inputs["sizes"] = np.array(sizes, np.int64)
        names[3] = "sizes"
    while names[-1] == "":
        names.pop()
    return Case(
        name,
        [oh.make_node("Resize", names, ["y"], **attrs)],
        inputs,
        ["x"],
        initializers=[k for k in inputs if k != "x"],
        opset=opset,
        ort_dtype=F32,
        dynamic=["x"] if dynamic else [],
    )


# align_corners with fractional output widths: onnxruntime divides by the floored size,
# the spec (and onnx's reference, and we) by scale * in; integral widths there
NEAREST = [
    resize(
        f"resize-nearest-{m}-{t}",
        (1, 2, 3, 4),
        scales=[1, 1, 2, 0.5] if t == "align_corners" else [1, 1, 1.7, 0.6],
        mode="nearest",
        nearest_mode=m,
        coordinate_transformation_mode=t,
    )
    for m, t in [
        ("round_prefer_floor", "half_pixel"),
        ("round_prefer_ceil", "asymmetric"),
        ("floor", "align_corners"),
        ("ceil", "pytorch_half_pixel"),
    ]
]

RESIZE = [
    *NEAREST,
    resize("resize-nearest-up2", (2, 1, 2, 3), scales=[1, 1, 2, 2], mode="nearest"),
    resize("resize-linear-half-pixel", (1, 2, 3, 4), scales=[1, 1, 2, 1.5], mode="linear"),
    resize("resize-linear-down", (1, 1, 5, 6), scales=[1, 1, 0.6, 0.5], mode="linear"),
    resize(
        "resize-linear-align-corners",
        (1, 2, 3, 3),
        sizes=[1, 2, 5, 4],
        mode="linear",
        coordinate_transformation_mode="align_corners",
    ),
    resize(
        "resize-linear-asymmetric",
        (1, 1, 3, 4),
        scales=[1, 1, 1.5, 2],
        mode="linear",
        coordinate_transformation_mode="asymmetric",
    ),
    resize(
        "resize-linear-pytorch",
        (1, 1, 4, 1),
        sizes=[1, 1, 7, 1],
        mode="linear",
        coordinate_transformation_mode="pytorch_half_pixel",
    ),
    resize(
        "resize-linear-symmetric",
        (1, 1, 3, 4),
        scales=[1, 1, 1.6, 0.7],
        mode="linear",
        coordinate_transformation_mode="half_pixel_symmetric",
    ),
    resize(
        "resize-linear-crop",
        (1, 1, 4, 5),
        sizes=[1, 1, 3, 4],
        roi=[0, 0, 0.2, -0.1, 1, 1, 0.9, 1.2],
        mode="linear",
        coordinate_transformation_mode="tf_crop_and_resize",
        extrapolation_value=2.5,
    ),
    resize("resize-cubic", (1, 2, 4, 4), scales=[1, 1, 1.5, 2], mode="cubic"),
    resize(
        "resize-cubic-exclude",
        (1, 1, 4, 5),
        scales=[1, 1, 1.25, 0.8],
        mode="cubic",
        cubic_coeff_a=-0.5,
        exclude_outside=1,
    ),
    resize("resize-linear-antialias", (1, 1, 6, 8), scales=[1, 1, 0.5, 0.4], mode="linear", antialias=1),
    resize("resize-cubic-antialias", (1, 1, 6, 5), sizes=[1, 1, 3, 4], mode="cubic", antialias=1),
    resize("resize-axes", (1, 2, 3, 4), scales=[2.0, 0.75], mode="linear", axes=[2, 3]),
    resize("resize-axes-negative", (2, 3, 4), sizes=[6], mode="cubic", axes=[-2]),
    resize("resize-3d-trilinear", (1, 1, 2, 3, 2), scales=[1, 1, 2, 1.5, 2], mode="linear"),
    resize("resize-batch-axis", (3, 4), scales=[1.5, 0.5], mode="linear", dynamic=True),
    resize("resize-dynamic-batch", (2, 2, 3, 3), scales=[1, 1, 2, 2], mode="linear", dynamic=True),
    resize("resize-opset11", (1, 1, 3, 3), scales=[1, 1, 2, 1.5], mode="linear", opset=11, roi=[]),
    resize("resize-opset13-sizes", (1, 1, 3, 3), sizes=[1, 1, 4, 5], mode="nearest", opset=13),
    Case(
        "resize-opset10",
        [oh.make_node("Resize", ["x", "scales"], ["y"], mode="linear")],
        {"x": rnd(1, 1, 3, 2), "scales": f32(1, 1, 2, 2.5)},
        ["x"],
        initializers=["scales"],
        opset=10,
        ort_dtype=F32,
    ),
    Case(
        "upsample-opset9",
        [oh.make_node("Upsample", ["x", "scales"], ["y"], mode="nearest")],
        {"x": rnd(1, 2, 2, 3), "scales": f32(1, 1, 2, 3)},
        ["x"],
        initializers=["scales"],
        opset=9,
        ort_dtype=F32,
    ),
    Case(
        "upsample-opset7-linear",
        [oh.make_node("Upsample", ["x"], ["y"], mode="linear", scales=[1.0, 1.0, 2.0, 2.0])],
        {"x": rnd(1, 1, 2, 3)},
        ["x"],
        opset=7,
        ort_dtype=F32,
    ),
    # scales computed in the graph (not known to the pass): every axis takes its matrix
    Case(
        "resize-scales-runtime",
        [
            oh.make_node("Mul", ["s", "two"], ["scales"]),
            oh.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear"),
        ],
        {"x": rnd(1, 2, 2, 3), "s": f32(0.5, 0.5, 1, 0.75), "two": f32(2)},
        ["x"],
        initializers=["s", "two"],
        ort_dtype=F32,
    ),
]


# sizes read from Shape(X) for the batch and channels, as torch exports interpolate(size=...)
RESIZE_SHAPE_SIZES = Case(
    "resize-sizes-from-shape",
    [
        oh.make_node("Shape", ["x"], ["shape"], end=2),
        oh.make_node("Concat", ["shape", "hw"], ["sizes"], axis=0),
        oh.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear"),
    ],
    {"x": rnd(2, 3, 3, 4), "hw": np.array([5, 6], np.int64)},
    ["x"],
    initializers=["hw"],
    dynamic=["x"],
    ort_dtype=F32,
)
# scales in a Constant node (torch's export of interpolate(scale_factor=...))
RESIZE_CONST_SCALES = Case(
    "resize-constant-scales",
    [
        oh.make_node("Constant", [], ["scales"], value=oh.make_tensor("s", 1, [4], [1, 1, 2, 1.5])),
        oh.make_node("Resize", ["x", "", "scales"], ["y"], mode="cubic"),
    ],
    {"x": rnd(2, 2, 3, 2)},
    ["x"],
    dynamic=["x"],
    ort_dtype=F32,
)
RESIZE += [RESIZE_SHAPE_SIZES, RESIZE_CONST_SCALES]


def test_resize_leaves_unresized_axes_alone() -> None:
    """Batch and channels keep their size (symbolic batch included): only H and W take a MatMul."""
    for case in (RESIZE_SHAPE_SIZES, RESIZE_CONST_SCALES):
        _, bwd = gradient(case)
        assert [n.op_type for n in bwd.node].count("MatMul") == 2, case.name


@pytest.mark.parametrize("case", RESIZE, ids=lambda c: c.name)
def test_resize(case: Case) -> None:
    check_gradient(case)


def test_resize_keep_aspect_ratio_is_refused() -> None:
    case = resize(
        "resize-policy", (1, 1, 3, 4), sizes=[1, 1, 6, 6], mode="linear", keep_aspect_ratio_policy="not_larger"
    )
    with pytest.raises(ol.GradientError, match="keep_aspect_ratio_policy"):
        gradient(case)


def one(name: str, op: str, inputs: dict[str, np.ndarray], xs: list[str], opset: int = 21, **attrs: Any) -> Case:
    """One node over ``inputs`` (integer inputs as initializers), differentiated in ``xs``."""
    ints = [k for k, v in inputs.items() if v.dtype.kind in "iu"]
    return Case(name, [oh.make_node(op, list(inputs), ["y"], **attrs)], inputs, xs, initializers=ints, opset=opset)


def pool_indices(x: np.ndarray, kernel: int, stride: int) -> np.ndarray:
    """MaxPool's flat Indices of a 2-D pool (first max on ties), computed here in numpy."""
    n, c, h, w = x.shape
    oh_, ow = (h - kernel) // stride + 1, (w - kernel) // stride + 1
    out = np.zeros((n, c, oh_, ow), np.int64)
    for i, j, a, b in np.ndindex(n, c, oh_, ow):
        win = x[i, j, a * stride : a * stride + kernel, b * stride : b * stride + kernel]
        r, s = np.unravel_index(int(np.argmax(win)), win.shape)
        out[i, j, a, b] = ((i * c + j) * h + a * stride + r) * w + b * stride + s
    return out


_POOLED = rnd(1, 2, 5, 5)
PERMUTE = [
    one("depth-to-space-dcr", "DepthToSpace", {"x": rnd(2, 8, 2, 3)}, ["x"], blocksize=2),
    one("depth-to-space-crd", "DepthToSpace", {"x": rnd(1, 18, 2, 2)}, ["x"], blocksize=3, mode="CRD"),
    one("depth-to-space-opset1", "DepthToSpace", {"x": rnd(1, 4, 2, 3)}, ["x"], blocksize=2, opset=1),
    one("space-to-depth", "SpaceToDepth", {"x": rnd(2, 3, 4, 6)}, ["x"], blocksize=2),
    Case(
        "depth-to-space-crd-dynamic",
        [oh.make_node("DepthToSpace", ["x"], ["y"], blocksize=2, mode="CRD")],
        {"x": rnd(2, 8, 3, 2)},
        ["x"],
        dynamic=["x"],
    ),
    one("center-crop-pad", "CenterCropPad", {"x": rnd(2, 5, 4), "s": np.array([3, 7], np.int64)}, ["x"], axes=[1, 2]),
    one("center-crop-pad-all", "CenterCropPad", {"x": rnd(3, 4), "s": np.array([6, 1], np.int64)}, ["x"], opset=18),
    one("affine-grid-2d", "AffineGrid", {"t": rnd(2, 2, 3), "size": np.array([2, 3, 4, 5], np.int64)}, ["t"]),
    one(
        "affine-grid-3d-aligned",
        "AffineGrid",
        {"t": rnd(1, 3, 4), "size": np.array([1, 2, 2, 3, 4], np.int64)},
        ["t"],
        align_corners=1,
    ),
    one(
        "max-unpool",
        "MaxUnpool",
        {"x": rnd(1, 2, 2, 2), "i": pool_indices(rnd(1, 2, 4, 4), 2, 2)},
        ["x"],
        kernel_shape=[2, 2],
        strides=[2, 2],
    ),
    # overlapping windows repeat an index: only the last write reaches Y
    one(
        "max-unpool-overlap-output-shape",
        "MaxUnpool",
        {"x": rnd(1, 2, 2, 2), "i": pool_indices(_POOLED, 3, 2), "shape": np.array([1, 2, 6, 7], np.int64)},
        ["x"],
        kernel_shape=[3, 3],
        strides=[2, 2],
    ),
]


@pytest.mark.parametrize("case", PERMUTE, ids=lambda c: c.name)
def test_linear_image_op(case: Case) -> None:
    check_gradient(case)


def grid_sample(
    name: str, x: tuple[int, ...], out: tuple[int, ...], opset: int = 22, spread: float = 1.3, **attrs: Any
) -> Case:
    """A GridSample row in X and the grid; grid points up to ``spread`` (outside [-1, 1]:
    the padding modes), kept off the pixel centres and cell borders (kinks of the weights)."""
    nd = len(x) - 2
    grid = _rng.uniform(-spread, spread, (x[0], *out, nd))
    # away from the kinks: integers and half-integers of every axis' pixel coordinate
    sizes = list(reversed(x[2:]))
    for k, size in enumerate(sizes):
        for scale, shift in (((size - 1) / 2, (size - 1) / 2), (size / 2, (size - 1) / 2)):
            v = grid[..., k] * scale + shift
            frac = np.abs(v * 2 - np.round(v * 2))
            grid[..., k] = np.where(frac < 0.1, grid[..., k] + 0.1 / max(scale, 0.5), grid[..., k])
    return Case(
        name,
        [oh.make_node("GridSample", ["x", "grid"], ["y"], **attrs)],
        {"x": rnd(*x), "grid": grid},
        ["x", "grid"],
        opset=opset,
        ort_dtype=F32,
        rtol=1e-4,
    )


GRID_SAMPLE = [
    grid_sample(f"grid-sample-{mode}-{pad}-ac{ac}", (1, 2, 3, 4), (2, 3), mode=mode, padding_mode=pad, align_corners=ac)
    for mode in ("linear", "cubic")
    for pad in ("zeros", "border", "reflection")
    for ac in (0, 1)
] + [
    grid_sample("grid-sample-nearest", (2, 1, 3, 3), (2, 2), mode="nearest"),
    grid_sample("grid-sample-nearest-reflection", (1, 2, 3, 4), (3, 1), mode="nearest", padding_mode="reflection"),
    grid_sample("grid-sample-bilinear-opset16", (1, 2, 3, 3), (2, 2), opset=16, mode="bilinear"),
    grid_sample("grid-sample-3d", (1, 2, 2, 3, 3), (2, 1, 2), mode="linear", padding_mode="border"),
    grid_sample(
        "grid-sample-3d-reflection",
        (1, 1, 3, 2, 3),
        (1, 2, 2),
        mode="linear",
        padding_mode="reflection",
        align_corners=1,
    ),
]


def runtime_sized(case: Case) -> Case:
    """``case`` with X's dims known only at run time: X reshaped by a shape fed as an input."""
    x = case.inputs["x"]
    node = case.nodes[0]
    reshape = oh.make_node("Reshape", ["x", "x_shape"], ["x_any"])
    sample = oh.make_node(node.op_type, ["x_any", *node.input[1:]], list(node.output))
    sample.attribute.extend(node.attribute)
    inputs = {**case.inputs, "x_shape": np.array(x.shape, np.int64)}
    return Case(
        f"{case.name}-runtime-sized",
        [reshape, sample],
        inputs,
        case.xs,
        opset=case.opset,
        ort_dtype=case.ort_dtype,
        rtol=case.rtol,
    )


GRID_SAMPLE += [
    runtime_sized(c)
    for c in GRID_SAMPLE
    if c.name
    in (
        "grid-sample-linear-reflection-ac0",
        "grid-sample-cubic-border-ac1",
        "grid-sample-nearest",
        "grid-sample-3d-reflection",
        "grid-sample-linear-zeros-ac1",
    )
]


@pytest.mark.parametrize("case", GRID_SAMPLE, ids=lambda c: c.name)
def test_grid_sample(case: Case) -> None:
    check_gradient(case)


def lp(
    name: str, op: str, x: tuple[int, ...], opset: int = 22, dynamic: bool = False, zero: Any = None, **attrs: Any
) -> Case:
    """An LpPool / GlobalLpPool row (onnxruntime has them in float32 only); x[zero] = 0."""
    value = rnd(*x)
    if zero is not None:
        value[zero] = 0.0
    return Case(
        name,
        [oh.make_node(op, ["x"], ["y"], **attrs)],
        {"x": value},
        ["x"],
        opset=opset,
        ort_dtype=F32,
        dynamic=["x"] if dynamic else [],
    )


LP_POOL = [
    lp("lppool-p2", "LpPool", (2, 2, 4, 4), kernel_shape=[2, 2], strides=[2, 2]),
    lp("lppool-p3-pads", "LpPool", (1, 2, 4, 5), kernel_shape=[3, 2], pads=[1, 0, 1, 1], p=3),
    lp("lppool-p1-1d", "LpPool", (1, 3, 7), kernel_shape=[3], strides=[2], p=1),
    lp(
        "lppool-ceil-dil",
        "LpPool",
        (1, 1, 6, 5),
        kernel_shape=[2, 2],
        strides=[2, 2],
        dilations=[1, 2],
        ceil_mode=1,
        opset=18,
    ),
    lp("lppool-same", "LpPool", (1, 2, 5, 4), kernel_shape=[3, 3], strides=[2, 1], auto_pad="SAME_UPPER"),
    lp("lppool-dynamic-batch", "LpPool", (2, 2, 3, 4), kernel_shape=[2, 2], dynamic=True, opset=11),
    lp("globallppool-p2", "GlobalLpPool", (2, 3, 2, 3), opset=21),  # onnxruntime lacks GlobalLpPool-22
    lp("globallppool-p3-1d", "GlobalLpPool", (1, 2, 5), p=3, opset=2),
    # windows whose cells are all 0 (after a Relu), or that hold no cell (a dilation stepping
    # over x): Y = 0 has the subgradient 0 (torch's); Y^(1-p) gave their cells NaN
    lp(
        "lppool-zero-window",
        "LpPool",
        (1, 2, 4),
        kernel_shape=[2],
        strides=[2],
        zero=(slice(None), slice(None), slice(0, 2)),
    ),
    lp(
        "lppool-p3-zero-window",
        "LpPool",
        (1, 1, 4, 4),
        kernel_shape=[2, 2],
        strides=[2, 2],
        p=3,
        zero=(0, 0, slice(2, 4), slice(0, 2)),
    ),
    lp("lppool-empty-window", "LpPool", (1, 2, 6), kernel_shape=[2], pads=[1, 1], dilations=[7]),
    lp("globallppool-zero-plane", "GlobalLpPool", (1, 2, 3), opset=21, zero=(0, 1)),
]


@pytest.mark.parametrize("case", LP_POOL, ids=lambda c: c.name)
def test_lp_pool(case: Case) -> None:
    check_gradient(case)


def roi_align(
    name: str, x: tuple[int, ...], rois: list[list[float]], batch: list[int], opset: int = 21, **attrs: Any
) -> Case:
    return Case(
        name,
        [oh.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], **attrs)],
        {"x": rnd(*x), "rois": np.array(rois, np.float64), "batch": np.array(batch, np.int64)},
        ["x"],
        initializers=["batch"],
        opset=opset,
    )


_BOXES = [[0.3, 0.2, 3.1, 2.7], [1.0, 0.5, 4.6, 3.9], [0.0, 0.0, 2.2, 1.4]]
ROI_ALIGN = [
    roi_align("roi-align", (2, 2, 4, 5), _BOXES, [0, 1, 0], output_height=2, output_width=3, sampling_ratio=2),
    roi_align(
        "roi-align-adaptive-scale", (1, 3, 6, 5), _BOXES, [0, 0, 0], output_height=3, output_width=2, spatial_scale=0.7
    ),
    roi_align(
        "roi-align-output-half-pixel-opset10",
        (2, 1, 5, 5),
        _BOXES[:2],
        [1, 1],
        opset=10,
        output_height=2,
        output_width=2,
        sampling_ratio=1,
    ),
]


@pytest.mark.parametrize("case", ROI_ALIGN, ids=lambda c: c.name)
def test_roi_align(case: Case) -> None:
    check_gradient(case)


@pytest.mark.parametrize(("mode", "xs", "match"), [("max", ["x"], "mode='max'"), ("avg", ["x", "rois"], "boxes")])
def test_roi_align_refusals(mode: str, xs: list[str], match: str) -> None:
    case = roi_align("roi-align-refused", (1, 1, 4, 4), _BOXES[:1], [0], mode=mode)
    case.xs = xs
    with pytest.raises(ol.GradientError, match=match):
        gradient(case)


def col2im(name: str, x: tuple[int, ...], image: list[int], block: list[int], **attrs: Any) -> Case:
    inputs = {"x": rnd(*x), "image": np.array(image, np.int64), "block": np.array(block, np.int64)}
    return Case(
        name,
        [oh.make_node("Col2Im", list(inputs), ["y"], **attrs)],
        inputs,
        ["x"],
        initializers=["image", "block"],
        opset=18,
        ort_dtype=F32,
    )


COL2IM = [
    col2im("col2im", (1, 2 * 4, 12), [4, 5], [2, 2]),
    col2im(
        "col2im-strides-pads-dil", (2, 1 * 6, 3), [5, 4], [2, 3], strides=[2, 1], pads=[1, 0, 0, 1], dilations=[1, 2]
    ),
    col2im("col2im-1d", (1, 3 * 3, 4), [6], [3], strides=[1]),
]


@pytest.mark.parametrize("case", COL2IM, ids=lambda c: c.name)
def test_col2im(case: Case) -> None:
    check_gradient(case)


def deform(
    name: str,
    x: tuple[int, ...],
    w: tuple[int, ...],
    out: tuple[int, int],
    offset_group: int = 1,
    bias: bool = True,
    mask: bool = True,
    **attrs: Any,
) -> Case:
    """A DeformConv row in every operand; offsets of about a pixel (never integral: the tents' kinks)."""
    taps = w[2] * w[3]
    inputs = {"x": rnd(*x), "w": rnd(*w), "offset": 0.7 * rnd(x[0], offset_group * 2 * taps, *out)}
    names = ["x", "w", "offset"]
    if bias:
        inputs["b"] = rnd(w[0])
    names.append("b" if bias else "")
    if mask:
        inputs["mask"] = _rng.uniform(0.2, 1.0, (x[0], offset_group * taps, *out))
        names.append("mask")
    return Case(
        name,
        [oh.make_node("DeformConv", names, ["y"], offset_group=offset_group, **attrs)],
        inputs,
        list(inputs),
        opset=19,
        ort_dtype=F32,
        rtol=1e-4,
    )


DEFORM_CONV = [
    deform("deform-conv", (1, 2, 4, 4), (3, 2, 2, 2), (3, 3)),
    deform("deform-conv-no-mask-bias", (2, 2, 3, 4), (2, 2, 2, 2), (2, 3), bias=False, mask=False),
    deform("deform-conv-groups", (1, 4, 4, 3), (2, 2, 3, 2), (2, 2), offset_group=2, group=2),
    deform(
        "deform-conv-stride-pad-dil",
        (1, 2, 5, 5),
        (2, 2, 2, 2),
        (3, 2),
        strides=[2, 2],
        pads=[1, 0, 1, 0],
        dilations=[1, 2],
    ),
]


@pytest.mark.parametrize("case", DEFORM_CONV, ids=lambda c: c.name)
def test_deform_conv(case: Case) -> None:
    check_gradient(case)
