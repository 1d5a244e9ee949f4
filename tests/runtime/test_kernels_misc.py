"""Quantization, random, math kernels of issue 11 against onnxruntime on random inputs."""

from __future__ import annotations

import numpy as np
from ort_reference import compare_with_ort, rng


def test_quantize_linear_per_axis_int8() -> None:
    g = rng()
    x = g.standard_normal((2, 3, 4)).astype(np.float32)
    scale = np.array([0.02, 0.05, 0.1], np.float32)
    zp = np.array([-3, 0, 7], np.int8)
    compare_with_ort("QuantizeLinear", [x, scale, zp], {"axis": 1}, opset=21)


def test_dequantize_linear_uint8() -> None:
    g = rng()
    x = g.integers(0, 256, (3, 5)).astype(np.uint8)
    compare_with_ort("DequantizeLinear", [x, np.array(0.1, np.float32), np.array(128, np.uint8)], opset=21)


def test_dynamic_quantize_linear() -> None:
    x = rng().standard_normal((4, 6)).astype(np.float32)
    compare_with_ort("DynamicQuantizeLinear", [x], n_out=3, opset=11)


def test_matmul_integer_and_qlinear_matmul() -> None:
    g = rng()
    a = g.integers(0, 256, (3, 4)).astype(np.uint8)
    b = g.integers(0, 256, (4, 5)).astype(np.uint8)
    compare_with_ort("MatMulInteger", [a, b, np.array(12, np.uint8), np.array(130, np.uint8)], opset=10)
    ins = [
        a,
        np.array(0.05, np.float32),
        np.array(12, np.uint8),
        b,
        np.array(0.02, np.float32),
        np.array(130, np.uint8),
        np.array(0.3, np.float32),
        np.array(100, np.uint8),
    ]
    compare_with_ort("QLinearMatMul", ins, opset=10)


def test_conv_integer_and_qlinear_conv() -> None:
    g = rng()
    x = g.integers(0, 256, (1, 2, 5, 5)).astype(np.uint8)
    w = g.integers(0, 256, (3, 2, 3, 3)).astype(np.uint8)
    compare_with_ort(
        "ConvInteger", [x, w, np.array(10, np.uint8), np.array(120, np.uint8)], {"pads": [1, 1, 1, 1]}, opset=10
    )
    bias = g.integers(-100, 100, (3,)).astype(np.int32)
    ins = [
        x,
        np.array(0.05, np.float32),
        np.array(10, np.uint8),
        w.astype(np.int8) // 2,
        np.array(0.01, np.float32),
        np.array(0, np.int8),
        np.array(0.2, np.float32),
    ]
    compare_with_ort("QLinearConv", [*ins, np.array(90, np.uint8), bias], opset=10)


def test_random_ops_seeded_are_reproducible_and_distributed() -> None:
    from onnx_light.runtime.kernels import random as r

    a = r.random_normal(shape=[2000], seed=3.0)
    assert np.array_equal(a, r.random_normal(shape=[2000], seed=3.0)) and a.dtype == np.float32
    assert not np.array_equal(a, r.random_normal(shape=[2000], seed=4.0))
    assert abs(a.mean()) < 0.1 and abs(a.std() - 1) < 0.1
    u = r.random_uniform_like(np.zeros((50, 40), np.float64), low=2.0, high=3.0, seed=1.0)
    assert u.dtype == np.float64 and u.min() >= 2.0 and u.max() < 3.0
    b = r.bernoulli(np.full(4000, 0.25, np.float32), seed=5.0)
    assert set(np.unique(b)) <= {0.0, 1.0} and abs(b.mean() - 0.25) < 0.03
    m = r.multinomial(np.log(np.array([[0.1, 0.0001, 0.9]], np.float32)), sample_size=3000, seed=2.0)
    assert m.dtype == np.int32 and m.shape == (1, 3000)
    assert abs((m == 2).mean() - 0.9) < 0.03 and (m == 1).mean() < 0.01


def test_det_and_bitshift_match_onnxruntime() -> None:
    g = rng()
    compare_with_ort("Det", [g.standard_normal((2, 3, 4, 4)).astype(np.float32)], opset=22)
    x = g.integers(0, 2**16, (3, 4)).astype(np.uint32)
    compare_with_ort("BitShift", [x, np.array([1, 3, 0, 7], np.uint32)], {"direction": "LEFT"}, opset=11)
    compare_with_ort("BitShift", [x, np.array([1, 3, 0, 7], np.uint32)], {"direction": "RIGHT"}, opset=11)


def test_cum_prod_with_zeros_exclusive_reverse() -> None:
    from onnx_light.runtime.kernels.math_misc import cum_prod

    x = np.array([[2.0, 0.0, 3.0, 4.0]], np.float32)
    np.testing.assert_array_equal(cum_prod(x, np.array(1), exclusive=1), [[1, 2, 0, 0]])
    np.testing.assert_array_equal(cum_prod(x, np.array(-1), reverse=1), [[0, 0, 12, 4]])
    np.testing.assert_array_equal(cum_prod(x, np.array(1), exclusive=1, reverse=1), [[0, 12, 4, 1]])


def test_signal_ops_match_onnxruntime() -> None:
    g = rng()
    x = g.standard_normal((2, 16, 1)).astype(np.float32)
    compare_with_ort("DFT", [x], {"onesided": 1}, opset=17)
    compare_with_ort("DFT", [g.standard_normal((2, 8, 2)).astype(np.float32)], {"inverse": 1}, opset=17)
    sig = g.standard_normal((1, 64, 1)).astype(np.float32)
    window = np.hanning(16).astype(np.float32)
    compare_with_ort("STFT", [sig, np.array(8, np.int64), window], opset=17)
    for op in ("HannWindow", "HammingWindow", "BlackmanWindow"):
        compare_with_ort(op, [np.array(10, np.int64)], {"periodic": 0}, opset=17)
        compare_with_ort(op, [np.array(10, np.int64)], opset=17)


def test_string_ops_match_onnxruntime() -> None:
    x = np.array(["Monday", "tuesday", "THE", "the end", "a1b2"], dtype=object)
    from onnx_light.runtime.kernels.strings import string_normalizer

    # onnxruntime's StringNormalizer needs an installed en_US locale; the expected value is by hand
    got = string_normalizer(x, case_change_action="UPPER", stopwords=["the"])
    assert list(got) == ["MONDAY", "TUESDAY", "THE END", "A1B2"]
    compare_with_ort("RegexFullMatch", [x], {"pattern": r"[a-z]+\d?b?\d?"}, opset=20)
    compare_with_ort("StringSplit", [x], {"delimiter": "e"}, n_out=2, opset=20)
    compare_with_ort("StringConcat", [x, np.array(["!"], dtype=object)], opset=20)
