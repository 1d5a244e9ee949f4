"""Large matrix products split by row bands over the session's threads (``runtime/_split.py``):
the bits of one thread, bands on other threads, nothing split below the thresholds, and a
forked child that splits again (the parent's worker threads do not exist there)."""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

import numpy as np
import pytest

from onnx_light import TensorProto, helper, numpy_helper
from onnx_light.runtime import InferenceSession, _native, _split
from onnx_light.runtime.kernels.linalg import gemm

# m, k, n, transB, dtype: resnet18's weight-gradient Gemms (dY @ patches^T), a plain one, float64,
# an odd row count, and one too small to split
CASES = [
    (512, 49, 4608, 1, np.float32),
    (64, 3136, 576, 1, np.float32),
    (1000, 512, 300, 0, np.float32),
    (333, 700, 257, 0, np.float64),
    (37, 300, 99, 0, np.float32),
    # mobilenetv3's classifier (1-row Gemms with transB: split by the weights' bytes), the same
    # weights not transposed (not split: gemv over C-contiguous b sums in other orders per band)
    (1, 576, 1024, 1, np.float32),
    (1, 1024, 1000, 1, np.float32),
    (1, 1024, 1000, 0, np.float32),
    (1, 1280, 130, 1, np.float32),
    *((1, int(k), int(n), 1, np.float32) for k, n in np.random.default_rng(10).integers(256, 3000, (8, 2))),
    *(
        (int(m), int(k), int(n), int(t), d)
        for m, k, n, t, d in zip(
            np.random.default_rng(7).integers(128, 700, 6),
            np.random.default_rng(8).integers(100, 900, 6),
            np.random.default_rng(9).integers(100, 900, 6),
            [0, 1] * 3,
            [np.float32, np.float64] * 3,
        )
    ),
]


def _threads(n: int) -> Any:
    class Context:
        def __enter__(self) -> None:
            self.token = _native.CONV_THREADS.set(n)

        def __exit__(self, *exc: object) -> None:
            _native.CONV_THREADS.reset(self.token)

    return Context()


@pytest.fixture
def one_blas_thread() -> Any:
    """OpenBLAS on one thread, as a session runs it (``_blas.py``): its own threads split a gemv
    at other columns than the bands, changing last bits (1 of 2529 outputs of a 1-row product)."""
    from onnx_light.runtime._blas import get_blas_threads, use_blas_threads

    before = get_blas_threads()
    use_blas_threads(1)
    yield
    if before is not None:
        use_blas_threads(before)


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}x{c[1]}x{c[2]}" for c in CASES])
def test_gemm_bands_give_the_bits_of_one_thread(case: tuple, one_blas_thread: None) -> None:
    m, k, n, trans_b, dtype = case
    rng = np.random.default_rng(m + n)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(dtype)
    c = rng.standard_normal(n).astype(dtype)
    with _threads(1):
        one = gemm(a, b, c, alpha=0.5, transB=trans_b)
    # float64 is never split (OpenBLAS's dgemm changes last bits when its rows are)
    # bands of rows, or of columns when there are more columns (64 x 576: a 64-channel layer's dW)
    streamed = n * k * np.dtype(dtype).itemsize if m == 1 and trans_b else 0
    large = m * n * k >= 2 * _split.MIN_MACS or streamed >= 2 * _split.MIN_MATVEC_BYTES
    split = large and max(m, n) >= 2 * _split.MIN_ROWS and dtype == np.float32
    for threads in (2, 3):
        with _threads(threads):
            assert (_split.matmul_rows(a, b.T if trans_b else b) is not None) is split
            np.testing.assert_array_equal(gemm(a, b, c, alpha=0.5, transB=trans_b), one)
            out = np.empty((m, n), dtype)  # the buffer pool's array
            got = gemm(a, b, c, alpha=0.5, transB=trans_b, out=out)
            np.testing.assert_array_equal(got, one)
    want = 0.5 * (a.astype(np.float64) @ (b.T if trans_b else b).astype(np.float64)) + c
    np.testing.assert_allclose(one, want, rtol=1e-4, atol=1e-4 * k**0.5)


def _record_threads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the threads that run _split's matmuls from now on."""
    names: list[str] = []
    real = np.matmul

    class Numpy:
        def __getattr__(self, name: str) -> Any:
            return getattr(np, name)

        @staticmethod
        def matmul(*args: Any, **kwargs: Any) -> Any:
            names.append(threading.current_thread().name)
            return real(*args, **kwargs)

    monkeypatch.setattr(_split, "np", Numpy())
    return names


def test_bands_run_on_other_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """With 2 threads the second band runs on a worker thread; with 1 nothing is split."""
    names = _record_threads(monkeypatch)
    a = np.ones((512, 64), np.float32)
    b = np.ones((64, 1024), np.float32)
    with _threads(1):
        assert _split.matmul_rows(a, b) is None
    with _threads(2):
        y = _split.matmul_rows(a, b)
    assert y is not None and (y == 64).all()
    assert sorted(n.startswith("onnx-light-matmul") for n in names) == [False, True], names  # caller, worker


def test_session_gemm_with_two_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Gemm step of a session asked for 2 threads runs its bands on 2 threads and gives the
    result of 1 thread."""
    names = _record_threads(monkeypatch)
    rng = np.random.default_rng(4)
    w = numpy_helper.from_array(rng.standard_normal((600, 400)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [256, 400])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [256, 600])],
        [w],
    )
    _check_two_threads(graph, rng.standard_normal((256, 400)).astype(np.float32), names)


def _check_two_threads(graph: Any, x: np.ndarray, names: list[str]) -> None:
    """The model of ``graph`` gives the bits of 1 thread with 2, a band on a worker thread."""
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    one = InferenceSession(model, intra_op_num_threads=1)
    two = InferenceSession(model, intra_op_num_threads=2)
    for _ in range(3):  # the observed run, then the generated function with the buffer pool
        np.testing.assert_array_equal(two.run(None, {"x": x})[0], one.run(None, {"x": x})[0])
    assert any(n.startswith("onnx-light-matmul") for n in names), names


def test_session_classifier_matvecs_with_two_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """mobilenetv3's classifier at batch 1 (Gemm 576 -> 1024, HardSwish, Gemm 1024 -> 1000, both
    transB): its 1-row products run in bands on 2 threads with the bits of 1 thread."""
    names = _record_threads(monkeypatch)
    rng = np.random.default_rng(6)
    inits = [
        numpy_helper.from_array((rng.standard_normal((1024, 576)) * 0.05).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal(1024).astype(np.float32), "b1"),
        numpy_helper.from_array((rng.standard_normal((1000, 1024)) * 0.05).astype(np.float32), "w2"),
        numpy_helper.from_array(rng.standard_normal(1000).astype(np.float32), "b2"),
    ]
    graph = helper.make_graph(
        [
            helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1),
            helper.make_node("HardSwish", ["h"], ["a"]),
            helper.make_node("Gemm", ["a", "w2", "b2"], ["y"], transB=1),
        ],
        "classifier",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 576])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1000])],
        inits,
    )
    _check_two_threads(graph, rng.standard_normal((1, 576)).astype(np.float32), names)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_splits_again() -> None:
    """The parent's worker threads do not exist after fork: the child makes its own (a hang before)."""
    a = np.ones((512, 64), np.float32)
    b = np.ones((64, 1024), np.float32)
    with _threads(2):
        assert _split.matmul_rows(a, b) is not None  # the parent's pool exists now
    pid = os.fork()
    if pid == 0:  # the child: exit 0 when the split works, killed by the alarm when it hangs
        signal.alarm(20)
        try:
            with _threads(2):
                y = _split.matmul_rows(a, b)
            os._exit(0 if y is not None and (y == 64).all() else 1)
        finally:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
