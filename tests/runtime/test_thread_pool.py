"""The native persistent thread pool (``src/thread_pool.h``): every item runs once, on a worker
below the thread count; a worker's exception reaches the caller; concurrent callers (Python
threads, sessions) neither deadlock nor mix their results; a forked child runs threaded work;
the helpers are joined at interpreter exit; the threaded convolution keeps one thread's bits."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from typing import Any

import numpy as np
import pytest
from test_conv_threads import _conv_model
from test_native import _require_conv2d

import onnx_light
from onnx_light.runtime import InferenceSession, _native

pytestmark = pytest.mark.skipif(not _native.THREAD_POOL, reason="the native extension (with its pool) is not built")


def _pool() -> Any:
    assert _native.EXTENSION is not None
    return _native.EXTENSION


@pytest.mark.parametrize("threads", [1, 2, 3, 8])
@pytest.mark.parametrize("items", [0, 1, 2, 7, 200])
def test_every_item_runs_once_on_a_worker_below_threads(threads: int, items: int) -> None:
    ids = _pool().thread_pool_selftest(threads, items, -1, 2000)
    assert ids.shape == (items,)
    assert ids.min(initial=0) >= 0  # -1: an item that did not run
    assert ids.max(initial=0) < threads


def test_helpers_share_the_items() -> None:
    """With items that take a while the helper takes some of them (unless never scheduled)."""
    for _ in range(20):
        ids = _pool().thread_pool_selftest(2, 64, -1, 200_000)
        if (ids == 1).any():
            break
    assert (ids == 1).any() and (ids == 0).any()
    assert _pool().thread_pool_helpers() >= 1


@pytest.mark.parametrize("throw_at", [0, 1, 63])
def test_a_workers_exception_reaches_the_caller(throw_at: int) -> None:
    with pytest.raises(RuntimeError, match=f"item {throw_at} failed"):
        _pool().thread_pool_selftest(2, 64, throw_at, 20_000)
    ids = _pool().thread_pool_selftest(2, 64, -1, 0)
    assert ids.min() >= 0  # the pool still works


def test_concurrent_callers_do_not_deadlock() -> None:
    """Python threads calling the pool at once: each call runs all its items (on the pool or
    on its own thread), none waits on another, and sessions give their one-thread results."""
    model = _conv_model()
    x = np.random.default_rng(3).standard_normal((2, 8, 40, 40)).astype(np.float32)
    want = InferenceSession(model).run(None, {"x": x})[0]
    sessions = [InferenceSession(model, intra_op_num_threads=t) for t in (2, 2, 3)]
    errors: list[BaseException] = []

    def session_worker(sess: InferenceSession) -> None:
        try:
            for _ in range(6):
                np.testing.assert_array_equal(sess.run(None, {"x": x})[0], want)
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    def pool_worker() -> None:
        try:
            for _ in range(30):
                ids = _pool().thread_pool_selftest(2, 50, -1, 5000)
                assert ids.min() >= 0 and ids.max() < 2
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    workers = [threading.Thread(target=session_worker, args=(s,)) for s in sessions * 2]
    workers += [threading.Thread(target=pool_worker) for _ in range(3)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in workers), "a caller hangs"
    assert not errors, errors


def _python(code: str) -> subprocess.CompletedProcess[str]:
    """Runs ``code`` in a fresh interpreter that imports the onnx_light this process imported
    (an installed one in CI, whose checkout has no built extension): from its parent folder,
    which also comes first on the path (``-c`` puts the working folder there)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(onnx_light.__file__)))
    env = {**os.environ, "PYTHONPATH": here}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=here, capture_output=True, text=True, timeout=120
    )


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_runs_threaded_work() -> None:
    """The child of a process whose pool is alive (and busy in another thread) re-creates it:
    its calls finish and its own helper takes items."""
    done = _python(
        """
        import os, threading
        from onnx_light import _native as N
        assert N.thread_pool_selftest(2, 64, -1, 100000).min() >= 0
        busy = threading.Thread(target=N.thread_pool_selftest, args=(2, 400, -1, 1000000))
        busy.start()  # the parent's pool is in a call while it forks
        pid = os.fork()
        if pid == 0:
            runs = [N.thread_pool_selftest(2, 64, -1, 200000) for _ in range(10)]
            ok = all(ids.min() >= 0 for ids in runs)
            helped = any((ids == 1).any() for ids in runs)  # the child's own helper joined
            os._exit(0 if ok and helped else 3)
        _, status = os.waitpid(pid, 0)
        busy.join()
        print("child", os.waitstatus_to_exitcode(status))
        """
    )
    assert done.returncode == 0, done.stderr
    assert "child 0" in done.stdout


def _tasks() -> int:
    return len(os.listdir("/proc/self/task"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs /proc")
def test_helpers_are_joined_at_exit() -> None:
    """shutdown() joins the helpers (the process's thread count drops back); at exit atexit
    does it, and the interpreter exits at once with its helpers alive."""
    done = _python(
        """
        import os
        import time
        from onnx_light import _native as N
        tasks = lambda: len(os.listdir("/proc/self/task"))
        before = tasks()
        N.thread_pool_selftest(4, 64, -1, 1000)
        assert N.thread_pool_helpers() == 3 and tasks() == before + 3, (N.thread_pool_helpers(), tasks())
        N.thread_pool_shutdown()
        # a joined thread may stay listed in /proc for a moment (the kernel reaps it after join)
        for _ in range(1000):
            if tasks() == before:
                break
            time.sleep(0.01)
        assert N.thread_pool_helpers() == 0 and tasks() == before, (before, tasks())
        N.thread_pool_selftest(2, 64, -1, 1000)  # started again; joined by atexit
        assert N.thread_pool_helpers() == 1
        print("ok")
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def _random_case(rng: np.random.Generator) -> tuple:
    k = (int(rng.integers(1, 6)), int(rng.integers(1, 6)))
    s = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
    d = (int(rng.integers(1, 3)), 1)
    p = tuple(int(v) for v in rng.integers(0, 3, size=4))
    g = int(rng.choice([1, 1, 2, 4]))
    c, m = g * int(rng.integers(1, 9)), g * int(rng.integers(1, 20))
    h, w = (int(v) for v in rng.integers(k[0] * d[0] + 1, 40, size=2))
    return int(rng.integers(1, 4)), c, h, w, m, k, s, d, p, g


@pytest.mark.parametrize("seed", range(12))
def test_threaded_conv_keeps_the_bits_over_random_shapes(seed: int) -> None:
    """Random geometries (small maps and few channels: the split over weight rows) give the
    one-thread bits with 2, 3 and 4 threads; depthwise too."""
    _require_conv2d("avx2")
    from test_conv_threads import _conv

    rng = np.random.default_rng(seed)
    cases = [_random_case(rng) for _ in range(4)]
    n, c, h, w = 2, 4 * (seed + 1), 9 + seed, 11 + 2 * seed
    cases.append((n, c, h, w, c, (3, 3), (1 + seed % 2, 1 + seed % 2), (1, 1), (1, 1, 1, 1), c))  # depthwise
    for case in cases:
        one = _conv(case, "", 1)
        for threads in (2, 3, 4):
            np.testing.assert_array_equal(_conv(case, "", threads), one, err_msg=str(case))


@pytest.mark.parametrize("shape", [(1, 3, 9, 10), (2, 16, 40, 33), (1, 64, 80, 80)])
@pytest.mark.parametrize("window", [(3, 3, 2, 2, 1, 1), (2, 2, 2, 2, 0, 0), (5, 5, 1, 1, 2, 2)])
def test_threaded_max_pool_keeps_the_bits(shape: tuple, window: tuple) -> None:
    kh, kw, sh, sw, pt, pl = window
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    x[0, 0, 0, :3] = np.nan  # NaN propagation is per window, whichever worker runs it
    oh, ow = (shape[2] + 2 * pt - kh) // sh + 1, (shape[3] + 2 * pl - kw) // sw + 1
    one = _pool().max_pool2d_f32(x, kh, kw, sh, sw, 1, 1, oh, ow, pt, pl)
    for threads in (2, 3):
        np.testing.assert_array_equal(_pool().max_pool2d_f32(x, kh, kw, sh, sw, 1, 1, oh, ow, pt, pl, threads), one)


@pytest.mark.parametrize("size", [1, 7, 16384, 16385, 100_003])
def test_threaded_sigmoid_and_softmax_keep_the_bits(size: int) -> None:
    x = (np.random.default_rng(size).standard_normal(size) * 8).astype(np.float32)
    one = np.empty_like(x)
    _pool().sigmoid_f32(x, one)
    for threads in (2, 3):
        y = np.empty_like(x)
        _pool().sigmoid_f32(x, y, threads)
        np.testing.assert_array_equal(y, one)
    for cols in (1, 5, 1000, 20000):
        m = np.resize(x, (max(1, size // cols), cols))
        want = np.empty_like(m)
        _pool().softmax_rows_f32(m, want)
        got = np.empty_like(m)
        _pool().softmax_rows_f32(m, got, 2)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("inner", [1, 3, 400])
def test_threaded_resample_keeps_the_bits(dtype: Any, inner: int) -> None:
    rng = np.random.default_rng(inner)
    x = rng.standard_normal((6, 50, inner)).astype(dtype)
    index = rng.integers(0, 50, size=(97, 4))
    weight = rng.standard_normal((97, 4)).astype(dtype)
    one = _pool().resample_axis(x, index, weight)
    for threads in (2, 3):
        np.testing.assert_array_equal(_pool().resample_axis(x, index, weight, threads), one)


def test_other_kernels_check_threads() -> None:
    x = np.zeros((1, 1, 4, 4), np.float32)
    with pytest.raises(ValueError, match="threads"):
        _pool().max_pool2d_f32(x, 2, 2, 2, 2, 1, 1, 2, 2, 0, 0, 0)
    with pytest.raises(ValueError, match="threads"):
        _pool().sigmoid_f32(x.ravel(), x.ravel(), 65)


@pytest.mark.parametrize("threads", [1, 2])
def test_stats_record_every_item_of_every_run(threads: int) -> None:
    """``thread_pool_set_stats`` (bench_threads.py --layers): each run's items, their CPU times
    and workers, the callers' time in the runs; taking them resets them; off records nothing."""
    pool = _pool()
    pool.thread_pool_set_stats(True)
    try:
        pool.thread_pool_stats()
        pool.thread_pool_selftest(threads, 5, -1, 200_000)
        pool.thread_pool_selftest(threads, 3, -1, 200_000)
        items, workers, inside, runs, caller = pool.thread_pool_stats()
    finally:
        pool.thread_pool_set_stats(False)
    assert runs == [5, 3] and len(items) == len(workers) == 8
    # 0.2 ms of wall-clock spinning each: less thread CPU time when another process takes the core
    assert all(0 < t < 1e9 for t in items)
    assert set(workers) <= set(range(threads))
    assert sum(inside) >= sum(items) and caller >= inside[0]
    assert pool.thread_pool_stats()[3] == []  # taken: reset
    pool.thread_pool_selftest(threads, 4, -1, 0)
    assert pool.thread_pool_stats()[3] == []  # off: nothing recorded


@pytest.mark.parametrize(
    ("threads", "macs", "want"),
    [(1, 1 << 30, 1), (2, (1 << 20) - 1, 1), (2, 1 << 20, 2), (4, 3 << 19, 3), (4, 1 << 30, 4), (3, 0, 1)],
)
def test_a_conv_gets_one_worker_per_share_of_work(threads: int, macs: int, want: int) -> None:
    """``conv_threads``: the session's count, at most one worker per 512K multiply-adds, at least one."""
    assert _native._THREAD_MIN_MACS == 1 << 19  # the default (ONNX_LIGHT_THREAD_MIN_MACS unset)
    token = _native.CONV_THREADS.set(threads)
    try:
        assert _native.conv_threads(macs) == want
    finally:
        _native.CONV_THREADS.reset(token)


def test_small_native_loops_stay_on_one_thread() -> None:
    if _native.NATIVE is None or not _native.THREAD_POOL:
        pytest.skip("the pure-Python twins run every loop on one thread")
    token = _native.CONV_THREADS.set(4)
    try:
        assert _native._threads((1 << 16) - 1) == {}  # less than two shares
        assert _native._threads(1 << 15) == {}  # one worker's share: no call into the pool
        assert _native._threads(3 << 15) == {"threads": 3}
        assert _native._threads(1 << 20) == {"threads": 4}
    finally:
        _native.CONV_THREADS.reset(token)
