"""Runs the reverse transform of the benchmark chain ``calls`` times after one warm call: for
instruction counts, which the machine's load does not change (issue 15).

One call's instructions are the difference of two runs (``calls`` 1 and 3, halved), with the
hash seed fixed, the bytecode compiled beforehand and the collector off (else the runs differ by
the compiling and by when collections happen)::

    python -m compileall -q onnx_light
    for k in 1 3; do PYTHONHASHSEED=0 PYTHONDONTWRITEBYTECODE= PYTHONPATH=. valgrind --tool=callgrind \\
        --callgrind-out-file=/dev/null python benchmarks/gradient_calls.py 1000 $k 2>&1 | grep Collected; done
"""

from __future__ import annotations

import gc
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import onnx_light as ol  # noqa: E402
from onnx_light import helper, shape_inference  # noqa: E402

FLOAT = ol.TensorProto.FLOAT


def chain_model(layers: int, width: int = 64) -> tuple[ol.ModelProto, list[str], str]:
    """``bench_gradient.chain_model`` built with our helper (importing onnx would cost more
    instructions than a small transform, and vary more between runs)."""
    inputs = [helper.make_tensor_value_info("x", FLOAT, [width])]
    nodes, prev = [], "x"
    for i in range(layers):
        inputs += [helper.make_tensor_value_info(n, FLOAT, [width]) for n in (f"w{i}", f"b{i}")]
        nodes += [
            helper.make_node("Mul", [prev, f"w{i}"], [f"m{i}"]),
            helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"]),
            helper.make_node("Tanh", [f"a{i}"], [f"t{i}"]),
        ]
        prev = f"t{i}"
    graph = helper.make_graph(nodes, "forward", inputs, [helper.make_tensor_value_info(prev, FLOAT, None)])
    model = shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]))
    return model, [i.name for i in inputs], prev


def main() -> None:
    nodes, calls = int(sys.argv[1]), int(sys.argv[2])
    model, xs, y = chain_model(max(1, nodes // 3))
    registry = ol.DefaultGradRegistry()
    ol.GradientOfFunction(model, xs, y, registry=registry)
    gc.collect()
    gc.disable()  # no collection between the calls: when one runs depends on the allocations
    for _ in range(calls):
        ol.GradientOfFunction(model, xs, y, registry=registry)


if __name__ == "__main__":
    main()
