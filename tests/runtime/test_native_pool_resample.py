"""The rows-first float32 MaxPool, GlobalAveragePool's row means and the 2-D nearest
replication (``src/pool.cpp``, ``src/resample.cpp``): native against twin bit for bit, and the
kernels against onnxruntime (issue 15 §1)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from onnx_light.runtime import _native
from onnx_light.runtime.kernels.pool import global_average_pool, max_pool
from onnx_light.runtime.kernels.resize import plan_resize, run_plan

_RNG = np.random.default_rng(15)


def _native_or_skip() -> Any:
    if _native.EXTENSION is None:
        pytest.skip("the native extension is not built")
    return _native.EXTENSION


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.dtype(f"u{a.dtype.itemsize}"))


def _out_size(size: int, k: int, s: int, d: int, before: int, after: int) -> int:
    return (size + before + after - (k - 1) * d - 1) // s + 1


# (kh, kw), (sh, sw), (dh, dw), (top, left, bottom, right), (h, w): widths around whole vectors
_POOLS = [
    ((3, 3), (2, 2), (1, 1), (1, 1, 1, 1), (112, 112)),
    ((3, 3), (2, 2), (1, 1), (1, 1, 1, 1), (17, 31)),
    ((2, 2), (2, 2), (1, 1), (0, 0, 0, 0), (6, 16)),
    ((2, 1), (2, 1), (1, 1), (0, 0, 0, 0), (4, 9)),
    ((5, 5), (1, 1), (1, 1), (2, 2, 2, 2), (10, 10)),
    ((3, 4), (2, 2), (2, 3), (2, 3, 1, 0), (13, 41)),  # dilated stride 2: odd tap offsets
    ((3, 3), (1, 2), (1, 1), (0, 2, 0, 5), (5, 23)),  # right pads past the row
    ((2, 3), (3, 1), (1, 1), (0, 0, 1, 1), (7, 8)),
    ((1, 1), (1, 1), (1, 1), (0, 0, 0, 0), (3, 1)),
    ((3, 3), (2, 2), (1, 1), (1, 1, 2, 2), (7, 7)),  # ceil mode: windows past the end
]


@pytest.mark.parametrize("kernel,strides,dilations,pads,size", _POOLS)
def test_max_pool2d_f32_native_is_the_twin_bit_for_bit(
    kernel: tuple, strides: tuple, dilations: tuple, pads: tuple, size: tuple
) -> None:
    ext = _native_or_skip()
    x = _RNG.standard_normal((2, 3, *size)).astype(np.float32)
    x[0, 0] = np.where(_RNG.random(size) < 0.5, np.float32(0.0), np.float32(-0.0))  # signed zeros only
    x[0, 1].flat[_RNG.integers(0, x[0, 1].size, 3)] = np.nan
    x[1, 1, :, -1] = np.inf
    x[1, 2] = -np.inf
    (kh, kw), (sh, sw), (dh, dw), (top, left, bottom, right) = kernel, strides, dilations, pads
    oh = _out_size(size[0], kh, sh, dh, top, bottom)
    ow = _out_size(size[1], kw, sw, dw, left, right)
    args = (kh, kw, sh, sw, dh, dw, oh, ow, top, left)
    want = _native.max_pool2d_f32_twin(x, *args)
    got = ext.max_pool2d_f32(x, *args)
    assert got.shape == want.shape == (2, 3, oh, ow)

    def canonical(a: np.ndarray) -> np.ndarray:  # one NaN bit pattern: the payloads may differ
        return _bits(np.where(np.isnan(a), np.float32(np.nan), a))

    np.testing.assert_array_equal(canonical(got), canonical(want))
    assert np.isnan(got[0, 1]).any()
    # the window maxima of the padded array (kh * kw taps): an independent oracle
    xp = np.full((2, 3, size[0] + top + bottom + sh * 2, size[1] + left + right + sw * 2), -np.inf, np.float32)
    xp[:, :, top : top + size[0], left : left + size[1]] = x
    cells = np.zeros(xp.shape[2:], bool)
    cells[top : top + size[0], left : left + size[1]] = True
    oracle = np.full((2, 3, oh, ow), -np.inf, np.float32)
    inside = np.zeros((oh, ow), bool)
    for a in range(kh):
        for b in range(kw):
            at = (slice(a * dh, a * dh + (oh - 1) * sh + 1, sh), slice(b * dw, b * dw + (ow - 1) * sw + 1, sw))
            tap = xp[(slice(None), slice(None), *at)]
            oracle = np.where(np.isnan(tap) | np.isnan(oracle), np.nan, np.maximum(oracle, tap))
            inside |= cells[at]
    oracle[..., ~inside] = np.finfo(np.float32).min  # a window with no input cell: onnxruntime's answer
    np.testing.assert_array_equal(got, oracle)


def test_max_pool_kernel_matches_onnxruntime_on_the_real_models_pools() -> None:
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto
    from onnx import helper as H

    cases: list[tuple[tuple[int, ...], dict[str, Any]]] = [
        ((1, 64, 112, 112), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
        ((1, 128, 10, 10), {"kernel_shape": [5, 5], "strides": [1, 1], "pads": [2, 2, 2, 2]}),
        ((1, 32, 32, 160), {"kernel_shape": [2, 2], "strides": [2, 2]}),
        ((1, 128, 8, 40), {"kernel_shape": [2, 1], "strides": [2, 1]}),
        ((1, 8, 9, 9), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ]
    for shape, attrs in cases:
        x = _RNG.standard_normal(shape).astype(np.float32)
        graph = H.make_graph(
            [H.make_node("MaxPool", ["x"], ["y"], **attrs)],
            "g",
            [H.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
            [H.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        )
        model = H.make_model(graph, opset_imports=[H.make_opsetid("", 18)])
        peer = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        want = peer.run(None, {"x": x})[0]
        np.testing.assert_array_equal(max_pool(x, **attrs), want)
        pooled = np.empty_like(want)
        assert max_pool(x, out=pooled, **attrs) is pooled
        np.testing.assert_array_equal(pooled, want)


@pytest.mark.parametrize("cells", [1, 4, 7, 8, 9, 49, 100, 128, 129, 196, 400, 3136, 12544])
def test_mean_rows_f32_is_numpys_mean_bit_for_bit(cells: int) -> None:
    x = (_RNG.standard_normal((24, cells)) * 100).astype(np.float32)
    x[3, 0] = np.nan
    x[5, -1] = np.inf
    want = x.mean(axis=1, dtype=np.float32)
    twin = _native.mean_rows_f32_twin(x, np.empty(24, np.float32))
    np.testing.assert_array_equal(_bits(twin), _bits(want))
    if _native.EXTENSION is not None:
        got = np.empty(24, np.float32)
        _native.EXTENSION.mean_rows_f32(x, got)
        np.testing.assert_array_equal(_bits(got), _bits(want))


@pytest.mark.parametrize("shape", [(1, 576, 7, 7), (2, 16, 56, 56), (1, 3, 1, 1), (2, 5, 3), (1, 2, 3, 4, 5)])
def test_global_average_pool_is_numpys_mean(shape: tuple) -> None:
    x = _RNG.standard_normal(shape).astype(np.float32)
    got = global_average_pool(x)
    want = x.mean(axis=tuple(range(2, x.ndim)), keepdims=True, dtype=np.float32)
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_array_equal(_bits(got), _bits(want))
    for dtype in (np.float16, np.float64):  # numpy's path, unchanged
        y = global_average_pool(x.astype(dtype))
        assert y.dtype == dtype and y.shape == want.shape
    strided = x[..., ::-1]  # not contiguous: numpy's path
    np.testing.assert_allclose(global_average_pool(strided), want, rtol=1e-6, atol=1e-7)


def test_global_average_pool_matches_onnxruntime() -> None:
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto
    from onnx import helper as H

    x = _RNG.standard_normal((1, 288, 7, 7)).astype(np.float32) * 50
    graph = H.make_graph(
        [H.make_node("GlobalAveragePool", ["x"], ["y"])],
        "g",
        [H.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [H.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = H.make_model(graph, opset_imports=[H.make_opsetid("", 18)])
    peer = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = peer.run(None, {"x": x})[0]
    # float32 sums of 49 values up to ~200 in another order: a few ulps of the sum apart
    np.testing.assert_allclose(global_average_pool(x), want, rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8, np.int64, np.bool_, np.complex64])
@pytest.mark.parametrize("factors", [(2, 2), (1, 2), (2, 1), (4, 4), (3, 5), (8, 8)])
@pytest.mark.parametrize("size", [(5, 9), (8, 16), (1, 1), (3, 17)])
def test_replicate2d_native_is_the_twin(dtype: Any, factors: tuple, size: tuple) -> None:
    x = (_RNG.standard_normal((2, 3, *size)) * 10).astype(dtype).reshape(6, *size)
    if dtype == np.float32:
        x[0, 0, 0] = np.nan
    y_shape = (6, size[0] * factors[0], size[1] * factors[1])
    want = _native.replicate2d_twin(x, np.empty(y_shape, x.dtype))
    np.testing.assert_array_equal(want, np.repeat(np.repeat(x, factors[0], axis=1), factors[1], axis=2))
    if _native.EXTENSION is not None:
        got = _native.replicate2d(x, np.full(y_shape, 1, x.dtype))
        np.testing.assert_array_equal(_bits(got), _bits(want))


def test_resize_replication_writes_into_the_pools_buffer() -> None:
    x = _RNG.standard_normal((1, 4, 5, 6)).astype(np.float32)
    plan = plan_resize(
        x.shape,
        None,
        np.array([1, 1, 2, 2], np.float32),
        None,
        mode="nearest",
        coordinate_transformation_mode="asymmetric",
        nearest_mode="floor",
    )
    assert plan.replicate == [1, 1, 2, 2]
    want = run_plan(x, plan._replace(replicate=None))
    buffer = np.empty((1, 4, 10, 12), np.float32)
    got = run_plan(x, plan, into=buffer)
    assert got is buffer
    np.testing.assert_array_equal(got, want)
    assert run_plan(x, plan, into=np.empty((1, 4, 10, 11), np.float32)).shape == (1, 4, 10, 12)  # not taken
    np.testing.assert_array_equal(run_plan(x[:, :, ::-1], plan), run_plan(x[:, :, ::-1].copy(), plan))


def _layer_norm_general_outputs(
    x: np.ndarray, scale: np.ndarray, bias: np.ndarray | None, axis: int
) -> tuple[np.ndarray, ...]:
    """Y, Mean and InvStdDev by the general (numpy) path of the LayerNormalization kernel."""
    from onnx_light.runtime.kernels import normalization

    rows = normalization._float32_rows
    normalization._float32_rows = lambda *args: False  # type: ignore[assignment]
    try:
        y = normalization.layer_norm(x, scale, bias, axis=axis, epsilon=1e-5, _num_outputs=3)
    finally:
        normalization._float32_rows = rows  # type: ignore[assignment]
    assert isinstance(y, tuple)
    return y


def _layer_norm_general(x: np.ndarray, scale: np.ndarray, bias: np.ndarray | None, axis: int) -> np.ndarray:
    """Y by the general (numpy) path of the LayerNormalization kernel."""
    return _layer_norm_general_outputs(x, scale, bias, axis)[0]


@pytest.mark.parametrize("width", [1, 7, 256, 1030])
@pytest.mark.parametrize("axis", [-1, 1, 0])
def test_layer_norm_rows_mean_and_inv_std_are_the_general_paths(width: int, axis: int) -> None:
    """With Mean and InvStdDev asked for (a training graph), the rows path gives all three
    outputs bit for bit as the general path does, natively and in its twin."""
    from onnx_light.runtime.kernels.normalization import layer_norm

    x = (_RNG.standard_normal((3, 5, width)) * 30 + 4).astype(np.float32)
    x[1, 2, 0] = np.nan
    x[2, 1, -1] = np.inf
    scale = _RNG.standard_normal(width).astype(np.float32)
    bias: np.ndarray | None = _RNG.standard_normal(width).astype(np.float32)
    if axis != -1:
        scale, bias = _RNG.standard_normal(x.shape[axis:]).astype(np.float32), None
    want = _layer_norm_general_outputs(x, scale, bias, axis)
    got = layer_norm(x, scale, bias, axis=axis, epsilon=1e-5, _num_outputs=3)
    assert isinstance(got, tuple) and len(got) == 3
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == np.float32
        np.testing.assert_array_equal(_bits(np.nan_to_num(g, nan=7.0)), _bits(np.nan_to_num(w, nan=7.0)))
    two = layer_norm(x, scale, bias, axis=axis, epsilon=1e-5, _num_outputs=2)
    assert isinstance(two, tuple) and len(two) == 2
    if axis == -1:
        rows = x.reshape(-1, width)
        mean, inv_std = np.empty(15, np.float32), np.empty(15, np.float32)
        y = _native.layer_norm_rows_f32_twin(rows, scale, bias, np.float32(1e-5), np.empty_like(rows), mean, inv_std)
        for g, w in zip((y, mean, inv_std), want):
            np.testing.assert_array_equal(
                _bits(np.nan_to_num(g, nan=7.0)), _bits(np.nan_to_num(w, nan=7.0).reshape(g.shape))
            )


@pytest.mark.parametrize("width", [1, 7, 8, 100, 256, 300, 1030])
@pytest.mark.parametrize("with_bias", [True, False])
def test_layer_norm_rows_is_the_general_path_bit_for_bit(width: int, with_bias: bool) -> None:
    from onnx_light.runtime.kernels.normalization import layer_norm

    x = (_RNG.standard_normal((3, 5, width)) * 30 + 4).astype(np.float32)
    x[1, 2, 0] = np.nan
    scale = _RNG.standard_normal(width).astype(np.float32)
    bias = _RNG.standard_normal(width).astype(np.float32) if with_bias else None
    want = _layer_norm_general(x, scale, bias, -1)
    got = layer_norm(x, scale, bias, axis=-1, epsilon=1e-5)
    assert got.shape == x.shape and got.dtype == np.float32
    np.testing.assert_array_equal(_bits(np.nan_to_num(got, nan=7.0)), _bits(np.nan_to_num(want, nan=7.0)))
    assert np.isnan(got[1, 2]).all() and not np.isnan(got[0]).any()
    twin = _native.layer_norm_rows_f32_twin(
        x.reshape(-1, width), scale, bias, np.float32(1e-5), np.empty((15, width), np.float32)
    )
    np.testing.assert_array_equal(
        _bits(np.nan_to_num(twin, nan=7.0)), _bits(np.nan_to_num(want, nan=7.0).reshape(-1, width))
    )


def test_layer_norm_rows_over_several_axes_and_broadcast_scale() -> None:
    from onnx_light.runtime.kernels.normalization import layer_norm

    x = _RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    for scale, bias in [
        (_RNG.standard_normal((4, 5)).astype(np.float32), _RNG.standard_normal((5,)).astype(np.float32)),
        (np.array([2.0], np.float32), None),
        (_RNG.standard_normal((1, 1, 4, 5)).astype(np.float32), None),  # more dims than normalized: numpy decides
    ]:
        want = _layer_norm_general(x, scale, bias, 2)
        got = layer_norm(x, scale, bias, axis=2, epsilon=1e-5)
        np.testing.assert_array_equal(_bits(got), _bits(want))


def test_layer_norm_matches_onnxruntime() -> None:
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto
    from onnx import helper as H

    from onnx_light.runtime.kernels.normalization import layer_norm

    x = _RNG.standard_normal((1, 128, 256)).astype(np.float32) * 3
    scale = _RNG.standard_normal(256).astype(np.float32)
    bias = _RNG.standard_normal(256).astype(np.float32)
    graph = H.make_graph(
        [H.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1, epsilon=1e-5)],
        "g",
        [H.make_tensor_value_info(n, TensorProto.FLOAT, v.shape) for n, v in (("x", x), ("s", scale), ("b", bias))],
        [H.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = H.make_model(graph, opset_imports=[H.make_opsetid("", 17)])
    peer = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = peer.run(None, {"x": x, "s": scale, "b": bias})[0]
    np.testing.assert_allclose(layer_norm(x, scale, bias, axis=-1, epsilon=1e-5), want, rtol=1e-5, atol=1e-5)
