"""Plan-time optimisations (issue 15 §1): each checked against the unoptimised plan.

``InferenceSession(model, optimize=False)`` compiles the plan node for node, as the model says;
the default plan folds constants, folds inference BatchNormalization into the Conv/Gemm before
it, fuses activation epilogues into convolutions and aligns constants. Results must agree to
float rounding.
"""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto
from onnx import helper as H
from onnx import numpy_helper as NH

import onnx_light
from onnx_light.onnx_core.numpy_helper import to_array
from onnx_light.runtime import InferenceSession

F = TensorProto.FLOAT


def _session(nodes: list[Any], inputs: list[Any], outputs: list[str], inits: list[Any], **kw: Any) -> InferenceSession:
    graph = H.make_graph(nodes, "g", inputs, [H.make_tensor_value_info(o, F, None) for o in outputs], inits)
    model = H.make_model(graph, opset_imports=[H.make_opsetid("", 17)])
    return InferenceSession(onnx_light.load_from_string(model.SerializeToString()), **kw)


def _both(*args: Any) -> tuple[InferenceSession, InferenceSession]:
    return _session(*args), _session(*args, optimize=False)


def _ops(sess: InferenceSession) -> list[str]:
    return [step.label for step in sess._plan.steps]


# ---------------------------------------------------------------- constants
def test_unaligned_initializers_are_copied_aligned_once() -> None:
    # (a 64 x 64 float tensor named "W" sits at an unaligned offset of its serialized model)
    w = np.arange(4096, dtype=np.float32).reshape(64, 64) / 4096
    x = H.make_tensor_value_info("X", F, [2, 64])
    y = H.make_tensor_value_info("Y", F, None)
    graph = H.make_graph([H.make_node("MatMul", ["X", "W"], ["Y"])], "g", [x], [y], [NH.from_array(w, "W")])
    model = onnx_light.load_from_string(H.make_model(graph, opset_imports=[H.make_opsetid("", 17)]).SerializeToString())
    assert not to_array(model.graph.initializer[0]).flags.aligned  # the case under test
    sess = InferenceSession(model)
    consts = [v for v in sess._plan.constants.values() if isinstance(v, np.ndarray)]
    assert consts and all(v.flags.aligned and not v.flags.writeable for v in consts)
    feed = np.random.default_rng(0).standard_normal((2, 64)).astype(np.float32)
    np.testing.assert_allclose(sess.run(None, {"X": feed})[0], feed @ w, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- profiler
def test_verbose_2_prints_a_profile_table_per_run() -> None:
    x = H.make_tensor_value_info("X", F, [2, 2])
    nodes = [H.make_node("Neg", ["X"], ["N"]), H.make_node("Neg", ["N"], ["M"]), H.make_node("Exp", ["M"], ["Y"])]
    sess = _session(nodes, [x], ["Y"], [], verbose=2)
    out = io.StringIO()
    with redirect_stdout(out):
        got = sess.run(None, {"X": np.ones((2, 2), np.float32)})
    np.testing.assert_allclose(got[0], np.e * np.ones((2, 2)), rtol=1e-6)
    text = out.getvalue()
    assert "profile" in text and "op type" in text
    rows = {line.split()[0]: line.split() for line in text.splitlines()[2:]}
    assert rows["Neg"][1] == "2" and rows["Exp"][1] == "1"
    assert sess.last_profile["Neg"][0] == 2 and sess.last_profile["Exp"][1] >= 0.0


@pytest.mark.parametrize("optimize", [True, False])
def test_optimize_flag_keeps_results(optimize: bool) -> None:
    x = H.make_tensor_value_info("X", F, [2, 2])
    sess = _session([H.make_node("Relu", ["X"], ["Y"])], [x], ["Y"], [], optimize=optimize)
    np.testing.assert_array_equal(sess.run(None, {"X": -np.ones((2, 2), np.float32)})[0], np.zeros((2, 2)))


# ---------------------------------------------------------------- BatchNormalization folding
def _bn_inits(c: int, seed: int = 0) -> list[Any]:
    r = np.random.default_rng(seed)
    return [
        NH.from_array(r.uniform(0.5, 1.5, c).astype(np.float32), "s"),
        NH.from_array(r.standard_normal(c).astype(np.float32), "t"),
        NH.from_array(r.standard_normal(c).astype(np.float32), "mu"),
        NH.from_array(r.uniform(0.5, 2.0, c).astype(np.float32), "var"),
    ]


def _bn(x: str, y: str) -> Any:
    return H.make_node("BatchNormalization", [x, "s", "t", "mu", "var"], [y], epsilon=1e-3)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("group", [1, 2])
def test_batch_norm_after_conv_is_folded_into_its_weights(bias: bool, group: int) -> None:
    r = np.random.default_rng(1)
    inits = [NH.from_array(r.standard_normal((4, 4 // group, 3, 3)).astype(np.float32), "W"), *_bn_inits(4)]
    if bias:
        inits.append(NH.from_array(r.standard_normal(4).astype(np.float32), "B"))
    conv = H.make_node("Conv", ["X", "W", "B" if bias else ""], ["c"], pads=[1, 1, 1, 1], group=group)
    nodes = [conv, _bn("c", "n"), H.make_node("Relu", ["n"], ["Y"])]
    opt, ref = _both(nodes, [H.make_tensor_value_info("X", F, [2, 4, 9, 9])], ["Y"], inits)
    assert _ops(opt) == ["Conv+BatchNormalization+Relu"]
    assert _ops(ref) == ["Conv", "BatchNormalization", "Relu"]
    x = r.standard_normal((2, 4, 9, 9)).astype(np.float32)
    np.testing.assert_allclose(opt.run(None, {"X": x})[0], ref.run(None, {"X": x})[0], rtol=1e-5, atol=1e-5)


def test_batch_norm_is_not_folded_into_a_conv_whose_output_is_read_elsewhere() -> None:
    r = np.random.default_rng(2)
    inits = [NH.from_array(r.standard_normal((4, 4, 1, 1)).astype(np.float32), "W"), *_bn_inits(4)]
    nodes = [H.make_node("Conv", ["X", "W"], ["c"]), _bn("c", "n"), H.make_node("Add", ["n", "c"], ["Y"])]
    opt, ref = _both(nodes, [H.make_tensor_value_info("X", F, [1, 4, 5, 5])], ["Y", "c"], inits)
    assert _ops(opt) == ["Conv", "BatchNormalization", "Add"]  # BN runs with s, t precomputed
    x = r.standard_normal((1, 4, 5, 5)).astype(np.float32)
    for a, b in zip(opt.run(None, {"X": x}), ref.run(None, {"X": x})):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("with_c", [True, False])
def test_batch_norm_after_gemm_is_folded(trans_b: int, with_c: bool) -> None:
    r = np.random.default_rng(3)
    w = r.standard_normal((6, 4) if trans_b else (4, 6)).astype(np.float32)
    inits = [NH.from_array(w, "W"), *_bn_inits(6, 4), NH.from_array(r.standard_normal(6).astype(np.float32), "C")]
    gemm = H.make_node("Gemm", ["X", "W", "C" if with_c else ""], ["g"], transB=trans_b, alpha=0.5, beta=2.0)
    opt, ref = _both([gemm, _bn("g", "Y")], [H.make_tensor_value_info("X", F, [3, 4])], ["Y"], inits)
    assert _ops(opt) == ["Gemm+BatchNormalization"]
    x = r.standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(opt.run(None, {"X": x})[0], ref.run(None, {"X": x})[0], rtol=1e-5, atol=1e-5)


def test_batch_norm_whose_statistics_are_fed_is_not_folded() -> None:
    r = np.random.default_rng(4)
    inits = [NH.from_array(r.standard_normal((4, 4, 1, 1)).astype(np.float32), "W"), *_bn_inits(4)]
    inputs = [H.make_tensor_value_info("X", F, [1, 4, 3, 3]), H.make_tensor_value_info("mu", F, [4])]
    nodes = [H.make_node("Conv", ["X", "W"], ["c"]), _bn("c", "Y")]
    opt, ref = _both(nodes, inputs, ["Y"], inits)  # "mu" is an input with a default: not a constant
    assert _ops(opt) == ["Conv", "BatchNormalization"]
    x, mu = r.standard_normal((1, 4, 3, 3)).astype(np.float32), np.full(4, 3.0, np.float32)
    np.testing.assert_allclose(opt.run(None, {"X": x, "mu": mu})[0], ref.run(None, {"X": x, "mu": mu})[0], rtol=1e-5)


# ---------------------------------------------------------------- constant folding
def test_shape_arithmetic_on_constants_is_folded() -> None:
    r = np.random.default_rng(5)
    inits = [NH.from_array(r.standard_normal((2, 6)).astype(np.float32), "W"), NH.from_array(np.array([0]), "i")]
    nodes = [
        H.make_node("Transpose", ["W"], ["WT"]),  # depends only on an initializer
        H.make_node("Shape", ["WT"], ["shp"]),
        H.make_node("Gather", ["shp", "i"], ["d0"]),
        H.make_node("Concat", ["d0", "d0"], ["target"], axis=0),
        H.make_node("MatMul", ["X", "WT"], ["m"]),
        H.make_node("Reshape", ["m", "target"], ["Y"]),
    ]
    opt, ref = _both(nodes, [H.make_tensor_value_info("X", F, [3, 6])], ["Y", "target"], inits)
    assert _ops(opt) == ["MatMul", "Reshape"]
    x = r.standard_normal((3, 6)).astype(np.float32)
    with pytest.raises(Exception, match="Reshape"):
        ref.run(None, {"X": x})  # a 3 x 2 result cannot be 6 x 6: both plans say so at run time
    with pytest.raises(Exception, match="Reshape"):
        opt.run(None, {"X": x})


def test_folded_values_match_and_outputs_stay_writable() -> None:
    inits = [NH.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "W")]
    nodes = [H.make_node("Transpose", ["W"], ["WT"]), H.make_node("Neg", ["WT"], ["Y"])]
    opt, ref = _both(nodes, [], ["Y"], inits)
    assert _ops(opt) == []
    a, b = opt.run(None, {})[0], ref.run(None, {})[0]
    np.testing.assert_array_equal(a, b)
    a[0, 0] = 7.0  # the caller's copy, not the plan's constant
    np.testing.assert_array_equal(opt.run(None, {})[0], b)


def test_random_ops_and_failing_kernels_are_not_folded() -> None:
    inits = [NH.from_array(np.ones((2, 2), np.float32), "A"), NH.from_array(np.ones((3, 3), np.float32), "B")]
    nodes = [H.make_node("RandomUniformLike", ["A"], ["R"]), H.make_node("Add", ["A", "B"], ["Y"])]
    opt = _session(nodes[:1], [], ["R"], inits)
    assert _ops(opt) == ["RandomUniformLike"]
    assert not np.array_equal(opt.run(None, {})[0], opt.run(None, {})[0])
    bad = _session(nodes[1:], [], ["Y"], inits)
    with pytest.raises(Exception, match="Add"):
        bad.run(None, {})


# ---------------------------------------------------------------- convolution epilogues
def _conv_chain(tail: str, shape: tuple[int, ...] = (1, 4, 12, 12), k: int = 3, group: int = 1) -> tuple[Any, ...]:
    """X -> Conv -> c, then ``tail``: the nodes after it (Y is the graph output)."""
    r = np.random.default_rng(7)
    c = shape[1]
    inits = [
        NH.from_array((r.standard_normal((c, c // group, k, k)) * 0.4).astype(np.float32), "W"),
        NH.from_array(r.standard_normal(c).astype(np.float32), "B"),
        NH.from_array(np.array(-0.25, np.float32), "lo"),
        NH.from_array(np.array(0.5, np.float32), "hi"),
    ]
    pads = [k // 2] * 4
    nodes = [H.make_node("Conv", ["X", "W", "B"], ["c"], pads=pads, group=group)]
    tails = {
        "hardswish": [H.make_node("HardSwish", ["c"], ["Y"])],
        "hardsigmoid": [H.make_node("HardSigmoid", ["c"], ["Y"], alpha=0.3, beta=0.4)],
        "clip": [H.make_node("Clip", ["c", "lo", "hi"], ["Y"])],
        "sigmoid": [H.make_node("Sigmoid", ["c"], ["Y"])],
        "silu": [H.make_node("Sigmoid", ["c"], ["s"]), H.make_node("Mul", ["c", "s"], ["Y"])],
        "add": [H.make_node("Add", ["R", "c"], ["Y"])],
        "add_relu": [H.make_node("Add", ["c", "R"], ["a"]), H.make_node("Relu", ["a"], ["Y"])],
        "add_broadcast": [H.make_node("Add", ["c", "Rb"], ["a"]), H.make_node("Relu", ["a"], ["Y"])],
    }
    nodes += tails[tail]
    inputs = [H.make_tensor_value_info("X", F, list(shape))]
    feeds = {"X": r.standard_normal(shape).astype(np.float32)}
    if "add" in tail:
        rs = (1, c, 1, 1) if tail == "add_broadcast" else shape
        name = "Rb" if tail == "add_broadcast" else "R"
        inputs.append(H.make_tensor_value_info(name, F, list(rs)))
        feeds[name] = r.standard_normal(rs).astype(np.float32)
    return nodes, inputs, inits, feeds


_FUSED = {
    "hardswish": "Conv+HardSwish",
    "hardsigmoid": "Conv+HardSigmoid",
    "clip": "Conv+Clip",
    "sigmoid": "Conv+Sigmoid",
    "silu": "Conv+Sigmoid+Mul",
    "add": "Conv+Add",
    "add_relu": "Conv+Add+Relu",
    "add_broadcast": "Conv+Add+Relu",
}


@pytest.mark.parametrize("tail", sorted(_FUSED))
@pytest.mark.parametrize("geometry", ["tiled", "depthwise", "pointwise"])
def test_conv_epilogues_are_fused_and_match_the_unoptimised_plan(tail: str, geometry: str) -> None:
    k, group = {"tiled": (3, 1), "depthwise": (3, 4), "pointwise": (1, 1)}[geometry]
    nodes, inputs, inits, feeds = _conv_chain(tail, k=k, group=group)
    opt, ref = _both(nodes, inputs, ["Y"], inits)
    assert _ops(opt) == [_FUSED[tail]]
    np.testing.assert_allclose(opt.run(None, feeds)[0], ref.run(None, feeds)[0], rtol=1e-5, atol=1e-6)


def test_epilogues_are_not_fused_across_a_value_read_elsewhere() -> None:
    nodes, inputs, inits, feeds = _conv_chain("add_relu")
    opt, ref = _both(nodes, inputs, ["Y", "a"], inits)  # the Add's output is a graph output too
    assert _ops(opt) == ["Conv+Add", "Relu"]
    for a, b in zip(opt.run(None, feeds), ref.run(None, feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_two_convolutions_feeding_one_add_fuse_it_once() -> None:
    r = np.random.default_rng(8)
    inits = [NH.from_array(r.standard_normal((4, 4, 3, 3)).astype(np.float32), n) for n in ("W1", "W2")]
    nodes = [
        H.make_node("Conv", ["X", "W1"], ["c1"], pads=[1, 1, 1, 1]),
        H.make_node("Conv", ["X", "W2"], ["c2"], pads=[1, 1, 1, 1]),
        H.make_node("Add", ["c1", "c2"], ["a"]),
        H.make_node("Relu", ["a"], ["Y"]),
    ]
    opt, ref = _both(nodes, [H.make_tensor_value_info("X", F, [1, 4, 6, 6])], ["Y"], inits)
    assert sorted(_ops(opt)) == ["Conv", "Conv+Add+Relu"]
    x = r.standard_normal((1, 4, 6, 6)).astype(np.float32)
    np.testing.assert_allclose(opt.run(None, {"X": x})[0], ref.run(None, {"X": x})[0], rtol=1e-5, atol=1e-5)


def _head(outputs: list[str]) -> tuple[Any, ...]:
    """yolo's detection head: Conv -> Reshape -> Transpose -> Reshape -> Sigmoid."""
    r = np.random.default_rng(10)
    inits = [
        NH.from_array(r.standard_normal((12, 8, 1, 1)).astype(np.float32), "W"),
        NH.from_array(r.standard_normal(12).astype(np.float32), "B"),
        NH.from_array(np.array([1, 3, 4, 36], np.int64), "s1"),
        NH.from_array(np.array([1, -1, 4], np.int64), "s2"),
    ]
    nodes = [
        H.make_node("Conv", ["X", "W", "B"], ["c"]),
        H.make_node("Reshape", ["c", "s1"], ["r1"]),
        H.make_node("Transpose", ["r1"], ["t"], perm=[0, 1, 3, 2]),
        H.make_node("Reshape", ["t", "s2"], ["r2"]),
        H.make_node("Sigmoid", ["r2"], ["Y"]),
    ]
    x = r.standard_normal((1, 8, 6, 6)).astype(np.float32)
    return _both(nodes, [H.make_tensor_value_info("X", F, [1, 8, 6, 6])], outputs, inits), {"X": x}


def test_an_activation_after_element_movers_fuses_into_the_convolution() -> None:
    (opt, ref), feeds = _head(["Y"])
    assert _ops(opt) == ["Conv+Sigmoid", "Reshape", "Transpose", "Reshape"]
    y, want = opt.run(None, feeds)[0], ref.run(None, feeds)[0]
    assert y.shape == want.shape == (1, 108, 4)
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-7)


def test_an_activation_is_not_moved_across_a_value_read_elsewhere() -> None:
    (opt, ref), feeds = _head(["Y", "t"])  # the Transpose's output is a graph output too
    assert _ops(opt) == ["Conv", "Reshape", "Transpose", "Reshape", "Sigmoid"]
    for a, b in zip(opt.run(None, feeds), ref.run(None, feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_fused_epilogues_fall_back_to_the_kernels_for_float64() -> None:
    r = np.random.default_rng(9)
    w = NH.from_array(r.standard_normal((2, 2, 3, 3)), "W")
    nodes = [H.make_node("Conv", ["X", "W"], ["c"]), H.make_node("HardSwish", ["c"], ["Y"])]
    x = H.make_tensor_value_info("X", TensorProto.DOUBLE, [1, 2, 5, 5])
    graph = H.make_graph(nodes, "g", [x], [H.make_tensor_value_info("Y", TensorProto.DOUBLE, None)], [w])
    data = H.make_model(graph, opset_imports=[H.make_opsetid("", 17)]).SerializeToString()
    opt = InferenceSession(onnx_light.load_from_string(data))
    ref = InferenceSession(onnx_light.load_from_string(data), optimize=False)
    assert _ops(opt) == ["Conv+HardSwish"]
    feed = {"X": r.standard_normal((1, 2, 5, 5))}
    got = opt.run(None, feed)[0]
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, ref.run(None, feed)[0])  # the same kernels, bit for bit


# ---------------------------------------------------------------- sums of zero-padded tiles
def _padded_sum(pads: list[list[int]], sizes: list[int], value: float = 0.0, mode: str = "constant") -> tuple:
    """``Sum(Pad(X_k, pads_k) ...)`` (the gradient of Gather slabs meeting in one Sum)."""
    xs = [H.make_tensor_value_info(f"X{k}", F, [2, n, 3]) for k, n in enumerate(sizes)]
    nodes, inits = [], []
    for k, p in enumerate(pads):
        inits.append(NH.from_array(np.array(p, np.int64), f"P{k}"))
        inits.append(NH.from_array(np.array(value, np.float32), f"V{k}"))
        nodes.append(H.make_node("Pad", [f"X{k}", f"P{k}", f"V{k}"], [f"Q{k}"], mode=mode))
    nodes.append(H.make_node("Sum", [f"Q{k}" for k in range(len(pads))], ["Y"]))
    return nodes, xs, ["Y"], inits


@pytest.mark.parametrize(
    "pads,sizes,tiles",
    [
        ([[0, 0, 0, 0, 4, 0], [0, 1, 0, 0, 3, 0], [0, 2, 0, 0, 0, 0]], [1, 1, 3], True),  # slabs of axis 1
        ([[0, 3, 0, 0, 0, 0], [0, 0, 0, 0, 2, 0]], [2, 3], True),  # out of order
        ([[0, 0, 0, 0, 1, 0], [0, 1, 0, 0, 0, 0]], [2, 1], False),  # overlapping
        ([[0, 0, 0, 0, 2, 0], [0, 3, 0, 0, 0, 0]], [1, 2], False),  # shapes that disagree
        ([[0, 1, 0, 0, 1, 0], [0, 0, 0, 0, 1, 0]], [1, 2], False),  # an overlap and a gap
        ([[0, 0, 0, 0, 1, 0], [0, 1, 0, 0, 0, 1]], [1, 1], False),  # two axes
    ],
)
def test_a_sum_of_zero_padded_tiles_is_one_step_matching_the_unoptimised_plan(
    pads: list[list[int]], sizes: list[int], tiles: bool
) -> None:
    fast, slow = _both(*_padded_sum(pads, sizes))
    assert _ops(fast) == ["Sum" + "+Pad" * len(pads)]
    rng = np.random.default_rng(0)
    feeds = {f"X{k}": rng.standard_normal((2, n, 3)).astype(np.float32) for k, n in enumerate(sizes)}
    try:
        want = slow.run(None, feeds)[0]
    except onnx_light.OnnxLightError:  # the pieces' padded shapes disagree: the same error
        assert not tiles
        with pytest.raises(onnx_light.OnnxLightError):
            fast.run(None, feeds)
        return
    got = fast.run(None, feeds)[0]
    np.testing.assert_array_equal(got, want)
    if tiles:
        order = np.argsort([p[1] for p in pads])
        np.testing.assert_array_equal(got, np.concatenate([feeds[f"X{k}"] for k in order], 1))


def test_pads_that_are_not_zero_fills_are_not_merged() -> None:
    sizes, pads = [1, 1], [[0, 0, 0, 0, 1, 0], [0, 1, 0, 0, 0, 0]]
    for kw in ({"value": 1.0}, {"mode": "edge"}):
        fast, slow = _both(*_padded_sum(pads, sizes, **kw))
        assert "Sum" in _ops(fast) and "Pad" in _ops(fast)
        feeds = {f"X{k}": np.full((2, 1, 3), k + 1.0, np.float32) for k in range(2)}
        np.testing.assert_array_equal(fast.run(None, feeds)[0], slow.run(None, feeds)[0])
