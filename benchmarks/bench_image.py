"""Image kernels (Resize, GridSample, ...) of onnx-light against onnxruntime, one process.

numpy runs with one BLAS thread and onnxruntime with ``intra_op_num_threads=1``, so the
comparison is one core against one core. Each case is a one-node model built with ``onnx``
and run through both ``InferenceSession`` objects; the runs alternate (the order flips every
round) and the table reports the median time per run and the median of the per-round ratios,
and, for a shared (loaded) machine, the ratio of the best per-round thread CPU times (the
time this thread ran, which other processes' load does not stretch). Before timing, our
output is checked against onnxruntime's.

    PYTHONPATH=. python benchmarks/bench_image.py [--rounds 15] [--cases resize-linear,gridsample-bilinear]
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
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import helper as H  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import onnx_light  # noqa: E402
from onnx_light.runtime import InferenceSession  # noqa: E402


def _model(op: str, feeds: dict[str, np.ndarray | None], attrs: dict[str, Any], opset: int) -> onnx.ModelProto:
    """A one-node model over ``feeds`` (None: an omitted optional input), output shape inferred."""
    names = [n if v is not None else "" for n, v in feeds.items()]
    node = H.make_node(op, names, ["y"], **attrs)
    inputs = [
        H.make_tensor_value_info(n, H.np_dtype_to_tensor_dtype(v.dtype), v.shape)
        for n, v in feeds.items()
        if v is not None
    ]
    graph = H.make_graph([node], op, inputs, [H.make_empty_tensor_value_info("y")])
    model = H.make_model(graph, opset_imports=[H.make_opsetid("", opset)])
    model.ir_version = 10
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    del model.graph.output[:]
    model.graph.output.extend(v for v in inferred.graph.value_info if v.name == "y")
    return model


def cases() -> dict[str, tuple[onnx.ModelProto, dict[str, np.ndarray]]]:
    """The benchmarked models and their feeds, by name."""
    r = np.random.default_rng(0)
    x = r.standard_normal((1, 64, 128, 128)).astype(np.float32)
    up2 = np.array([1, 1, 2, 2], np.float32)
    out: dict[str, tuple[onnx.ModelProto, dict[str, np.ndarray]]] = {}
    for mode in ("linear", "nearest", "cubic"):
        feeds: dict[str, np.ndarray | None] = {"X": x, "roi": None, "scales": up2}
        out[f"resize-{mode}"] = (_model("Resize", feeds, {"mode": mode}, 19), {"X": x, "scales": up2})
    down = np.array([1, 1, 0.5, 0.5], np.float32)
    feeds = {"X": x, "roi": None, "scales": down}
    out["resize-linear-antialias-down2"] = (
        _model("Resize", feeds, {"mode": "linear", "antialias": 1}, 19),
        {"X": x, "scales": down},
    )
    img = r.standard_normal((4, 32, 64, 64)).astype(np.float32)
    grid = r.uniform(-1.1, 1.1, (4, 64, 64, 2)).astype(np.float32)
    for mode in ("linear", "nearest", "cubic"):
        out[f"gridsample-{mode}"] = (
            _model("GridSample", {"X": img, "grid": grid}, {"mode": mode}, 20),
            {"X": img, "grid": grid},
        )
    return out


def _time(fn: Any, repeat: int) -> tuple[float, float]:
    """(wall seconds, this thread's CPU seconds) per call."""
    start, cpu = time.perf_counter(), time.thread_time()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat, (time.thread_time() - cpu) / repeat


def bench(
    name: str, model: onnx.ModelProto, feeds: dict[str, np.ndarray], rounds: int
) -> tuple[float, float, float, float]:
    """(ours ms, onnxruntime ms, median ratio ours / onnxruntime, ratio of the best CPU times)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    peer = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    ours = InferenceSession(onnx_light.ModelProto.FromString(model.SerializeToString()))
    want = peer.run(None, feeds)[0]
    got = ours.run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=name)
    runners = [lambda: ours.run(None, feeds), lambda: peer.run(None, feeds)]
    repeat = max(1, int(0.05 / max(_time(runners[0], 1)[0], 1e-4)))
    mine: list[float] = []
    theirs: list[float] = []
    ratios: list[float] = []
    cpu: tuple[list[float], list[float]] = ([], [])
    for k in range(rounds):
        order = (0, 1) if k % 2 == 0 else (1, 0)
        t = {i: _time(runners[i], repeat) for i in order}
        mine.append(t[0][0])
        theirs.append(t[1][0])
        ratios.append(t[0][0] / t[1][0])
        cpu[0].append(t[0][1])
        cpu[1].append(t[1][1])
    best = min(cpu[0]) / max(min(cpu[1]), 1e-9)
    return statistics.median(mine) * 1e3, statistics.median(theirs) * 1e3, statistics.median(ratios), best


def main() -> None:
    """Runs the cases and prints a markdown table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    args = parser.parse_args()
    chosen = set(filter(None, args.cases.split(",")))
    print(f"# image kernels, {platform.machine()} {platform.processor() or ''}, numpy {np.__version__}")
    print("| case | onnx-light ms | onnxruntime ms | ratio | best-CPU ratio |")
    print("|---|---:|---:|---:|---:|")
    for name, (model, feeds) in cases().items():
        if chosen and name not in chosen:
            continue
        mine, theirs, ratio, best = bench(name, model, feeds, args.rounds)
        print(f"| {name} | {mine:.2f} | {theirs:.2f} | {ratio:.2f} | {best:.2f} |", flush=True)


if __name__ == "__main__":
    main()
