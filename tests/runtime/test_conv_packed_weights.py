"""The AVX2 convolution with its weights packed once (``conv2d_pack_weights``, ``src/conv.cpp``):
stride-1 convolutions with at least 8 weight row blocks per group stream the packed row blocks
past each pixel panel. The same products in the same order: the result is bitwise the unpacked
kernel's, checked against it and the numpy twin over pads, dilations, groups, odd sizes, several
K blocks, partial row blocks, non-finite values, empty batches and 2 threads; and the runtime's
Conv kernel passes the packed form only for immutable weights."""

from __future__ import annotations

import numpy as np
import pytest
from test_native import _require_conv2d

from onnx_light.runtime import _native
from onnx_light.runtime.kernels import conv as conv_kernels
from onnx_light.runtime.kernels.conv import _conv_im2col, conv

# (n, c, h, w, m, kernel, dilations, pads (top, left, bottom, right), group): crnn's class (2-16
# rows, 40-80 columns, 64-256 outputs), partial last row blocks (m % 6 = 1, 3, 5), K of several
# 256-row blocks, odd sizes, asymmetric pads, dilations, groups of 43+ outputs, non-square kernels
CASES = [
    (1, 64, 4, 40, 128, (3, 3), (1, 1), (1, 1, 1, 1), 1),
    (1, 40, 2, 37, 49, (3, 3), (1, 1), (1, 1, 1, 1), 1),
    (2, 33, 5, 23, 51, (3, 3), (1, 1), (0, 2, 1, 1), 1),
    (1, 16, 9, 31, 53, (3, 3), (2, 2), (2, 2, 2, 2), 1),
    (1, 12, 7, 45, 96, (2, 3), (1, 2), (1, 0, 0, 2), 2),
    (1, 70, 3, 19, 60, (3, 3), (1, 1), (1, 1, 1, 1), 1),
    (1, 8, 16, 20, 47, (5, 5), (1, 1), (2, 2, 2, 2), 1),
    (1, 24, 6, 17, 135, (1, 3), (1, 1), (0, 1, 0, 1), 3),
]


def _data(case: tuple, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n, c, h, w, m, k, _d, _p, g = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((m, c // g, *k)).astype(np.float32)
    return x, wt, rng.standard_normal(m).astype(np.float32)


def _run(case: tuple, x: np.ndarray, wt: np.ndarray, b: np.ndarray, packed: bool, act: int = 0, threads: int = 1):
    *_, d, p, g = case
    ext = _native.EXTENSION
    assert ext is not None
    extra = {"packed": ext.conv2d_pack_weights(wt, g)} if packed else {}
    if packed:
        assert extra["packed"] is not None, "this geometry should take the packed weights"
    return ext.conv2d(x, wt, b, 1, 1, *d, *p, g, False, "avx2", act, 0.0, 0.0, None, threads=threads, **extra)


def _require_packing() -> None:
    _require_conv2d("avx2")
    if not hasattr(_native.EXTENSION, "conv2d_pack_weights"):
        pytest.skip("an extension without conv2d_pack_weights")


@pytest.mark.parametrize("case", CASES, ids=[str(i) for i in range(len(CASES))])
def test_packed_weights_give_the_unpacked_bits_and_match_the_twin(case: tuple) -> None:
    _require_packing()
    x, wt, b = _data(case, seed=case[1] + case[4])
    got = _run(case, x, wt, b, packed=True)
    np.testing.assert_array_equal(got, _run(case, x, wt, b, packed=False))
    *_, d, p, g = case
    want = _conv_im2col(x, wt, b, [1, 1], list(d), list(p[:2]), list(p[2:]), g)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.sqrt(wt[0].size))
    # ReLU inside the tile (its last K block) and SiLU after it
    for act in (1, 5):
        np.testing.assert_array_equal(_run(case, x, wt, b, True, act), _run(case, x, wt, b, False, act))
    np.testing.assert_array_equal(_run(case, x, wt, b, True, threads=2), got)


@pytest.mark.parametrize("case", CASES, ids=[str(i) for i in range(len(CASES))])
def test_the_kernel_reads_the_packed_weights(case: tuple) -> None:
    """Zeros given as the packed form leave the bias wherever a panel took the packed path
    (every panel but the edge ones that are packed copies: so that the bitwise test above
    is not passed by a kernel that ignores them)."""
    _require_packing()
    x, wt, b = _data(case, seed=5)
    *_, d, p, g = case
    ext = _native.EXTENSION
    assert ext is not None
    got = ext.conv2d(x, wt, b, 1, 1, *d, *p, g, False, "avx2", packed=np.zeros(wt.size, np.float32))
    assert (got == b[None, :, None, None]).mean() > 0.5


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_packed_weights_carry_non_finite_values(value: float) -> None:
    """An inf or NaN in the input or the weights reaches the same outputs as unpacked."""
    _require_packing()
    case = CASES[1]
    x, wt, b = _data(case, seed=3)
    x[0, 5, 1, 36] = value
    wt[48, 39, 2, 0] = value  # the last, one-row block
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(_run(case, x, wt, b, True), _run(case, x, wt, b, False))


def test_pack_weights_declines_where_the_kernel_would_not_read_them() -> None:
    _require_packing()
    ext = _native.EXTENSION
    assert ext is not None
    assert ext.conv2d_pack_weights(np.ones((42, 4, 3, 3), np.float32)) is None  # 7 row blocks
    assert ext.conv2d_pack_weights(np.ones((256, 64, 1, 1), np.float32)) is None  # 1 x 1
    assert ext.conv2d_pack_weights(np.ones((86, 4, 3, 3), np.float32), 2).shape == (86 * 36,)  # 43 per group
    assert ext.conv2d_pack_weights(np.ones((84, 4, 3, 3), np.float32), 2) is None  # 42 per group
    assert ext.conv2d_pack_weights(np.ones((43, 4, 3, 3), np.float32)).shape == (43 * 36,)
    with pytest.raises(ValueError, match="group"):
        ext.conv2d_pack_weights(np.ones((43, 4, 3, 3), np.float32), 2)
    with pytest.raises(ValueError, match="packed"):
        ext.conv2d(
            np.ones((1, 4, 5, 5), np.float32),
            np.ones((43, 4, 3, 3), np.float32),
            None,
            1,
            1,
            1,
            1,
            1,
            1,
            1,
            1,
            1,
            False,
            "avx2",
            packed=np.ones(5, np.float32),
        )


def test_conv_kernel_packs_only_immutable_weights() -> None:
    _require_packing()
    if not _native.CONV2D or _native.CONV_ISA != "avx2":
        pytest.skip("the runtime does not run the AVX2 convolution here")
    case = CASES[0]
    x, wt, b = _data(case, seed=1)
    want = conv(x, wt, b, pads=[1, 1, 1, 1])
    assert conv_kernels.packed_weights(wt, 1) is None  # writeable: never cached
    frozen = wt.copy()
    frozen.flags.writeable = False
    assert conv_kernels.packed_weights(frozen, 1) is not None
    np.testing.assert_array_equal(conv(x, frozen, b, pads=[1, 1, 1, 1]), want)


def test_conv_of_an_empty_batch_is_empty() -> None:
    """(The numpy path's im2col reshape inferred a -1 from zero cells: a ValueError.)"""
    x, wt, b = _data(CASES[0], seed=2)
    wt.flags.writeable = False
    got = conv(x[:0], wt, b, pads=[1, 1, 1, 1])
    assert got.shape == (0, 128, 4, 40)
