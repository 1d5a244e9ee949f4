"""Gradient rules of DFT and STFT (float64 finite differences, onnxruntime agreement, the
full checker), and an audio front end (STFT -> power -> mel MatMul -> Log) checked in float64."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime  # noqa: F401  (a test extra)
import pytest
from gradcheck import Case, check_gradient, check_tangent, gradient
from onnx import helper as oh

import onnx_light as ol

_rng = np.random.default_rng(1717)
#: onnxruntime's DFT/STFT round their twiddle factors like float32 (relative error ~3e-8 in
#: float64, above check_in_onnxruntime's 1e-9): they are compared in float32
ORT = np.float32


def rnd(*shape: int) -> np.ndarray:
    return _rng.standard_normal(shape)


def i64(v: int) -> np.ndarray:
    return np.array(v, np.int64)


def dft(
    name: str, x: np.ndarray, length: int | None = None, axis: int | None = None, opset: int = 20, **attrs: Any
) -> Case:
    inputs: dict[str, np.ndarray] = {"x": x}
    names = ["x", "", ""]
    if length is not None:
        inputs["n"], names[1] = i64(length), "n"
    if axis is not None and opset >= 20:
        inputs["axis"], names[2] = i64(axis), "axis"
    elif axis is not None:
        attrs["axis"] = axis
    while not names[-1]:
        names.pop()
    node = oh.make_node("DFT", names, ["y"], **attrs)
    return Case(name, [node], inputs, ["x"], initializers=[k for k in inputs if k != "x"], opset=opset, ort_dtype=ORT)


def stft(
    name: str, signal: np.ndarray, step: int, window: np.ndarray | None, length: int | None, xs: str, **attrs: Any
) -> Case:
    inputs: dict[str, np.ndarray] = {"signal": signal, "step": i64(step)}
    names = ["signal", "step", "", ""]
    if window is not None:
        inputs["window"], names[2] = window, "window"
    if length is not None:
        inputs["length"], names[3] = i64(length), "length"
    while not names[-1]:
        names.pop()
    # onesided spelled out: onnx 1.23's shape inference ignores its default (1) and declares
    # the two-sided bin count for y, which the pass would trust
    node = oh.make_node("STFT", names, ["y"], **{"onesided": 1, **attrs})
    return Case(
        name,
        [node],
        inputs,
        xs.split(","),
        initializers=["step", "length"][: 1 + (length is not None)],
        opset=17,
        ort_dtype=ORT,
    )


CASES: list[Case] = [
    dft("DFT-complex", rnd(2, 5, 2)),
    dft("DFT-real", rnd(3, 6, 1)),
    dft("DFT-onesided-even", rnd(2, 6, 1), onesided=1),
    dft("DFT-onesided-odd", rnd(2, 7, 1), onesided=1),
    dft("DFT-inverse", rnd(2, 5, 2), inverse=1),
    dft("DFT-inverse-real", rnd(4, 1), inverse=1),
    dft("DFT-padded", rnd(2, 4, 2), length=7),
    dft("DFT-cropped-onesided", rnd(2, 7, 1), length=5, onesided=1),
    dft("DFT-axis0", rnd(6, 3, 2), axis=0),
    dft("DFT-axis-input-negative", rnd(2, 5, 3, 2), axis=-3, inverse=1),
    dft("DFT-opset17-axis-attribute", rnd(2, 5, 2), axis=1, opset=17),
    dft("DFT-irfft", rnd(2, 4, 2), inverse=1, onesided=1),
    dft("DFT-irfft-odd-length", rnd(2, 4, 2), length=7, inverse=1, onesided=1),
    dft("DFT-irfft-extra-bins", rnd(3, 5, 2), length=4, inverse=1, onesided=1),
    stft("STFT-window", rnd(2, 16, 1), 4, rnd(8), None, "signal,window"),
    stft("STFT-window-and-length", rnd(1, 13, 1), 3, rnd(6), 6, "signal,window"),
    stft("STFT-complex-two-sided", rnd(2, 12, 2), 5, None, 4, "signal", onesided=0),
    stft("STFT-complex-window", rnd(1, 10, 2), 2, rnd(5), None, "window,signal"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_rule(case: Case) -> None:
    check_gradient(case)


def audio_front_end(samples: int = 64, frame: int = 16, step: int = 8, mels: int = 5) -> Case:
    """log(mel @ |STFT(signal, hann)|^2 + eps): a speech model's feature extractor."""
    nodes = [
        oh.make_node("HannWindow", ["frame"], ["hann"]),  # float32 windows, cast to the signal's type
        oh.make_node("CastLike", ["hann", "signal"], ["window"]),
        oh.make_node("STFT", ["signal", "step", "window", "frame"], ["spec"], onesided=1),
        oh.make_node("Mul", ["spec", "spec"], ["sq"]),
        oh.make_node("ReduceSum", ["sq", "last"], ["power"], keepdims=0),
        oh.make_node("MelWeightMatrix", ["mels", "frame", "rate", "low", "high"], ["mel32"]),
        oh.make_node("CastLike", ["mel32", "signal"], ["mel"]),
        oh.make_node("MatMul", ["power", "mel"], ["mel_power"]),
        oh.make_node("Add", ["mel_power", "eps"], ["shifted"]),
        oh.make_node("Log", ["shifted"], ["y"]),
    ]
    t = np.arange(samples) / 8000.0
    signal = (np.sin(2 * np.pi * 440 * t) + 0.3 * rnd(samples)).reshape(1, samples, 1)
    inputs = {
        "signal": signal,
        "step": i64(step),
        "frame": i64(frame),
        "last": np.array([-1], np.int64),
        "mels": i64(mels),
        "rate": i64(8000),
        "low": np.array(100.0),
        "high": np.array(3800.0),
        "eps": np.array(1e-3),
    }
    consts = ["step", "frame", "last", "mels", "rate", "low", "high", "eps"]
    return Case("audio-front-end", nodes, inputs, ["signal"], initializers=consts, opset=17, ort_dtype=ORT)


def test_audio_front_end_in_float64() -> None:
    grads = check_gradient(audio_front_end())
    assert np.abs(grads["signal"]).max() > 0


def test_audio_front_end_forward_mode() -> None:
    """Forward mode through the whole front end: adjoint identity and finite differences.
    (Not a table row: the Hessian-vector check differentiates the backward function with
    its seed untyped, and MatMul's rule needs the rank that hides.)"""
    check_tangent(audio_front_end())


def test_dft_length_computed_at_run_time_is_refused() -> None:
    row = dft("dyn", rnd(2, 6, 1), length=4, onesided=1)
    row.initializers = []  # dft_length a graph input: known only at run time
    with pytest.raises(ol.GradientError, match=r"ai.onnx::DFT.*dft_length"):
        gradient(row)


def test_stft_step_computed_at_run_time_is_refused() -> None:
    row = stft("dyn", rnd(1, 12, 1), 4, rnd(4), None, "signal")
    row.initializers = []
    with pytest.raises(ol.GradientError, match=r"ai.onnx::STFT.*frame_step"):
        gradient(row)
