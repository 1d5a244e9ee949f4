"""One training step (forward, loss, backward, AdamW): an MLP, a conv net, a transformer block.

Models: the MLP 784-512-256-10 (batch 64), bench_runtime's conv net plus a classifier,
and a pre-LN transformer block (d 256). Four ways, alternating in one process, one thread each:

* ``torch``: eager torch, ``zero_grad``, forward, cross-entropy, ``backward``, ``AdamW.step``;
* ``ours``:  ``onnx_light.training`` Module + Optimizer (training_model.onnx then
  optimizer_model.onnx in our runtime), the torch export's artifacts;
* ``ours train_step``: train_step.onnx (everything fused) in our runtime;
* ``ort train_step``: the same train_step.onnx in onnxruntime (``intra_op_num_threads=1``).

Prints the median time per step and the ratios to torch and to onnxruntime, and (Linux) the
peak memory of a step per engine: freed heap pages go back to the OS (``malloc_trim``), the
resident set's high-water mark is reset through ``/proc/self/clear_refs`` before three steps
and read back (``VmHWM``) after them, so each engine's peak above the memory it held before
(``VmRSS``) is measured in this one process (onnxruntime's arena keeps its buffers between
runs, so its peak reads as ~0: compare ours with torch's).

    PYTHONPATH=. python benchmarks/bench_training.py [--rounds 15] [--repeat 10] [--models mlp,cnn]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

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


def _setup(d: str, kind: str) -> dict[str, Callable[[], None]]:
    import onnxruntime as ort
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
    a = os.path.join(d, "a")
    opt_t = torch.optim.AdamW(m.parameters(), lr=1e-3)

    def torch_step() -> None:
        opt_t.zero_grad()
        torch.nn.functional.cross_entropy(m(x), y).backward()
        opt_t.step()

    state = olt.CheckpointState.load_checkpoint(os.path.join(a, "checkpoint"))
    mod = olt.Module(os.path.join(a, "training_model.onnx"), state)
    opt = olt.Optimizer(os.path.join(a, "optimizer_model.onnx"), mod)
    xn, yn = x.numpy(), y.numpy()

    def ours_step() -> None:
        mod(xn, yn)
        opt.step()
        mod.lazy_reset_grad()

    path = os.path.join(a, "train_step.onnx")
    st0 = olt.CheckpointState.load_checkpoint(os.path.join(a, "checkpoint"))
    values = {k: p.data for k, p in st0.parameters.items()} | dict(st0.optimizer_states)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    sessions = {
        "ours train_step": InferenceSession(path),
        "ort train_step": ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]),
    }
    counters = {k: 0 for k in sessions}

    def fused(name: str) -> Callable[[], None]:
        sess = sessions[name]
        vals = dict(values)

        def step() -> None:
            counters[name] += 1
            feeds = {
                "input": xn,
                "labels": yn,
                "learning_rate": np.array(1e-3, np.float32),
                "step": np.array(counters[name], np.int64),
            }
            feeds |= {n: vals[n] for n in in_names if n not in feeds}
            res = sess.run(None, feeds)
            for n, v in zip(out_names[1:], res[1:]):
                vals[n[: -len("_next")]] = v

        return step

    import onnx

    g = onnx.load(path).graph
    in_names = [i.name for i in g.input]
    out_names = [o.name for o in g.output]
    return {
        "torch": torch_step,
        "ours": ours_step,
        "ours train_step": fused("ours train_step"),
        "ort train_step": fused("ort train_step"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument(
        "--models",
        default="mlp,cnn,transformer",
        help="mlp (784-512-256-10, batch 64), cnn (bench_runtime's), transformer (pre-LN block, d 256)",
    )
    args = parser.parse_args()
    for kind in args.models.split(","):
        _bench(kind, args.rounds, args.repeat)
    return 0


def _bench(kind: str, rounds: int, repeat: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        steps = _setup(d, kind)
        for fn in steps.values():  # warm up
            for _ in range(3):
                fn()
        times: dict[str, list[float]] = {k: [] for k in steps}
        names = list(steps)
        for r in range(rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                t0 = time.perf_counter()
                for _ in range(repeat):
                    steps[name]()
                times[name].append((time.perf_counter() - t0) / repeat * 1e3)
        peaks = {name: _step_peak_mb(fn) for name, fn in steps.items()}
    med = {k: statistics.median(v) for k, v in times.items()}
    title = {
        "mlp": "MLP 784-512-256-10, batch 64",
        "cnn": "conv net 16x3x64x64 (bench_runtime's) + Linear",
        "transformer": "pre-LN transformer block d 256, [8, 64, 256]",
    }[kind]
    print(f"{title}, AdamW step, 1 thread ({platform.processor() or platform.machine()})")
    for k, v in med.items():
        peak = (
            ""
            if peaks[k] is None
            else f"   peak {peaks[k]:6.1f} MB (x{peaks[k] / max(peaks['torch'] or 1e-9, 1e-9):.2f} torch)"
        )
        print(f"  {k:16s} {v:7.3f} ms   x{v / med['torch']:.2f} torch   x{v / med['ort train_step']:.2f} ort{peak}")


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def _step_peak_mb(step: Callable[[], None], steps: int = 3) -> float | None:
    """Peak resident memory above the current one while ``step`` runs ``steps`` times (MB), or
    None where the peak cannot be reset (not Linux)."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)  # freed heap pages back to the OS: RSS = what is live
    except (OSError, AttributeError):
        pass
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current VmRSS
        base = _status_kb("VmRSS")
    except OSError:
        return None
    for _ in range(steps):
        step()
    return (_status_kb("VmHWM") - base) / 1024


if __name__ == "__main__":
    raise SystemExit(main())
