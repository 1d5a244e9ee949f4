"""The CNN forward rules in onnxruntime: MaxPool on inputs full of ties, and every MaxPool,
Conv and ConvTranspose row's tangent against ours.

The Indices-free forward rule (prefix pools for tiling windows of up to 4 cells) must pick
tX at the first maximum in kernel raster order, exactly the cell onnxruntime's Indices
name and the reverse rule routes dY to (so <J^T u, t> = <u, J t> holds with ties too).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from gradcheck import _NP_TO_ONNX, Case, build_model, check_tangent_in_onnxruntime, tangent, tangent_feeds
from onnx import helper as oh
from test_rules_nn import CONV, CONV_AUTO_PAD, POOL, TIES, _tied_windows, node

import onnx_light as ol


def _tangent_model(fwd: Any, feeds: dict[str, np.ndarray], y: str, y_shape: tuple[int, ...]) -> Any:
    """Our forward-mode FunctionProto wrapped as an onnx ModelProto that calls it."""
    import onnx

    fn = onnx.FunctionProto.FromString(fwd.SerializeToString())
    inputs = [oh.make_tensor_value_info(n, _NP_TO_ONNX[feeds[n].dtype], list(feeds[n].shape)) for n in fn.input]
    outputs = [oh.make_tensor_value_info(fn.output[0], _NP_TO_ONNX[feeds["x"].dtype], list(y_shape))]
    call = oh.make_node(fn.name, list(fn.input), list(fn.output), domain=fn.domain)
    graph = oh.make_graph([call], "tangent", inputs, outputs)
    model = oh.make_model(graph, opset_imports=[*fn.opset_import, oh.make_opsetid(fn.domain, 1)], functions=[fn])
    model.ir_version = 10
    return model


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize(("name", "shape", "attrs", "dynamic"), TIES, ids=[t[0] for t in TIES])
def test_max_pool_jvp_ties(name: str, shape: tuple[int, ...], attrs: dict[str, Any], dynamic: bool, dtype: Any) -> None:
    import onnxruntime as ort

    rng = np.random.default_rng(5)
    x = np.maximum(rng.integers(-2, 3, shape), 0).astype(dtype)  # all-zero windows, repeated maxima
    dyn = ["x"] if dynamic else []
    hidden = Case(f"jvp-ties-{name}", [node("MaxPool", ["x"], **attrs)], {"x": x}, ["x"], dtype=dtype, dynamic=dyn)
    indexed = Case(
        f"jvp-ties-{name}-indices", [node("MaxPool", ["x"], ["y", "idx"], **attrs)], {"x": x}, ["x"], y="y", dtype=dtype
    )
    model, fwd = tangent(hidden)
    _, fwd_indexed = tangent(indexed)
    pools = [n for n in fwd.node if n.op_type == "MaxPool"]
    if dtype == np.float32:  # as the reverse rule's MaxUnpool: the forward's Indices, one pool
        assert [len(n.output) for n in pools] == [2], f"{name}: {[list(n.output) for n in pools]}"
    elif int(np.prod(attrs["kernel_shape"])) <= 4:  # the prefix pools: no MaxPool computes Indices
        assert all(len(n.output) == 1 for n in pools), f"{name}: {[list(n.output) for n in pools]}"
    assert "Gather" not in {n.op_type for n in fwd.node} | {n.op_type for n in fwd_indexed.node}

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    forward = build_model(indexed, dtype)
    forward.graph.output.append(oh.make_tensor_value_info("idx", 7, None))  # INT64
    y, idx = ort.InferenceSession(forward.SerializeToString(), opts).run(["y", "idx"], {"x": x})
    assert _tied_windows(x, y, attrs["kernel_shape"]) > 0
    t = rng.standard_normal(x.shape).astype(dtype)
    expected = t.reshape(-1)[idx.reshape(-1)].reshape(y.shape)  # tX at onnxruntime's Indices

    for f in (fwd, fwd_indexed):
        feeds = tangent_feeds(f, {"x": x}, {"fwd_x": t}, model)
        (ours,) = ol.runtime.InferenceSession(f).run(None, feeds)
        wrapped = _tangent_model(f, feeds, "y", y.shape)
        (in_ort,) = ort.InferenceSession(wrapped.SerializeToString(), opts).run(None, feeds)
        np.testing.assert_array_equal(ours, expected)
        np.testing.assert_array_equal(in_ort, expected)


#: tiling geometries of the Indices-free tangent (name, x shape, attributes)
_NAN_POOLS = [
    ("2d", (2, 3, 6, 8), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ("2d-cut", (2, 2, 5, 7), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ("1d-4", (2, 3, 13), {"kernel_shape": [4], "strides": [4]}),
    ("3d-4cells", (2, 2, 4, 3, 5), {"kernel_shape": [2, 1, 2], "strides": [2, 1, 2]}),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize(("name", "shape", "attrs"), _NAN_POOLS, ids=[t[0] for t in _NAN_POOLS])
def test_max_pool_jvp_nan(name: str, shape: tuple[int, ...], attrs: dict[str, Any], dtype: Any) -> None:
    """Windows holding NaN, first or not, among ties: tY is tX where the reverse rule routes dY.

    float32 reads the forward's Indices, as the reverse rule's MaxUnpool does: tX at each
    runtime's own Indices (with NaN ours and onnxruntime's differ). float64 takes the
    Indices-free prefix pools, as the reverse rule does: onnxruntime's float64 pools are
    plain loops (a NaN first cell is the max and the index, a later NaN is skipped), so tY
    is tX at its Indices; ours makes Y NaN wherever a window holds one, and tY is then tX
    at the window's first cell. (onnxruntime's float32 pools treat NaN by SIMD lane, unlike
    its Indices: no Indices-free form could agree with them.)"""
    import onnxruntime as ort

    rng = np.random.default_rng(11)
    x = np.maximum(rng.integers(-2, 3, shape), 0).astype(dtype)
    x[rng.random(shape) < 0.15] = np.nan
    hidden = Case(f"jvp-nan-{name}", [node("MaxPool", ["x"], **attrs)], {"x": x}, ["x"], dtype=dtype)
    indexed = Case(
        f"jvp-nan-{name}-indices", [node("MaxPool", ["x"], ["y", "idx"], **attrs)], {"x": x}, ["x"], y="y", dtype=dtype
    )
    model, fwd = tangent(hidden)
    outputs = [len(n.output) for n in fwd.node if n.op_type == "MaxPool"]
    assert outputs == [2] if dtype == np.float32 else set(outputs) == {1}  # Indices / the prefix pools
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    forward = build_model(indexed, dtype)
    forward.graph.output.append(oh.make_tensor_value_info("idx", 7, None))  # INT64
    y, idx = ort.InferenceSession(forward.SerializeToString(), opts).run(["y", "idx"], {"x": x})
    kernel = attrs["kernel_shape"]
    cut = x[(..., *[slice(0, o * k) for o, k in zip(y.shape[2:], kernel)])]
    windows = cut.reshape(*x.shape[:2], *[d for o, k in zip(y.shape[2:], kernel) for d in (o, k)])
    window_axes = tuple(range(3, 3 + 2 * len(kernel), 2))
    has_nan = np.isnan(windows).any(axis=window_axes)
    first_nan = np.isnan(windows[(..., *[s for _ in kernel for s in (slice(None), slice(0, 1))])]).reshape(y.shape)
    assert first_nan.any() and (has_nan & ~first_nan).any()  # both kinds of window occur
    t = rng.standard_normal(x.shape).astype(dtype)
    expected = t.reshape(-1)[idx.reshape(-1)].reshape(y.shape)  # tX at onnxruntime's Indices

    feeds = tangent_feeds(fwd, {"x": x}, {"fwd_x": t}, model)
    wrapped = _tangent_model(fwd, feeds, "y", y.shape)
    (in_ort,) = ort.InferenceSession(wrapped.SerializeToString(), opts).run(None, feeds)
    np.testing.assert_array_equal(in_ort, expected)
    first_cell = t[(..., *[slice(0, o * k, k) for o, k in zip(y.shape[2:], kernel)])]
    (ours,) = ol.runtime.InferenceSession(fwd).run(None, feeds)
    if dtype == np.float32:  # tX at our own Indices (with NaN they differ from onnxruntime's)
        _, own_idx = ol.runtime.InferenceSession(forward.SerializeToString()).run(["y", "idx"], {"x": x})
        np.testing.assert_array_equal(ours, t.reshape(-1)[own_idx.reshape(-1)].reshape(y.shape))
    else:
        np.testing.assert_array_equal(ours, np.where(has_nan, first_cell, expected))


@pytest.mark.parametrize(
    "case", [pytest.param(c, id=c.name) for c in POOL if c.nodes[0].op_type == "MaxPool" and not c.dynamic]
)
def test_max_pool_tangent_runs_in_onnxruntime(case: Case) -> None:
    """Every MaxPool row's tangent graph passes the full checker and agrees with onnxruntime."""
    check_tangent_in_onnxruntime(case)


#: onnx's shape inference rejects the forward node itself (a negative SAME pad at opset 10)
_CHECKER_REJECTS = {"ConvTranspose-2d-SAME_UPPER-opset10"}


@pytest.mark.parametrize(
    "case",
    [pytest.param(c, id=c.name) for c in CONV + CONV_AUTO_PAD if not c.dynamic and c.name not in _CHECKER_REJECTS],
)
def test_conv_tangent_runs_in_onnxruntime(case: Case) -> None:
    """Conv/ConvTranspose tangents (tB as the tangent convolution's bias) agree with onnxruntime."""
    check_tangent_in_onnxruntime(case)
