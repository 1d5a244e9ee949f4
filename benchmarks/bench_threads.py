"""Two threads against one: the real models of ``bench_real_models.py`` in our runtime with
``intra_op_num_threads=1`` and ``=2`` (the native convolution splits its work over the threads;
everything else runs on one), and onnxruntime likewise, in one process, alternating, wall clock
(a second thread shows only in wall time). Issue 15 asks conv-heavy models to run at least 1.6x
faster with 2 threads than with 1; one thread stays the default.

    PYTHONPATH=. python benchmarks/bench_threads.py [--models resnet18,dbnet,yolo] [--rounds 9]
    PYTHONPATH=. python benchmarks/bench_threads.py --profile --models yolo   # per-op, 1 vs 2 threads
    PYTHONPATH=. python benchmarks/bench_threads.py --layers --models resnet18  # per conv layer, 1 vs 2
    PYTHONPATH=. python benchmarks/bench_threads.py --policy --models mobilenetv3,yolo  # thresholds, spin
    PYTHONPATH=. python benchmarks/bench_threads.py --amdahl --models resnet18 [--backward]  # serial part, per op

Measure on a quiet machine: with other jobs on the cores, the second thread is rarely scheduled
(the load is printed with the table, and "CPU/wall" is the process CPU time over the wall time
of the 2-thread runs: near 2 when both cores were ours, near 1 when the helper rarely ran).
The table gives the ratio of the medians and of the best runs.
"""

from __future__ import annotations

import os

# one BLAS thread for numpy (the 1x1 convolutions that go to OpenBLAS stay on one thread)
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_real_models import SHAPES, real_model_path  # noqa: E402


def _ours(path: str, threads: int) -> Callable[[dict[str, np.ndarray]], Any]:
    import onnx_light as ol

    sess = ol.runtime.InferenceSession(ol.load(path), intra_op_num_threads=threads)
    return lambda feeds: sess.run(None, feeds)


ORT_SPIN = False  # --ort-spin: onnxruntime's intra-op threads poll for work after a run (its default)


def _theirs(path: str, threads: int) -> Callable[[dict[str, np.ndarray]], Any]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # spinning helpers keep a core busy after the run, stealing it from the next engine's run
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if ORT_SPIN else "0")
    sess = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    return lambda feeds: sess.run(None, feeds)


def _alternate(fns: dict[str, Callable[[], Any]], rounds: int) -> dict[str, list[tuple[float, float]]]:
    """(wall, process CPU) seconds of each run, the engines alternating (order reversed every round)."""
    samples: dict[str, list[tuple[float, float]]] = {k: [] for k in fns}
    order = list(fns)
    for r in range(rounds):
        for k in order if r % 2 == 0 else order[::-1]:
            t, c = time.perf_counter(), time.process_time()
            fns[k]()
            samples[k].append((time.perf_counter() - t, time.process_time() - c))
    return samples


ENGINES = {"ours": _ours, "ort": _theirs}


def _feeds(name: str) -> dict[str, np.ndarray]:
    return {"input": np.random.default_rng(0).standard_normal(SHAPES[name]).astype(np.float32)}


def _worker(spec: str) -> None:
    """``--worker ENGINE:MODEL:THREADS``: one engine alone in this process. Prints the SHA-256 of
    the first run's outputs, then one run per line read on stdin: "wall CPU" seconds (CPU of
    this process: all of its threads), until EOF."""
    import hashlib

    engine, name, threads = spec.split(":")
    fn, feeds = ENGINES[engine](real_model_path(name), int(threads)), _feeds(name)
    digest = hashlib.sha256(b"".join(np.ascontiguousarray(o).tobytes() for o in fn(feeds))).hexdigest()
    print(digest, flush=True)
    for _ in sys.stdin:
        t, c = time.perf_counter(), time.process_time()
        fn(feeds)
        print(f"{time.perf_counter() - t!r} {time.process_time() - c!r}", flush=True)


def bench_isolated(name: str, rounds: int) -> dict[str, list[tuple[float, float]]]:
    """``bench`` with every engine/thread count in its own process (the others block in a read
    meanwhile): no thread of another engine shares the cores during a run, and the CPU/wall of
    a run counts only that engine's threads."""
    import subprocess

    workers: dict[str, subprocess.Popen[str]] = {}
    argv = [sys.executable, os.path.abspath(__file__), *(["--ort-spin"] if ORT_SPIN else []), "--worker"]
    for engine in ENGINES:
        for threads in (1, 2):
            workers[f"{engine}-{threads}"] = subprocess.Popen(
                [*argv, f"{engine}:{name}:{threads}"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
            )
    try:
        digests = {k: w.stdout.readline().strip() for k, w in workers.items() if w.stdout}
        # the threaded kernels are bit-identical to one thread
        assert digests["ours-1"] == digests["ours-2"], f"{name}: 2 threads differ from 1"

        def run(w: subprocess.Popen[str]) -> Callable[[], tuple[float, float]]:
            def call() -> tuple[float, float]:
                assert w.stdin and w.stdout
                w.stdin.write("\n")
                w.stdin.flush()
                wall, cpu = w.stdout.readline().split()
                return float(wall), float(cpu)

            return call

        fns = {k: run(w) for k, w in workers.items()}
        samples: dict[str, list[tuple[float, float]]] = {k: [] for k in fns}
        order = list(fns)
        for r in range(rounds + 2):  # 2 warm-up rounds
            for k in order if r % 2 == 0 else order[::-1]:
                sample = fns[k]()
                if r >= 2:
                    samples[k].append(sample)
        return samples
    finally:
        for w in workers.values():
            if w.stdin:
                w.stdin.close()
            w.wait()


def bench(name: str, rounds: int) -> dict[str, list[tuple[float, float]]]:
    """The (wall, CPU) time of every run of each engine/thread count on ``name``, in this process."""
    path = real_model_path(name)
    feeds = _feeds(name)
    runs = {
        "ours-1": _ours(path, 1),
        "ours-2": _ours(path, 2),
        "ort-1": _theirs(path, 1),
        "ort-2": _theirs(path, 2),
    }
    one, two = runs["ours-1"](feeds), runs["ours-2"](feeds)
    for a, b in zip(one, two):  # the threaded convolution is bit-identical to one thread
        np.testing.assert_array_equal(a, b)
    fns = {k: (lambda f=f: f(feeds)) for k, f in runs.items()}
    _alternate(fns, 2)  # warm-up
    return _alternate(fns, rounds)


def _profile(name: str, rounds: int) -> None:
    """Per-op time (``verbose=2``) of our runtime with 1 and 2 threads: where the second core idles."""
    import contextlib
    import io

    import onnx_light as ol

    path = real_model_path(name)
    feeds = {"input": np.random.default_rng(0).standard_normal(SHAPES[name]).astype(np.float32)}
    best: dict[int, tuple[float, dict[str, tuple[int, float]]]] = {}
    sessions = {t: ol.runtime.InferenceSession(ol.load(path), intra_op_num_threads=t, verbose=2) for t in (1, 2)}
    for r in range(rounds + 2):
        for t, sess in sessions.items():
            start = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()):
                sess.run(None, feeds)
            wall = time.perf_counter() - start
            if r >= 2 and (t not in best or wall < best[t][0]):
                best[t] = (wall, dict(sess.last_profile))
    ops = sorted(best[1][1], key=lambda k: -best[1][1][k][1])
    print(f"\n{name}: best of {rounds}, wall {best[1][0] * 1e3:.2f} ms (1 thread), {best[2][0] * 1e3:.2f} ms (2)")
    print("| op | nodes | 1 thread | share | 2 threads | share | 1/2 |")
    print("|---|---|---|---|---|---|---|")
    total = {t: sum(v for _, v in best[t][1].values()) for t in (1, 2)}
    for op in ops:
        n, one = best[1][1][op]
        two = best[2][1].get(op, (0, 0.0))[1]
        print(
            f"| {op} | {n} | {one * 1e3:.2f} ms | {one / total[1]:.1%} | {two * 1e3:.2f} ms | {two / total[2]:.1%}"
            f" | {one / two if two else float('nan'):.2f}x |"
        )


class _Recorder:
    """Stands in for the extension while a model runs once: keeps every conv2d call's arguments."""

    def __init__(self, native: Any) -> None:
        self.native, self.calls = native, []  # type: ignore[var-annotated]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.native, name)

    def conv2d(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.pop("out", None)
        kwargs.pop("threads", None)
        self.calls.append(([np.array(a) if isinstance(a, np.ndarray) else a for a in args], kwargs))
        return self.native.conv2d(*args, **kwargs)


def _conv_calls(name: str) -> list[tuple[list[Any], dict[str, Any]]]:
    """The arguments of every native conv2d call of one run of ``name`` (1 thread)."""
    import onnx_light as ol
    from onnx_light.runtime import _native

    path = real_model_path(name)
    feeds = {"input": np.random.default_rng(0).standard_normal(SHAPES[name]).astype(np.float32)}
    sess = ol.runtime.InferenceSession(ol.load(path))
    sess.run(None, feeds)
    recorder, native = _Recorder(_native.NATIVE), _native.NATIVE
    setattr(_native, "NATIVE", recorder)  # noqa: B010 (the module global conv2d_native reads)
    try:
        sess.run(None, feeds)
    finally:
        _native.NATIVE = native
    return recorder.calls


def _layer_class(args: list[Any], kwargs: dict[str, Any]) -> str:
    """The path the native conv takes: depthwise, winograd, 1x1, 3x3/2, 7x7/2 stem ..."""
    from onnx_light.runtime import _native

    x, w, group = args[0], args[1], args[11]
    sh, sw, dh, dw, pt, pl, pb, pr = args[3:11]
    if w.shape[1] == 1 and group > 1:
        return f"depthwise {w.shape[2]}x{w.shape[3]}/{sh}"
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    cached = kwargs.get("winograd") is not None
    ext: Any = _native.NATIVE
    if ext.conv2d_winograd_applies(c, h, wd, m, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, group, n, cached):
        return "winograd 3x3/1"
    return f"{kh}x{kw}/{sh}"


def _makespan(costs: list[int], workers: int) -> int:
    """The end of the last item when ``workers`` take the items in order as each gets free."""
    free = [0] * workers
    for c in costs:
        k = free.index(min(free))
        free[k] += c
    return max(free)


#: ``--before``: another build of the extension (with the pool's statistics), modelled beside ours
BEFORE: Any = None


def _modelled(args: list[Any], kwargs: dict[str, Any], reps: int, ext: Any) -> tuple[float, float, float, str]:
    """From thread CPU time (robust to load): the 1-thread call, and the 2-thread call's serial
    part (caller CPU outside the pool's runs) and modelled wall on 2 free cores (each run's items
    taken in order by 2 workers as each gets free). Each item's time, the serial part and the
    1-thread time are their minimum over ``reps`` calls (another process on the core only adds)."""
    one = min(_cpu(lambda: ext.conv2d(*args, **kwargs, threads=1)) for _ in range(reps))
    serial, items, runs = float("inf"), None, []
    ext.thread_pool_set_stats(True)
    try:
        for _ in range(reps):
            ext.thread_pool_stats()
            total = _cpu(lambda: ext.conv2d(*args, **kwargs, threads=2))
            got, _, _, runs, caller = ext.thread_pool_stats()
            serial = min(serial, total - caller)  # outside the pool's runs: what a second core cannot share
            items = got if items is None else [min(p, q) for p, q in zip(items, got)]
    finally:
        ext.thread_pool_set_stats(False)
    model, first = serial, 0
    for size in runs:  # each run ends when its last item does
        model += _makespan((items or [])[first : first + size], 2)
        first += size
    return one, model, serial, "+".join(map(str, runs)) or "0"


def _cpu(fn: Callable[[], Any]) -> int:
    t = time.thread_time_ns()
    fn()
    return time.thread_time_ns() - t


def _wall(args: list[Any], kwargs: dict[str, Any], rounds: int) -> tuple[float, float, float]:
    """(1-thread, 2-thread median wall seconds per call, 2-thread CPU/wall) of one conv, alternating."""
    from onnx_light.runtime import _native

    ext: Any = _native.NATIVE
    t0 = time.perf_counter()
    ext.conv2d(*args, **kwargs, threads=1)
    reps = max(1, int(2e-3 / max(time.perf_counter() - t0, 1e-6)))

    def calls(threads: int) -> Callable[[], Any]:
        return lambda: [ext.conv2d(*args, **kwargs, threads=threads) for _ in range(reps)]

    fns = {"1": calls(1), "2": calls(2)}
    _alternate(fns, 1)
    s = _alternate(fns, rounds)
    (m1, _, _), (m2, _, cpu2) = _stats(s["1"]), _stats(s["2"])
    return m1 / reps, m2 / reps, cpu2


def _add(totals: dict[str, list[float]], cls: str, values: tuple[float, ...]) -> None:
    acc = totals.setdefault(cls, [0.0] * len(values))
    for j, v in enumerate(values):
        acc[j] += v


def _layers(name: str, rounds: int) -> None:
    """Every conv layer of ``name`` alone, 1 and 2 threads alternating: its scaling and CPU/wall,
    and the scaling modelled from thread CPU times (serial part + items on 2 free workers)."""
    from onnx_light.runtime import _native

    ext: Any = _native.NATIVE
    calls = _conv_calls(name)
    print(f"\n{name}: {len(calls)} native convs, median of {rounds} (each run repeats the call until >= 2 ms)")
    head = "| layer | class | in | out | items | 1 thread | 2 threads | 1/2 | CPU/wall (2) |"
    print(head + " model: serial | model 1/2 |" + (" before: serial | before model 1/2 |" if BEFORE else ""))
    print("|---|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if BEFORE else ""))
    totals: dict[str, list[float]] = {}
    for k, (args, kwargs) in enumerate(calls):
        one = ext.conv2d(*args, **kwargs, threads=1)
        np.testing.assert_array_equal(one, ext.conv2d(*args, **kwargs, threads=2))  # the same bits
        m1, m2, cpu2 = _wall(args, kwargs, rounds)
        c1, model, serial, items = _modelled(args, kwargs, rounds, ext)
        cls, was = _layer_class(args, kwargs), ""
        if BEFORE is not None:
            b1, bmodel, bserial, _ = _modelled(args, kwargs, rounds, BEFORE)
            was = f" {bserial / b1:.1%} | {b1 / bmodel:.2f}x |"
            _add(totals, "before: " + cls, (0, 0, 1, b1 * 1e-9, bmodel * 1e-9))
        _add(totals, cls, (m1, m2, 1, c1 * 1e-9, model * 1e-9))
        x, w = args[0], args[1]
        print(
            f"| {k} | {cls} | {'x'.join(map(str, x.shape[1:]))} | {w.shape[0]}x{'x'.join(map(str, one.shape[2:]))}"
            f" | {items} | {m1 * 1e6:.0f} us | {m2 * 1e6:.0f} us | {m1 / m2:.2f}x | {cpu2:.2f}"
            f" | {serial / c1:.1%} | {c1 / model:.2f}x |{was}",
            flush=True,
        )
    print(f"\n{name} by class: | class | layers | 1 thread | 2 threads | 1/2 | CPU 1 thread | model 2 | model 1/2 |")
    for cls, (a, b, n, c, m) in sorted(totals.items(), key=lambda kv: (kv[0].startswith("before"), -kv[1][3])):
        wall = f"{a * 1e3:.2f} ms | {b * 1e3:.2f} ms | {a / b:.2f}x" if b else " | | "
        print(f"| {cls} | {n:.0f} | {wall} | {c * 1e3:.2f} ms | {m * 1e3:.2f} ms | {c / m:.2f}x |")
    for tag in ("", "before: "):
        rows = [v for k, v in totals.items() if k.startswith("before") == bool(tag)]
        a, b, c, m = (sum(v[j] for v in rows) for j in (0, 1, 3, 4))
        if rows:
            wall = f"{a * 1e3:.2f} ms | {b * 1e3:.2f} ms | {a / b:.2f}x" if b else " | | "
            print(f"| {tag}all | {len(calls)} | {wall} | {c * 1e3:.2f} ms | {m * 1e3:.2f} ms | {c / m:.2f}x |")


#: ``--policy``: (threads, multiply-adds per worker of a threaded conv, the helpers' spin in us; None: the default)
POLICIES: dict[str, tuple[int, int | None, int | None]] = {
    "1 thread": (1, None, None),
    "2": (2, None, None),
    "2, >= 2M MACs/worker": (2, 1 << 21, None),
    "2, >= 8M MACs/worker": (2, 1 << 23, None),
    "2, convs on 1": (2, 1 << 50, None),
    "2, no spin": (2, None, 0),
    "2, spin 2 ms": (2, None, 2000),
}


def _policy(name: str, rounds: int) -> None:
    """Our runtime with 1 thread against 2 under other thread policies (the conv's per-worker
    threshold ``_native._THREAD_MIN_MACS``, the pool's spin), one process, alternating, wall clock:
    which policy keeps a model from getting slower with 2 threads."""
    import onnx_light as ol
    from onnx_light.runtime import _native

    ext: Any = _native.NATIVE
    path = real_model_path(name)
    feeds = {"input": np.random.default_rng(0).standard_normal(SHAPES[name]).astype(np.float32)}
    macs, spin = _native._THREAD_MIN_MACS, ext.thread_pool_spin_us()
    sessions = {k: ol.runtime.InferenceSession(ol.load(path), intra_op_num_threads=v[0]) for k, v in POLICIES.items()}

    def run(k: str) -> Callable[[], Any]:
        def call() -> Any:
            _native._THREAD_MIN_MACS = POLICIES[k][1] or macs
            ext.thread_pool_set_spin_us(spin if POLICIES[k][2] is None else POLICIES[k][2])
            return sessions[k].run(None, feeds)

        return call

    fns = {k: run(k) for k in POLICIES}
    try:
        _alternate(fns, 2)
        samples = _alternate(fns, rounds)
    finally:
        _native._THREAD_MIN_MACS = macs
        ext.thread_pool_set_spin_us(spin)
    base = _stats(samples["1 thread"])[0]
    print(f"\n{name}: median of {rounds} | policy | wall | 1 thread / this | CPU/wall |")
    for k, v in samples.items():
        median, _, cpu = _stats(v)
        print(f"| {k} | {median * 1e3:.2f} ms | {base / median:.2f}x | {cpu:.2f} |", flush=True)


def _case(name: str, backward: bool) -> tuple[Any, dict[str, np.ndarray]]:
    """The model (our proto) and feeds of ``name``: its forward, or (``backward``) the emitted backward
    of bench_real_models' ``--gradient`` (loss = sum of the outputs, xs = the float initializers)."""
    import onnx_light as ol

    if not backward:
        feeds = {"input": np.random.default_rng(0).standard_normal(SHAPES[name]).astype(np.float32)}
        return ol.load(real_model_path(name)), feeds
    from bench_real_models import gradient_case

    case = gradient_case(name)
    return ol.ModelProto.FromString(case["backward"].SerializeToString()), case["bwd_feeds"]


class _StepClock:
    """Wraps every step of a plan: per step the least thread CPU time over the runs, and with the
    pool's statistics on, the least serial part (CPU outside the pool's runs) and item times."""

    def __init__(self, plan: Any, ext: Any) -> None:
        self.ext, self.cpu, self.serial, self.items = ext, {}, {}, {}  # type: ignore[var-annotated]
        self.runs: dict[int, list[int]] = {}
        for k, step in enumerate(plan.steps):
            step.fn = self._timed(k, step.fn)

    def _timed(self, k: int, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.ext.thread_pool_stats()
            t = time.thread_time_ns()
            result = fn(*args, **kwargs)
            total = time.thread_time_ns() - t
            items, _, _, runs, caller = self.ext.thread_pool_stats()
            self.cpu[k] = min(self.cpu.get(k, total), total)
            self.serial[k] = min(self.serial.get(k, total - caller), total - caller)
            if k not in self.items or len(self.items[k]) != len(items):
                self.items[k], self.runs[k] = items, runs
            else:
                self.items[k] = [min(p, q) for p, q in zip(self.items[k], items)]
            return result

        return call

    def modelled(self, k: int, workers: int) -> float:
        """Step ``k`` on ``workers`` free cores: its serial part + each run's makespan."""
        model, first = self.serial[k], 0
        for size in self.runs[k]:
            model += _makespan(self.items[k][first : first + size], workers)
            first += size
        return model


def _dispatch_cost(ext: Any, calls: int = 2000) -> tuple[float, float, float]:
    """Wall microseconds a pool run of 2 empty items costs over a 1-thread call: back to back (the
    helper spinning; the least of ``calls``), and 1 ms apart (the helper asleep: a condition-variable
    wake-up; the least and the median of ``calls // 10``). Load only adds to the least."""

    def times(threads: int, gap: float) -> list[float]:
        out = []
        for _ in range(calls if gap == 0 else calls // 10):
            if gap:
                time.sleep(gap)
            t = time.perf_counter()
            ext.thread_pool_selftest(threads, 2)
            out.append(time.perf_counter() - t)
        return out

    spin = min(times(2, 0)) - min(times(1, 0))
    one, two = times(1, 1e-3), times(2, 1e-3)
    return spin * 1e6, (min(two) - min(one)) * 1e6, (statistics.median(two) - statistics.median(one)) * 1e6


def _amdahl(name: str, rounds: int, backward: bool = False) -> None:
    """Per op type, from thread CPU time (robust to load): the 1-thread time, the 2-thread run's
    serial part and its modelled time on 2 free cores (serial + the makespan of each pool run's items),
    the speed-up that leaves (Amdahl), and the pool's dispatch cost per run."""
    import contextlib
    import io

    import onnx_light as ol
    from onnx_light.runtime import _native

    ext: Any = _native.NATIVE
    model, feeds = _case(name, backward)
    sessions = {t: ol.runtime.InferenceSession(model, intra_op_num_threads=t) for t in (1, 2)}
    fast = {}
    for t, sess in sessions.items():
        sess.run(None, feeds)  # observed: the generated function with the buffer pool
        fast[t] = min(_cpu(lambda s=sess: s.run(None, feeds)) for _ in range(rounds))
    clocks = {t: _StepClock(sess._plan, ext) for t, sess in sessions.items()}
    ext.thread_pool_set_stats(True)
    try:
        for _ in range(rounds):
            for sess in sessions.values():
                sess.verbose = 2  # the generic loop, which calls the wrapped steps
                with contextlib.redirect_stdout(io.StringIO()):
                    sess.run(None, feeds)
    finally:
        ext.thread_pool_set_stats(False)
    one, two = clocks[1], clocks[2]
    steps = sessions[1]._plan.steps
    rows: dict[str, list[float]] = {}
    for k, step in enumerate(steps):
        row = rows.setdefault(step.label, [0, 0.0, 0.0, 0.0, 0.0])
        row[0] += 1
        row[1] += one.cpu[k] * 1e-9
        row[2] += two.serial[k] * 1e-9
        row[3] += len(two.runs[k])
        row[4] += two.modelled(k, 2) * 1e-9
    total = sum(r[1] for r in rows.values())
    spin, asleep, asleep_median = _dispatch_cost(ext)
    what = "backward" if backward else "forward"
    print(f"\n{name} {what}: least thread CPU of {rounds} runs per step (generic loop), 2 threads modelled")
    print("| op | nodes | 1 thread | share | serial at 2 | pool runs | model 2 cores | model 1/2 |")
    print("|---|---|---|---|---|---|---|---|")
    for label, (n, c, s, r, m) in sorted(rows.items(), key=lambda kv: -kv[1][1]):
        print(
            f"| {label} | {n:.0f} | {c * 1e3:.2f} ms | {c / total:.1%} | {s * 1e3:.2f} ms | {r:.0f}"
            f" | {m * 1e3:.2f} ms | {c / m if m else float('nan'):.2f}x |"
        )
    model2 = sum(r[4] for r in rows.values())
    serial = sum(r[2] for r in rows.values())
    runs = sum(r[3] for r in rows.values())
    cost = runs * spin * 1e-6
    print(
        f"| all | {len(steps)} | {total * 1e3:.2f} ms | | {serial * 1e3:.2f} ms ({serial / total:.1%}) | {runs:.0f}"
        f" | {model2 * 1e3:.2f} ms | **{total / model2:.2f}x** |"
    )
    print(
        f"pool dispatch per run: {spin:.1f} us (helper spinning), {asleep:.1f} us (asleep; median"
        f" {asleep_median:.1f} us); {runs:.0f} runs x"
        f" {spin:.1f} us = {cost * 1e3:.2f} ms -> {total / (model2 + cost):.2f}x. Generated function, thread CPU"
        f" per run: 1 thread {fast[1] * 1e-6:.2f} ms, 2 threads (caller) {fast[2] * 1e-6:.2f} ms; steps' sum"
        f" {total * 1e3:.2f} ms"
    )


def _stats(runs: list[tuple[float, float]]) -> tuple[float, float, float]:
    """(median wall, best wall, median CPU / wall) of the runs."""
    walls = [w for w, _ in runs]
    return statistics.median(walls), min(walls), statistics.median(c / w for w, c in runs)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="resnet18,dbnet,yolo,mobilenetv3,crnn")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--profile", action="store_true", help="per-op time with 1 and 2 threads instead")
    p.add_argument("--layers", action="store_true", help="every conv layer alone, 1 and 2 threads, instead")
    p.add_argument("--policy", action="store_true", help="1 thread against 2 under other thread policies instead")
    p.add_argument("--amdahl", action="store_true", help="per op, 1 thread vs 2 modelled from thread CPU time instead")
    p.add_argument("--backward", action="store_true", help="with --amdahl: the model's emitted backward")
    p.add_argument("--before", default="", help="with --layers: another build of _native*.so, modelled beside ours")
    p.add_argument("--one-process", action="store_true", help="all engines in this process (default: one each)")
    p.add_argument("--ort-spin", action="store_true", help="let onnxruntime's idle intra-op threads spin")
    p.add_argument("--worker", default="", help=argparse.SUPPRESS)
    args = p.parse_args()
    global ORT_SPIN
    ORT_SPIN = args.ort_spin
    if args.worker:
        return _worker(args.worker)
    print(
        f"# {time.strftime('%H:%M:%S', time.gmtime())} UTC, load {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}"
        f" (1/5 min), nproc={os.cpu_count()}"
    )
    if args.before:
        import importlib.util

        global BEFORE
        spec = importlib.util.spec_from_file_location("_native", args.before)
        assert spec is not None and spec.loader is not None
        BEFORE = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(BEFORE)
    if args.amdahl:
        for name in args.models.split(","):
            _amdahl(name, args.rounds, args.backward)
        print(f"# load after: {os.getloadavg()[0]:.2f}")
        return
    if args.profile or args.layers or args.policy:
        for name in args.models.split(","):
            (_layers if args.layers else _policy if args.policy else _profile)(name, args.rounds)
        print(f"# load after: {os.getloadavg()[0]:.2f}")
        return
    print(
        f"# {'one process' if args.one_process else 'one process per engine and thread count'}, alternating;"
        f" onnxruntime's idle threads {'spin' if ORT_SPIN else 'sleep (allow_spinning=0)'}"
    )
    head = ["model", "ours 1 thread", "ours 2 threads", "ours 1/2 median (>= 1.6x)", "best / best", "CPU/wall (2)"]
    head += ["ORT 1 thread", "ORT 2", "ORT 1/2 median", "best / best", "CPU/wall (2)"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    shared: list[str] = []
    for name in args.models.split(","):
        samples = (bench if args.one_process else bench_isolated)(name, args.rounds)
        t = {k: _stats(v) for k, v in samples.items()}
        (o1, b1, _), (o2, b2, cpu2), (r1, c1, _), (r2, c2, rcpu2) = t["ours-1"], t["ours-2"], t["ort-1"], t["ort-2"]
        print(
            f"| {name} | {o1 * 1e3:.2f} ms | {o2 * 1e3:.2f} ms | {o1 / o2:.2f}x | {b1 / b2:.2f}x | {cpu2:.2f}"
            f" | {r1 * 1e3:.2f} ms | {r2 * 1e3:.2f} ms | {r1 / r2:.2f}x | {c1 / c2:.2f}x | {rcpu2:.2f} |",
            flush=True,
        )
        if min(cpu2, rcpu2) < 1.7:  # both engines use both cores in their conv-heavy parts
            shared.append(name)
    if shared:
        print(f"# CPU/wall (2) below 1.7 for {', '.join(shared)}: another job held the second core; not a measurement")
    print(f"# load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
