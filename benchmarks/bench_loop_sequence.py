"""A Loop carrying a list (torch's ``list.append`` in a scripted loop): backward/forward time.

    PYTHONPATH=$PWD python benchmarks/bench_loop_sequence.py [--steps 50 200] [--repeat 7] [--rounds 2]
        [--baseline BWD.onnx]

The forward is ``h <- tanh(h W + b)`` T times, each h appended to a list, the list stacked
and reduced; the backward is our reverse pass's function (the tape Loop, then the reverse
Loop carrying the list backwards, SequenceErase per step). Both run in our runtime and in
onnxruntime (1 intra-op thread), alternating in one process; the table gives the medians
and backward/forward. ``--baseline``: a backward model saved by another tree (e.g. before a
change to the rules), run alternating with ours in the same runtime, with its time as a ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np

import onnx_light as ol
from onnx_light import helper as h

H = 64
B = 16


def _model(dtype: int = 1) -> Any:
    seq = h.make_tensor_sequence_value_info
    vi = h.make_tensor_value_info
    body = h.make_graph(
        [
            h.make_node("MatMul", ["h", "W"], ["hw"]),
            h.make_node("Add", ["hw", "b"], ["pre"]),
            h.make_node("Tanh", ["pre"], ["h_next"]),
            h.make_node("SequenceInsert", ["acc", "h_next"], ["acc_next"]),
            h.make_node("Identity", ["c"], ["c_out"]),
        ],
        "body",
        [vi("i", 7, []), vi("c", 9, []), vi("h", dtype, [B, H]), seq("acc", dtype, [B, H])],
        [vi("c_out", 9, []), vi("h_next", dtype, [B, H]), seq("acc_next", dtype, [B, H])],
    )
    nodes = [
        h.make_node("SequenceEmpty", [], ["s0"], dtype=dtype),
        h.make_node("Loop", ["T", "", "x", "s0"], ["hf", "sf"], body=body),
        h.make_node("ConcatFromSequence", ["sf"], ["st"], axis=0, new_axis=1),
        h.make_node("ReduceSumSquare", ["st"], ["loss"], keepdims=0),
    ]
    graph = h.make_graph(
        nodes,
        "list_loop",
        [vi("T", 7, []), vi("x", dtype, [B, H]), vi("W", dtype, [H, H]), vi("b", dtype, [H])],
        [vi("loss", dtype, [])],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 21)])
    model.ir_version = 10
    return model


def _median(fn: Any, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _timed(sess: Any, values: dict[str, np.ndarray], repeat: int) -> float:
    """The median time of one run of ``sess`` on the inputs it takes from ``values``."""
    feeds = {i.name: values[i.name] for i in sess.get_inputs()}
    return _median(lambda: sess.run(None, feeds), repeat)


def main() -> None:
    import onnxruntime as ort

    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, nargs="+", default=[50, 200])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=2, help="alternations; the medians over them are shown")
    parser.add_argument("--baseline", help="a backward model (.onnx) to time against ours, alternating")
    args = parser.parse_args()
    model = _model()
    t0 = time.perf_counter()
    bwd_model = ol.gradient_model(model, xs=["x", "W", "b"], y="loss")
    transform = time.perf_counter() - t0
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sessions = {
        "ours": (ol.runtime.InferenceSession(model), ol.runtime.InferenceSession(bwd_model)),
        "onnxruntime": tuple(
            ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
            for m in (model, bwd_model)
        ),
    }
    if args.baseline:
        sessions["baseline"] = (sessions["ours"][0], ol.runtime.InferenceSession(ol.load_model(args.baseline)))
    rng = np.random.default_rng(0)
    fn = ol.GradientOfFunction(model, xs=["x", "W", "b"], y="loss")
    loops = sum(n.op_type == "Loop" for n in fn.node)
    print(f"transform {transform * 1e3:.1f} ms (first call); backward function: {len(fn.node)} nodes, {loops} Loops")
    print("| T | runtime | forward ms | backward ms | backward/forward |")
    print("|---|---|---|---|---|")
    for steps in args.steps:
        feeds = {
            "T": np.array(steps, np.int64),
            "x": rng.standard_normal((B, H)).astype(np.float32),
            "W": (rng.standard_normal((H, H)) * 0.1).astype(np.float32),
            "b": rng.standard_normal(H).astype(np.float32),
        }
        bfeeds = {**feeds, "dy": np.ones((), np.float32)}
        rounds: dict[str, list[tuple[float, float]]] = {name: [] for name in sessions}
        for _ in range(args.rounds):  # alternate ours / onnxruntime (/ baseline)
            for name, (fwd, bwd) in sessions.items():
                rounds[name].append((_timed(fwd, feeds, args.repeat), _timed(bwd, bfeeds, args.repeat)))
        results = {name: [statistics.median(r[i] for r in rs) for i in (0, 1)] for name, rs in rounds.items()}
        for name, (f, b) in results.items():
            print(f"| {steps} | {name} | {f * 1e3:.2f} | {b * 1e3:.2f} | {b / f:.1f}x |")
        if args.baseline:
            print(f"| {steps} | ours / baseline backward | | {results['ours'][1] / results['baseline'][1]:.2f} | |")


if __name__ == "__main__":
    main()
