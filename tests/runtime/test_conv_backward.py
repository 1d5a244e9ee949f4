"""The data gradient's convolutions (runtime/kernels/_conv_backward.py, src/conv_backward.cpp):
ConvTranspose weights as the stride-1 Conv's (native against its twin), and a strided
ConvTranspose split into one stride-1 convolution per output phase (against the scatter path)."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from onnx_light.onnx_core.ops import transpose_window
from onnx_light.runtime import _native
from onnx_light.runtime.kernels import _conv_backward
from onnx_light.runtime.kernels import conv as conv_module

NATIVE = _native.NATIVE is not None and hasattr(_native.NATIVE, "conv_transpose_weights")


@pytest.mark.parametrize(
    "shape, group",
    [((4, 3, 3, 3), 1), ((6, 2, 3, 3), 3), ((40, 24, 1, 1), 1), ((33, 17, 5, 2), 1), ((8, 1, 5, 5), 8)]
    + [((17, 35, 3, 3), 1)],
)
def test_conv_transpose_weights_twin_is_the_flipped_swap(shape: tuple[int, ...], group: int) -> None:
    w = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    got = _conv_backward.conv_transpose_weights_twin(w, group)
    c, mg, kh, kw = shape
    cg = c // group
    assert got.shape == (group * mg, cg, kh, kw)
    for g, m, ci, a, b in itertools.product(range(group), range(mg), range(cg), range(kh), range(kw)):
        if (m + ci + a + b) % 7 == 0:  # a deterministic sample of the cells
            assert got[g * mg + m, ci, a, b] == w[g * cg + ci, m, kh - 1 - a, kw - 1 - b]


@pytest.mark.skipif(not NATIVE, reason="no native conv_transpose_weights (pure-Python twins)")
@pytest.mark.parametrize(
    "shape, group",
    [((4, 3, 3, 3), 1), ((6, 2, 3, 3), 3), ((40, 24, 1, 1), 1), ((33, 17, 5, 2), 1), ((8, 1, 5, 5), 8)]
    + [((64, 96, 3, 3), 2)],
)
def test_conv_transpose_weights_native_equals_twin(shape: tuple[int, ...], group: int) -> None:
    w = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    assert _native.NATIVE is not None
    got = _native.NATIVE.conv_transpose_weights(w, group)
    np.testing.assert_array_equal(got, _conv_backward.conv_transpose_weights_twin(w, group))
    # the dispatcher (into its per-thread scratch), also from a non-contiguous view
    view = w[:, :, ::-1]
    want = _conv_backward.conv_transpose_weights_twin(view, group)
    np.testing.assert_array_equal(_conv_backward.conv_transpose_weights(view, group), want)
    out = np.empty_like(got)
    assert _native.NATIVE.conv_transpose_weights(w, group, out) is out
    np.testing.assert_array_equal(out, got)


def test_conv_transpose_weights_twin_into_out() -> None:
    w = np.random.default_rng(4).standard_normal((6, 4, 3, 2)).astype(np.float32)
    out = np.empty((8, 3, 3, 2), np.float32)
    assert _conv_backward.conv_transpose_weights_twin(w, 2, out) is out
    np.testing.assert_array_equal(out, _conv_backward.conv_transpose_weights_twin(w, 2))


@pytest.mark.skipif(not NATIVE, reason="no native conv_transpose_weights (pure-Python twins)")
def test_conv_transpose_weights_native_refuses_a_bad_group() -> None:
    assert _native.NATIVE is not None
    with pytest.raises(ValueError, match="multiple of group"):
        _native.NATIVE.conv_transpose_weights(np.zeros((5, 2, 3, 3), np.float32), 2)
    w = np.zeros((4, 2, 3, 3), np.float32)
    with pytest.raises(ValueError, match="out is not"):
        _native.NATIVE.conv_transpose_weights(w, 1, np.zeros((2, 4, 3, 2), np.float32))
    with pytest.raises(ValueError, match="overlaps"):
        _native.NATIVE.conv_transpose_weights(w, 1, w.reshape(2, 4, 3, 3))


def _window(x: np.ndarray, w: np.ndarray, attrs: dict[str, Any]) -> Any:
    return transpose_window(
        list(x.shape[2:]), list(w.shape[2:]), attrs.get("strides"), None, attrs.get("pads"), "NOTSET",
        attrs.get("output_padding"), attrs.get("output_shape"), legacy=False,
    )  # fmt: skip


# strides against kernels: taps per phase 2 and 1 (k3 s2), none for some phases (k1 s2, k2 s3),
# uneven axes, pads (begin crops), output_padding and output_shape (cells past the input)
PHASE_CASES = [
    ("k3-s2-p1", dict(k=(3, 3), strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1])),
    ("k3-s2-p0", dict(k=(3, 3), strides=[2, 2], pads=[0, 0, 0, 0])),
    ("k1-s2", dict(k=(1, 1), strides=[2, 2], pads=[0, 0, 0, 0], output_padding=[1, 1])),
    ("k2-s3", dict(k=(2, 2), strides=[3, 3], pads=[0, 1, 0, 0], output_padding=[2, 1])),
    ("k4x3-s2x1", dict(k=(4, 3), strides=[2, 1], pads=[1, 0, 2, 1])),
    ("k5-s3-wide-pads", dict(k=(5, 5), strides=[3, 2], pads=[4, 3, 4, 1])),
    ("k3-s2-output_shape", dict(k=(3, 3), strides=[2, 2], output_shape=[15, 12])),
]


@pytest.mark.parametrize("group", [1, 2])
@pytest.mark.parametrize("case", [c for _, c in PHASE_CASES], ids=[n for n, _ in PHASE_CASES])
def test_conv_transpose_phases_equal_the_scatter(case: dict[str, Any], group: int) -> None:
    """float64: the phases run the numpy convolution (the twin), against the scatter path."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 4, 7, 6))
    w = rng.standard_normal((4, 3, *case["k"]))
    attrs = {k: v for k, v in case.items() if k != "k"}
    tw = _window(x, w, attrs)
    want = conv_module._conv_transpose_scatter(x, w, tw.strides, tw.dilations, group, tw.begin, tw.out)
    got = _conv_backward.conv_transpose_phases(
        x, w, tw.strides, group, tw.begin, tw.out, conv_module._conv_transpose_as_conv
    )
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_strided_conv_transpose_runs_one_native_conv_per_phase(monkeypatch: pytest.MonkeyPatch) -> None:
    """A float32 stride-2 3x3 ConvTranspose (a strided Conv's data gradient): four native
    convolutions of the 2x2, 2x1, 1x2 and 1x1 sub-kernels, equal to the scatter path."""
    if not conv_module.USING_NATIVE or not NATIVE:
        pytest.skip("no native conv (pure-Python twins)")
    calls: list[tuple[int, ...]] = []
    native = conv_module.conv2d_native

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[1].shape)
        return native(*args, **kwargs)

    monkeypatch.setattr(conv_module, "conv2d_native", spy)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 32, 28, 28)).astype(np.float32)
    w = rng.standard_normal((32, 16, 3, 3)).astype(np.float32)
    y = conv_module.conv_transpose(x, w, strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1])
    assert sorted(calls) == [(16, 32, 1, 1), (16, 32, 1, 2), (16, 32, 2, 1), (16, 32, 2, 2)]
    tw = _window(x, w, dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]))
    want = conv_module._conv_transpose_scatter(x, w, tw.strides, tw.dilations, 1, tw.begin, tw.out)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


# geometries that take the phases in float32 (the kernel's choice: _phases_pay) against onnxruntime
ORT_CASES = [
    ("k3-s2-28", (1, 6, 28, 28), (6, 8, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1])),
    ("k1-s2", (2, 6, 7, 5), (6, 8, 1, 1), dict(strides=[2, 2], output_padding=[1, 0])),
    ("k2-s2-bias", (1, 4, 9, 8), (4, 8, 2, 2), dict(strides=[2, 2])),
    ("k3-s3-g2", (1, 8, 6, 7), (8, 4, 3, 3), dict(strides=[3, 3], pads=[1, 0, 2, 1], group=2)),
    ("k2-s3x2-output_padding", (1, 4, 6, 5), (4, 8, 2, 2), dict(strides=[3, 2], output_padding=[2, 1])),
]


@pytest.mark.parametrize("xs, ws, attrs", [c[1:] for c in ORT_CASES], ids=[c[0] for c in ORT_CASES])
def test_phased_conv_transpose_vs_ort(xs: tuple[int, ...], ws: tuple[int, ...], attrs: dict[str, Any]) -> None:
    from ort_reference import compare_with_ort

    rng = np.random.default_rng(5)
    x = rng.uniform(-1, 1, xs).astype(np.float32)
    w = rng.uniform(-1, 1, ws).astype(np.float32)
    b = rng.uniform(-1, 1, ws[1] * attrs.get("group", 1)).astype(np.float32) if xs[2] == 9 else None
    compare_with_ort("ConvTranspose", [x, w, b] if b is not None else [x, w], attrs)
