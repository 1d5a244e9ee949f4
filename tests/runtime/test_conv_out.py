"""Convolutions write into the buffer pool's arrays (``writes_out``, issue 13 §3): the native
``conv2d`` (``src/conv.cpp``, argument ``out``), the fused Conv epilogues, the one-hot Conv and
ConvTranspose that runs as a Conv. ``out`` is a hint: a wrong one is ignored, never an error."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from onnx_light import TensorProto, helper
from onnx_light.runtime import InferenceSession, _native
from onnx_light.runtime.kernels.conv import USING_NATIVE, conv, conv_epilogue, conv_relu, conv_transpose

_RNG = np.random.default_rng(0)


def _f32(*shape: int) -> np.ndarray:
    return _RNG.standard_normal(shape).astype(np.float32)


def _one_hot(c: int) -> np.ndarray:
    w = np.zeros((c * 9, 1, 3, 3), np.float32)  # the Conv gradient's im2col: tap k of channel j
    for j in range(c):
        for k in range(9):
            w[j * 9 + k, 0, k // 3, k % 3] = 1
    return w


_X = _f32(2, 8, 20, 20)
_W64 = _f32(64, 64, 3, 3)
_W64.flags.writeable = False  # read-only weights keep their Winograd transform (kernels/conv.py)
_CASES: list[tuple[str, Any, tuple[Any, ...], dict[str, Any], bool]] = [
    # id, kernel, args, attributes, whether the native kernel (else numpy copies) writes out
    ("3x3", conv, (_X, _f32(16, 8, 3, 3), _f32(16)), {"pads": [1, 1, 1, 1]}, True),
    ("winograd", conv, (_f32(1, 64, 28, 28), _W64, None), {"pads": [1, 1, 1, 1]}, True),
    ("5x5-stride2", conv, (_X, _f32(16, 8, 5, 5), None), {"strides": [2, 2]}, True),
    ("1-D", conv, (_f32(2, 8, 50), _f32(16, 8, 3), _f32(16)), {"pads": [1, 1]}, True),
    ("relu", conv_relu, (_X, _f32(16, 4, 3, 3), _f32(16)), {"group": 2, "pads": [1, 1, 1, 1]}, True),
    ("epilogue", conv_epilogue, (_X, _f32(8, 8, 3, 3), None, _f32(2, 8, 20, 20), 1, 0.0, 0.0), {"pads": [1] * 4}, True),
    ("one-hot", conv, (_X[:, :1], _one_hot(1), None), {"group": 1, "pads": [1, 1, 1, 1]}, False),
    ("transpose", conv_transpose, (_X, _f32(8, 16, 3, 3), _f32(16)), {"pads": [1, 1, 1, 1]}, True),
]


@pytest.mark.parametrize(("fn", "args", "kwargs", "native"), [c[1:] for c in _CASES], ids=[c[0] for c in _CASES])
def test_a_conv_writes_into_a_lent_array_of_its_exact_type_only(fn, args, kwargs, native) -> None:  # type: ignore[no-untyped-def]
    want = fn(*args, **kwargs)
    if want is None:
        pytest.skip("conv_epilogue without the native conv: the plan runs Conv and the fused nodes' kernels")
    out = np.full(want.shape, 7, want.dtype)
    got = fn(*args, **kwargs, out=out)
    np.testing.assert_array_equal(got, want)  # bitwise: the same kernel, only the memory differs
    if native and not USING_NATIVE:
        assert got is not out  # the numpy twin allocates (and leaves out alone)
        np.testing.assert_array_equal(out, 7)
    else:
        assert got is out
    wrong = [
        np.empty((1, *want.shape), want.dtype),  # another shape
        np.empty(want.shape, np.float64),  # another dtype
        np.empty((*want.shape[:-1], 2 * want.shape[-1]), want.dtype)[..., ::2],  # not C-contiguous
    ]
    readonly = np.empty(want.shape, want.dtype)
    readonly.flags.writeable = False
    for other in [*wrong, readonly]:
        before = other.copy()
        got = fn(*args, **kwargs, out=other)
        assert got is not other
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(other, before)


@pytest.mark.skipif(not _native.CONV2D, reason="no native conv2d on this machine")
def test_native_conv2d_ignores_an_out_that_overlaps_an_input() -> None:
    ext = _native.NATIVE
    assert ext is not None
    x = _f32(1, 4, 10, 10)
    w = _f32(4, 4, 1, 1)
    args = (0, 0, 0, 0, 1, False)  # pads, group, relu
    want = ext.conv2d(x.copy(), w, None, 1, 1, 1, 1, *args)
    got = ext.conv2d(x, w, None, 1, 1, 1, 1, *args, out=x)  # out is x itself: would read what it wrote
    assert got is not x
    np.testing.assert_array_equal(got, want)
    residual = _f32(1, 4, 10, 10)
    got = ext.conv2d(x, w, None, 1, 1, 1, 1, *args, residual=residual, out=residual)
    assert got is not residual
    fresh = np.empty_like(want)
    assert ext.conv2d(x, w, None, 1, 1, 1, 1, *args, out=fresh) is fresh
    np.testing.assert_array_equal(fresh, want)


def _conv_net() -> Any:
    """x -> Conv+Relu -> Conv (+ x) -> Relu -> ConvTranspose -> ReduceSum: 256 KiB intermediates."""
    c = 16
    weights = {n: _f32(c, c, 3, 3) * 0.2 for n in ("w1", "w2", "w3")}
    init = [helper.make_tensor(n, TensorProto.FLOAT, list(v.shape), v.ravel()) for n, v in weights.items()]
    pads = [1, 1, 1, 1]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=pads),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=pads),
        helper.make_node("Add", ["c2", "x"], ["s"]),
        helper.make_node("Relu", ["s"], ["r2"]),
        helper.make_node("ConvTranspose", ["r2", "w3"], ["t"], pads=pads),
        helper.make_node("Mul", ["t", "r1"], ["m"]),
        helper.make_node("ReduceSum", ["m"], ["out"], keepdims=0),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", c, 32, 32])
    y = helper.make_tensor_value_info("out", TensorProto.FLOAT, None)
    r = helper.make_tensor_value_info("r1", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "g", [x], [y, r], init)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def test_pooled_conv_outputs_agree_bitwise_and_returned_results_stay() -> None:
    model = _conv_net()
    pooled, plain = InferenceSession(model), InferenceSession(model, buffer_pool=False)
    kept: list[tuple[np.ndarray, np.ndarray]] = []
    for seed, n in [(0, 8), (1, 8), (2, 8), (3, 4), (4, 8)]:
        x = np.random.default_rng(seed).standard_normal((n, 16, 32, 32)).astype(np.float32)
        got, want = pooled.run(None, {"x": x}), plain.run(None, {"x": x})
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
        kept.append((got[1], got[1].copy()))  # r1, a conv output returned to the caller
        for result, copy in kept:
            np.testing.assert_array_equal(result, copy)  # never overwritten by a later run
    arenas = pooled._plan.arenas
    assert arenas is not None, "nothing was pooled: the test would not test the pool"
    names = {s: n for n, s in pooled._plan.slot_of.items()}
    assert {"r2", "t"} <= {names[s] for s in arenas.index}  # the fused epilogue's and ConvTranspose's outputs
