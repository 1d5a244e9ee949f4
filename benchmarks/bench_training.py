"""One training step (forward, loss, backward, AdamW): an MLP, a conv net, a transformer block.

Models: the MLP 784-512-256-10 (batch 64), bench_runtime's conv net plus a classifier,
and a pre-LN transformer block (d 256). Four ways, alternating in one process, one thread each:

* ``torch``: eager torch, ``zero_grad``, forward, cross-entropy, ``backward``, ``AdamW.step``;
* ``ours``:  ``onnx_light.training`` Module + Optimizer (training_model.onnx then
  optimizer_model.onnx in our runtime), the torch export's artifacts;
* ``ours train_step``: train_step.onnx (everything fused) in our runtime;
* ``ort train_step``: the same train_step.onnx in onnxruntime (``intra_op_num_threads=1``).

Prints the median time per step and the ratios to torch and to onnxruntime. With
``--memory``, each engine also runs alone in a fresh subprocess (Linux: /proc/self/status)
that reports the peak RSS of three steps above the built engine, and above the engine's
libraries (parameters, optimizer states, session and the steps).

    PYTHONPATH=. python benchmarks/bench_training.py [--rounds 15] [--repeat 10] [--models mlp,cnn]
    PYTHONPATH=. python benchmarks/bench_training.py --memory --no-time
    PYTHONPATH=. python benchmarks/bench_training.py --models cnn --cpu   # CPU time: steadier under load

Each row also gives the minor page faults per step (``getrusage``: fresh pages touched).
``--trace`` prints, per node of our train_step (its generated function's calls wrapped), the
process CPU time in its calls, the page faults and the new arrays of >= 128 KiB that are not
the buffer pool's (with onnxruntime's step run between ours, as in the timing), costliest
first; ``--torch-profile`` prints torch's profiler table of the same eager step (self CPU time
per aten op); ``--top N`` keeps the N costliest rows of either:

    PYTHONPATH=. python benchmarks/bench_training.py --models cnn --trace
    PYTHONPATH=. python benchmarks/bench_training.py --models transformer --trace --torch-profile --top 40
``ONNX_LIGHT_BUFFER_POOL=0`` turns our session's buffer pool off; ``ONNX_LIGHT_MALLOC_KEEP=1``
makes glibc keep freed memory for the whole process (every engine in it; ``runtime/_malloc.py``).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import re  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import weakref  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from onnx_light import load  # noqa: E402
from onnx_light import training as olt  # noqa: E402
from onnx_light.runtime import InferenceSession  # noqa: E402


def _model(kind: str):  # type: ignore[no-untyped-def]
    """The torch model and one batch: the MLP, or bench_runtime's conv net with a classifier."""
    import torch

    nn = torch.nn
    torch.manual_seed(0)
    if kind == "cnn":
        m = nn.Sequential(
            nn.Conv2d(3, 32, 3),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(64, 10),
        )
        return m, torch.randn(16, 3, 64, 64), torch.randint(0, 10, (16,))
    if kind == "transformer":
        return _Block(), torch.randn(8, 64, 256), torch.randint(0, 10, (8,))
    m = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))
    return m, torch.randn(64, 784), torch.randint(0, 10, (64,))


def _Block():  # type: ignore[no-untyped-def]  # noqa: N802
    """A pre-LN transformer block, d 256, 4 heads, FFN 1024, on [8, 64, 256], mean-pooled to 10 classes."""
    import torch

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True, norm_first=True)
            self.head = torch.nn.Linear(256, 10)

        def forward(self, x):  # type: ignore[no-untyped-def]
            return self.head(self.layer(x).mean(1))

    return Block()


def _export(d: str, kind: str) -> None:
    """The torch export, its artifacts in ``d/a`` and the batch in ``d/batch.npz``."""
    import torch

    torch.set_num_threads(1)
    m, x, y = _model(kind)
    torch.onnx.export(
        m,
        (x,),
        os.path.join(d, "mlp.onnx"),
        input_names=["input"],
        output_names=["logits"],
        opset_version=17,
        dynamo=False,
    )
    olt.generate_artifacts(
        os.path.join(d, "mlp.onnx"), loss="CrossEntropyLoss", optimizer="AdamW", artifact_directory=os.path.join(d, "a")
    )
    np.savez(os.path.join(d, "batch.npz"), x=x.numpy(), y=y.numpy())


TITLES = {
    "mlp": "MLP 784-512-256-10, batch 64",
    "cnn": "conv net 16x3x64x64 (bench_runtime's) + Linear",
    "transformer": "pre-LN transformer block d 256, [8, 64, 256]",
}
ENGINES = ("torch", "ours", "ours train_step", "ort train_step")


def _torch_step(kind: str) -> Callable[[], None]:
    import torch

    torch.set_num_threads(1)
    m, x, y = _model(kind)
    opt_t = torch.optim.AdamW(m.parameters(), lr=1e-3)

    def torch_step() -> None:
        opt_t.zero_grad()
        torch.nn.functional.cross_entropy(m(x), y).backward()
        opt_t.step()

    return torch_step


def _ours_step(a: str, xn: np.ndarray, yn: np.ndarray) -> Callable[[], None]:
    state = olt.CheckpointState.load_checkpoint(os.path.join(a, "checkpoint"))
    mod = olt.Module(os.path.join(a, "training_model.onnx"), state)
    opt = olt.Optimizer(os.path.join(a, "optimizer_model.onnx"), mod)

    def ours_step() -> None:
        mod(xn, yn)
        opt.step()
        mod.lazy_reset_grad()

    return ours_step


def _fused_step(a: str, engine: str, xn: np.ndarray, yn: np.ndarray) -> Callable[[], None]:
    """train_step.onnx in our runtime or onnxruntime; the new values are fed back."""
    path = os.path.join(a, "train_step.onnx")
    st0 = olt.CheckpointState.load_checkpoint(os.path.join(a, "checkpoint"))
    vals = {k: p.data for k, p in st0.parameters.items()} | dict(st0.optimizer_states)
    g = load(path).graph
    in_names = [i.name for i in g.input]
    out_names = [o.name for o in g.output]
    sess: Any
    if engine == "ort train_step":
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    else:
        sess = InferenceSession(path)
    counter = [0]

    def step() -> None:
        counter[0] += 1
        feeds = {
            "input": xn,
            "labels": yn,
            "learning_rate": np.array(1e-3, np.float32),
            "step": np.array(counter[0], np.int64),
        }
        feeds |= {n: vals[n] for n in in_names if n not in feeds}
        res = sess.run(None, feeds)
        for n, v in zip(out_names[1:], res[1:]):
            vals[n[: -len("_next")]] = v

    return step


def _engines(d: str, kind: str, only: Sequence[str] = ENGINES) -> dict[str, Callable[[], None]]:
    """The step of each engine in ``only`` (torch is not imported unless asked for)."""
    a = os.path.join(d, "a")
    batch = np.load(os.path.join(d, "batch.npz"))
    xn, yn = batch["x"], batch["y"]
    out: dict[str, Callable[[], None]] = {}
    for name in only:
        if name == "torch":
            out[name] = _torch_step(kind)
        elif name == "ours":
            out[name] = _ours_step(a, xn, yn)
        else:
            out[name] = _fused_step(a, name, xn, yn)
    return out


def _status_kb(key: str) -> int:
    with open("/proc/self/status") as f:
        found = re.search(key + r":\s+(\d+)", f.read())
    if found is None:
        raise RuntimeError(f"/proc/self/status has no {key} (the memory measure needs Linux)")
    return int(found.group(1))


def _memory_child(d: str, kind: str, engine: str) -> None:
    """Prints (JSON) the peak RSS of the first steps above the built engine and above its imports.

    Linux only: writing 5 to /proc/self/clear_refs resets the high-water mark (VmHWM) to the
    current RSS once the engine is built (parameters, optimizer states, session), so the
    step peak is what three steps add (activations, gradients, torch's lazily created
    optimizer states); the total adds what building the engine took above its libraries.
    """
    if engine == "torch":
        import torch  # noqa: F401
    elif engine == "ort train_step":
        import onnxruntime  # noqa: F401
    gc.collect()
    rss_libs = _status_kb("VmRSS")
    step = _engines(d, kind, [engine])[engine]
    gc.collect()
    rss_built = _status_kb("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    for _ in range(3):
        step()
    peak = _status_kb("VmHWM")
    print(json.dumps({"step_mb": (peak - rss_built) / 1024, "total_mb": (peak - rss_libs) / 1024}))


def _memory(kind: str, d: str) -> None:
    """One fresh subprocess per engine (see _memory_child); prints MB and the ratio to torch."""
    res: dict[str, dict[str, float]] = {}
    for engine in ENGINES:
        cmd = [sys.executable, os.path.abspath(__file__), "--memory-child", d, kind, engine]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        res[engine] = json.loads(out.strip().splitlines()[-1])
    t = res["torch"]
    print(f"{TITLES[kind]}, AdamW step, memory")
    print("  peak RSS of 3 steps, one fresh process per engine: above the built engine (step) and above")
    print("  the engine's libraries (total: parameters, optimizer states, session and the steps):")
    for k, v in res.items():
        print(
            f"  {k:16s} step {v['step_mb']:7.1f} MB  x{v['step_mb'] / max(t['step_mb'], 1e-9):.2f} torch"
            f"   total {v['total_mb']:7.1f} MB  x{v['total_mb'] / max(t['total_mb'], 1e-9):.2f} torch"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument(
        "--models",
        default="mlp,cnn,transformer",
        help="mlp (784-512-256-10, batch 64), cnn (bench_runtime's), transformer (pre-LN block, d 256)",
    )
    parser.add_argument("--memory", action="store_true", help="also measure the peak memory of a step per engine")
    parser.add_argument("--no-time", action="store_true", help="skip the timing (with --memory)")
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="process CPU time instead of wall-clock (every engine runs on one thread; steadier under load)",
    )
    parser.add_argument(
        "--engines",
        default=",".join(ENGINES),
        help="the engines to time (torch, ours, 'ours train_step', 'ort train_step'; ort always runs: the ratios)",
    )
    parser.add_argument(
        "--trace",
        action="store_true",
        help="per node of our train_step: CPU time, page faults, new arrays not from the pool",
    )
    parser.add_argument("--top", type=int, default=0, help="with --trace / --torch-profile: only the costliest rows")
    parser.add_argument(
        "--torch-profile", action="store_true", help="torch's profiler over 5 eager steps (time per aten op, self CPU)"
    )
    parser.add_argument("--memory-child", nargs=3, metavar=("DIR", "KIND", "ENGINE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    engines = [e for e in ENGINES if e in args.engines.split(",") or e == "ort train_step"]
    if args.memory_child:
        _memory_child(*args.memory_child)
        return 0
    for kind in args.models.split(","):
        with tempfile.TemporaryDirectory() as d:
            _export(d, kind)
            if args.torch_profile:
                _torch_profile(kind, args.top)
            if args.trace:
                _trace(kind, d, top=args.top)
            elif not args.no_time and not args.torch_profile:
                _bench(kind, d, args.rounds, args.repeat, time.process_time if args.cpu else time.perf_counter, engines)
            if args.memory:
                _memory(kind, d)
    return 0


def _bench(
    kind: str,
    d: str,
    rounds: int,
    repeat: int,
    clock: Callable[[], float] = time.perf_counter,
    engines: Sequence[str] = ENGINES,
) -> None:
    steps = _engines(d, kind, engines)
    for fn in steps.values():  # warm up
        for _ in range(3):
            fn()
    times: dict[str, list[float]] = {k: [] for k in steps}
    faults = dict.fromkeys(steps, 0)  # minor page faults (fresh pages touched), summed over the rounds
    names = list(steps)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            t0 = clock()
            for _ in range(repeat):
                steps[name]()
            times[name].append((clock() - t0) / repeat * 1e3)
            faults[name] += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
    med = {k: statistics.median(v) for k, v in times.items()}
    title = TITLES[kind]
    print(f"{title}, AdamW step, 1 thread ({platform.processor() or platform.machine()}){_options()}")
    torch_ms = med.get("torch", float("nan"))
    for k, v in med.items():
        print(
            f"  {k:16s} {v:7.3f} ms   x{v / torch_ms:.2f} torch   x{v / med['ort train_step']:.2f} ort"
            f"   {faults[k] / (rounds * repeat):8.0f} minflt/step"
        )


def _trace(kind: str, d: str, steps: int = 5, top: int = 0) -> None:
    """Per node of our train_step (most time first; ``top``: only that many rows): the time in its
    calls, minor faults and new arrays >= 128 KiB that are not the pool's."""
    engines = _engines(d, kind, ["ours train_step", "ort train_step"])
    ours, ort_step = engines["ours train_step"], engines["ort train_step"]
    for _ in range(3):
        ours()
    cells = [c.cell_contents for c in ours.__closure__ or ()]
    plan = next(c for c in cells if isinstance(c, InferenceSession))._plan
    namespace, arenas = plan.fast.__globals__, plan.arenas  # type: ignore[union-attr]
    buffers: set[int] = set()  # ids of the arena's buffers in the current run (no references kept)
    # the arrays counted, by id (a view's base counts once; a freed array leaves)
    counted: weakref.WeakValueDictionary[int, np.ndarray] = weakref.WeakValueDictionary()
    stats: dict[str, list[float]] = {}

    def wrap(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        label = f"{name[1:]:>4} {plan.steps[int(name[1:])].label}" if name[1:].isdigit() else name

        def traced(*a: Any, **kw: Any) -> Any:
            f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            t0 = time.process_time()
            result = fn(*a, **kw)
            t1 = time.process_time()
            row = stats.setdefault(label, [0, 0, 0.0, 0])
            row[0] += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
            row[2] += t1 - t0
            row[3] += 1
            for v in result if isinstance(result, tuple) else (result,):
                base = v
                while isinstance(base, np.ndarray) and isinstance(base.base, np.ndarray):
                    base = base.base
                if isinstance(v, np.ndarray) and v.nbytes >= 1 << 17 and id(base) not in buffers:
                    if counted.get(id(base)) is not base:
                        counted[id(base)] = base
                        row[1] += v.nbytes
            return result

        return traced

    if arenas is not None:
        take = arenas.take

        def take_traced() -> Any:
            arena = take()
            buffers.clear()
            buffers.update(id(b) for b in arena.buffers)
            return arena

        namespace["_take"] = take_traced
    for name, fn in list(namespace.items()):
        if (
            name[:1] in "kup_"
            and callable(fn)
            and not isinstance(fn, type)
            and name not in ("_take", "_give", "_outputs")
        ):
            namespace[name] = wrap(name, fn)
    for _ in range(steps):
        ort_step()
        ours()
    pooled = (
        f"{len(arenas.index)} values in {len(arenas.sizes)} buffers, {arenas.nbytes / 1e6:.1f} MB" if arenas else "none"
    )
    print(f"{TITLES[kind]}: our train_step per node, {steps} steps (pooled: {pooled})")
    rows = sorted(stats.items(), key=lambda kv: -kv[1][2])
    for label, (faults, fresh, seconds, calls) in rows[:top] if top else rows:
        print(
            f"  {label:44s} {seconds / steps * 1e3:7.3f} ms  {calls // steps:3d} calls"
            f"  {faults / steps:6.0f} faults  {fresh / steps / 1e6:6.2f} MB not pooled  (per step)"
        )
    total = [sum(v[k] for v in stats.values()) / steps for k in (0, 1, 2)]
    print(
        f"  total: {total[2] * 1e3:.2f} ms in calls, {total[0]:.0f} faults/step, "
        f"{total[1] / 1e6:.1f} MB of new arrays >= 128 KiB not pooled/step"
    )


def _torch_profile(kind: str, top: int = 0, steps: int = 5) -> None:
    """torch's profiler over ``steps`` eager steps (after 3 warm-up steps): self CPU time per aten op."""
    from torch.profiler import ProfilerActivity, profile

    step = _torch_step(kind)
    for _ in range(3):
        step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    events = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    total = sum(e.self_cpu_time_total for e in events)
    print(f"{TITLES[kind]}: torch eager per aten op, {steps} steps, self CPU {total / steps / 1e3:.2f} ms/step")
    for e in events[:top] if top else events:
        if e.self_cpu_time_total:
            print(
                f"  {e.key:44s} {e.self_cpu_time_total / steps / 1e3:7.3f} ms  {e.count // steps:3d} calls (per step)"
            )


def _options() -> str:
    """The memory options this process runs with (see the module)."""
    on = [f"{v}={os.environ[v]}" for v in ("ONNX_LIGHT_BUFFER_POOL", "ONNX_LIGHT_MALLOC_KEEP") if v in os.environ]
    return f" [{', '.join(on)}]" if on else ""


if __name__ == "__main__":
    raise SystemExit(main())
