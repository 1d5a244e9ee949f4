"""Conv steps prepared at plan time (``kernels/conv.py`` ``PreparedConv``, issue 15 §1): the
native call's arguments worked out once per input shape give the very bits of the general
kernels (``conv`` / ``conv_epilogue``), and every call they do not cover is left to those."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from onnx_light import TensorProto, helper, numpy_helper
from onnx_light.runtime import InferenceSession
from onnx_light.runtime.kernels import conv as conv_module
from onnx_light.runtime.kernels.conv import USING_NATIVE, conv, conv_epilogue, prepare_conv

_RNG = np.random.default_rng(5)


def _f32(*shape: int, frozen: bool = False) -> np.ndarray:
    a = _RNG.standard_normal(shape).astype(np.float32)
    a.flags.writeable = not frozen
    return a


# id, input shape, weights shape, attributes: the layer classes of the real models
_GEOMETRIES: list[tuple[str, tuple[int, ...], tuple[int, ...], dict[str, Any]]] = [
    ("se-1x1-on-1x1", (1, 24, 1, 1), (96, 24, 1, 1), {}),
    ("pointwise", (1, 40, 14, 14), (240, 40, 1, 1), {}),
    ("depthwise-3x3-s2", (1, 16, 28, 28), (16, 1, 3, 3), {"group": 16, "strides": [2, 2], "pads": [1] * 4}),
    ("depthwise-5x5", (1, 48, 7, 7), (48, 1, 5, 5), {"group": 48, "pads": [2] * 4}),
    ("winograd-3x3", (1, 64, 16, 16), (64, 64, 3, 3), {"pads": [1] * 4}),
    ("3x3-s2-same", (2, 16, 20, 20), (32, 16, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ("grouped-dilated", (1, 8, 12, 12), (8, 4, 3, 3), {"group": 2, "dilations": [2, 2], "pads": [2] * 4}),
]
# (code, a, b): none, Relu, Clip, HardSwish, HardSigmoid, SiLU
_ACTS = [(0, 0.0, 0.0), (1, 0.0, 0.0), (2, -0.5, 0.5), (3, 0.0, 0.0), (4, 0.2, 0.5), (5, 0.0, 0.0)]

native_only = pytest.mark.skipif(not USING_NATIVE, reason="prepared only where the native convolution runs")


@native_only
@pytest.mark.parametrize("act", _ACTS, ids=[f"act{a[0]}" for a in _ACTS])
@pytest.mark.parametrize(("xs", "ws", "attrs"), [g[1:] for g in _GEOMETRIES], ids=[g[0] for g in _GEOMETRIES])
def test_prepared_conv_gives_the_general_kernels_bits(xs: Any, ws: Any, attrs: Any, act: Any) -> None:
    x, w, b = _f32(*xs), _f32(*ws, frozen=True), _f32(ws[0], frozen=True)
    run = prepare_conv(w, b, *act, kernel_shape=list(ws[2:]), **attrs)
    assert run is not None
    want = conv_epilogue(x, w, b, None, *act, **attrs) if act[0] else conv(x, w, b, **attrs)
    assert want is not None
    for _ in range(2):  # the first call works the shape out, the second only looks it up
        got = run(x, None, None)
        assert got is not None
        np.testing.assert_array_equal(got, want)
    residual = _f32(*want.shape)
    want = conv_epilogue(x, w, b, residual, *act, **attrs)
    np.testing.assert_array_equal(run(x, residual, None), want)


@native_only
def test_prepared_conv_follows_the_input_shape_and_writes_into_out() -> None:
    w, b = _f32(16, 8, 3, 3, frozen=True), _f32(16, frozen=True)
    attrs: dict[str, Any] = {"pads": [1] * 4}
    run = prepare_conv(w, b, 3, 0.0, 0.0, **attrs)
    assert run is not None
    for shape in [(1, 8, 10, 10), (2, 8, 6, 9), (1, 8, 10, 10)]:
        x = _f32(*shape)
        want = conv_epilogue(x, w, b, None, 3, 0.0, 0.0, **attrs)
        assert want is not None
        out = np.full(want.shape, 7, np.float32)
        got = run(x, None, out)
        assert got is out
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(
            run(x[:, :, ::-1], None, None), conv_epilogue(x[:, :, ::-1], w, b, None, 3, 0, 0, **attrs)
        )


@native_only
def test_prepared_conv_leaves_what_it_does_not_cover_to_the_kernels() -> None:
    w, b = _f32(16, 8, 3, 3, frozen=True), _f32(16, frozen=True)
    run = prepare_conv(w, b, 1, 0.0, 0.0)
    assert run is not None
    x = _f32(1, 8, 6, 6)
    assert run(x.astype(np.float64), None, None) is None  # another dtype
    assert run(_f32(1, 8, 6), None, None) is None  # 1-D
    assert run(x, _f32(1, 16, 1, 1), None) is None  # a broadcast residual: Add's kernel
    assert run(_f32(1, 8, 2, 2), None, None) is None  # the kernel is larger than the input
    # weights that may change are never prepared, nor other dtypes
    assert prepare_conv(_f32(16, 8, 3, 3), b, 0, 0.0, 0.0) is None
    assert prepare_conv(w.astype(np.float64), None, 0, 0.0, 0.0) is None


def _model(batch: str | int) -> Any:
    """Conv -> BatchNormalization -> HardSwish, Conv (+ Add of the first) -> Relu, a lone Conv."""
    w1, w2, w3 = _f32(16, 8, 3, 3), _f32(16, 16, 1, 1), _f32(4, 16, 3, 3)
    scale, shift, mean, var = _f32(16), _f32(16), _f32(16), np.abs(_f32(16)) + 0.5
    inits = [numpy_helper.from_array(v, n) for v, n in [(w1, "w1"), (w2, "w2"), (w3, "w3"), (scale, "s")]]
    inits += [numpy_helper.from_array(v, n) for v, n in [(shift, "t"), (mean, "m"), (var, "v")]]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1] * 4),
        helper.make_node("BatchNormalization", ["c1", "s", "t", "m", "v"], ["b1"]),
        helper.make_node("HardSwish", ["b1"], ["h1"]),
        helper.make_node("Conv", ["h1", "w2"], ["c2"]),
        helper.make_node("Add", ["c2", "h1"], ["a2"]),
        helper.make_node("Relu", ["a2"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3"], ["y"], strides=[2, 2]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 8, 12, 12])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "g", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_session_with_prepared_convs_gives_the_unprepared_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model("N")
    prepared = InferenceSession(model)
    monkeypatch.setattr(conv_module, "PREPARE", False)
    general = InferenceSession(model)
    for n in (1, 3, 1):
        feeds = {"x": _f32(n, 8, 12, 12)}
        for _ in range(2):  # the second run has the buffer pool
            np.testing.assert_array_equal(prepared.run(None, feeds)[0], general.run(None, feeds)[0])
    unoptimised = InferenceSession(model, optimize=False)
    np.testing.assert_allclose(prepared.run(None, feeds)[0], unoptimised.run(None, feeds)[0], rtol=1e-4, atol=1e-4)


def test_folded_weights_are_immutable_so_their_convs_keep_transforms_and_preparation() -> None:
    """A BatchNormalization folded into a Conv gives new weights: they must be read-only down to
    their base (a read-only view of a writeable array is not), or the Winograd transform and the
    prepared call, kept only for immutable weights, are lost on every BN-folded conv."""
    session = InferenceSession(_model(1))
    plan = session._plan
    convs = [step for step in plan.steps if step.node.op_type == "Conv"]
    assert [step.label for step in convs] == ["Conv+BatchNormalization+HardSwish", "Conv+Add+Relu", "Conv"]
    folded = convs[0].inputs[1:3]  # the BN-folded weights and bias
    for slot in (*folded, convs[1].inputs[1], convs[2].inputs[1]):
        value = plan.constants[slot]
        assert conv_module._immutable(value), slot
        with pytest.raises(ValueError):
            value[...] = 0


@pytest.mark.parametrize("access, immutable", [("read", True), ("write", False), ("copy", False)])
def test_weights_of_a_read_only_mapped_file_are_immutable(tmp_path: Any, access: str, immutable: bool) -> None:
    """``load`` maps the model file ACCESS_READ and its aligned tensors are views of that map: they
    are immutable (nothing writes through the map; ``save`` renames a new file), so their convs keep
    the Winograd transform and the packed weights (resnet18's 64 -> 64 layers re-transformed their
    weights on the calling thread every call: 10% of each layer serial with 2 threads). A map that
    can be written (ACCESS_WRITE, ACCESS_COPY) is not."""
    import mmap

    path = tmp_path / "w.bin"
    path.write_bytes(_f32(64, 64, 3, 3).tobytes())
    modes = {"read": mmap.ACCESS_READ, "write": mmap.ACCESS_WRITE, "copy": mmap.ACCESS_COPY}
    with open(path, "r+b") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=modes[access])
    w = np.frombuffer(memoryview(mapped), np.float32).reshape(64, 64, 3, 3)
    assert conv_module._immutable(w) is immutable
    if conv_module._native.CONV2D and conv_module._native.CONV_ISA == "avx2":
        x = np.empty((1, 64, 56, 56), np.float32)
        u = conv_module.winograd_weights(x, w, [1, 1], [1, 1], [1, 1], [1, 1], 1)
        assert (u is not None) is immutable
    del w


@native_only
def test_a_loaded_model_file_prepares_its_convs(tmp_path: Any) -> None:
    """Every Conv of a model read by ``load`` (zero-copy views of the mapped file where aligned,
    copies elsewhere) is prepared at plan time, whichever its tensors are."""
    import onnx_light as ol

    nodes, inits = [], []
    for k in range(4):  # several tensors: some land on aligned offsets of the file, some do not
        inits.append(numpy_helper.from_array(_f32(16, 16 if k else 8, 3, 3), f"w{k}"))
        nodes.append(helper.make_node("Conv", [f"x{k}", f"w{k}"], [f"x{k + 1}"], pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("Relu", [f"x{k + 1}"], [f"r{k + 1}"]))
        nodes[-2].input[0] = "x" if k == 0 else f"r{k}"
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 12, 12])],
        [helper.make_tensor_value_info("r4", TensorProto.FLOAT, None)],
        inits,
    )
    path = str(tmp_path / "m.onnx")
    ol.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    session = InferenceSession(ol.load(path))
    steps = [step for step in session._plan.steps if step.node.op_type == "Conv"]
    assert len(steps) == 4
    assert all(step.fn.__name__ != "conv_relu" for step in steps), [step.fn.__name__ for step in steps]
    feeds = {"x": _f32(1, 8, 12, 12)}
    want = InferenceSession(ol.load(path), optimize=False).run(None, feeds)[0]
    np.testing.assert_allclose(session.run(None, feeds)[0], want, rtol=1e-4, atol=1e-4)
