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
    one = InferenceSession(m, intra_op_num_threads=1)
    assert InferenceSession(m).intra_op_num_threads == _native.DEFAULT_THREADS  # 1 unless ONNX_LIGHT_THREADS
    want = one.run(None, {"x": x})[0]
    for sess in (InferenceSession(m, intra_op_num_threads=2), InferenceSession(m, sess_options=_Options())):
        assert sess.intra_op_num_threads == 2
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], want)
    assert _native.CONV_THREADS.get() == _native.DEFAULT_THREADS  # restored after each run


@pytest.mark.parametrize("env, want", [(None, 1), ("2", 2), ("0", 1), ("x", 1), ("99", 64)])
def test_threads_environment_sets_the_default(env: str | None, want: int) -> None:
    """ONNX_LIGHT_THREADS gives sessions not told a count (and kernels outside sessions) their
    threads: how the kernel test files run at 2 threads; 1 when unset or not a positive integer."""
    import os
    import subprocess
    import sys

    code = (
        "from onnx_light.runtime import InferenceSession, _native\n"
        "from onnx_light import helper, TensorProto\n"
        "g = helper.make_graph([helper.make_node('Relu', ['x'], ['y'])], 'g',"
        " [helper.make_tensor_value_info('x', TensorProto.FLOAT, [1])],"
        " [helper.make_tensor_value_info('y', TensorProto.FLOAT, [1])])\n"
        "print(InferenceSession(helper.make_model(g)).intra_op_num_threads, _native.CONV_THREADS.get())\n"
    )
    environ = {k: v for k, v in os.environ.items() if k != "ONNX_LIGHT_THREADS"}
    if env is not None:
        environ["ONNX_LIGHT_THREADS"] = env
    out = subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(want), str(want)]


def _geometries_model() -> tuple[Any, list[str]]:
    """One Conv per threaded path of the native kernel, side by side on one input each: the tiled
    GEMM (3x3/1, 3x3/2, 1x1, 1x1/2, a 7x7/2 stem, grouped), Winograd (64 -> 64 at 28 x 28), a
    7 x 7 map of 256 -> 256 (one-thread BLAS under the AVX-512 policy before), depthwise 3x3/1 and
    5x5/2 with an activation; then MaxPool, Sigmoid and a Concat over the threaded outputs."""
    rng = np.random.default_rng(11)
    convs = [  # name, input (c, h, w), weights (m, c/g, kh, kw), attributes, activation
        ("t3", (16, 30, 30), (24, 16, 3, 3), {"pads": [1, 1, 1, 1]}, "Relu"),
        ("t3s2", (16, 30, 30), (32, 16, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}, ""),
        ("p1", (32, 20, 20), (40, 32, 1, 1), {}, "Sigmoid"),
        ("p1s2", (32, 20, 20), (40, 32, 1, 1), {"strides": [2, 2]}, ""),
        ("stem", (3, 64, 64), (16, 3, 7, 7), {"pads": [3, 3, 3, 3], "strides": [2, 2]}, "Relu"),
        ("grp", (32, 16, 16), (32, 8, 3, 3), {"pads": [1, 1, 1, 1], "group": 4}, ""),
        ("wino", (64, 28, 28), (64, 64, 3, 3), {"pads": [1, 1, 1, 1]}, "Relu"),
        ("small", (256, 7, 7), (256, 256, 3, 3), {"pads": [1, 1, 1, 1]}, "Relu"),
        ("dw3", (48, 28, 28), (48, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 48}, "HardSwish"),
        ("dw5s2", (48, 28, 28), (48, 1, 5, 5), {"pads": [2, 2, 2, 2], "group": 48, "strides": [2, 2]}, ""),
    ]
    nodes, inputs, inits, outputs = [], [], [], []
    for name, cin, wshape, attrs, act in convs:
        inputs.append(helper.make_tensor_value_info(f"x_{name}", TensorProto.FLOAT, [1, *cin]))
        inits.append(numpy_helper.from_array((rng.standard_normal(wshape) * 0.2).astype(np.float32), f"w_{name}"))
        inits.append(numpy_helper.from_array(rng.standard_normal(wshape[0]).astype(np.float32), f"b_{name}"))
        nodes.append(helper.make_node("Conv", [f"x_{name}", f"w_{name}", f"b_{name}"], [f"c_{name}"], **attrs))
        out = f"c_{name}"
        if act:
            nodes.append(helper.make_node(act, [out], [f"y_{name}"]))
            out = f"y_{name}"
        outputs.append(out)
    nodes.append(
        helper.make_node("MaxPool", ["y_t3"], ["pool"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    )
    nodes.append(helper.make_node("Sigmoid", ["c_t3s2"], ["sig"]))
    nodes.append(helper.make_node("Concat", ["pool", "sig"], ["cat"], axis=1))
    outputs += ["pool", "cat"]
    graph = helper.make_graph(
        nodes, "g", inputs, [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs], inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), outputs


def test_model_geometries_two_threads_match_one_and_onnxruntime() -> None:
    """Every threaded conv path and the threaded pooling/Sigmoid in one model: 2 threads give the
    bits of 1 thread (both through the buffer pool's second run), and both agree with onnxruntime."""
    m, outputs = _geometries_model()
    rng = np.random.default_rng(12)
    feeds = {
        i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
        for i in m.graph.input
    }
    one, two = InferenceSession(m, intra_op_num_threads=1), InferenceSession(m, intra_op_num_threads=2)
    for _ in range(2):  # the first run observes, the second runs the generated function with the pool
        want = one.run(None, feeds)
        got = two.run(None, feeds)
        for name, a, b in zip(outputs, got, want):
            np.testing.assert_array_equal(a, b, err_msg=name)
    ort = pytest.importorskip("onnxruntime")
    import onnx

    sess = ort.InferenceSession(
        onnx.load_from_string(m.SerializeToString()).SerializeToString(), providers=["CPUExecutionProvider"]
    )
    for name, a, b in zip(outputs, got, sess.run(None, feeds)):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-4 * max(1.0, float(np.abs(b).max())), err_msg=name)


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
