"""Reverse- and forward-mode graphs on empty tensors: the rules left after Conv and GridSample
(test_empty_batch_backward.py) whose ``Reshape(t, [0, .., -1])`` was ambiguous when a copied
dim is 0 (onnxruntime refuses it: "Invalid Target shape product of 0").

At N = 0 (or R = 0 rois) every gradient and tangent is empty or zero, so the reference is
their shapes, zeros, and onnxruntime running the same graph; the symbolic-batch forms at
N = 2 are checked against float64 finite differences.
"""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import (
    Case,
    backward_feeds,
    check_gradient,
    check_in_onnxruntime,
    check_tangent,
    check_tangent_in_onnxruntime,
    gradient,
    run_forward,
    tangent,
    tangent_feeds,
)
from onnx import helper as oh

import onnx_light as ol


def _cases(n: int, dynamic: bool) -> dict[str, Case]:
    rng = np.random.default_rng(n)

    def case(name: str, node: object, inputs: dict[str, np.ndarray], xs: list[str], **kw: object) -> Case:
        batched = [k for k, v in inputs.items() if k in xs and (k == "x" or v.shape[:1] == (n,))]
        names = batched if dynamic else []
        return Case(f"{name}_n{n}", [node], inputs, xs, dynamic=names, **kw)  # type: ignore[arg-type]

    rois = np.array([[0.5, 0.5, 3.5, 3.0], [0.0, 1.0, 4.0, 4.0]])[: min(n, 2)]
    cases = [
        case(
            "global_max_pool",
            oh.make_node("GlobalMaxPool", ["x"], ["y"]),
            {"x": rng.standard_normal((n, 3, 4, 5))},
            ["x"],
        ),
        case(
            "depth_to_space_crd",
            oh.make_node("DepthToSpace", ["x"], ["y"], blocksize=2, mode="CRD"),
            {"x": rng.standard_normal((n, 8, 2, 3))},
            ["x"],
        ),
        case(
            "group_norm",
            oh.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2),
            {"x": rng.standard_normal((n, 4, 3, 3)), "s": rng.standard_normal(4), "b": rng.standard_normal(4)},
            ["x", "s", "b"],
        ),
        case("lrn", oh.make_node("LRN", ["x"], ["y"], size=3), {"x": rng.standard_normal((n, 5, 3, 2))}, ["x"]),
        case(
            "roi_align",
            oh.make_node("RoiAlign", ["x", "r", "i"], ["y"], output_height=2, output_width=2, sampling_ratio=2),
            {"x": rng.standard_normal((1, 2, 5, 5)), "r": rois, "i": np.zeros(len(rois), np.int64)},
            ["x"],
            initializers=["r", "i"],
            opset=16,
        ),
        case(
            "deform_conv",
            oh.make_node("DeformConv", ["x", "w", "o"], ["y"], kernel_shape=[2, 2]),
            {
                "x": rng.standard_normal((n, 2, 4, 4)),
                "w": rng.standard_normal((3, 2, 2, 2)),
                "o": 0.3 * rng.standard_normal((n, 8, 3, 3)),
            },
            ["x", "w", "o"],
            opset=19,
        ),
        case(
            "deform_conv_mask",
            oh.make_node("DeformConv", ["x", "w", "o", "", "m"], ["y"], kernel_shape=[2, 2]),
            {
                "x": rng.standard_normal((n, 2, 4, 4)),
                "w": rng.standard_normal((3, 2, 2, 2)),
                "o": 0.3 * rng.standard_normal((n, 8, 3, 3)),
                "m": rng.uniform(0.2, 1.0, (n, 4, 3, 3)),
            },
            ["x", "w", "o", "m"],
            opset=19,
        ),
        case(
            "affine_grid",
            oh.make_node("AffineGrid", ["theta", "size"], ["y"]),
            {"theta": rng.standard_normal((n, 2, 3)), "size": np.array([n, 1, 3, 4], np.int64)},
            ["theta"],
            initializers=["size"],
        ),
    ]
    return {c.name.rsplit("_n", 1)[0]: c for c in cases}


NAMES = list(_cases(0, False))
#: onnxruntime 1.32 has no float64 kernel for these (the N = 0 graphs run in float32)
_ORT_FLOAT32 = {"deform_conv", "deform_conv_mask", "lrn", "roi_align", "group_norm"}


def _empty(name: str, dynamic: bool) -> Case:
    case = _cases(0, dynamic)[name]
    if name in _ORT_FLOAT32:
        case.ort_dtype = np.float32
    return case


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "symbolic"])
@pytest.mark.parametrize("name", NAMES)
def test_reverse_mode_on_an_empty_batch(name: str, dynamic: bool) -> None:
    case = _empty(name, dynamic)
    check_in_onnxruntime(case)  # onnxruntime refused the old Reshape
    model, bwd = gradient(case)
    y = run_forward(model, case.inputs, "y")
    dy = np.ones_like(y)
    grads = ol.runtime.InferenceSession(bwd).run(None, backward_feeds(bwd, case.inputs, dy, model))
    for x, g in zip(case.xs, grads):
        assert g.shape == case.inputs[x].shape
        if name not in ("roi_align", "group_norm"):  # R = 0 rois leave X's gradient 0; scale/bias sum over N = 0
            assert not np.any(g)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "symbolic"])
@pytest.mark.parametrize("name", NAMES)
def test_forward_mode_on_an_empty_batch(name: str, dynamic: bool) -> None:
    case = _empty(name, dynamic)
    check_tangent_in_onnxruntime(case)
    model, fwd = tangent(case)
    y = run_forward(model, case.inputs, "y")
    ts = {f"fwd_{x}": np.ones_like(case.inputs[x]) for x in case.xs}
    (jt,) = ol.runtime.InferenceSession(fwd).run(None, tangent_feeds(fwd, case.inputs, ts, model))
    assert jt.shape == y.shape
    assert not np.any(jt)


@pytest.mark.parametrize("name", NAMES)
def test_symbolic_batch_forms_match_finite_differences(name: str) -> None:
    case = _cases(2, True)[name]
    check_gradient(case, ort=False)
    check_tangent(case)


def test_grouped_conv_weight_gradient_with_symbolic_spatial_dims_on_an_empty_batch() -> None:
    """Conv's dW for group > 1 splits X's channels by ``[0, group, per, -1]`` when its spatial
    dims are symbolic: at N = 0 the -1 is the product of C / group and the spatial dims."""
    import onnx
    import onnxruntime as ort

    graph = oh.make_graph(
        [oh.make_node("Conv", ["x", "w"], ["y"], group=2, pads=[1, 1, 1, 1])],
        "grouped",
        [oh.make_tensor_value_info("x", 1, [0, 4, "H", "W"]), oh.make_tensor_value_info("w", 1, [6, 2, 3, 3])],
        [oh.make_tensor_value_info("y", 1, None)],
    )
    proto = onnx.shape_inference.infer_shapes(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)]))
    model = ol.ModelProto.FromString(proto.SerializeToString())
    bwd = ol.GradientOfFunction(model, ["x", "w"], "y")
    rng = np.random.default_rng(0)
    feeds = {"x": np.zeros((0, 4, 5, 5), np.float32), "w": rng.standard_normal((6, 2, 3, 3)).astype(np.float32)}
    feeds[bwd.input[-1]] = np.zeros((0, 6, 5, 5), np.float32)
    feeds = {n: feeds[n] for n in bwd.input}
    ours = ol.runtime.InferenceSession(bwd).run(None, feeds)
    fn = onnx.FunctionProto.FromString(bwd.SerializeToString())
    wrapped = oh.make_model(
        oh.make_graph(
            [oh.make_node(fn.name, list(fn.input), list(fn.output), domain=fn.domain)],
            "backward",
            [oh.make_tensor_value_info(n, 1, None) for n in fn.input],
            [oh.make_tensor_value_info(n, 1, None) for n in fn.output],
        ),
        opset_imports=[*fn.opset_import, oh.make_opsetid(fn.domain, 1)],
        functions=[fn],
    )
    theirs = ort.InferenceSession(wrapped.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for name, a, b in zip(["x", "w"], ours, theirs):
        assert a.shape == b.shape == feeds[name].shape
        assert not np.any(a) and not np.any(b)
