"""Squeeze-excite blocks as one step (``runtime/_fuse.py`` ``fuse_squeeze_excite``, the native
``squeeze_excite`` of ``src/squeeze_excite.cpp``; issue 15 §1): GlobalAveragePool -> 1 x 1 Conv
-> activation -> 1 x 1 Conv -> activation -> Mul by the block's input. The native call against
the formula (activations, biases, sizes, NaN, a lent buffer), the fused session against the
unfused one and onnxruntime, the twin (the six kernels) where the native call is missing, and
the blocks that must not be fused."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from onnx_light import TensorProto, helper, numpy_helper
from onnx_light.runtime import InferenceSession, _native

_RNG = np.random.default_rng(15)
_EXT = _native.NATIVE if _native.CONV2D and hasattr(_native.NATIVE, "squeeze_excite") else None
native_only = pytest.mark.skipif(_EXT is None, reason="no native squeeze_excite on this CPU / build")

#: (act code of src/conv.h, a, b) -> numpy formula
_ACTS: dict[tuple[int, float, float], Any] = {
    (1, 0.0, 0.0): lambda v: np.maximum(v, 0),
    (4, 1 / 6, 0.5): lambda v: np.clip(v / 6 + 0.5, 0, 1),
    (3, 0.0, 0.0): lambda v: v * np.clip(v / 6 + 0.5, 0, 1),
    (6, 0.0, 0.0): lambda v: 1 / (1 + np.exp(-v)),
    (2, -0.5, 0.5): lambda v: np.clip(v, -0.5, 0.5),
    (0, 0.0, 0.0): lambda v: v,
}


def _f32(*shape: int) -> np.ndarray:
    return _RNG.standard_normal(shape).astype(np.float32)


def _formula(x: np.ndarray, w1: Any, b1: Any, act1: Any, w2: Any, b2: Any, act2: Any) -> np.ndarray:
    s = x.astype(np.float64).mean(axis=(2, 3))
    h = _ACTS[act1](s @ w1.T + (0 if b1 is None else b1))
    g = _ACTS[act2](h @ w2.T + (0 if b2 is None else b2))
    return (x * g[:, :, None, None]).astype(np.float32)


@native_only
@pytest.mark.parametrize("shape", [(1, 16, 56, 56), (2, 13, 7, 7), (1, 40, 1, 1), (3, 9, 3, 37)], ids=str)
@pytest.mark.parametrize("acts", [(0, 1), (2, 3), (4, 5)], ids=lambda a: f"acts{a[0]}{a[1]}")
@pytest.mark.parametrize("biases", [True, False])
def test_native_squeeze_excite_matches_the_formula(shape: tuple, acts: tuple, biases: bool) -> None:
    assert _EXT is not None
    n, c, _, _ = shape
    r = max(1, c // 4)
    keys = list(_ACTS)
    act1, act2 = keys[acts[0]], keys[acts[1]]
    x, w1, w2 = _f32(*shape), _f32(r, c) * 0.3, _f32(c, r) * 0.3
    b1, b2 = (_f32(r), _f32(c)) if biases else (None, None)
    got = _EXT.squeeze_excite(x, w1, b1, *act1, w2, b2, *act2)
    np.testing.assert_allclose(got, _formula(x, w1, b1, act1, w2, b2, act2), rtol=2e-5, atol=2e-6)


@native_only
def test_native_squeeze_excite_nan_out_buffer_and_errors() -> None:
    assert _EXT is not None
    x, w1, b1, w2, b2 = _f32(2, 12, 5, 5), _f32(3, 12), _f32(3), _f32(12, 3), _f32(12)
    args = (w1, b1, 1, 0.0, 0.0, w2, b2, 4, 1 / 6, 0.5)
    x[1, 4, 2, 2] = np.nan  # sample 1's mean of channel 4 is NaN: every channel of sample 1 (through W2)
    got = _EXT.squeeze_excite(x, *args)
    with np.errstate(invalid="ignore"):
        want = _formula(x, w1, b1, (1, 0.0, 0.0), w2, b2, (4, 1 / 6, 0.5))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got[1]).all() and not np.isnan(got[0]).any()
    out = np.full_like(x, 7.0)
    assert _EXT.squeeze_excite(x, *args, out=out) is out
    np.testing.assert_array_equal(out, got)
    fresh = _EXT.squeeze_excite(x, *args, out=x)  # overlapping its input: ignored
    assert fresh is not x
    np.testing.assert_array_equal(fresh, got)
    with pytest.raises(ValueError, match="weights"):
        _EXT.squeeze_excite(x, w2, b1, 1, 0.0, 0.0, w2, b2, 4, 0.2, 0.5)
    with pytest.raises(ValueError, match="bias"):
        _EXT.squeeze_excite(x, w1, b2, 1, 0.0, 0.0, w2, b2, 4, 0.2, 0.5)
    with pytest.raises(ValueError, match="activation"):
        _EXT.squeeze_excite(x, w1, b1, 9, 0.0, 0.0, w2, b2, 4, 0.2, 0.5)
    with pytest.raises(ValueError, match="empty"):
        _EXT.squeeze_excite(np.zeros((1, 12, 0, 3), np.float32), *args)


def _se_model(c: int = 24, r: int = 6, *, kernel: int = 1, mul_by: str = "x", output_h: bool = False) -> Any:
    """x -> Relu -> GlobalAveragePool -> Conv -> Relu -> Conv -> HardSigmoid -> Mul(x', s) -> y."""
    inits = [
        numpy_helper.from_array(_f32(r, c, kernel, kernel) * 0.3, "w1"),
        numpy_helper.from_array(_f32(r), "b1"),
        numpy_helper.from_array(_f32(c, r, 1, 1) * 0.3, "w2"),
        numpy_helper.from_array(_f32(c), "b2"),
    ]
    nodes = [
        helper.make_node("Relu", ["x"], ["xr"]),
        helper.make_node("Neg", ["x"], ["xn"]),
        helper.make_node("GlobalAveragePool", ["xr"], ["p"]),
        helper.make_node("Conv", ["p", "w1", "b1"], ["c1"], pads=[kernel // 2] * 4),
        helper.make_node("Relu", ["c1"], ["h"]),
        helper.make_node("Conv", ["h", "w2", "b2"], ["c2"]),
        helper.make_node("HardSigmoid", ["c2"], ["g"], alpha=1 / 6, beta=0.5),
        helper.make_node("Mul", ["xr" if mul_by == "x" else "xn", "g"], ["y"]),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if output_h:
        outputs.append(helper.make_tensor_value_info("h", TensorProto.FLOAT, None))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", c, 9, 11])
    graph = helper.make_graph(nodes, "se", [x], outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


SE_LABEL = "GlobalAveragePool+Conv+Relu+Conv+HardSigmoid+Mul"


def _labels(session: InferenceSession) -> list[str]:
    return [step.label for step in session._plan.steps]


def _fused_once(session: InferenceSession) -> bool:
    """Whether the block is one step and none of its nodes runs alone."""
    labels = _labels(session)
    return labels.count(SE_LABEL) == 1 and not {"GlobalAveragePool", "Conv", "HardSigmoid", "Mul"} & set(labels)


def test_a_squeeze_excite_block_is_one_step_with_the_unfused_values() -> None:
    ort = pytest.importorskip("onnxruntime")
    model = _se_model()
    fused, unfused = InferenceSession(model), InferenceSession(model, optimize=False)
    assert _fused_once(fused)
    peer = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for n in (1, 2, 1):
        feeds = {"x": _f32(n, 24, 9, 11)}
        for _ in range(2):  # the second run lends the step a buffer of the pool
            got = fused.run(None, feeds)[0]
            np.testing.assert_allclose(got, unfused.run(None, feeds)[0], rtol=2e-5, atol=2e-6)
            np.testing.assert_allclose(got, peer.run(None, feeds)[0], rtol=2e-5, atol=2e-6)


def test_without_the_native_call_the_step_runs_the_six_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _se_model()
    monkeypatch.setattr(_native, "NATIVE", None)
    twin = InferenceSession(model)
    assert _fused_once(twin)
    unfused = InferenceSession(model, optimize=False)
    feeds = {"x": _f32(2, 24, 9, 11)}
    np.testing.assert_array_equal(twin.run(None, feeds)[0], unfused.run(None, feeds)[0])
    # float64 feeds to a float32 model are refused by the session itself; a float64 model's
    # weights are no float32 constants: not fused at all
    model64 = _se_model()
    for init in model64.graph.initializer:
        array = numpy_helper.to_array(init).astype(np.float64)
        init.CopyFrom(numpy_helper.from_array(array, init.name))
    model64.graph.input[0].type.tensor_type.elem_type = TensorProto.DOUBLE
    assert SE_LABEL not in _labels(InferenceSession(model64))


@pytest.mark.parametrize(
    "variant",
    [{"kernel": 3}, {"mul_by": "other"}, {"output_h": True}],
    ids=["3x3-conv", "mul-by-another-tensor", "intermediate-is-an-output"],
)
def test_blocks_that_are_not_squeeze_excite_stay_as_they_are(variant: dict) -> None:
    model = _se_model(**variant)
    session = InferenceSession(model)
    assert SE_LABEL not in _labels(session)
    feeds = {"x": _f32(1, 24, 9, 11)}
    want = InferenceSession(model, optimize=False).run(None, feeds)
    for got, ref in zip(session.run(None, feeds), want):
        np.testing.assert_allclose(got, ref, rtol=2e-5, atol=2e-6)
