"""The native convolution on several threads: the same bits as on one, from the kernel and
from an ``InferenceSession`` asked for ``intra_op_num_threads`` (or onnxruntime's spelling)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from test_native import CONV_CASES, _require_conv2d

from onnx_light import TensorProto, helper, numpy_helper
from onnx_light.runtime import InferenceSession, _native


def _conv(case: tuple, isa: str, threads: int, act: int = 0, residual: bool = False) -> np.ndarray:
    n, c, h, w, m, k, s, d, p, g = case
    rng = np.random.default_rng(c * 31 + m)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((m, c // g, *k)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    out = [(h + p[0] + p[2] - (k[0] - 1) * d[0] - 1) // s[0] + 1, (w + p[1] + p[3] - (k[1] - 1) * d[1] - 1) // s[1] + 1]
    res = rng.standard_normal((n, m, *out)).astype(np.float32) if residual else None
    conv2d = _native.EXTENSION.conv2d  # type: ignore[union-attr]
    return conv2d(x, wt, b, *s, *d, *p, g, False, isa, act, 0.3, 0.45, res, threads=threads)


@pytest.mark.parametrize("case", CONV_CASES, ids=[str(i) for i in range(len(CONV_CASES))])
@pytest.mark.parametrize("isa", ["avx512", "avx2"])
def test_threads_give_the_bits_of_one_thread(case: tuple, isa: str) -> None:
    """Every output element is computed by the same operations whichever thread runs it."""
    _require_conv2d(isa)
    one = _conv(case, isa, 1)
    for threads in (2, 3):
        np.testing.assert_array_equal(_conv(case, isa, threads), one)


@pytest.mark.parametrize("case", [0, 12, 19, 25, 27], ids=lambda i: f"case{i}")
@pytest.mark.parametrize("act", [1, 3, 5])
def test_threads_keep_the_epilogue(case: int, act: int) -> None:
    _require_conv2d("avx2")
    one = _conv(CONV_CASES[case], "", 1, act, residual=True)
    np.testing.assert_array_equal(_conv(CONV_CASES[case], "", 2, act, residual=True), one)


def test_threads_argument_is_checked() -> None:
    _require_conv2d("avx2")
    with pytest.raises(ValueError, match="threads"):
        _conv(CONV_CASES[0], "", 0)


def _conv_model() -> Any:
    rng = np.random.default_rng(5)
    w1 = numpy_helper.from_array(rng.standard_normal((24, 8, 3, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((24, 1, 3, 3)).astype(np.float32), "w2")
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Conv", ["r", "w2"], ["y"], pads=[1, 1, 1, 1], group=24, strides=[2, 2]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8, 40, 40])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[w1, w2],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


class _Options:
    intra_op_num_threads = 2


def test_session_threads_option() -> None:
    """intra_op_num_threads (or sess_options.intra_op_num_threads) runs the convolutions on
    that many threads with the same results; the default is one thread."""
    m = _conv_model()
    x = np.random.default_rng(1).standard_normal((2, 8, 40, 40)).astype(np.float32)
    one = InferenceSession(m)
    assert one.intra_op_num_threads == 1
    want = one.run(None, {"x": x})[0]
    for sess in (InferenceSession(m, intra_op_num_threads=2), InferenceSession(m, sess_options=_Options())):
        assert sess.intra_op_num_threads == 2
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], want)
    assert _native.CONV_THREADS.get() == 1  # restored after each run


def test_session_threads_reach_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """The session's thread count is the kernel's while it runs (and large convolutions get it)."""
    _require_conv2d("avx2")
    if not _native.CONV2D:
        pytest.skip("the pure-Python twins run: no native convolution to reach")
    seen: list[int] = []
    real = _native.NATIVE.conv2d  # type: ignore[union-attr]

    class Recorder:
        def __getattr__(self, name: str) -> Any:
            return getattr(_native.EXTENSION, name)

        @staticmethod
        def conv2d(*args: Any, threads: int = 1, **kwargs: Any) -> Any:
            seen.append(threads)
            return real(*args, threads=threads, **kwargs)

    monkeypatch.setattr(_native, "NATIVE", Recorder())
    x = np.random.default_rng(1).standard_normal((2, 8, 40, 40)).astype(np.float32)
    InferenceSession(_conv_model(), intra_op_num_threads=2).run(None, {"x": x})
    assert seen and seen[0] == 2  # the 2 x 24 x 72 x 1600 multiply-adds of the first Conv


def _winograd_ext() -> Any:
    ext = _native.EXTENSION
    if ext is None or not hasattr(ext, "conv2d_winograd_weights") or ext.conv2d_default_isa() != "avx2":
        pytest.skip("the native Winograd kernel runs where conv2d's default kernel is AVX2 only")
    return ext


# n, c, h, m: one tile block (14 x 14, the output channels split over the threads), three
# blocks and a sliver (28 x 28 at 128 -> 128), a batch of two, channels no multiple of 6
WINOGRAD_SPLITS = [(1, 256, 14, 256), (1, 128, 28, 128), (2, 64, 14, 70), (1, 96, 13, 100)]


@pytest.mark.parametrize("case", WINOGRAD_SPLITS, ids=[str(c) for c in WINOGRAD_SPLITS])
def test_winograd_threads_give_the_bits_of_one_thread(case: tuple) -> None:
    """Winograd blocks split by output channels when there are few: each channel's sums are
    the same operations whichever worker (and chunk) computes them; with the fused epilogue."""
    ext = _winograd_ext()
    n, c, h, m = case
    rng = np.random.default_rng(c + m)
    x = rng.standard_normal((n, c, h, h)).astype(np.float32)
    wt = (rng.standard_normal((m, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    res = rng.standard_normal((n, m, h, h)).astype(np.float32)
    u = ext.conv2d_winograd_weights(wt)
    assert ext.conv2d_winograd_applies(c, h, h, m, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, n, True)
    args = (x, wt, b, 1, 1, 1, 1, 1, 1, 1, 1, 1, False, "avx2", 5, 0.0, 0.0, res)
    one = ext.conv2d(*args, winograd=u, threads=1)
    for threads in (2, 3, 5):
        np.testing.assert_array_equal(ext.conv2d(*args, winograd=u, threads=threads), one)


@pytest.mark.parametrize("where", ["first plane", "last plane", "last weights"])
def test_winograd_threads_find_non_finite_values(where: str) -> None:
    """The threaded check for infinities (each worker its planes and weight chunks) sends the
    convolution to the direct sum as the one-thread check does: the same NaNs, the same bits."""
    ext = _winograd_ext()
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 100, 14, 14)).astype(np.float32)
    wt = (rng.standard_normal((90, 100, 3, 3)) / 30).astype(np.float32)  # 81,000 weights: two chunks
    if where == "first plane":
        x[0, 0, 0, 0] = np.inf
    elif where == "last plane":
        x[0, -1, -1, -1] = np.nan
    else:
        wt[-1, -1, -1, -1] = -np.inf
    args = (x, wt, None, 1, 1, 1, 1, 1, 1, 1, 1, 1, False, "avx2")
    one = ext.conv2d(*args, threads=1)
    assert np.isnan(one).any() or np.isinf(one).any()
    for threads in (2, 3):
        np.testing.assert_array_equal(ext.conv2d(*args, threads=threads), one)


# small maps with many weight rows (ResNet's 7 x 7 and 14 x 14 stages): the weight rows split
# over the threads, the panels packed once by a first pass and shared (TiledPlan::shared);
# n, c, h, w, m, kernel, strides, dilations, pads, group, like CONV_CASES
SHARED_PACK_CASES = [
    (1, 256, 7, 7, 128, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),
    (1, 64, 14, 14, 96, (1, 1), (2, 2), (1, 1), (0, 0, 0, 0), 1),
    (2, 32, 9, 9, 50, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 1),
    (1, 300, 6, 6, 40, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 1),
    (1, 3, 16, 16, 64, (7, 7), (2, 2), (1, 1), (3, 3, 3, 3), 1),
]


@pytest.mark.parametrize("case", SHARED_PACK_CASES, ids=[str(i) for i in range(len(SHARED_PACK_CASES))])
def test_shared_panels_give_the_bits_of_one_thread(case: tuple) -> None:
    _require_conv2d("avx2")
    one = _conv(case, "", 1, 1, residual=True)
    for threads in (2, 3, 4):
        np.testing.assert_array_equal(_conv(case, "", threads, 1, residual=True), one)
