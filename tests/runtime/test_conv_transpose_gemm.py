"""A dense ConvTranspose as GEMM + col2im (runtime/kernels/_conv_backward.py, src/conv_backward.cpp):
the fold native against its twin bit for bit, the kernel against onnxruntime on the shapes it
takes (every strided dense one; stride 1 where the input channels outnumber the input cells)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from onnx_light.runtime import _native
from onnx_light.runtime.kernels import _conv_backward
from onnx_light.runtime.kernels import conv as conv_kernels
from onnx_light.runtime.kernels.conv import conv_transpose

_RNG = np.random.default_rng(2026)
NATIVE = _native.NATIVE is not None and hasattr(_native.NATIVE, "col2im_f32")

# kh, kw, ih, iw, sh, sw, dh, dw, top, left, oh, ow: crops, strides, dilations, cells dropped past the end
_FOLDS = [
    (3, 3, 7, 7, 1, 1, 1, 1, 1, 1, 7, 7),
    (3, 3, 14, 14, 2, 2, 1, 1, 1, 1, 27, 28),
    (1, 1, 7, 7, 2, 2, 1, 1, 0, 0, 14, 14),
    (7, 7, 5, 6, 2, 2, 1, 1, 3, 3, 9, 11),
    (3, 2, 5, 9, 1, 3, 2, 1, 0, 2, 8, 24),
    (2, 3, 4, 4, 3, 1, 1, 2, 4, 0, 6, 5),
]


@pytest.mark.skipif(not NATIVE, reason="no native col2im_f32 (pure-Python twins)")
@pytest.mark.parametrize("case", _FOLDS, ids=[f"fold{i}" for i in range(len(_FOLDS))])
def test_col2im_native_is_the_twin_bit_for_bit(case: tuple[int, ...]) -> None:
    kh, kw, ih, iw, sh, sw, dh, dw, top, left, oh, ow = case
    cols = _RNG.standard_normal((5, kh * kw, ih * iw)).astype(np.float32)
    cols[0, 0, 0] = np.nan
    cols[1, -1, -1] = np.inf
    want = _conv_backward.col2im_f32_twin(
        cols, kh, kw, ih, iw, sh, sw, dh, dw, top, left, np.full((5, oh, ow), 7.0, np.float32)
    )
    got = np.full((5, oh, ow), 7.0, np.float32)  # overwritten, not added to
    _native.NATIVE.col2im_f32(cols, kh, kw, ih, iw, sh, sw, dh, dw, top, left, got)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.skipif(not NATIVE, reason="no native col2im_f32 (pure-Python twins)")
def test_col2im_native_refuses_mismatched_shapes() -> None:
    cols = np.zeros((2, 9, 16), np.float32)
    with pytest.raises(ValueError, match="col2im_f32"):
        _native.NATIVE.col2im_f32(cols, 3, 3, 4, 5, 1, 1, 1, 1, 0, 0, np.zeros((2, 4, 4), np.float32))
    with pytest.raises(ValueError, match="col2im_f32"):
        _native.NATIVE.col2im_f32(cols, 3, 3, 4, 4, 0, 1, 1, 1, 0, 0, np.zeros((2, 4, 4), np.float32))


# (x shape, w shape, attributes): ResNet-18's data gradients and odd geometries
_CASES: list[tuple[tuple[int, ...], tuple[int, ...], dict[str, Any]]] = [
    ((1, 64, 7, 7), (64, 48, 3, 3), {"pads": [1, 1, 1, 1]}),  # stride 1, channels > cells
    ((1, 40, 6, 5), (40, 24, 3, 3), {"pads": [1, 0, 1, 2]}),
    ((1, 16, 10, 10), (16, 12, 3, 3), {"pads": [1, 1, 1, 1]}),  # stride 1, channels >= cells / 7
    ((1, 32, 14, 14), (32, 16, 3, 3), {"strides": [2, 2], "pads": [1, 1, 0, 0]}),
    ((2, 16, 7, 7), (16, 8, 1, 1), {"strides": [2, 2], "output_padding": [1, 1]}),
    ((1, 8, 9, 11), (8, 3, 7, 7), {"strides": [2, 2], "pads": [3, 3, 2, 2]}),
    ((2, 12, 5, 6), (12, 5, 3, 2), {"strides": [3, 2], "dilations": [2, 1], "pads": [1, 0, 0, 1], "group": 2}),
    ((1, 48, 4, 4), (48, 4, 2, 2), {"strides": [2, 2], "group": 3, "output_padding": [1, 0]}),
]


@pytest.mark.parametrize("case", _CASES, ids=[f"ct{i}" for i in range(len(_CASES))])
@pytest.mark.parametrize("bias", [False, True])
def test_conv_transpose_gemm_matches_onnxruntime(case: tuple[Any, ...], bias: bool) -> None:
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto
    from onnx import helper as H

    xs, ws, attrs = case
    x = _RNG.standard_normal(xs).astype(np.float32)
    w = _RNG.standard_normal(ws).astype(np.float32)
    group = attrs.get("group", 1)
    b = _RNG.standard_normal(ws[1] * group).astype(np.float32)
    names = ["x", "w", "b"] if bias else ["x", "w"]
    inputs = [H.make_tensor_value_info(n, TensorProto.FLOAT, a.shape) for n, a in zip(names, (x, w, b))]
    graph = H.make_graph(
        [H.make_node("ConvTranspose", names, ["y"], **attrs)],
        "g",
        inputs,
        [H.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = H.make_model(graph, opset_imports=[H.make_opsetid("", 18)])
    peer = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = peer.run(None, dict(zip(names, (x, w, b))))[0]
    got = conv_transpose(x, w, b if bias else None, **attrs)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))
    into = np.empty_like(want)
    assert conv_transpose(x, w, b if bias else None, out=into, **attrs) is into
    np.testing.assert_allclose(into, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


def test_dense_strided_and_channel_heavy_conv_transposes_take_the_gemm(monkeypatch: pytest.MonkeyPatch) -> None:
    taken: list[tuple[int, ...]] = []
    gemm = conv_kernels.conv_transpose_gemm

    def recorder(x: np.ndarray, *args: Any, **kwargs: Any) -> np.ndarray:
        taken.append(x.shape)
        return gemm(x, *args, **kwargs)

    monkeypatch.setattr(conv_kernels, "conv_transpose_gemm", recorder)
    for xs, ws, attrs in _CASES:
        conv_transpose(
            _RNG.standard_normal(xs).astype(np.float32), _RNG.standard_normal(ws).astype(np.float32), **attrs
        )
    assert taken == [xs for xs, _, _ in _CASES]
    taken.clear()
    # stride 1 over a map more than 7x the channels: the Conv of the flipped weights; depthwise: its own kernel
    conv_transpose(np.ones((1, 8, 16, 16), np.float32), np.ones((8, 4, 3, 3), np.float32), pads=[1, 1, 1, 1])
    conv_transpose(np.ones((1, 8, 8, 8), np.float32), np.ones((8, 1, 3, 3), np.float32), strides=[2, 2], group=8)
    conv_transpose(np.ones((1, 8, 8, 8)), np.ones((8, 4, 3, 3)), strides=[2, 2])  # float64
    assert taken == []


@pytest.mark.parametrize(
    "xs,group,attrs",
    [
        ((1, 6, 5, 7), 1, {}),
        ((1, 6, 1, 1), 1, {"strides": [1, 1], "pads": [0, 0, 0, 0]}),  # a squeeze-excite's 1 x 1 map
        ((2, 6, 3, 4), 1, {"auto_pad": "SAME_UPPER"}),
        ((1, 6, 4, 3), 2, {"dilations": [2, 3]}),
        ((2, 6, 9), 3, {}),
    ],
)
@pytest.mark.parametrize("bias", [False, True])
def test_pointwise_conv_transpose_is_w_transposed_times_x_into_the_pools_buffer(
    xs: tuple[int, ...], group: int, attrs: dict[str, Any], bias: bool
) -> None:
    # y[n, g*Mg + m, p] = sum_c w[g*Cg + c, m] x[n, g*Cg + c, p] (+ b); one ungrouped sample writes the buffer
    x = _RNG.standard_normal(xs).astype(np.float32)
    w = _RNG.standard_normal((xs[1], 4) + (1,) * (len(xs) - 2)).astype(np.float32)
    b = _RNG.standard_normal(4 * group).astype(np.float32) if bias else None
    cg, n, cells = xs[1] // group, xs[0], int(np.prod(xs[2:]))
    wg = w.reshape(group, cg, 4).astype(np.float64)
    want = np.einsum("gcm,ngcp->ngmp", wg, x.reshape(n, group, cg, cells).astype(np.float64))
    want = want.reshape((n, 4 * group, *xs[2:])) + (0 if b is None else b.reshape((-1,) + (1,) * (len(xs) - 2)))
    into = np.full(want.shape, np.nan, np.float32)
    got = conv_transpose(x, w, b, group=group, out=into, **attrs)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert (got is into) == (n == 1 and group == 1)
