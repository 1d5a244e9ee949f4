"""The native Winograd F(2x2, 3x3) convolution (src/conv_winograd.cpp) against the numpy twin
in float64, the runtime's cache of transformed weights (runtime/kernels/conv.py), and the strided
large-window convolutions read from phase planes (src/conv.h)."""

from __future__ import annotations

import numpy as np
import pytest

from onnx_light.runtime import _native
from onnx_light.runtime.kernels import conv as K

# n, c, h, w, m, pads (top, left, bottom, right): odd and even output sizes (a last tile of one
# row or column), pads 0, 1, 2 and asymmetric, batches, channels no multiple of the 6 x 16 tile,
# two reduction blocks (c > 256), several tile blocks per sample, the fewest tiles taken (7 x 7)
WINOGRAD_CASES = [
    (1, 64, 13, 15, 64, (1, 1, 1, 1)),
    (2, 65, 9, 11, 70, (1, 1, 1, 1)),
    (1, 64, 16, 16, 67, (0, 0, 0, 0)),
    (3, 64, 13, 5, 64, (2, 2, 2, 2)),
    (1, 80, 16, 23, 66, (0, 2, 1, 0)),
    (1, 300, 14, 14, 64, (1, 1, 1, 1)),
    (2, 64, 40, 37, 64, (1, 1, 1, 1)),
    (1, 64, 30, 30, 100, (1, 0, 1, 0)),
    (1, 64, 20, 20, 70, (1, 1, 1, 1)),  # 100 tiles: AVX-512's 16 x 16 tile
]


def _ext():  # noqa: ANN202
    ext = _native.EXTENSION
    if ext is None or not hasattr(ext, "conv2d_winograd_weights"):
        pytest.skip("the native extension (with the Winograd kernel) is not built")
    if getattr(ext, "conv2d_default_isa", ext.conv2d_isa)() != "avx2":
        pytest.skip("the Winograd kernel runs where conv2d's default kernel is AVX2 only")
    return ext


def _isas(ext) -> list[str]:  # noqa: ANN001
    """The drivers that run Winograd here: AVX2's, and AVX-512's tile where the CPU has it."""
    return ["avx2", "avx512"] if ext.conv2d_isa() == "avx512" else ["avx2"]


def _data(case: tuple, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n, c, h, w, m, _ = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = (rng.standard_normal((m, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    return x, wt, rng.standard_normal(m).astype(np.float32)


def _want(x: np.ndarray, wt: np.ndarray, b: np.ndarray | None, pads: tuple) -> np.ndarray:
    f64 = np.float64
    bias = None if b is None else b.astype(f64)
    return K._conv_im2col(x.astype(f64), wt.astype(f64), bias, [1, 1], [1, 1], list(pads[:2]), list(pads[2:]), 1)


def _close(got: np.ndarray, want: np.ndarray) -> None:
    # float32 rounding only: the direct float32 sum is off by the same order (about 1e-7 of the largest value)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6 * np.abs(want).max())


@pytest.mark.parametrize("case", WINOGRAD_CASES, ids=[str(i) for i in range(len(WINOGRAD_CASES))])
def test_winograd_matches_float64_twin(case: tuple) -> None:
    ext = _ext()
    x, wt, b = _data(case, seed=sum(case[:5]))
    pads = case[5]
    assert ext.conv2d_winograd_applies(case[1], case[2], case[3], case[4], 3, 3, 1, 1, 1, 1, *pads, 1, case[0], True)
    u = ext.conv2d_winograd_weights(wt)
    assert u.shape == (16, case[4], case[1]) and u.dtype == np.float32
    want = _want(x, wt, b, pads)
    for isa in _isas(ext):
        got = ext.conv2d(x, wt, b, 1, 1, 1, 1, *pads, 1, False, isa, winograd=u)
        _close(got, want)
        # transformed per call (or the tiled kernel, as the geometry decides): the same values
        _close(ext.conv2d(x, wt, b, 1, 1, 1, 1, *pads, 1, False, isa), want)
        two = ext.conv2d(x, wt, b, 1, 1, 1, 1, *pads, 1, False, isa, winograd=u, threads=2)
        np.testing.assert_array_equal(two, got)  # blocks are independent: threads change nothing


# act codes of src/conv.h with numpy formulas
ACTS = {
    1: lambda v: np.maximum(v, 0),
    2: lambda v: np.clip(v, -0.5, 0.7),
    3: lambda v: v * np.clip(v / 6 + 0.5, 0, 1),
    4: lambda v: np.clip(0.2 * v + 0.5, 0, 1),
    5: lambda v: v / (1 + np.exp(-v)),
    6: lambda v: 1 / (1 + np.exp(-v)),
}
ACT_ARGS = {1: (0.0, 0.0), 2: (-0.5, 0.7), 3: (0.0, 0.0), 4: (0.2, 0.5), 5: (0.0, 0.0), 6: (0.0, 0.0)}


@pytest.mark.parametrize("act", sorted(ACTS))
@pytest.mark.parametrize("residual", [False, True])
def test_winograd_epilogues(act: int, residual: bool) -> None:
    ext = _ext()
    case = WINOGRAD_CASES[1]
    x, wt, b = _data(case, seed=act)
    pads = case[5]
    want = _want(x, wt, b, pads)
    res = np.random.default_rng(act).standard_normal(want.shape).astype(np.float32) if residual else None
    want = ACTS[act](want + (0 if res is None else res))
    u = ext.conv2d_winograd_weights(wt)
    for isa in _isas(ext):
        got = ext.conv2d(x, wt, b, 1, 1, 1, 1, *pads, 1, False, isa, act, *ACT_ARGS[act], res, winograd=u)
        _close(got, want)


def test_winograd_rejects_mismatched_weights() -> None:
    ext = _ext()
    x, wt, b = _data(WINOGRAD_CASES[0], seed=0)
    u = ext.conv2d_winograd_weights(wt)
    with pytest.raises(ValueError, match="Winograd"):
        ext.conv2d(x, wt, b, 1, 1, 1, 1, 1, 1, 1, 1, 1, False, "avx2", winograd=u[:, :8].copy())
    with pytest.raises(ValueError, match="3 x 3"):
        ext.conv2d_winograd_weights(np.zeros((4, 4, 5, 5), np.float32))


def test_runtime_caches_immutable_weights_only() -> None:
    _ext()
    if not _native.CONV2D or _native.CONV_ISA != "avx2":
        pytest.skip("the runtime does not run the AVX2 kernel here")
    case = WINOGRAD_CASES[6]
    x, wt, b = _data(case, seed=1)
    pads = list(case[5])
    # writeable weights: never cached, and a change between calls is seen
    assert K.winograd_weights(x, wt, [1, 1], [1, 1], pads[:2], pads[2:], 1) is None
    _close(K.conv(x, wt, b, pads=pads), _want(x, wt, b, case[5]))
    wt *= 2
    _close(K.conv(x, wt, b, pads=pads), _want(x, wt, b, case[5]))
    view = wt.view()
    view.flags.writeable = False  # read-only, but its base can change
    assert K.winograd_weights(x, view, [1, 1], [1, 1], pads[:2], pads[2:], 1) is None
    # read-only weights (a session's initializers): transformed once
    frozen = wt.copy()
    frozen.flags.writeable = False
    u = K.winograd_weights(x, frozen, [1, 1], [1, 1], pads[:2], pads[2:], 1)
    assert u is not None and K.winograd_weights(x, frozen, [1, 1], [1, 1], pads[:2], pads[2:], 1) is u
    _close(K.conv(x, frozen, b, pads=pads), _want(x, frozen, b, case[5]))
    _close(K.conv_relu(x, frozen, b, pads=pads), np.maximum(_want(x, frozen, b, case[5]), 0))
    key = id(frozen)
    del frozen
    assert key not in K._WINOGRAD  # dropped with the weights
    # float64 and other geometries: no transform (numpy, or the tiled kernel)
    x64, w64 = x.astype(np.float64), wt.astype(np.float64)
    w64.flags.writeable = False
    assert K.winograd_weights(x64, w64, [1, 1], [1, 1], pads[:2], pads[2:], 1) is None
    other = wt.copy()
    other.flags.writeable = False
    assert K.winograd_weights(x, other, [2, 2], [1, 1], pads[:2], pads[2:], 1) is None


def test_session_matches_onnxruntime() -> None:
    """A 3 x 3 Conv + Relu and a residual Conv + Add in our session (weights cached) and in onnxruntime."""
    _ext()
    ort = pytest.importorskip("onnxruntime")
    helper = pytest.importorskip("onnx.helper")
    numpy_helper = pytest.importorskip("onnx.numpy_helper")
    from onnx import TensorProto

    from onnx_light.runtime import InferenceSession

    rng = np.random.default_rng(5)
    w1 = (rng.standard_normal((72, 64, 3, 3)) / 24).astype(np.float32)
    w2 = (rng.standard_normal((64, 72, 3, 3)) / 25).astype(np.float32)
    b1, b2 = rng.standard_normal(72).astype(np.float32), rng.standard_normal(64).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "x"], ["y"]),
    ]
    inits = [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (w2, "w2"), (b1, "b1"), (b2, "b2"))]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64, 15, 18])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    x = rng.standard_normal((2, 64, 15, 18)).astype(np.float32)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    sess = InferenceSession(model)
    for _ in range(2):  # the second run reads the cached transforms
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-4, atol=1e-5)
    if _native.CONV2D and _native.CONV_ISA == "avx2":  # not with ONNX_LIGHT_PURE_PYTHON=1
        assert sum(entry[2] is not None for entry in K._WINOGRAD.values()) >= 2  # both took Winograd


# The strided large-window convolutions read in place from phase planes (src/conv.h PhasePlanes):
# n, c, h, w, m, kernel, strides, dilations, pads (top, left, bottom, right), group. Strides 2
# and 3 per axis, dilation 2, asymmetric pads, groups, two reduction blocks (K = 392), output
# rows longer and shorter than a panel, a batch.
PHASE_CASES = [
    (2, 3, 23, 29, 10, (7, 7), (2, 2), (1, 1), (3, 3, 3, 3), 1),
    (1, 4, 30, 31, 6, (7, 7), (3, 2), (1, 1), (2, 3, 1, 0), 2),
    (1, 2, 40, 40, 7, (7, 7), (2, 3), (2, 1), (0, 1, 2, 3), 1),
    (1, 3, 50, 70, 64, (7, 7), (2, 2), (1, 1), (3, 3, 3, 3), 1),
    (1, 8, 30, 30, 9, (7, 7), (2, 2), (1, 1), (3, 3, 3, 3), 1),
    (2, 3, 37, 45, 13, (7, 9), (2, 2), (1, 1), (3, 4, 3, 4), 1),
]


@pytest.mark.parametrize("case", PHASE_CASES, ids=[str(i) for i in range(len(PHASE_CASES))])
@pytest.mark.parametrize("relu", [False, True])
def test_strided_large_windows_match_float64_twin(case: tuple, relu: bool) -> None:
    ext = _ext()
    n, c, h, w, m, k, s, d, p, g = case
    rng = np.random.default_rng(h * w)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = (rng.standard_normal((m, c // g, *k)) / np.sqrt(c * k[0] * k[1])).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    f64 = np.float64
    want = K._conv_im2col(x.astype(f64), wt.astype(f64), b.astype(f64), list(s), list(d), list(p[:2]), list(p[2:]), g)
    if relu:
        want = np.maximum(want, 0)
    got = ext.conv2d(x, wt, b, *s, *d, *p, g, relu, "avx2")
    _close(got, want)


@pytest.mark.parametrize("where", ["input", "weights"])
def test_non_finite_values_stay_where_the_direct_sum_puts_them(where: str) -> None:
    """An infinity or NaN must not spread through the transforms' sums: such convolutions take
    the direct sum (an infinity in a tile's window would become NaN, a NaN reach its neighbours)."""
    ext = _ext()
    case = WINOGRAD_CASES[0]
    x, wt, b = _data(case, seed=7)
    if where == "input":
        x[0, 3, 5, 6], x[0, 10, 8, 2] = np.inf, np.nan
    else:
        wt[5, 3, 1, 1], wt[9, 2, 0, 2] = -np.inf, np.nan
    pads = case[5]
    f64 = np.float64
    with np.errstate(invalid="ignore"):
        want = K._conv_im2col(x.astype(f64), wt.astype(f64), b.astype(f64), [1, 1], [1, 1], [1, 1], [1, 1], 1)
    runs = [ext.conv2d(x, wt, b, 1, 1, 1, 1, *pads, 1, False, isa) for isa in _isas(ext)]
    if where == "input":  # non-finite weights have no transform (test_winograd_weights_refuses_non_finite)
        u = ext.conv2d_winograd_weights(wt)
        runs += [ext.conv2d(x, wt, b, 1, 1, 1, 1, *pads, 1, False, isa, winograd=u) for isa in _isas(ext)]
    for got in runs:
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
        finite = np.isfinite(want)
        np.testing.assert_allclose(got[finite], want[finite], rtol=1e-5, atol=1e-5)
    if where == "weights":  # the runtime keeps no transform of them
        frozen = wt.copy()
        frozen.flags.writeable = False
        assert K.winograd_weights(x, frozen, [1, 1], [1, 1], [1, 1], [1, 1], 1) is None


def test_winograd_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    ext = _ext()
    case = WINOGRAD_CASES[0]
    args = (case[1], case[2], case[3], case[4], 3, 3, 1, 1, 1, 1, *case[5], 1, case[0], True)
    assert ext.conv2d_winograd_applies(*args)
    monkeypatch.setenv("ONNX_LIGHT_CONV_WINOGRAD", "0")
    assert not ext.conv2d_winograd_applies(*args)
    x, wt, b = _data(case, seed=3)
    got = ext.conv2d(x, wt, b, 1, 1, 1, 1, *case[5], 1, False, "avx2", winograd=ext.conv2d_winograd_weights(wt))
    _close(got, _want(x, wt, b, case[5]))


def test_winograd_weights_refuses_non_finite() -> None:
    """conv2d does not re-check the weights behind a given transform (every call used to re-read
    all of them), so the transform is only made of finite weights: an infinity would turn into
    NaNs where the direct sum gives an infinity."""
    ext = _ext()
    _, wt, _ = _data(WINOGRAD_CASES[0], seed=0)
    for bad in (np.inf, -np.inf, np.nan):
        w = wt.copy()
        w[0, 0, 1, 1] = bad
        with pytest.raises(ValueError, match="infinity or a NaN"):
            ext.conv2d_winograd_weights(w)
