"""onnx-light's runtime against onnxruntime and onnx's ReferenceEvaluator, one process.

numpy runs with one BLAS thread and onnxruntime with ``intra_op_num_threads=1`` (and
``inter_op_num_threads=1``, default graph optimisations), so the comparison is one
core against one core. Each model is built here with ``onnx``:

* ``chain``: 2,000 element-wise nodes (Add, Mul, Tanh, Sub, Relu, Neg, Sigmoid, Abs
  in turn) on a [64] float32 tensor: the per-node overhead of the executor.
* ``mlp``:   one training step of a 784-512-256-10 ReLU MLP, batch 64: forward,
  softmax cross-entropy, hand-written backward and SGD update, 45 ONNX nodes.
* ``cnn``:   Conv(3->32, 3x3) - Relu - MaxPool(2x2) - Conv(32->64, 3x3) - Relu -
  GlobalAveragePool on a 16x3x64x64 batch.
* ``lstm``:  two bidirectional LSTM layers, hidden 128, T 100, batch 16, 64 features.

Every sample times ``repeat`` back-to-back runs of one runtime; the runtimes alternate
within a round and the order flips every round; the table reports medians per run
and, as "ours / ORT", the median over rounds of the two samples' ratio within a round (the
two samples ran back to back, so a change of the machine's load between rounds cancels: on
the shared 2-core machine the ratio of the two medians spread over 1.00-1.19 in six runs of
the MLP step, the median of the paired ratios over 1.03-1.14). Before timing, all runtimes'
outputs are checked against ours.

    PYTHONPATH=. python benchmarks/bench_runtime.py [--rounds 15] [--models chain,mlp,cnn,lstm] [--no-reference]
    PYTHONPATH=. python benchmarks/bench_runtime.py --models real --no-reference --profile

``--models real`` selects the real models of ``bench_real_models.py`` (MobileNetV3-small-like,
ResNet-18, CRNN, DB text detector, YOLO-style detector, transformer encoder; needs torch to
export them once); ``--profile`` then prints, per model, where the time goes: our per-op-type
time table (the fused steps) beside onnxruntime's profiler table (the nodes of its optimised graph).
"""

from __future__ import annotations

import os

# one BLAS thread for numpy: must be set before numpy is imported
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import functools  # noqa: E402
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

import onnx_light  # noqa: E402
from onnx_light.runtime import InferenceSession  # noqa: E402

sys.path.insert(0, HERE)
from bench_real_models import REAL_MODELS, real_model  # noqa: E402

F = TensorProto.FLOAT
OPSET = [H.make_opsetid("", 18)]


# ----------------------------------------------------------------------------
# models
# ----------------------------------------------------------------------------
def chain_model(n: int = 2000) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    ops = ["Add", "Mul", "Tanh", "Sub", "Relu", "Neg", "Sigmoid", "Abs"]
    nodes = []
    for i in range(n):
        op = ops[i % len(ops)]
        ins = [f"v{i}", "c"] if op in ("Add", "Mul", "Sub") else [f"v{i}"]
        nodes.append(H.make_node(op, ins, [f"v{i + 1}"]))
    c = NH.from_array(np.full(64, 0.5, np.float32), "c")
    graph = H.make_graph(
        nodes, "chain", [H.make_tensor_value_info("v0", F, [64])], [H.make_tensor_value_info(f"v{n}", F, [64])], [c]
    )
    x = np.random.default_rng(0).standard_normal(64).astype(np.float32)
    return H.make_model(graph, opset_imports=OPSET), {"v0": x}


def mlp_model(batch: int = 64) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """One SGD step; outputs the loss and the six updated parameters."""
    sizes = [784, 512, 256, 10]
    n = []  # nodes

    def node(op: str, ins: list[str], out: str, **attrs: Any) -> str:
        n.append(H.make_node(op, ins, [out], **attrs))
        return out

    # forward
    h = "X"
    acts = ["X"]
    for k in range(3):
        z = node("Add", [node("MatMul", [h, f"W{k}"], f"mm{k}"), f"b{k}"], f"z{k}")
        h = node("Relu", [z], f"h{k}") if k < 2 else z
        acts.append(h)
    logits = h
    # softmax cross-entropy against one-hot labels Y
    lsm = node("LogSoftmax", [logits], "lsm", axis=1)
    nll = node("ReduceSum", [node("Mul", ["Y", lsm], "ylsm"), "axis1"], "nll_rows", keepdims=0)
    node("Neg", [node("ReduceMean", [nll], "mean_ll", keepdims=0)], "loss")
    # backward: d logits = (softmax - Y) / batch
    dz = node("Div", [node("Sub", [node("Exp", [lsm], "softmax"), "Y"], "diff"), "batch"], "dz2")
    grads: dict[str, str] = {}
    for k in (2, 1, 0):
        a = acts[k]
        grads[f"W{k}"] = node("MatMul", [node("Transpose", [a], f"{a}_T"), dz], f"dW{k}")
        grads[f"b{k}"] = node("ReduceSum", [dz, "axis0"], f"db{k}", keepdims=0)
        if k > 0:
            dh = node("MatMul", [dz, node("Transpose", [f"W{k}"], f"W{k}_T")], f"dh{k - 1}")
            mask = node("Greater", [acts[k], "zero"], f"mask{k - 1}")
            dz = node("Where", [mask, dh, "zero"], f"dz{k - 1}")
    # SGD
    outputs = [H.make_tensor_value_info("loss", F, [])]
    for p, g in grads.items():
        node("Sub", [p, node("Mul", [g, "lr"], f"step_{p}")], f"new_{p}")
        outputs.append(H.make_tensor_value_info(f"new_{p}", F, None))
    assert len(n) == 45, len(n)

    r = np.random.default_rng(0)
    inputs = [
        H.make_tensor_value_info("X", F, [batch, 784]),
        H.make_tensor_value_info("Y", F, [batch, 10]),
    ]
    feeds: dict[str, np.ndarray] = {
        "X": r.random((batch, 784), dtype=np.float32),
        "Y": np.eye(10, dtype=np.float32)[r.integers(0, 10, batch)],
    }
    for k in range(3):
        fan_in, fan_out = sizes[k], sizes[k + 1]
        feeds[f"W{k}"] = (r.standard_normal((fan_in, fan_out)) * np.sqrt(2 / fan_in)).astype(np.float32)
        feeds[f"b{k}"] = np.zeros(fan_out, np.float32)
        inputs.append(H.make_tensor_value_info(f"W{k}", F, [fan_in, fan_out]))
        inputs.append(H.make_tensor_value_info(f"b{k}", F, [fan_out]))
    consts = [
        NH.from_array(np.array([1], np.int64), "axis1"),
        NH.from_array(np.array([0], np.int64), "axis0"),
        NH.from_array(np.array(batch, np.float32), "batch"),
        NH.from_array(np.array(0, np.float32), "zero"),
        NH.from_array(np.array(0.01, np.float32), "lr"),
    ]
    graph = H.make_graph(n, "mlp_step", inputs, outputs, consts)
    return H.make_model(graph, opset_imports=OPSET), feeds


def cnn_model(batch: int = 16) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    r = np.random.default_rng(0)
    w1 = (r.standard_normal((32, 3, 3, 3)) * 0.2).astype(np.float32)
    w2 = (r.standard_normal((64, 32, 3, 3)) * 0.06).astype(np.float32)
    b1, b2 = r.standard_normal(32).astype(np.float32), r.standard_normal(64).astype(np.float32)
    nodes = [
        H.make_node("Conv", ["X", "W1", "B1"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        H.make_node("Relu", ["c1"], ["r1"]),
        H.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        H.make_node("Conv", ["p1", "W2", "B2"], ["c2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        H.make_node("Relu", ["c2"], ["r2"]),
        H.make_node("GlobalAveragePool", ["r2"], ["Y"]),
    ]
    inits = [NH.from_array(w1, "W1"), NH.from_array(b1, "B1"), NH.from_array(w2, "W2"), NH.from_array(b2, "B2")]
    graph = H.make_graph(
        nodes,
        "cnn",
        [H.make_tensor_value_info("X", F, [batch, 3, 64, 64])],
        [H.make_tensor_value_info("Y", F, [batch, 64, 1, 1])],
        inits,
    )
    return H.make_model(graph, opset_imports=OPSET), {"X": r.standard_normal((batch, 3, 64, 64)).astype(np.float32)}


def lstm_model(steps: int = 100, batch: int = 16, hidden: int = 128, features: int = 64) -> Any:
    """Two bidirectional LSTM layers (the second reads both directions of the first)."""
    r = np.random.default_rng(0)
    nodes, inits = [], []
    x, width = "X", features
    for layer in range(2):
        w, rr, b = f"W{layer}", f"R{layer}", f"B{layer}"
        inits += [
            NH.from_array(r.uniform(-0.1, 0.1, (2, 4 * hidden, width)).astype(np.float32), w),
            NH.from_array(r.uniform(-0.1, 0.1, (2, 4 * hidden, hidden)).astype(np.float32), rr),
            NH.from_array(r.uniform(-0.1, 0.1, (2, 8 * hidden)).astype(np.float32), b),
        ]
        y = f"Y{layer}"
        nodes.append(H.make_node("LSTM", [x, w, rr, b], [y], hidden_size=hidden, direction="bidirectional"))
        # [T, 2, N, H] -> [T, N, 2H]
        nodes.append(H.make_node("Transpose", [y], [f"T{layer}"], perm=[0, 2, 1, 3]))
        nodes.append(H.make_node("Reshape", [f"T{layer}", "seq_shape"], [f"S{layer}"]))
        x, width = f"S{layer}", 2 * hidden
    inits.append(NH.from_array(np.array([steps, batch, 2 * hidden], np.int64), "seq_shape"))
    graph = H.make_graph(
        nodes,
        "lstm",
        [H.make_tensor_value_info("X", F, [steps, batch, features])],
        [H.make_tensor_value_info(x, F, [steps, batch, 2 * hidden])],
        inits,
    )
    feeds = {"X": r.standard_normal((steps, batch, features)).astype(np.float32)}
    return H.make_model(graph, opset_imports=OPSET), feeds


MODELS: dict[str, Callable[[], tuple[onnx.ModelProto, dict[str, np.ndarray]]]] = {
    "chain": chain_model,
    "mlp": mlp_model,
    "cnn": cnn_model,
    "lstm": lstm_model,
}
TARGETS = {"chain": 2.0, "mlp": 1.25, "cnn": 1.5, "lstm": 1.5}
# the real models (bench_real_models.py: torch architectures exported once into a cache folder)
for _name in REAL_MODELS:
    MODELS[_name] = functools.partial(real_model, _name)
    TARGETS[_name] = 1.5


# ----------------------------------------------------------------------------
# runners
# ----------------------------------------------------------------------------
def runners(model: onnx.ModelProto, reference: bool) -> dict[str, Callable[[dict[str, np.ndarray]], list[Any]]]:
    import onnxruntime as ort

    data = model.SerializeToString()
    ours = InferenceSession(onnx_light.load_from_string(data))
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    theirs = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    out: dict[str, Callable[[dict[str, np.ndarray]], list[Any]]] = {
        "onnx-light": lambda feeds: ours.run(None, feeds),
        "onnxruntime": lambda feeds: theirs.run(None, feeds),
    }
    if reference:
        from onnx.reference import ReferenceEvaluator

        ref = ReferenceEvaluator(model)
        out["reference"] = lambda feeds: ref.run(None, feeds)
    return out


def check(results: dict[str, list[Any]]) -> None:
    ours = results["onnx-light"]
    for name, got in results.items():
        for a, b in zip(ours, got):
            np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4, err_msg=f"{name} disagrees with onnx-light")


#: the clock of a sample: wall time, or (``--clock cpu``) this process's CPU time, steadier on a
#: shared machine (both runtimes run one thread in this process)
CLOCK: Callable[[], float] = time.perf_counter


def measure(run: Callable[[], Any], repeat: int) -> float:
    t = CLOCK()
    for _ in range(repeat):
        run()
    return (CLOCK() - t) / repeat


def bench(name: str, rounds: int, reference: bool) -> dict[str, float]:
    """Median seconds per run of each runtime, and under ``"paired"`` the median over rounds of
    ours / onnxruntime within a round."""
    model, feeds = MODELS[name]()
    fns = runners(model, reference)
    check({k: f(feeds) for k, f in fns.items()})
    # enough back-to-back runs per sample for ~50 ms of onnxruntime time, at least 1
    one = measure(lambda: fns["onnxruntime"](feeds), 3)
    repeat = max(1, int(0.05 / max(one, 1e-6)))
    ref_repeat = max(1, repeat // 50)
    samples: dict[str, list[float]] = {k: [] for k in fns}
    order = list(fns)
    ref_rounds = min(rounds, 5)
    for r in range(rounds):
        for k in order if r % 2 == 0 else order[::-1]:
            if k == "reference" and r >= ref_rounds:
                continue  # the reference is orders of magnitude slower; a few samples suffice
            samples[k].append(measure(lambda f=fns[k]: f(feeds), ref_repeat if k == "reference" else repeat))
    paired = [a / b for a, b in zip(samples["onnx-light"], samples["onnxruntime"])]
    return {k: statistics.median(v) for k, v in samples.items()} | {"paired": statistics.median(paired)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--models", default="chain,mlp,cnn,lstm")
    p.add_argument("--no-reference", action="store_true", help="skip onnx.reference.ReferenceEvaluator")
    p.add_argument(
        "--profile",
        action="store_true",
        help="print per model our per-op-type time table (verbose=2) and onnxruntime's",
    )
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall", help="cpu: process CPU time per sample")
    args = p.parse_args()
    global CLOCK
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    names = args.models.replace("real", ",".join(REAL_MODELS)).split(",")
    import onnxruntime as ort

    print(
        f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"numpy {np.__version__}, onnxruntime {ort.__version__}, onnx {onnx.__version__}"
    )
    header = "| model | onnx-light | onnxruntime | reference | ours / ORT (target) | reference / ours |"
    print(header)
    print("|---|---|---|---|---|---|")
    for name in names:
        t = bench(name, args.rounds, not args.no_reference)
        ref = t.get("reference")
        ratio = t["paired"]
        ok = "ok" if ratio <= TARGETS[name] else "MISSED"
        ours = t["onnx-light"]
        print(
            f"| {name} | {t['onnx-light'] * 1e3:.3f} ms | {t['onnxruntime'] * 1e3:.3f} ms | "
            f"{'-' if ref is None else f'{ref * 1e3:.1f} ms'} | {ratio:.2f}x (<= {TARGETS[name]}x, {ok}) | "
            f"{'-' if ref is None else f'{ref / ours:.1f}x'} |",
            flush=True,
        )
    if args.profile:
        for name in names:
            profile(name)


def profile(name: str, runs: int = 10) -> None:
    """Where the time goes in ``name``: our session's per-op-type table (``verbose=2``, the fused
    steps' labels) and onnxruntime's (its profiler's kernel times, the nodes of its optimised
    graph: fused Conv activations, NCHWc reorders), the mean of ``runs`` runs each, alternating."""
    import contextlib
    import io

    model, feeds = MODELS[name]()
    data = model.SerializeToString()
    sess = InferenceSession(onnx_light.load_from_string(data), verbose=2)
    ours: dict[str, list[float]] = {}
    theirs: dict[str, list[float]] = {}
    peer = _profiled_ort(data, name)
    for _ in range(3):  # warm-up (ours: the buffer pool's first runs)
        with contextlib.redirect_stdout(io.StringIO()):
            sess.run(None, feeds)
        peer.run(None, feeds)
    for _ in range(runs):
        with contextlib.redirect_stdout(io.StringIO()):
            sess.run(None, feeds)
        peer.run(None, feeds)
        for label, (calls, seconds) in sess.last_profile.items():
            entry = ours.setdefault(label, [0, 0.0])
            entry[0] += calls / runs
            entry[1] += seconds / runs
    _ort_kernel_times(peer.end_profiling(), runs, theirs)
    print(f"\n## {name}: where the time goes (mean of {runs} runs; ours then onnxruntime's profiler)")
    print("| ours: step | calls | ms | onnxruntime: node | calls | ms |")
    print("|---|---|---|---|---|---|")
    left = sorted(ours.items(), key=lambda kv: -kv[1][1])
    right = sorted(theirs.items(), key=lambda kv: -kv[1][1])
    for k in range(max(len(left), len(right))):
        a = f"{left[k][0]} | {round(left[k][1][0])} | {left[k][1][1] * 1e3:.3f}" if k < len(left) else " | | "
        b = f"{right[k][0]} | {round(right[k][1][0])} | {right[k][1][1] * 1e3:.3f}" if k < len(right) else " | | "
        print(f"| {a} | {b} |")
    total_ours = sum(v[1] for v in ours.values()) * 1e3
    total_theirs = sum(v[1] for v in theirs.values()) * 1e3
    print(f"| **all steps** | | **{total_ours:.3f}** | **all nodes** | | **{total_theirs:.3f}** |")


def _profiled_ort(data: bytes, name: str) -> Any:
    """An onnxruntime session (1 thread) with its profiler on (its file in the temporary folder)."""
    import tempfile

    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.enable_profiling = True
    prefix = os.path.join(tempfile.gettempdir(), f"bench_runtime_{os.getpid()}_{name}")
    options.profile_file_prefix = prefix
    return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])


def _ort_kernel_times(path: str, runs: int, into: dict[str, list[float]]) -> None:
    """Adds to ``into[op type]`` the ``[calls, seconds]`` per run of the profiled runs after the
    three warm-up runs in onnxruntime's profile file ``path`` (deleted after reading)."""
    import json

    with open(path) as f:
        events = json.load(f)
    os.remove(path)
    model_runs = [e for e in events if e.get("name") == "model_run"]
    start = model_runs[3]["ts"] if len(model_runs) > 3 else 0
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time") and e["ts"] >= start:
            entry = into.setdefault(e["args"]["op_name"], [0, 0.0])
            entry[0] += 1 / runs
            entry[1] += e["dur"] * 1e-6 / runs


if __name__ == "__main__":
    main()
