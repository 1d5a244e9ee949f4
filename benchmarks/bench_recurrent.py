"""RNN, GRU and LSTM kernels: onnx-light (native step loop and its numpy twin) against onnxruntime.

One process, one core each: numpy runs with one BLAS thread and onnxruntime with
``intra_op_num_threads=1``. Every model is two bidirectional layers (the second reads both
directions of the first), hidden 128, T 100, batch 16, 64 features, float32 — the
``lstm`` model is the one of ``bench_runtime.py`` and issue 10's target (<= 1.5x onnxruntime).
``small`` models (hidden 32, T 20, batch 4) check the kernel-selection rule at the other end;
``lstm_crnn`` is the CRNN recogniser's head (T 40, batch 1, 512 features: a matrix-vector
product per step).

The runtimes alternate within each round (order flipped every round); the table gives the
median per run of process CPU time (the machine is shared: wall-clock time moves with other
processes' load, CPU time much less) and wall time, and the median ratios. Outputs are
checked against onnxruntime before timing.

    PYTHONPATH=. python benchmarks/bench_recurrent.py [--rounds 9] [--models lstm,gru,rnn,lstm_small,gru_small]
    PYTHONPATH=. python benchmarks/bench_recurrent.py --gradient [--rounds 9]

``--gradient``: the LSTM and GRU models of ``bench_gradient.py`` (one bidirectional layer, T 32,
batch 16, hidden 64): backward (GradientOfFunction's graph) / forward run time in our runtime
and in onnxruntime (issue 10's target: at most 8x in both).

``--first-call``: the first transform of those models in a fresh process (nothing cached,
nothing on disk), ours (``GradientOfFunction``) and onnx-ad's (``onnx_ad.reverse``) each in its
own subprocess, alternating, ``--rounds`` of each; the model is built and parsed before the
clock starts, the first call's CPU time is what is printed (issue 10: >= 10x onnx-ad).

    PYTHONPATH=. python benchmarks/bench_recurrent.py --first-call [--rounds 5]

``--direct-ab``: the ``--gradient`` models' backward in our runtime, the direct form
(``_recurrent_direct``) against the general lowering of the same node differentiated by the pass,
both built and run alternating in one process (the machine's load moves both alike).

    PYTHONPATH=. python benchmarks/bench_recurrent.py --direct-ab [--rounds 9]

``--sweep-ab``: the LSTM model's backward in our runtime with the reverse sweep and the cell-state
Scan run in one call each (``runtime/kernels/recurrent_sweep.py``) against the generic Scan running
the same graph, alternating in one process.

    PYTHONPATH=. python benchmarks/bench_recurrent.py --sweep-ab [--rounds 9]
"""

from __future__ import annotations

import os

# one BLAS thread for numpy: must be set before numpy is imported
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto  # noqa: E402
from onnx import helper as H  # noqa: E402
from onnx import numpy_helper as NH  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import onnx_light  # noqa: E402
from onnx_light.runtime import InferenceSession, _native  # noqa: E402

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def stacked_model(
    op: str, steps: int = 100, batch: int = 16, hidden: int = 128, features: int = 64
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Two bidirectional layers of ``op``; Y of each layer reshaped to [T, N, 2H] for the next."""
    r = np.random.default_rng(0)
    g = GATES[op]
    nodes, inits = [], []
    x, width = "X", features
    for layer in range(2):
        w, rr, b = f"W{layer}", f"R{layer}", f"B{layer}"
        inits += [
            NH.from_array(r.uniform(-0.1, 0.1, (2, g * hidden, width)).astype(np.float32), w),
            NH.from_array(r.uniform(-0.1, 0.1, (2, g * hidden, hidden)).astype(np.float32), rr),
            NH.from_array(r.uniform(-0.1, 0.1, (2, 2 * g * hidden)).astype(np.float32), b),
        ]
        nodes.append(H.make_node(op, [x, w, rr, b], [f"Y{layer}"], hidden_size=hidden, direction="bidirectional"))
        nodes.append(H.make_node("Transpose", [f"Y{layer}"], [f"T{layer}"], perm=[0, 2, 1, 3]))
        nodes.append(H.make_node("Reshape", [f"T{layer}", "seq_shape"], [f"S{layer}"]))
        x, width = f"S{layer}", 2 * hidden
    inits.append(NH.from_array(np.array([steps, batch, 2 * hidden], np.int64), "seq_shape"))
    graph = H.make_graph(
        nodes,
        op.lower(),
        [H.make_tensor_value_info("X", TensorProto.FLOAT, [steps, batch, features])],
        [H.make_tensor_value_info(x, TensorProto.FLOAT, [steps, batch, 2 * hidden])],
        inits,
    )
    feeds = {"X": r.standard_normal((steps, batch, features)).astype(np.float32)}
    return H.make_model(graph, opset_imports=[H.make_opsetid("", 18)]), feeds


MODELS: dict[str, Callable[[], tuple[onnx.ModelProto, dict[str, np.ndarray]]]] = {
    "lstm": lambda: stacked_model("LSTM"),
    "gru": lambda: stacked_model("GRU"),
    "rnn": lambda: stacked_model("RNN"),
    "lstm_small": lambda: stacked_model("LSTM", 20, 4, 32, 16),
    # the CRNN recogniser's head of bench_real_models.py: T 40, batch 1, 512 features
    "lstm_crnn": lambda: stacked_model("LSTM", 40, 1, 128, 512),
    "gru_small": lambda: stacked_model("GRU", 20, 4, 32, 16),
}


def _twin(sess: InferenceSession) -> Callable[[dict[str, np.ndarray]], list[Any]]:
    """Runs ``sess`` with the native step loop switched off (the numpy twin)."""

    def run(feeds: dict[str, np.ndarray]) -> list[Any]:
        saved, _native.RECURRENT = _native.RECURRENT, False
        try:
            return sess.run(None, feeds)
        finally:
            _native.RECURRENT = saved

    return run


def runners(model: onnx.ModelProto) -> dict[str, Callable[[dict[str, np.ndarray]], list[Any]]]:
    import onnxruntime as ort

    data = model.SerializeToString()
    ours = InferenceSession(onnx_light.load_from_string(data))
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    theirs = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    out = {"onnxruntime": lambda feeds: theirs.run(None, feeds), "twin": _twin(ours)}
    if _native.RECURRENT:
        out["native"] = lambda feeds: ours.run(None, feeds)
    return out


def measure(run: Callable[[], Any], repeat: int) -> tuple[float, float]:
    """(CPU seconds, wall seconds) per run."""
    c, t = time.process_time(), time.perf_counter()
    for _ in range(repeat):
        run()
    return (time.process_time() - c) / repeat, (time.perf_counter() - t) / repeat


def bench(name: str, rounds: int) -> dict[str, tuple[float, float]]:
    model, feeds = MODELS[name]()
    fns = runners(model)
    want = fns["onnxruntime"](feeds)
    for k, f in fns.items():
        for a, b in zip(f(feeds), want):
            np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4, err_msg=f"{k} disagrees with onnxruntime")
    one = measure(lambda: fns["onnxruntime"](feeds), 3)[1]
    repeat = max(1, int(0.1 / max(one, 1e-6)))  # ~0.1 s of onnxruntime per sample
    samples: dict[str, list[tuple[float, float]]] = {k: [] for k in fns}
    order = list(fns)
    for r in range(rounds):
        for k in order if r % 2 == 0 else order[::-1]:
            samples[k].append(measure(lambda f=fns[k]: f(feeds), repeat))
    return {k: (statistics.median(c for c, _ in v), statistics.median(w for _, w in v)) for k, v in samples.items()}


def _gradient_feeds(model: onnx.ModelProto, bwd: Any) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    r = np.random.default_rng(0)
    fwd = {
        i.name: (0.3 * r.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim])).astype(np.float32)
        for i in model.graph.input
    }
    return fwd, {i.name: fwd.get(i.name, np.ones((), np.float32)) for i in bwd.input}


def gradient_ratios(rounds: int) -> None:
    """Backward / forward run time in our runtime and in onnxruntime (CPU time, medians)."""
    import onnxruntime as ort
    from bench_gradient import recurrent_model

    print("| model | fwd ours | bwd ours | bwd/fwd ours | fwd ORT | bwd ORT | bwd/fwd ORT |")
    print("|---|---|---|---|---|---|---|")
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    for op in ("LSTM", "GRU"):
        model, xs, y = recurrent_model(op)
        ours_model = onnx_light.load_from_string(model.SerializeToString())
        bwd = onnx_light.gradient_model(ours_model, xs=xs, y=y, registry=onnx_light.DefaultGradRegistry())
        ffeeds, bfeeds = _gradient_feeds(model, bwd.graph)
        runs = {
            "fwd ours": (InferenceSession(ours_model), ffeeds),
            "bwd ours": (InferenceSession(bwd), bfeeds),
            "fwd ORT": (ort.InferenceSession(model.SerializeToString(), options), ffeeds),
            "bwd ORT": (ort.InferenceSession(bwd.SerializeToString(), options), bfeeds),
        }
        times: dict[str, list[float]] = {k: [] for k in runs}
        for r in range(rounds):
            for k, (sess, feeds) in runs.items() if r % 2 == 0 else reversed(runs.items()):
                times[k].append(measure(lambda s=sess, f=feeds: s.run(None, f), 5)[0])
        t = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        print(
            f"| {op.lower()} | {t['fwd ours']:.2f} ms | {t['bwd ours']:.2f} ms | {t['bwd ours'] / t['fwd ours']:.2f} | "
            f"{t['fwd ORT']:.2f} ms | {t['bwd ORT']:.2f} ms | {t['bwd ORT'] / t['fwd ORT']:.2f} |",
            flush=True,
        )


_FIRST_CALL = """
import sys, time
sys.path[:0] = {paths!r}
import onnx_light as ol
from bench_gradient import recurrent_model
model, xs, y = recurrent_model({op!r})
data = model.SerializeToString()
if {peer!r}:
    import onnx_ad
    start = time.process_time()
    onnx_ad.reverse(model, inputs=xs, outputs=[y], layout="onnx")
else:
    ours = ol.ModelProto.FromString(data)
    start = time.process_time()
    ol.GradientOfFunction(ours, xs, y)
print(time.process_time() - start)
"""


def first_calls(rounds: int) -> None:
    """The first transform in a fresh process, ours and onnx-ad's alternating (CPU time, medians).

    Twice: as the environment runs Python (here ``PYTHONDONTWRITEBYTECODE=1``: every module of ours
    compiled from source in every process, onnx-ad's read from the .pyc files its install wrote), and
    with our modules' bytecode cached as an installed package has it (a temporary
    ``PYTHONPYCACHEPREFIX``, written by one untimed run first).
    """
    import subprocess
    import tempfile

    print("| model | bytecode | first call ours (runs) | first call onnx-ad (runs) | onnx-ad / ours |")
    print("|---|---|---|---|---|")
    paths = [os.path.dirname(HERE), HERE]
    with tempfile.TemporaryDirectory() as pyc:
        cached = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        cached["PYTHONPYCACHEPREFIX"] = pyc
        for op in ("LSTM", "GRU"):
            for label, env in (("as run here", dict(os.environ)), (".pyc cached", cached)):

                def run(peer: bool, env: dict[str, str] = env, op: str = op) -> float:
                    code = _FIRST_CALL.format(paths=paths, op=op, peer=peer)
                    out = subprocess.run(
                        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
                    )
                    return float(out.stdout.split()[-1]) * 1e3

                run(False)  # writes the .pyc files where they are cached
                times: dict[bool, list[float]] = {False: [], True: []}
                for r in range(rounds):
                    for peer in (False, True) if r % 2 == 0 else (True, False):
                        times[peer].append(run(peer))
                ours, theirs = statistics.median(times[False]), statistics.median(times[True])
                cells = [", ".join(f"{t:.1f}" for t in times[k]) for k in (False, True)]
                print(
                    f"| {op.lower()} | {label} | {ours:.1f} ms ({cells[0]}) | {theirs:.1f} ms ({cells[1]}) | "
                    f"{theirs / ours:.1f}x |",
                    flush=True,
                )


def direct_ab(rounds: int) -> None:
    """Backward run time, direct form vs general lowering, alternating in one process (CPU time)."""
    from bench_gradient import recurrent_model

    from onnx_light.onnx_extensions.gradient import _recurrent_direct

    print("| model | fwd | bwd direct | bwd lowering | direct / lowering | bwd/fwd direct | bwd/fwd lowering |")
    print("|---|---|---|---|---|---|---|")
    for op in ("LSTM", "GRU"):
        model, xs, y = recurrent_model(op)
        ours_model = onnx_light.load_from_string(model.SerializeToString())
        built = {}
        for form in ("direct", "lowering"):
            real = _recurrent_direct._applies
            if form == "lowering":
                _recurrent_direct._applies = lambda ctx: False
            try:
                registry = onnx_light.DefaultGradRegistry()
                built[form] = onnx_light.gradient_model(ours_model, xs=xs, y=y, registry=registry)
            finally:
                _recurrent_direct._applies = real
        ffeeds, bfeeds = _gradient_feeds(model, built["direct"].graph)
        runs = {"fwd": (InferenceSession(ours_model), ffeeds)}
        runs.update({k: (InferenceSession(m), bfeeds) for k, m in built.items()})
        times: dict[str, list[float]] = {k: [] for k in runs}
        for r in range(rounds):
            for k, (sess, feeds) in runs.items() if r % 2 == 0 else reversed(runs.items()):
                times[k].append(measure(lambda s=sess, f=feeds: s.run(None, f), 5)[0])
        t = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        print(
            f"| {op.lower()} | {t['fwd']:.2f} ms | {t['direct']:.2f} ms | {t['lowering']:.2f} ms | "
            f"{t['direct'] / t['lowering']:.2f} | {t['direct'] / t['fwd']:.2f} | {t['lowering'] / t['fwd']:.2f} |",
            flush=True,
        )


def sweep_ab(rounds: int) -> None:
    """The LSTM backward in our runtime with the one-call reverse sweep (``recurrent_sweep``) on
    and off (the generic Scan running the same graph), alternating in one process (CPU time)."""
    from bench_gradient import recurrent_model

    from onnx_light.runtime.kernels import recurrent_sweep

    print("| model | fwd | bwd sweep on | bwd sweep off | on / off | bwd/fwd on | bwd/fwd off |")
    print("|---|---|---|---|---|---|---|")
    model, xs, y = recurrent_model("LSTM")
    ours_model = onnx_light.load_from_string(model.SerializeToString())
    bwd = onnx_light.gradient_model(ours_model, xs=xs, y=y, registry=onnx_light.DefaultGradRegistry())
    ffeeds, bfeeds = _gradient_feeds(model, bwd.graph)
    fwd, back = InferenceSession(ours_model), InferenceSession(bwd)

    def backward(on: bool) -> None:
        recurrent_sweep.ENABLED = on
        try:
            back.run(None, bfeeds)
        finally:
            recurrent_sweep.ENABLED = True

    runs: dict[str, Callable[[], Any]] = {
        "fwd": lambda: fwd.run(None, ffeeds),
        "on": lambda: backward(True),
        "off": lambda: backward(False),
    }
    times: dict[str, list[float]] = {k: [] for k in runs}
    for r in range(rounds):
        for k, run in runs.items() if r % 2 == 0 else reversed(runs.items()):
            times[k].append(measure(run, 5)[0])
    t = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    print(
        f"| lstm | {t['fwd']:.2f} ms | {t['on']:.2f} ms | {t['off']:.2f} ms | {t['on'] / t['off']:.2f} | "
        f"{t['on'] / t['fwd']:.2f} | {t['off'] / t['fwd']:.2f} |",
        flush=True,
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--gradient", action="store_true", help="backward/forward ratios of the gradient models")
    p.add_argument("--first-call", action="store_true", help="first transform in a fresh process, vs onnx-ad")
    p.add_argument("--direct-ab", action="store_true", help="backward run time, direct form vs lowering")
    p.add_argument("--sweep-ab", action="store_true", help="LSTM backward run time, one-call sweep on vs off")
    args = p.parse_args()
    import onnxruntime as ort

    if args.direct_ab:
        direct_ab(args.rounds)
        return
    if args.sweep_ab:
        sweep_ab(args.rounds)
        return
    if args.first_call:
        first_calls(args.rounds)
        return
    if args.gradient:
        gradient_ratios(args.rounds)
        return
    print(
        f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"numpy {np.__version__}, onnxruntime {ort.__version__}, native step loop: {_native.RECURRENT}"
    )
    print("| model | native CPU (wall) | numpy twin CPU (wall) | onnxruntime CPU (wall) | native / ORT | twin / ORT |")
    print("|---|---|---|---|---|---|")
    for name in args.models.split(","):
        t = bench(name, args.rounds)
        ort_c = t["onnxruntime"][0]
        nat = t.get("native")

        def cell(v: tuple[float, float] | None) -> str:
            return "-" if v is None else f"{v[0] * 1e3:.1f} ms ({v[1] * 1e3:.1f})"

        print(
            f"| {name} | {cell(nat)} | {cell(t['twin'])} | {cell(t['onnxruntime'])} | "
            f"{'-' if nat is None else f'{nat[0] / ort_c:.2f}x'} | {t['twin'][0] / ort_c:.2f}x |",
            flush=True,
        )


if __name__ == "__main__":
    main()
