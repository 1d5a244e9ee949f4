"""Runs the reverse transform of the benchmark chain ``calls`` times after one warm call: for
instruction counts, which the machine's load does not change (issue 15).

One call's instructions are the difference of two runs (``calls`` 1 and 3, halved), with the
hash seed fixed and the bytecode compiled beforehand (else the runs differ by the compiling)::

    python -m compileall -q onnx_light
    for k in 1 3; do PYTHONHASHSEED=0 PYTHONDONTWRITEBYTECODE= PYTHONPATH=. valgrind --tool=callgrind \\
        --callgrind-out-file=/dev/null python benchmarks/gradient_calls.py 1000 $k 2>&1 | grep Collected; done
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench_gradient import REGISTRY, chain_model  # noqa: E402

import onnx_light as ol  # noqa: E402


def main() -> None:
    nodes, calls = int(sys.argv[1]), int(sys.argv[2])
    model, xs, y = chain_model(max(1, nodes // 3))
    ours = ol.ModelProto.FromString(model.SerializeToString())
    ol.GradientOfFunction(ours, xs, y, registry=REGISTRY)
    for _ in range(calls):
        ol.GradientOfFunction(ours, xs, y, registry=REGISTRY)


if __name__ == "__main__":
    main()
