"""Single ops of the real models, ours against onnxruntime (1 thread), one process.

Each op is a one-node float32 model (MaxPool of ResNet-18, CRNN and YOLO's SPPF, YOLO's head
Sigmoid, the encoder's attention Softmax). Ours and onnxruntime alternate, the order flipping
every round; a sample is the process CPU time of 20 runs; the table reports the minimum of 9.

    PYTHONPATH=. python benchmarks/bench_ops.py
"""

from __future__ import annotations

import os

# one BLAS thread for numpy: must be set before numpy is imported
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = "1"

import functools  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
from onnx import TensorProto  # noqa: E402
from onnx import helper as H  # noqa: E402

import onnx_light  # noqa: E402
from onnx_light.runtime import InferenceSession  # noqa: E402

CASES: list[tuple[str, tuple[int, ...], dict[str, Any]]] = [
    ("MaxPool", (1, 64, 112, 112), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("MaxPool", (1, 128, 10, 10), {"kernel_shape": [5, 5], "strides": [1, 1], "pads": [2, 2, 2, 2]}),
    ("MaxPool", (1, 32, 32, 160), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ("MaxPool", (1, 64, 16, 80), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ("MaxPool", (1, 128, 8, 40), {"kernel_shape": [2, 1], "strides": [2, 1]}),
    ("Sigmoid", (1, 4800, 85), {}),
    ("Softmax", (1, 4, 128, 128), {"axis": -1}),
]


def sample(run: Callable[[], Any], n: int = 20) -> float:
    start = time.process_time()
    for _ in range(n):
        run()
    return (time.process_time() - start) / n


def main() -> None:
    print("| op (shape) | ours (us) | onnxruntime (us) | ours / ORT |")
    print("|---|---|---|---|")
    for op, shape, attrs in CASES:
        f = TensorProto.FLOAT
        graph = H.make_graph(
            [H.make_node(op, ["x"], ["y"], **attrs)],
            "g",
            [H.make_tensor_value_info("x", f, shape)],
            [H.make_tensor_value_info("y", f, None)],
        )
        data = H.make_model(graph, opset_imports=[H.make_opsetid("", 18)]).SerializeToString()
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        theirs = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
        ours = InferenceSession(onnx_light.load_from_string(data))
        np.testing.assert_allclose(ours.run(None, {"x": x})[0], theirs.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)
        times: dict[str, list[float]] = {"ours": [], "ort": []}
        feeds = {"x": x}
        runs = {"ours": functools.partial(ours.run, None, feeds), "ort": functools.partial(theirs.run, None, feeds)}
        for r in range(9):
            for k in ("ours", "ort") if r % 2 else ("ort", "ours"):
                times[k].append(sample(runs[k]))
        a, b = min(times["ours"]), min(times["ort"])
        label = f"{op} {attrs.get('kernel_shape', '')} {shape}"
        print(f"| {label} | {a * 1e6:.0f} | {b * 1e6:.0f} | {a / b:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
