"""One LSTM, GRU or RNN layer across shapes: onnx-light's kernel against onnxruntime's.

Each row is one bidirectional layer with constant weights (initializers, as in a deployed model):
crnn's two LSTM layers (``bench_real_models.py``: T 40, batch 1, 512 then 256 features, hidden
128), then batch 1 and 32, hidden 64 to 512, sequences of 10 to 100 steps. One process, one core
each (numpy with one BLAS thread, onnxruntime with ``intra_op_num_threads=1``); the two runtimes
alternate within each round (order flipped every round) and the table gives the median process
CPU time per run and the median of the rounds' ratios. Outputs are checked against onnxruntime
before timing. ``bench_recurrent.py`` has the stacked models, the numpy twin and the backward.

    PYTHONPATH=. python benchmarks/bench_rnn.py [--rounds 9] [--ops LSTM,GRU,RNN] [--quick]
"""

from __future__ import annotations

import os

# one BLAS thread for numpy: must be set before numpy is imported
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from bench_recurrent import GATES, measure  # noqa: E402
from onnx import TensorProto  # noqa: E402
from onnx import helper as H  # noqa: E402
from onnx import numpy_helper as NH  # noqa: E402

import onnx_light  # noqa: E402
from onnx_light.runtime import InferenceSession, _native  # noqa: E402

#: (label, steps, batch, features, hidden)
SHAPES = [
    ("crnn layer 1", 40, 1, 512, 128),
    ("crnn layer 2", 40, 1, 256, 128),
    ("b1 h64 t100", 100, 1, 64, 64),
    ("b1 h256 t50", 50, 1, 128, 256),
    ("b1 h512 t10", 10, 1, 256, 512),
    ("b32 h64 t100", 100, 32, 64, 64),
    ("b32 h128 t50", 50, 32, 128, 128),
    ("b32 h256 t20", 20, 32, 128, 256),
    ("b32 h512 t10", 10, 32, 256, 512),
]
QUICK = ["crnn layer 1", "crnn layer 2", "b1 h256 t50", "b32 h128 t50"]


def layer(op: str, steps: int, batch: int, features: int, hidden: int) -> tuple[bytes, dict[str, np.ndarray]]:
    """One bidirectional ``op`` layer with W, R, B as initializers; its feeds."""
    r = np.random.default_rng(0)
    g = GATES[op]
    inits = [
        NH.from_array(r.uniform(-0.1, 0.1, shape).astype(np.float32), name)
        for name, shape in (
            ("W", (2, g * hidden, features)),
            ("R", (2, g * hidden, hidden)),
            ("B", (2, 2 * g * hidden)),
        )
    ]
    graph = H.make_graph(
        [H.make_node(op, ["X", "W", "R", "B"], ["Y"], hidden_size=hidden, direction="bidirectional")],
        op.lower(),
        [H.make_tensor_value_info("X", TensorProto.FLOAT, [steps, batch, features])],
        [H.make_tensor_value_info("Y", TensorProto.FLOAT, [steps, 2, batch, hidden])],
        inits,
    )
    model = H.make_model(graph, opset_imports=[H.make_opsetid("", 18)])
    return model.SerializeToString(), {"X": r.standard_normal((steps, batch, features)).astype(np.float32)}


def compare(data: bytes, feeds: dict[str, np.ndarray], rounds: int) -> tuple[float, float, float]:
    """(our CPU ms, onnxruntime's CPU ms, median ratio ours / onnxruntime) of one model."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    theirs = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    ours = InferenceSession(onnx_light.load_from_string(data))
    runs: dict[str, Any] = {"ours": lambda: ours.run(None, feeds), "ort": lambda: theirs.run(None, feeds)}
    np.testing.assert_allclose(runs["ours"]()[0], runs["ort"]()[0], rtol=1e-3, atol=1e-4)
    repeat = max(1, int(0.05 / max(measure(runs["ort"], 3)[0], 1e-6)))  # ~50 ms of onnxruntime a sample
    times: dict[str, list[float]] = {k: [] for k in runs}
    for r in range(rounds):
        for k in runs if r % 2 == 0 else reversed(runs):
            times[k].append(measure(runs[k], repeat)[0])
    ratio = statistics.median(a / b for a, b in zip(times["ours"], times["ort"]))
    return statistics.median(times["ours"]) * 1e3, statistics.median(times["ort"]) * 1e3, ratio


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--ops", default="LSTM,GRU,RNN")
    p.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    args = p.parse_args()
    import onnxruntime as ort

    print(
        f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, numpy {np.__version__}, "
        f"onnxruntime {ort.__version__}, onnx {onnx.__version__}, native step loop: {_native.RECURRENT}, "
        f"load {os.getloadavg()[0]:.1f}"
    )
    print("| op | shape (T, N, I, H) | ours CPU ms | onnxruntime CPU ms | ours / onnxruntime |")
    print("|---|---|---|---|---|")
    for op in args.ops.split(","):
        for label, *shape in SHAPES:
            if args.quick and label not in QUICK:
                continue
            ours, theirs, ratio = compare(*layer(op, *shape), args.rounds)
            dims = ", ".join(map(str, shape))
            print(f"| {op} | {label} ({dims}) | {ours:.3f} | {theirs:.3f} | {ratio:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
