"""Session build time against the node count: it must grow linearly (issue 14 §4).

    PYTHONPATH=. python benchmarks/bench_session_build.py [--sizes 25000 50000 100000]

Builds an ``InferenceSession`` for a Neg/Tanh chain of each size and for its backward
function (``GradientOfFunction``), and prints the seconds and the microseconds per node:
a flat per-node column is linear. The quadratic part found with cProfile was the cyclic
garbage collector: its full passes over every live object (the model's nodes included)
ran again and again while the plan's small objects were allocated; the build now pauses
it, as the gradient pass does.
"""

from __future__ import annotations

import argparse
import time

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[25000, 50000, 100000])
    args = parser.parse_args()
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
