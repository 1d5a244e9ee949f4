"""Session build time against the node count: it must grow linearly (issue 14 §4).

    PYTHONPATH=. python benchmarks/bench_session_build.py [--sizes 25000 50000 100000]

Builds an ``InferenceSession`` for a Neg/Tanh chain of each size and for its backward
function (``GradientOfFunction``), and prints the seconds and the microseconds per node:
a flat per-node column is linear. The quadratic part found with cProfile was the cyclic
garbage collector: its full passes over every live object (the model's nodes included)
ran again and again while the plan's small objects were allocated; the build now pauses
it, as the gradient pass does.

``--memory`` also measures, with tracemalloc (slower, so on smaller sizes), the memory the
model holds once loaded from its bytes and the memory the session build allocates at its
peak and keeps afterwards, as multiples of the model's (issue 14: at most 2x).
"""

from __future__ import annotations

import argparse
import gc
import time
import tracemalloc

import onnx_light as ol
from onnx_light import TensorProto, helper
from onnx_light.runtime import InferenceSession


def chain(n: int) -> ol.ModelProto:
    """``v0 -> Neg -> Tanh -> Neg -> ...``: n nodes on a [4] float tensor."""
    nodes = [helper.make_node("Tanh" if i % 2 else "Neg", [f"v{i}"], [f"v{i + 1}"]) for i in range(n)]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("v0", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info(f"v{n}", TensorProto.FLOAT, [4])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def memory(data: bytes) -> tuple[float, float, float]:
    """(model MB, build peak / model, kept after the build / model) for a serialized model."""
    gc.collect()
    tracemalloc.start()
    model = ol.ModelProto.FromString(data)
    _ = model.graph.node  # what every reader touches first
    model_bytes = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    session = InferenceSession(model)
    gc.collect()
    kept, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del session
    return model_bytes / 1e6, (peak - model_bytes) / model_bytes, (kept - model_bytes) / model_bytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[25000, 50000, 100000])
    parser.add_argument("--memory", action="store_true", help="tracemalloc: session memory against the model's")
    parser.add_argument("--model", nargs="*", default=[], help="with --memory: ONNX files to measure too")
    args = parser.parse_args()
    if args.memory:
        print(f"{'nodes':>8s} {'model MB':>9s} {'build peak x':>13s} {'kept x':>7s}")
        for n in args.sizes:
            mb, peak, kept = memory(chain(n).SerializeToString())
            print(f"{n:8d} {mb:9.1f} {peak:13.2f} {kept:7.2f}", flush=True)
        for path in args.model:
            with open(path, "rb") as f:
                mb, peak, kept = memory(f.read())
            print(f"{path}: model {mb:.1f} MB, build peak {peak:.2f}x, kept {kept:.2f}x", flush=True)
        return
    print(f"{'nodes':>8s} {'forward s':>10s} {'us/node':>8s} {'backward s':>11s} {'us/node':>8s} {'grad s':>7s}")
    for n in args.sizes:
        model = chain(n)
        t0 = time.perf_counter()
        InferenceSession(model)
        fwd = time.perf_counter() - t0
        t0 = time.perf_counter()
        bwd = ol.GradientOfFunction(model, ["v0"], f"v{n}")
        grad = time.perf_counter() - t0
        t0 = time.perf_counter()
        InferenceSession(bwd)
        back = time.perf_counter() - t0
        m = len(bwd.node)
        print(f"{n:8d} {fwd:10.2f} {fwd / n * 1e6:8.1f} {back:11.2f} {back / m * 1e6:8.1f} {grad:7.2f}", flush=True)


if __name__ == "__main__":
    main()
