"""2-D float32 convolutions on common geometries: the native kernel, the numpy twin, the
runtime's choice between them, and onnxruntime, one thread each, in one process.

The geometries are those of ResNet-50 (stem, bottleneck 1x1 and 3x3, strided 3x3, the
7x7 stage), a MobileNet depthwise layer (stride 1 and 2), a batch-8 3x3, and the two
convolutions of ``bench_runtime.py``'s CNN. The native kernel is ``src/conv.cpp``
(AVX-512); the numpy twin is im2col + one batched matmul (OpenBLAS, one thread);
``runtime`` is the ``Conv`` kernel, which picks one of them (``_native_conv_pays``).
Medians of ``--runs`` alternating calls; every result is checked against onnxruntime.

    PYTHONPATH=. python benchmarks/bench_conv.py [--runs 15]

The AVX2 kernel on an AVX-512 machine, against OpenBLAS's AVX2 (Haswell) GEMM:

    ONNX_LIGHT_CONV_ISA=avx2 OPENBLAS_CORETYPE=Haswell PYTHONPATH=. python benchmarks/bench_conv.py
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
from onnx import TensorProto  # noqa: E402
from onnx import helper as H  # noqa: E402
from onnx import numpy_helper as NH  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from onnx_light.runtime import _native  # noqa: E402
from onnx_light.runtime.kernels.conv import _conv_im2col, conv  # noqa: E402

# name, batch, in channels, size, out channels, kernel, stride, pad, group
SHAPES = [
    ("resnet stem 7x7/2", 1, 3, 224, 64, 7, 2, 3, 1),
    ("resnet 1x1 56", 1, 256, 56, 64, 1, 1, 0, 1),
    ("resnet 3x3 56", 1, 64, 56, 64, 3, 1, 1, 1),
    ("resnet 3x3/2 56", 1, 128, 56, 128, 3, 2, 1, 1),
    ("resnet 1x1 7", 1, 2048, 7, 512, 1, 1, 0, 1),
    ("resnet 3x3 7", 1, 512, 7, 512, 3, 1, 1, 1),
    ("depthwise 3x3 56", 1, 144, 56, 144, 3, 1, 1, 144),
    ("depthwise 3x3/2 56", 1, 144, 56, 144, 3, 2, 1, 144),
    ("batch 8 3x3 28", 8, 64, 28, 128, 3, 1, 1, 1),
    ("bench cnn conv1", 16, 3, 64, 32, 3, 1, 1, 1),
    ("bench cnn conv2", 16, 32, 32, 64, 3, 1, 1, 1),
]


def _ort_conv(x: np.ndarray, w: np.ndarray, b: np.ndarray, s: int, p: int, g: int) -> Any:
    node = H.make_node("Conv", ["x", "w", "b"], ["y"], pads=[p] * 4, strides=[s, s], group=g)
    graph = H.make_graph(
        [node],
        "conv",
        [H.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [H.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [NH.from_array(w, "w"), NH.from_array(b, "b")],
    )
    model = H.make_model(graph, opset_imports=[H.make_opsetid("", 17)])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def measure(shape: tuple[Any, ...], rng: np.random.Generator, runs: int) -> str:
    """One table row: median times of the four convolutions of one geometry."""
    name, n, c, size, m, k, s, p, g = shape
    x = rng.standard_normal((n, c, size, size)).astype(np.float32)
    w = (rng.standard_normal((m, c // g, k, k)) * 0.1).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    sess = _ort_conv(x, w, b, s, p, g)
    native, isa = _native.EXTENSION.conv2d, _native.CONV_ISA  # type: ignore[union-attr]
    fns: dict[str, Callable[[], Any]] = {
        "native": lambda: native(x, w, b, s, s, 1, 1, p, p, p, p, g, False, isa),
        "numpy": lambda: _conv_im2col(x, w, b, [s, s], [1, 1], [p, p], [p, p], g),
        "runtime": lambda: conv(x, w, b, pads=[p] * 4, strides=[s, s], group=g),
        "ort": lambda: sess.run(None, {"x": x})[0],
    }
    want = fns["ort"]()
    for key in ("native", "numpy", "runtime"):
        np.testing.assert_allclose(fns[key](), want, rtol=1e-4, atol=1e-4 * np.abs(want).max(), err_msg=key)
    times: dict[str, list[float]] = {key: [] for key in fns}
    for _ in range(runs):
        for key, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - start)
    med = {key: statistics.median(v) * 1e3 for key, v in times.items()}
    pays = _native._native_conv_pays(x.shape, w.shape, [s, s], [1, 1], [p, p], [p, p], g)
    return (
        f"| {name} | {med['native']:.2f} ms | {med['numpy']:.2f} ms | {med['runtime']:.2f} ms "
        f"({'native' if pays else 'numpy'}) | {med['ort']:.2f} ms | {med['runtime'] / med['ort']:.2f}x |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    if not _native.CONV2D:
        sys.exit("the native conv2d is not available (extension not built, or no AVX-512F / AVX2)")
    print(f"# native kernel: {_native.CONV_ISA}; OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '')}")
    print("| geometry | native | numpy | runtime (choice) | onnxruntime | runtime / ORT |")
    print("|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for shape in SHAPES:
        print(measure(shape, rng, args.runs), flush=True)


if __name__ == "__main__":
    main()
