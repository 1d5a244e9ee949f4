"""The conv net training step's heaviest nodes, one node per model, ours against onnxruntime.

Each node runs alone in a one-node model in both runtimes (one thread), alternating, and the
outputs are compared first. The geometries are those of ``bench_training.py --models cnn``:
MaxPool with Indices, the forward Convs, the ConvTranspose of the input gradient, the one-hot
im2col Convs of the weight gradients, the weight-gradient MatMuls.

    PYTHONPATH=. python benchmarks/bench_step_kernels.py [pool] [conv] [mm]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import sys  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from onnx_light.runtime import InferenceSession  # noqa: E402

RNG = np.random.default_rng(0)


def _f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _one_hot(c: int) -> np.ndarray:
    w = np.zeros((c * 9, 1, 3, 3), np.float32)
    for i in range(c):
        for k in range(9):
            w[i * 9 + k, 0, k // 3, k % 3] = 1
    return w


def one(op: str, ins: list[np.ndarray], n_out: int, attrs: dict[str, Any], rounds: int = 7) -> None:
    """Times one node in onnxruntime and in our runtime, alternating; prints the medians."""
    import onnx
    import onnxruntime as ort
    from onnx import helper as h

    names = [f"i{k}" for k in range(len(ins))]
    node = h.make_node(op, names, [f"o{k}" for k in range(n_out)], **attrs)
    inputs = [h.make_tensor_value_info(n, h.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in zip(names, ins)]
    outs = [
        h.make_tensor_value_info(f"o{k}", onnx.TensorProto.FLOAT if k == 0 else onnx.TensorProto.INT64, None)
        for k in range(n_out)
    ]
    model = h.make_model(h.make_graph([node], "g", inputs, outs), opset_imports=[h.make_opsetid("", 17)])
    data = model.SerializeToString()
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    engines = {
        "ort": ort.InferenceSession(data, so, providers=["CPUExecutionProvider"]),
        "ours": InferenceSession(data),
    }
    feeds = dict(zip(names, ins))
    for a, b in zip(*(s.run(None, feeds) for s in engines.values())):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-4)
    times: dict[str, list[float]] = {k: [] for k in engines}
    for _ in range(rounds):
        for k, s in engines.items():
            t0 = time.perf_counter()
            s.run(None, feeds)
            times[k].append(time.perf_counter() - t0)
    o, u = (float(np.median(times[k])) * 1e3 for k in ("ort", "ours"))
    print(f"{op:14s} {str([a.shape for a in ins]):58s} ort {o:7.2f} ms  ours {u:7.2f} ms  x{u / o:.2f}")


def main() -> None:
    which = set(sys.argv[1:]) or {"pool", "conv", "mm"}
    if "pool" in which:
        one("MaxPool", [np.maximum(_f32(16, 32, 62, 62), 0)], 2, {"kernel_shape": [2, 2], "strides": [2, 2]})
    if "conv" in which:
        one("Conv", [_f32(16, 3, 64, 64), _f32(32, 3, 3, 3), _f32(32)], 1, {"kernel_shape": [3, 3]})
        one("Conv", [_f32(16, 32, 31, 31), _f32(64, 32, 3, 3), _f32(64)], 1, {"kernel_shape": [3, 3]})
        one("ConvTranspose", [_f32(16, 64, 29, 29), _f32(64, 32, 3, 3)], 1, {})
        one("Conv", [_f32(16, 3, 64, 64), _one_hot(3)], 1, {"group": 3})
        one("Conv", [np.maximum(_f32(16, 32, 31, 31), 0), _one_hot(32)], 1, {"group": 32})
    if "mm" in which:
        one("MatMul", [_f32(16, 27, 3844), np.ascontiguousarray(_f32(16, 32, 3844).transpose(0, 2, 1))], 1, {})
        one("MatMul", [_f32(16, 288, 841), np.ascontiguousarray(_f32(16, 64, 841).transpose(0, 2, 1))], 1, {})


if __name__ == "__main__":
    main()
