"""Large float32 matrix products split into bands over the session's threads.

numpy's matmul releases the GIL and OpenBLAS runs on one thread in a session (``_blas.py``:
its own threads busy-wait after a call and would take the core the native pool's helper needs),
so a product of ``intra_op_num_threads`` > 1 is cut into row (or column) bands, each band one
matmul on its own Python thread into its slice of the result. Every output element is the same
dot product of the same row and column as in the unsplit call, and bands start at multiples of
64 rows (columns), so each sits at the same place of BLAS's register tiles as unsplit (an edge
tile sums in another order), and the contraction axis stays whole: the bits are those of one
thread (float32: 0 of ~60 random products differed, 2-4 bands). float64 is not split: its
products differed in the last bit of 0.04-0.2% of the elements even so (another blocking in
OpenBLAS's dgemm). The backward graphs' weight gradients (``Gemm(dY, patches^T)``: resnet18's
21 of them, 27% of its backward) run this way.

A one-row product by a transposed matrix (a classifier's Gemm with transB: 1 x 1024 by the
1000 x 1024 weights) is BLAS's gemv on b's contiguous rows, one dot product per output whatever
columns a call gets (0 of 600 random products differed, cut at multiples of 64, 2-3 bands; a
one-row product by a C-contiguous b is not split: 10 of 16 differed). It reads each weight once,
so its time is that of streaming b from memory (mobilenetv3's two: 0.53 ms, 17% of its run,
against 54 us warm): it splits by b's bytes (``MIN_MATVEC_BYTES`` a band) instead of its
multiply-adds.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from ._native import CONV_THREADS

__all__ = ["matmul_rows"]

#: multiply-adds each band must get (~1 ms of one core): a band's dispatch costs tens of microseconds
MIN_MACS = 1 << 23
#: rows each band must get, and what band boundaries are multiples of (every register tile of
#: BLAS's kernels: 4-32 rows)
MIN_ROWS = 64
#: bytes of b each band of a one-row product must stream (:func:`matmul_rows`): 1 MB, ~70 us from memory
MIN_MATVEC_BYTES = 1 << 20
_FLOATS = (np.dtype(np.float32),)

_lock = threading.Lock()
_executor: list[ThreadPoolExecutor] = []  # created on first use; forgotten in a forked child


def _forget_after_fork() -> None:
    _executor.clear()  # the parent's worker threads do not exist in the child


os.register_at_fork(after_in_child=_forget_after_fork)


def _pool() -> ThreadPoolExecutor:
    with _lock:
        if not _executor:
            _executor.append(ThreadPoolExecutor(max_workers=63, thread_name_prefix="onnx-light-matmul"))
        return _executor[0]


def _bands(rows: int, macs: int, streamed: int = 0) -> int:
    """How many bands a product cut along an axis of ``rows`` and of ``macs`` multiply-adds takes
    (1: unsplit); a one-row product's ``streamed`` bytes of b count instead when they give more."""
    threads = CONV_THREADS.get()
    if threads < 2:
        return 1
    return max(1, min(threads, rows // MIN_ROWS, max(macs // MIN_MACS, streamed // MIN_MATVEC_BYTES)))


def matmul_rows(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray | None:
    """``a @ b`` of 2-D float32 arrays, its bands computed at once on the context's threads
    (``intra_op_num_threads``): bands of rows, or of columns when ``b`` has more columns than ``a``
    rows (a 64-channel weight gradient: 64 x 576), into ``out`` when given (a C-contiguous array
    of the result's shape and dtype) or a new array; None when the product is not worth splitting
    (then the caller's own matmul runs)."""
    if a.ndim != 2 or b.ndim != 2 or a.dtype != b.dtype or a.dtype not in _FLOATS or a.shape[1] != b.shape[0]:
        return None
    if a.dtype.metadata or b.dtype.metadata:
        return None  # a tagged dtype (kernels/_dtypes): the caller's matmul keeps its tag
    m, k = a.shape
    n = b.shape[1]
    by_rows = m >= n
    size = m if by_rows else n
    matvec = m == 1 and b.flags.f_contiguous  # b = weights.T: gemv, each output one dot product
    bands = _bands(size, m * n * k, b.nbytes if matvec else 0)
    if bands < 2:
        return None
    if out is None:
        out = np.empty((m, n), a.dtype)
    cuts = [size * i // bands // MIN_ROWS * MIN_ROWS for i in range(bands)] + [size]

    def band(lo: int, hi: int) -> np.ndarray:
        if by_rows:
            return np.matmul(a[lo:hi], b, out=out[lo:hi])
        return np.matmul(a, b[:, lo:hi], out=out[:, lo:hi])  # BLAS writes the strided slice (ldc = n)

    pool = _pool()
    pending: list[Future[np.ndarray]] = [pool.submit(band, lo, hi) for lo, hi in zip(cuts[1:-1], cuts[2:])]
    try:
        band(0, cuts[1])
    finally:
        for f in pending:
            f.result()
    return out
