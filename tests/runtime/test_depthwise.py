"""The native depthwise convolution (one input channel per group; ``src/conv_avx2.cpp``'s
``depthwise``, issue 15 §1): each plane copied once into a zeroed buffer split by the column
stride into phase rows, one plain load per tap, the bias, residual and activation applied in
registers, vectors spilling into the next row's cells. Checked against the numpy twin
(``_conv_im2col``) and onnxruntime across strides, pads, dilations, odd and tiny maps, channel
multipliers, every activation with and without a residual, NaN and infinities; two threads give
one thread's bits, and no output cell past the tensor is written."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from onnx_light.runtime import _native
from onnx_light.runtime.kernels.conv import _conv_im2col

#: (n, c, h, w, multiplier, kernel, strides, dilations, pads (top, left, bottom, right))
CASES = [
    # MobileNetV3's geometries (reduced channel counts)
    (1, 5, 112, 112, 1, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),
    (1, 6, 56, 56, 1, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),
    (1, 7, 28, 28, 1, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    (1, 5, 28, 28, 1, (5, 5), (2, 2), (1, 1), (2, 2, 2, 2)),
    (1, 9, 14, 14, 1, (5, 5), (1, 1), (1, 1), (2, 2, 2, 2)),
    (1, 9, 14, 14, 1, (5, 5), (2, 2), (1, 1), (2, 2, 2, 2)),
    (1, 11, 7, 7, 1, (5, 5), (1, 1), (1, 1), (2, 2, 2, 2)),
    # odd sizes, asymmetric and no pads, strides 1 to 3 per axis, dilations, wide rows (64+)
    (2, 3, 13, 29, 1, (3, 3), (1, 1), (1, 1), (0, 0, 0, 0)),
    (1, 4, 15, 31, 1, (3, 3), (2, 2), (1, 1), (0, 1, 1, 0)),
    (1, 3, 9, 70, 1, (3, 5), (1, 2), (1, 1), (1, 2, 0, 3)),
    (1, 3, 10, 150, 1, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    (1, 3, 10, 151, 1, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),
    (2, 4, 11, 37, 1, (3, 3), (2, 1), (1, 2), (1, 2, 0, 1)),
    (1, 4, 8, 50, 1, (2, 5), (1, 3), (2, 1), (2, 3, 1, 2)),
    (1, 2, 9, 9, 1, (3, 3), (3, 3), (1, 1), (1, 1, 1, 1)),
    (1, 3, 12, 19, 1, (3, 3), (2, 2), (2, 3), (3, 3, 2, 1)),
    (1, 3, 7, 7, 1, (7, 1), (1, 2), (1, 1), (3, 0, 3, 0)),
    (1, 3, 17, 17, 1, (1, 1), (2, 2), (1, 1), (0, 0, 0, 0)),
    # tiny maps: one output cell, one column, one row
    (2, 3, 1, 1, 1, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    (1, 3, 5, 1, 1, (3, 1), (1, 1), (1, 1), (1, 0, 1, 0)),
    (1, 3, 1, 9, 1, (1, 3), (1, 2), (1, 1), (0, 1, 0, 1)),
    (1, 4, 3, 3, 1, (5, 5), (1, 1), (1, 1), (2, 2, 2, 2)),
    # two and three output channels per input channel
    (2, 3, 10, 10, 2, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    (1, 2, 9, 21, 3, (5, 5), (2, 2), (1, 1), (2, 2, 2, 2)),
]

#: act codes of src/conv.h with their parameters and numpy formulas
ACTS: dict[int, tuple[str, float, float, Any]] = {
    0: ("none", 0.0, 0.0, lambda v, a, b: v),
    1: ("relu", 0.0, 0.0, lambda v, a, b: np.maximum(v, 0)),
    2: ("clip", -0.5, 0.75, lambda v, a, b: np.minimum(np.maximum(v, a), b)),
    3: ("hardswish", 0.0, 0.0, lambda v, a, b: v * np.clip(v / 6 + 0.5, 0, 1)),
    4: ("hardsigmoid", 0.2, 0.5, lambda v, a, b: np.clip(a * v + b, 0, 1)),
    5: ("silu", 0.0, 0.0, lambda v, a, b: v / (1 + np.exp(-v.astype(np.float64)))),
    6: ("sigmoid", 0.0, 0.0, lambda v, a, b: 1 / (1 + np.exp(-v.astype(np.float64)))),
}


def _isas() -> list[str]:
    ext = _native.EXTENSION
    best = ext.conv2d_isa() if ext is not None and hasattr(ext, "conv2d_isa") else ""
    return {"avx512": ["avx2", "avx512"], "avx2": ["avx2"]}.get(best, [])


ISAS = _isas()
native_only = pytest.mark.skipif(not ISAS, reason="no native convolution on this CPU / build")


def _data(case: tuple, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n, c, h, w, mult, k, *_ = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = (rng.standard_normal((c * mult, 1, *k)) * 0.5).astype(np.float32)
    b = rng.standard_normal(c * mult).astype(np.float32)
    return x, wt, b


def _twin(case: tuple, x: np.ndarray, wt: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    *_, s, d, p = case
    return _conv_im2col(x, wt, b, list(s), list(d), list(p[:2]), list(p[2:]), x.shape[1])


def _native_conv(case: tuple, x: np.ndarray, wt: np.ndarray, b: Any, act: int, res: Any, isa: str, **kw: Any) -> Any:
    *_, s, d, p = case
    _, a, bb, _ = ACTS[act]
    ext = _native.EXTENSION
    assert ext is not None
    return ext.conv2d(x, wt, b, *s, *d, *p, x.shape[1], False, isa, act, a, bb, res, **kw)


@native_only
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("case", CASES, ids=[str(i) for i in range(len(CASES))])
def test_depthwise_matches_the_twin(case: tuple, isa: str) -> None:
    x, wt, b = _data(case, seed=case[1] * 100 + case[2])
    for bias in (b, None):
        want = _twin(case, x, wt, bias)
        got = _native_conv(case, x, wt, bias, 0, None, isa)
        assert got.shape == want.shape and got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.sqrt(wt[0].size))


@native_only
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("act", sorted(ACTS), ids=[ACTS[a][0] for a in sorted(ACTS)])
@pytest.mark.parametrize("case", [1, 4, 6, 9, 12, 18, 23], ids=lambda i: f"case{i}")
def test_depthwise_epilogue_in_registers(case: int, act: int, residual: bool, isa: str) -> None:
    """bias + residual, then the activation, as each vector is stored (stride 1 and 2, 7 x 7
    maps whose rows spill into the next, one-cell maps, a channel multiplier)."""
    geometry = CASES[case]
    x, wt, b = _data(geometry, seed=10 * act + case)
    conv = _twin(geometry, x, wt, b)
    res = np.random.default_rng(act).standard_normal(conv.shape).astype(np.float32) if residual else None
    _, a, bb, formula = ACTS[act]
    want = formula(conv + (0 if res is None else res), a, bb)
    got = _native_conv(geometry, x, wt, b, act, res, isa)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.sqrt(wt[0].size))


@native_only
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("case", [0, 3, 6, 10, 11, 15, 18], ids=lambda i: f"case{i}")
def test_depthwise_propagates_nan_and_infinity_like_the_twin(case: int, isa: str) -> None:
    """NaN and +-inf in the input (a corner, the last cell, the middle) and an infinite weight
    (0 * inf in the padding is NaN, as in the twin's zero-padded windows) land where the twin
    puts them."""
    geometry = CASES[case]
    x, wt, b = _data(geometry, seed=case)
    x[0, 0, 0, 0] = np.nan
    x[-1, -1, -1, -1] = np.inf
    x[0, -1, x.shape[2] // 2, x.shape[3] // 2] = -np.inf
    wt[1, 0, 0, -1] = np.inf
    with np.errstate(invalid="ignore", over="ignore"):
        conv = _twin(geometry, x, wt, b)
        for act, res in [(0, None), (3, np.ones_like(conv)), (1, None)]:
            want = ACTS[act][3](conv + (0 if res is None else res), 0.0, 0.0)
            got = _native_conv(geometry, x, wt, b, act, res, isa)
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
            np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
            np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
            finite = np.isfinite(want)
            assert not finite.all()
            np.testing.assert_allclose(got[finite], want[finite], rtol=1e-5, atol=1e-4)


@native_only
@pytest.mark.parametrize("case", range(len(CASES)), ids=str)
def test_depthwise_two_threads_give_one_threads_bits(case: int) -> None:
    geometry = CASES[case]
    x, wt, b = _data(geometry, seed=case + 7)
    res = np.ones_like(_twin(geometry, x, wt, b))
    for act, residual in [(0, None), (3, res), (1, None)]:
        one = _native_conv(geometry, x, wt, b, act, residual, ISAS[0], threads=1)
        two = _native_conv(geometry, x, wt, b, act, residual, ISAS[0], threads=2)
        np.testing.assert_array_equal(one, two)


@native_only
@pytest.mark.parametrize("case", [0, 6, 7, 14, 18, 20, 23], ids=lambda i: f"case{i}")
def test_depthwise_writes_nothing_past_its_output(case: int) -> None:
    """Vectors spill into the next row's cells only within a plane: the plane's last cells are
    stored alone, so a buffer lent as ``out`` keeps its neighbours (and its other planes)."""
    geometry = CASES[case]
    x, wt, b = _data(geometry, seed=case)
    want = _native_conv(geometry, x, wt, b, 3, None, ISAS[0])
    big = np.full(want.size + 64, 12345.0, np.float32)
    out = big[: want.size].reshape(want.shape)
    got = _native_conv(geometry, x, wt, b, 3, None, ISAS[0], out=out)
    assert got is out
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(big[want.size :], 12345.0)


@native_only
@pytest.mark.parametrize("case", [0, 3, 6, 9, 12, 15, 23], ids=lambda i: f"case{i}")
def test_depthwise_matches_onnxruntime(case: int) -> None:
    ort = pytest.importorskip("onnxruntime")
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    geometry = CASES[case]
    *_, s, d, p = geometry
    x, wt, b = _data(geometry, seed=case + 3)
    node = helper.make_node(
        "Conv", ["x", "w", "b"], ["y"], group=x.shape[1], strides=list(s), dilations=list(d), pads=[*p[:2], *p[2:]]
    )
    graph = helper.make_graph(
        [node],
        "dw",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(wt, "w"), numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(onnx.shape_inference.infer_shapes(model).SerializeToString(), options)
    (want,) = session.run(None, {"x": x})
    got = _native_conv(geometry, x, wt, b, 0, None, ISAS[0])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.sqrt(wt[0].size))
