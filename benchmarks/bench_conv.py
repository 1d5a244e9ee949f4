"""2-D float32 convolutions on common geometries: the native kernel, the numpy twin, the
runtime's choice between them, and onnxruntime, one thread each, in one process.

The geometries are the layers holding most of the FLOPs of ``bench_real_models.py``'s
ResNet-18 and MobileNetV3 (``--shapes models``), then those of ResNet-50 (stem, bottleneck
1x1 and 3x3, strided 3x3, the 7x7 stage), a MobileNet depthwise layer (stride 1 and 2), a
batch-8 3x3, and the two convolutions of ``bench_runtime.py``'s CNN (``--shapes common``).
The native kernel is ``src/conv.cpp`` (AVX-512) or ``src/conv_avx2.cpp`` (AVX2), on one
thread and on ``--threads`` (wall clock); the numpy twin is im2col + one batched matmul
(OpenBLAS, one thread); ``runtime`` is the ``Conv`` kernel, which picks one of them
(``_native_conv_pays``). Medians of ``--runs`` alternating calls (``--clock cpu``: this
thread's CPU time, steadier on a shared machine), with GFLOP/s; every result is checked
against onnxruntime.

    PYTHONPATH=. python benchmarks/bench_conv.py [--runs 15] [--clock cpu] [--shapes models] [--only r18]

``--model real`` (or a comma list of ``bench_real_models.py`` names) times every Conv geometry of
those models: the runtime's kernel with read-only weights (as a session's: the Winograd transform
is cached) against a one-node onnxruntime session, and with ``--before`` another build of the
extension (main's ``_native*.so``) in the same process:

    PYTHONPATH=. python benchmarks/bench_conv.py --model real --clock cpu --before /work/main/onnx_light/_native*.so

``--transpose`` times the ConvTransposes of MobileNetV3's emitted backward (the data gradient of
each Conv; ``TRANSPOSE_SHAPES``) instead: the runtime's ``ConvTranspose`` kernel, its numpy path
(the twin: one batched matmul or one multiply-add per kernel tap, then a scatter-add per tap) and
onnxruntime:

    PYTHONPATH=. python benchmarks/bench_conv.py --transpose [--runs 15] [--clock cpu]

The AVX2 kernel on an AVX-512 machine, against OpenBLAS's AVX2 (Haswell) GEMM:

    ONNX_LIGHT_CONV_ISA=avx2 OPENBLAS_CORETYPE=Haswell PYTHONPATH=. python benchmarks/bench_conv.py
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import functools  # noqa: E402
import importlib.util  # noqa: E402
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

from onnx_light.onnx_core.ops import transpose_window  # noqa: E402
from onnx_light.runtime import _native  # noqa: E402
from onnx_light.runtime.kernels.conv import _conv_im2col, _conv_transpose_scatter, conv, conv_transpose  # noqa: E402

#: the clock of a sample (``--clock``): wall time, or this thread's CPU time (steadier when the
#: machine is shared; the multi-threaded column is then meaningless)
CLOCK: Callable[[], float] = time.perf_counter
#: ``--before``: another build of the extension (e.g. main's), timed beside ours in --model tables
BEFORE: Any = None

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
# the layers of bench_real_models.py's ResNet-18 and MobileNetV3 that hold most of their FLOPs
MODEL_SHAPES = [
    ("r18 3x3 64 @56", 1, 64, 56, 64, 3, 1, 1, 1),
    ("r18 3x3 128 @28", 1, 128, 28, 128, 3, 1, 1, 1),
    ("r18 3x3 256 @14", 1, 256, 14, 256, 3, 1, 1, 1),
    ("r18 3x3 512 @7", 1, 512, 7, 512, 3, 1, 1, 1),
    ("r18 stem 7x7/2", 1, 3, 224, 64, 7, 2, 3, 1),
    ("r18 3x3/2 64->128", 1, 64, 56, 128, 3, 2, 1, 1),
    ("r18 3x3/2 256->512", 1, 256, 14, 512, 3, 2, 1, 1),
    ("r18 1x1/2 64->128", 1, 64, 56, 128, 1, 2, 0, 1),
    ("mb3 1x1 96->576 @7", 1, 96, 7, 576, 1, 1, 0, 1),
    ("mb3 stem 3x3/2", 1, 3, 224, 16, 3, 2, 1, 1),
    ("mb3 1x1 576->96 @7", 1, 576, 7, 96, 1, 1, 0, 1),
    ("mb3 1x1 40->240 @14", 1, 40, 14, 240, 1, 1, 0, 1),
    ("mb3 1x1 16->72 @56", 1, 16, 56, 72, 1, 1, 0, 1),
    ("mb3 dw 5x5 240 @14", 1, 240, 14, 240, 5, 1, 2, 240),
    ("mb3 dw 5x5 576 @7", 1, 576, 7, 576, 5, 1, 2, 576),
    ("mb3 dw 3x3/2 72 @56", 1, 72, 56, 72, 3, 2, 1, 72),
]


# the ConvTransposes of MobileNetV3's backward holding most of its time before h-convt:
# name, batch, in channels, size, out channels per group, kernel, stride, pads, group
TRANSPOSE_SHAPES = [
    ("mb3 dw 5x5/2 288 @7", 1, 288, 7, 1, 5, 2, (2, 2, 1, 1), 288),
    ("mb3 dw 5x5/2 96 @14", 1, 96, 14, 1, 5, 2, (2, 2, 1, 1), 96),
    ("mb3 dw 3x3/2 72 @28", 1, 72, 28, 1, 3, 2, (1, 1, 0, 0), 72),
    ("mb3 dw 3x3/2 16 @56", 1, 16, 56, 1, 3, 2, (1, 1, 0, 0), 16),
    ("mb3 dw 5x5 240 @14", 1, 240, 14, 1, 5, 1, (2, 2, 2, 2), 240),
    ("mb3 dw 5x5 576 @7", 1, 576, 7, 1, 5, 1, (2, 2, 2, 2), 576),
    ("mb3 1x1 576->96 @7", 1, 576, 7, 96, 1, 1, (0, 0, 0, 0), 1),
    ("mb3 1x1 96->576 @7", 1, 96, 7, 576, 1, 1, (0, 0, 0, 0), 1),
    ("mb3 1x1 576->144 @1", 1, 576, 1, 144, 1, 1, (0, 0, 0, 0), 1),
    ("batch 4 dw 3x3/2 72 @28", 4, 72, 28, 1, 3, 2, (1, 1, 0, 0), 72),
    ("group 1 3x3/2 256->128 @7", 1, 256, 7, 128, 3, 2, (1, 1, 0, 0), 1),
]


def measure_transpose(shape: tuple[Any, ...], rng: np.random.Generator, runs: int) -> str:
    """One table row: the ConvTranspose kernel, its numpy path and onnxruntime on one geometry."""
    name, n, c, size, mg, k, s, pads, g = shape
    x = rng.standard_normal((n, c, size, size)).astype(np.float32)
    w = (rng.standard_normal((c, mg, k, k)) * 0.1).astype(np.float32)
    attrs: dict[str, Any] = dict(group=g, strides=[s, s], pads=list(pads))
    node = H.make_node("ConvTranspose", ["x", "w"], ["y"], **attrs)
    graph = H.make_graph(
        [node],
        "convT",
        [H.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [H.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [NH.from_array(w, "w")],
    )
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    model = H.make_model(graph, opset_imports=[H.make_opsetid("", 17)]).SerializeToString()
    sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    tw = transpose_window([size, size], [k, k], [s, s], [1, 1], list(pads), "NOTSET", None, None, legacy=False)
    fns: dict[str, Callable[[], Any]] = {
        "runtime": lambda: conv_transpose(x, w, **attrs),
        "numpy": lambda: _conv_transpose_scatter(x, w, [s, s], [1, 1], g, tw.begin, tw.out),
        "ort": lambda: sess.run(None, {"x": x})[0],
    }
    want = fns["ort"]()
    for key in ("runtime", "numpy"):
        np.testing.assert_allclose(fns[key](), want, rtol=1e-4, atol=1e-4 * np.abs(want).max(), err_msg=key)
    times: dict[str, list[float]] = {key: [] for key in fns}
    for r in range(runs):
        for key in list(fns) if r % 2 == 0 else list(fns)[::-1]:
            start = CLOCK()
            fns[key]()
            times[key].append(CLOCK() - start)
    med = {key: statistics.median(v) * 1e3 for key, v in times.items()}
    return (
        f"| {name} | {med['runtime']:.3f} ms | {med['numpy']:.3f} ms | {med['ort']:.3f} ms "
        f"| {med['runtime'] / med['ort']:.2f}x | {med['numpy'] / med['ort']:.2f}x |"
    )


def _ort_conv(x: np.ndarray, w: np.ndarray, b: np.ndarray, **attrs: Any) -> Any:
    """A one-node onnxruntime session (1 thread) of Conv(x, w, b) with ``attrs``, w and b initializers."""
    node = H.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)
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


def measure(shape: tuple[Any, ...], rng: np.random.Generator, runs: int, threads: int) -> str:
    """One table row: median times of the five convolutions of one geometry."""
    name, n, c, size, m, k, s, p, g = shape
    x = rng.standard_normal((n, c, size, size)).astype(np.float32)
    w = (rng.standard_normal((m, c // g, k, k)) * 0.1).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    sess = _ort_conv(x, w, b, pads=[p] * 4, strides=[s, s], group=g)
    native, isa = _native.EXTENSION.conv2d, _native.CONV_ISA  # type: ignore[union-attr]
    fns: dict[str, Callable[[], Any]] = {
        "native": lambda: native(x, w, b, s, s, 1, 1, p, p, p, p, g, False, isa),
        f"native {threads}t": (
            (lambda: native(x, w, b, s, s, 1, 1, p, p, p, p, g, False, isa, threads=threads))
            if getattr(_native, "_CONV_TAKES_THREADS", False)
            else (lambda: None)  # an extension built before the option: no such column
        ),
        "numpy": lambda: _conv_im2col(x, w, b, [s, s], [1, 1], [p, p], [p, p], g),
        "runtime": lambda: conv(x, w, b, pads=[p] * 4, strides=[s, s], group=g),
        "ort": lambda: sess.run(None, {"x": x})[0],
    }
    want = fns["ort"]()
    for key in [k for k in fns if k != "ort" and (k != f"native {threads}t" or fns[k]() is not None)]:
        np.testing.assert_allclose(fns[key](), want, rtol=1e-4, atol=1e-4 * np.abs(want).max(), err_msg=key)
    times: dict[str, list[float]] = {key: [] for key in fns}
    for _ in range(runs):
        for key, fn in fns.items():
            start = CLOCK()
            fn()
            times[key].append(CLOCK() - start)
    med = {key: statistics.median(v) * 1e3 for key, v in times.items()}
    pays = _native._native_conv_pays(x.shape, w.shape, [s, s], [1, 1], [p, p], [p, p], g)
    oh = (size + 2 * p - k) // s + 1
    gflop = 2 * n * m * (c // g) * k * k * oh * oh / 1e9
    return (
        f"| {name} | {gflop * 1e3:.1f} | {med['native']:.2f} ms ({gflop / med['native'] * 1e3:.0f}) "
        f"| {med[f'native {threads}t']:.2f} ms | {med['numpy']:.2f} ms | {med['runtime']:.2f} ms "
        f"({'native' if pays else 'numpy'}) | {med['ort']:.2f} ms ({gflop / med['ort'] * 1e3:.0f}) "
        f"| {med['native'] / med['ort']:.2f}x | {med['runtime'] / med['ort']:.2f}x |"
    )


def model_convs(name: str) -> list[tuple[Any, ...]]:
    """The distinct Conv geometries of a real model of ``bench_real_models.py`` (shapes by onnx's
    shape inference), each with its count: ``(label, n, c, h, w, m, k, stride, pads, group, dilation, count)``."""
    import onnx

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_real_models import real_model

    model = onnx.shape_inference.infer_shapes(real_model(name)[0])
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in model.graph.value_info}
    shapes.update({v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in model.graph.input})
    inits = {t.name: list(t.dims) for t in model.graph.initializer}
    found: dict[tuple[Any, ...], int] = {}
    for node in model.graph.node:
        if node.op_type != "Conv" or node.input[1] not in inits:
            continue
        a = {at.name: H.get_attribute_value(at) for at in node.attribute}
        n, c, h, w = shapes.get(node.input[0], [0] * 4)
        m, _, k, k2 = inits[node.input[1]]
        if 0 in (n, c, h, w) or k != k2 or a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
            continue
        key = (
            n,
            c,
            h,
            w,
            m,
            k,
            tuple(a.get("strides", [1, 1])),
            tuple(a.get("pads", [0] * 4)),
            a.get("group", 1),
            tuple(a.get("dilations", [1, 1])),
        )
        found[key] = found.get(key, 0) + 1
    out = []
    for key, count in found.items():
        n, c, h, w, m, k, st, pads, g, dil = key
        label = f"{name} {c}->{m} {k}x{k}/{st[0]}" + (f" g{g}" if g > 1 else "") + (f" d{dil[0]}" if dil[0] > 1 else "")
        out.append((f"{label} @{h}x{w}", *key, count))
    return out


def _with_extension(ext: Any, fn: Callable[[], Any]) -> Any:
    """``fn()`` with the runtime calling ``ext`` (another build of the extension) for its native
    kernels: the same Python path as ours, the other build's C++."""
    saved = _native.NATIVE
    _native.NATIVE = ext
    try:
        return fn()
    finally:
        _native.NATIVE = saved


def measure_layer(layer: tuple[Any, ...], rng: np.random.Generator, runs: int) -> tuple[float, float, float, float]:
    """(ours, onnxruntime, MFLOP, before) of one real-model Conv geometry: the runtime's Conv kernel
    (native or numpy, as the session picks; read-only weights, as a session's), alternating with a
    one-node onnxruntime session and, with ``--before``, another build of the extension (NaN without)."""
    _, n, c, h, w_, m, k, st, pads, g, dil, _count = layer
    x = rng.standard_normal((n, c, h, w_)).astype(np.float32)
    w = (rng.standard_normal((m, c // g, k, k)) * 0.1).astype(np.float32)
    w.flags.writeable = False  # like a session's initializer: the kernel may cache its packed form
    b = rng.standard_normal(m).astype(np.float32)
    attrs: dict[str, Any] = dict(pads=list(pads), strides=list(st), group=g, dilations=list(dil))
    sess = _ort_conv(x, w, b, **attrs)
    fns: dict[str, Callable[[], Any]] = {
        "ours": lambda: conv(x, w, b, **attrs),
        "ort": lambda: sess.run(None, {"x": x})[0],
    }
    if BEFORE is not None:
        fns["before"] = lambda: _with_extension(BEFORE, lambda: conv(x, w, b, **attrs))
    want = fns["ort"]()
    for key in [k for k in fns if k != "ort"]:
        np.testing.assert_allclose(fns[key](), want, rtol=1e-4, atol=1e-4 * np.abs(want).max(), err_msg=layer[0])
    times: dict[str, list[float]] = {key: [] for key in fns}
    for r in range(runs):
        for key in list(fns) if r % 2 == 0 else list(fns)[::-1]:
            start = CLOCK()
            fns[key]()
            times[key].append(CLOCK() - start)
    oh = (h + pads[0] + pads[2] - dil[0] * (k - 1) - 1) // st[0] + 1
    ow = (w_ + pads[1] + pads[3] - dil[1] * (k - 1) - 1) // st[1] + 1
    mflop = 2 * n * m * (c // g) * k * k * oh * ow / 1e6
    med = {key: statistics.median(v) * 1e3 for key, v in times.items()}
    return med["ours"], med["ort"], mflop, med.get("before", float("nan"))


def models_table(names: list[str], runs: int, only: str) -> None:
    """Per real model: every Conv geometry, ours vs onnxruntime, and the totals (count-weighted)."""
    print("| layer | count | MFLOP | ours ms (GFLOP/s) | onnxruntime ms (GFLOP/s) | before / ORT | ours / ORT |")
    print("|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for name in names:
        total = [0.0, 0.0, 0.0]
        for layer in model_convs(name):
            if only not in layer[0]:
                continue
            ours, theirs, mflop, before = measure_layer(layer, rng, runs)
            count = layer[-1]
            total[0] += count * ours
            total[1] += count * theirs
            total[2] += count * before
            print(
                f"| {layer[0]} | {count} | {mflop:.1f} | {ours:.3f} ({mflop / ours:.0f}) "
                f"| {theirs:.3f} ({mflop / theirs:.0f}) | {before / theirs:.2f}x | {ours / theirs:.2f}x |",
                flush=True,
            )
        if total[1]:
            print(
                f"| **{name} all Conv** | | | {total[0]:.2f} | {total[1]:.2f} | {total[2] / total[1]:.2f}x "
                f"| **{total[0] / total[1]:.2f}x** |"
            )


def _ort_node_times(path: str, skip: int) -> dict[str, list[float]]:
    """Per node event of onnxruntime's profile file ``path`` (deleted): its kernel times (s) in
    the model runs after the first ``skip``."""
    import json

    with open(path) as f:
        events = json.load(f)
    os.remove(path)
    runs = [e for e in events if e.get("name") == "model_run"]
    start = runs[skip]["ts"] if len(runs) > skip else 0
    out: dict[str, list[float]] = {}
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time") and e["ts"] >= start:
            out.setdefault(e["name"], []).append(e["dur"] * 1e-6)
    return out


def _timed_steps(plan: Any, times: dict[int, list[float]], args: dict[int, list[Any]]) -> None:
    """Wraps the Conv steps' kernels in ``plan``'s generated function: each call's time into
    ``times[step]``, its arguments (copies) into ``args[step]`` (once)."""
    import re

    space = plan.fast.__globals__
    for key in list(space):
        found = re.fullmatch(r"k(\d+)", key)
        if not found or plan.steps[int(found[1])].node.op_type != "Conv":
            continue
        i, fn = int(found[1]), space[key]

        def timed(*a: Any, _fn: Any = fn, _i: int = i, **kw: Any) -> Any:
            start = CLOCK()
            y = _fn(*a, **kw)
            times.setdefault(_i, []).append(CLOCK() - start)
            if _i not in args:
                args[_i] = [np.array(v) if isinstance(v, np.ndarray) else v for v in a]
            return y

        space[key] = timed


def in_model_table(name: str, runs: int) -> None:
    """Every Conv step of ``name`` timed inside the model (our session's generated function,
    its buffer pool; onnxruntime's profiler per node) and alone (the same step on copies of its
    inputs; a one-node onnxruntime session, whose run() costs tens of microseconds on top):
    where a layer's in-model and standalone ratios part, and why."""
    import tempfile

    import onnx_light
    from onnx_light.runtime import InferenceSession

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_real_models import real_model

    model, feeds = real_model(name)
    data = model.SerializeToString()
    sess = InferenceSession(onnx_light.load_from_string(data))
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    opts.enable_profiling = True
    opts.profile_file_prefix = os.path.join(tempfile.gettempdir(), f"bench_conv_{os.getpid()}")
    peer = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
    for _ in range(3):
        sess.run(None, feeds)
        peer.run(None, feeds)
    times: dict[int, list[float]] = {}
    args: dict[int, list[Any]] = {}
    _timed_steps(sess._plan, times, args)
    for _ in range(runs):
        sess.run(None, feeds)
        peer.run(None, feeds)
    theirs = _ort_node_times(peer.end_profiling(), 3)
    attrs = {
        n.name: {a.name: H.get_attribute_value(a) for a in n.attribute if a.name != "kernel_shape"}
        for n in model.graph.node
        if n.op_type == "Conv"
    }
    readers: dict[str, list[Any]] = {}
    for n in model.graph.node:
        for v in n.input:
            readers.setdefault(v, []).append(n)
    chains = {}  # Conv node -> the outputs of it and of the nodes its fused step may hold
    for n in model.graph.node:
        if n.op_type == "Conv":
            outs, node = [n.output[0]], n
            while len(readers.get(node.output[0], [])) == 1 and len(outs) < 4:
                node = readers[node.output[0]][0]
                outs.append(node.output[0])
            chains[n.name] = outs
    _print_in_model(name, sess._plan, (times, args), theirs, (attrs, chains), runs)


def _print_in_model(
    name: str,
    plan: Any,
    steps: tuple[dict[int, list[float]], dict[int, list[Any]]],
    theirs: dict[str, list[float]],
    convs: tuple[dict[str, dict[str, Any]], dict[str, list[str]]],
    runs: int,
) -> None:
    """The rows of in_model_table: each Conv step beside onnxruntime's node of the same output
    (its profiler names a node by the output, ``_nchwc`` for a blocked layout, or by the node)."""
    print(f"# {name}: every Conv step in the model and alone (ms, medians of {runs} runs)")
    print("| step | input | ours in model | ORT in model | ratio | ours alone | ORT alone (run()) | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    times, args = steps
    attrs, chains = convs
    total = np.zeros(4)
    for i, spent in sorted(times.items()):
        step, a = plan.steps[i], args[i]
        keys = [f"{o}{tail}_kernel_time" for o in chains[step.node.name] for tail in ("_nchwc", "")]
        peer = next((theirs[k] for k in [*keys, f"{step.node.name}_kernel_time"] if k in theirs), None)
        if peer is None:
            continue
        w, b = a[1], a[2] if len(a) > 2 and isinstance(a[2], np.ndarray) else np.zeros(a[1].shape[0], np.float32)
        alone = _ort_conv(a[0], w, b, **attrs[step.node.name])
        row = [statistics.median(spent), statistics.median(peer)]
        row.append(_median_of(functools.partial(step.fn, *a), runs))
        row.append(_median_of(functools.partial(alone.run, None, {"x": a[0]}), runs))
        total += row
        print(
            f"| {step.label} | {list(a[0].shape)} x {list(w.shape)} | {row[0] * 1e3:.3f} | {row[1] * 1e3:.3f} "
            f"| {row[0] / row[1]:.2f}x | {row[2] * 1e3:.3f} | {row[3] * 1e3:.3f} | {row[2] / row[3]:.2f}x |"
        )
    t = total * 1e3
    print(
        f"| **all Conv steps** | | **{t[0]:.2f}** | **{t[1]:.2f}** | **{t[0] / t[1]:.2f}x** | {t[2]:.2f} "
        f"| {t[3]:.2f} | {t[2] / t[3]:.2f}x |"
    )


def _median_of(fn: Callable[[], Any], runs: int) -> float:
    spent = []
    for _ in range(runs):
        start = CLOCK()
        fn()
        spent.append(CLOCK() - start)
    return statistics.median(spent)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--threads", type=int, default=2, help="the native kernel's threads in the 'native Nt' column")
    parser.add_argument("--shapes", choices=("all", "models", "common"), default="all")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall", help="cpu: this thread's CPU time")
    parser.add_argument("--only", default="", help="only the geometries whose name contains this")
    parser.add_argument("--transpose", action="store_true", help="MobileNetV3's backward ConvTransposes instead")
    parser.add_argument("--model", default="", help="every Conv of these real models (comma list, or 'real')")
    parser.add_argument("--before", default="", help="with --model: another build of _native*.so to compare")
    parser.add_argument("--in-model", action="store_true", help="with --model: each Conv step in the model and alone")
    args = parser.parse_args()
    global CLOCK, BEFORE
    if args.before:
        spec = importlib.util.spec_from_file_location("before._native", args.before)
        assert spec is not None and spec.loader is not None
        BEFORE = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(BEFORE)
    CLOCK = time.thread_time if args.clock == "cpu" else time.perf_counter
    if args.model:
        names = args.model.replace("real", "mobilenetv3,resnet18,crnn,dbnet,yolo").split(",")
        if args.in_model:
            for name in names:
                in_model_table(name, args.runs)
            return
        print(f"# every Conv of {', '.join(names)}; native conv: {_native.CONV_ISA if _native.CONV2D else 'none'}")
        models_table(names, args.runs, args.only)
        return
    if args.transpose:
        print(f"# ConvTranspose, native conv: {_native.CONV_ISA if _native.CONV2D else 'none'}")
        print("| geometry | runtime | numpy path | onnxruntime | runtime / ORT | numpy / ORT |")
        print("|---|---|---|---|---|---|")
        rng = np.random.default_rng(0)
        for geometry in TRANSPOSE_SHAPES:
            if args.only in geometry[0]:
                print(measure_transpose(geometry, rng, args.runs), flush=True)
        return
    if not _native.CONV2D:
        sys.exit("the native conv2d is not available (extension not built, or no AVX-512F / AVX2)")
    print(f"# native kernel: {_native.CONV_ISA}; OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '')}")
    print(
        f"| geometry | MFLOP | native (GFLOP/s) | native {args.threads} threads (wall) | numpy | runtime (choice) "
        "| onnxruntime (GFLOP/s) | native / ORT | runtime / ORT |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    shapes = {"all": MODEL_SHAPES + SHAPES, "models": MODEL_SHAPES, "common": SHAPES}[args.shapes]
    for shape in shapes:
        if args.only in shape[0]:
            print(measure(shape, rng, args.runs, args.threads), flush=True)


if __name__ == "__main__":
    main()
