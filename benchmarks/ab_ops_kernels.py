"""The non-conv kernels of the real models, another tree's (OLD) against this one's, in one process.

Loads OLD's built extension beside ours and OLD's Resize replication and LayerNormalization
kernels (from its sources), then alternates them with ours on the real models' shapes (median of
11 samples of thread CPU time). The h-ops section of RESULTS.md was measured with OLD = /work/main:

    PYTHONPATH=. python benchmarks/ab_ops_kernels.py /work/main
"""

# ruff: noqa
import importlib.util, sys, time, types, glob, os, numpy as np

OLD = sys.argv[1] if len(sys.argv) > 1 else "/work/main"
pkg = types.ModuleType("oldpkg")
pkg.__path__ = []
sys.modules["oldpkg"] = pkg
spec = importlib.util.spec_from_file_location(
    "oldpkg._native", glob.glob(os.path.join(OLD, "onnx_light", "_native*.so"))[0]
)
old = importlib.util.module_from_spec(spec)
spec.loader.exec_module(old)
from onnx_light.runtime import _native as W
from onnx_light.runtime.kernels.pool import global_average_pool
from onnx_light.runtime.kernels.normalization import layer_norm
from onnx_light.runtime.kernels.activation import softmax
from onnx_light.runtime.kernels.resize import _replicate


def _old_kernel(module: str, name: str):
    """``name`` from OLD's ``onnx_light/runtime/kernels/<module>.py``, its @kernel registration a no-op."""
    ns = {"__name__": f"old_{module}"}
    src = open(os.path.join(OLD, f"onnx_light/runtime/kernels/{module}.py")).read()
    src = src.replace("from onnx_light.runtime._registry import kernel", "kernel = lambda *a, **k: (lambda f: f)")
    exec(compile(src, f"old_{module}", "exec"), ns)
    return ns[name]


old_replicate = _old_kernel("resize", "_replicate")
old_ln = _old_kernel("normalization", "layer_norm")
rng = np.random.default_rng(0)


def t(f, n):
    s = time.thread_time()
    for _ in range(n):
        f()
    return (time.thread_time() - s) / n


def ab(label, fa, fb, n=10, rounds=11):
    a, b = [], []
    for r in range(rounds):
        if r % 2:
            a.append(t(fa, n))
            b.append(t(fb, n))
        else:
            b.append(t(fb, n))
            a.append(t(fa, n))
    print(
        f"| {label} | {np.median(a) * 1e6:.1f} | {np.median(b) * 1e6:.1f} | {np.median(np.array(b) / np.array(a)):.2f} |",
        flush=True,
    )


print("| kernel (shape) | main us | h-ops us | h-ops / main |\n|---|---|---|---|")
for shape, k, s, p in [
    ((1, 64, 112, 112), (3, 3), (2, 2), 1),
    ((1, 64, 160, 160), (3, 3), (2, 2), 1),
    ((1, 32, 32, 160), (2, 2), (2, 2), 0),
    ((1, 64, 16, 80), (2, 2), (2, 2), 0),
    ((1, 128, 8, 40), (2, 1), (2, 1), 0),
    ((1, 256, 4, 40), (2, 1), (2, 1), 0),
    ((1, 128, 10, 10), (5, 5), (1, 1), 2),
]:
    x = rng.standard_normal(shape).astype(np.float32)
    oh = (shape[2] + 2 * p - k[0]) // s[0] + 1
    ow = (shape[3] + 2 * p - k[1]) // s[1] + 1
    out = np.empty((1, shape[1], oh, ow), np.float32)
    args = (k[0], k[1], s[0], s[1], 1, 1, oh, ow, p, p)
    ab(
        f"MaxPool {k[0]}x{k[1]}/{s[0]}x{s[1]} {shape[1:]}",
        lambda: old.max_pool2d_f32(x, *args, out=out),
        lambda: W.NATIVE.max_pool2d_f32(x, *args, out=out),
    )
for shape in [(1, 16, 56, 56), (1, 240, 14, 14), (1, 576, 7, 7), (1, 512, 7, 7)]:
    x = rng.standard_normal(shape).astype(np.float32)
    ab(
        f"GlobalAveragePool {shape[1:]}",
        lambda: x.mean(axis=(2, 3), keepdims=True, dtype=np.float32),
        lambda: global_average_pool(x),
        n=100,
    )
for shape, f in [
    ((1, 128, 40, 40), [1, 1, 2, 2]),
    ((1, 128, 10, 10), [1, 1, 2, 2]),
    ((1, 32, 10, 10), [1, 1, 8, 8]),
    ((1, 32, 20, 20), [1, 1, 4, 4]),
]:
    x = rng.standard_normal(shape).astype(np.float32)
    into = np.empty([d * k for d, k in zip(shape, f)], np.float32)
    ab(
        f"Resize nearest x{f[-1]} {shape[1:]} (pool's buffer)",
        lambda: old_replicate(x, f),
        lambda: _replicate(x, f, into),
    )
x = rng.standard_normal((1, 128, 256)).astype(np.float32)
sc = rng.standard_normal(256).astype(np.float32)
bi = sc * 0.5
ab(
    "LayerNormalization (1, 128, 256)",
    lambda: old_ln(x, sc, bi, epsilon=1e-5),
    lambda: layer_norm(x, sc, bi, epsilon=1e-5),
    n=50,
)
x = rng.standard_normal((1, 4, 128, 128)).astype(np.float32)
buf = np.empty_like(x)
ab("Softmax (1, 4, 128, 128), fresh vs pool's buffer", lambda: softmax(x), lambda: softmax(x, out=buf), n=50)
