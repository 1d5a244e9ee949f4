"""onnx-light's gradient pass against the ``onnx-ad`` package, in one process, alternating.

For each model the two reverse-mode transforms differentiate the same forward
``onnx.ModelProto`` (weights are graph inputs, so both tools may differentiate them):

* ``chain``: ``t_i = tanh(t_{i-1} * w_i + b_i)``, 2,000 layers (6,000 nodes), built
  with ``onnx.helper``; ``y`` is the last ``t`` (a vector);
* ``mlp``: 784-512-256-10 ``MatMul``/``Add``/``Relu`` on a batch of 64, loss = mean;
* ``cnn``: two ``Conv``/``Relu``/``MaxPool`` stages and a ``Gemm`` head on 16 x 3 x 32 x 32,
  loss = mean;
* ``encoder``: a 6-layer pre-LN ``torch.nn.TransformerEncoder`` (d_model 256, 8 heads,
  feed-forward 1024) exported by the TorchScript exporter at opset 17, loss = mean
  of the output (needs ``torch``; skipped with a note when it is missing).

``xs`` is every float graph input but the data ``x`` (the weights), except for the
chain, where it is ``x`` and every ``w_i``/``b_i``. Measured, median over alternating
rounds (the order flips every round):

* transform time: ``onnx_light.GradientOfFunction(model, xs, y)`` on our IR against
  ``onnx_ad.reverse(model, inputs=xs, outputs=[y], layout="onnx")`` on onnx's (model
  parsing excluded for both);
* emitted nodes / forward nodes: both emitted graphs are self-contained (they recompute
  the forward values they read), so both counts include forward nodes;
* backward run time / forward run time in onnxruntime (1 intra-op thread, sequential,
  default graph optimisations), our FunctionProto wrapped as a model with
  ``backward_model(..., inline=True)``;
* the time to differentiate a 10,000-node chain (ours only);
* with ``--per-op``: nodes each of our rules emits per forward node, by op type;
* for ``lstm`` and ``gru``, the first call as well: our template cache of recurrent
  backward graphs (``_recurrent_cache``) emptied before every round, as in a fresh process;
* with ``--sizes 10,100,1000,10000,100000``: the chain at each size (3 nodes a layer, every
  ``w_i``/``b_i`` an x), ours against onnx-ad (up to ``--peer-max`` nodes), the time per
  node (flat is linear) and our peak memory during the transform (tracemalloc, one more
  run) as a multiple of the decoded model's memory.

``--optimize on|off`` passes ``optimize=`` to ``GradientOfFunction`` (default: its default).

    PYTHONPATH=. python benchmarks/bench_gradient.py [--rounds 7] [--models chain,mlp,cnn,encoder] [--per-op]
    PYTHONPATH=. python benchmarks/bench_gradient.py --models lstm,gru --no-big-chain --optimize off
    PYTHONPATH=. python benchmarks/bench_gradient.py --models none --no-big-chain --sizes 10,100,1000,10000,100000

Times are CPU seconds of this process (``time.process_time``): every measured thing
runs single-threaded here, and the machine may be shared. ``--wall`` uses
``time.perf_counter`` instead. Each timed call follows a full ``gc.collect()``; ``--warm``
collects only the young generations and pauses the collector during the call, for both
sides (the full collection evicts the CPU caches: a fixed cost on small transforms). Writes nothing; the numbers go into
``benchmarks/RESULTS.md`` by hand.
"""

from __future__ import annotations

import argparse
import collections
import gc
import io
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper as oh

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import onnx_light as ol  # noqa: E402
from onnx_light.onnx_core.gradient import _pass as grad_pass  # noqa: E402
from onnx_light.onnx_core.gradient import backward_model, input_types  # noqa: E402
from onnx_light.runtime import InferenceSession  # noqa: E402

FLOATS = (TP.FLOAT, TP.DOUBLE, TP.FLOAT16)
#: CPU time of this process: both transforms and onnxruntime (1 thread) run on this
#: thread only, so other processes on the machine do not inflate either side
CLOCK = time.process_time
#: --warm: time each call without a full collection before it (see ``_time``)
WARM = False


# ----------------------------------------------------------------------------
# models: (onnx model, xs, y)
# ----------------------------------------------------------------------------
def _model(nodes: list[Any], inputs: list[Any], y: str, inits: list[Any] = (), opset: int = 21) -> onnx.ModelProto:
    graph = oh.make_graph(nodes, "forward", inputs, [oh.make_tensor_value_info(y, TP.FLOAT, None)], list(inits))
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
    model.ir_version = 10
    return onnx.shape_inference.infer_shapes(model)


def chain_model(layers: int, width: int = 64, xs_only_x: bool = False) -> tuple[onnx.ModelProto, list[str], str]:
    """``layers`` x (Mul, Add, Tanh): 3 * layers nodes; xs = x and every w_i, b_i (or x alone)."""
    inputs = [oh.make_tensor_value_info("x", TP.FLOAT, [width])]
    nodes = []
    prev = "x"
    for i in range(layers):
        inputs += [
            oh.make_tensor_value_info(f"w{i}", TP.FLOAT, [width]),
            oh.make_tensor_value_info(f"b{i}", TP.FLOAT, [width]),
        ]
        nodes += [
            oh.make_node("Mul", [prev, f"w{i}"], [f"m{i}"]),
            oh.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"]),
            oh.make_node("Tanh", [f"a{i}"], [f"t{i}"]),
        ]
        prev = f"t{i}"
    model = _model(nodes, inputs, prev)
    return model, ["x"] if xs_only_x else [i.name for i in model.graph.input], prev


def mlp_model(batch: int = 64, sizes: tuple[int, ...] = (784, 512, 256, 10)) -> tuple[onnx.ModelProto, list[str], str]:
    inputs = [oh.make_tensor_value_info("x", TP.FLOAT, [batch, sizes[0]])]
    nodes = []
    prev = "x"
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        inputs += [
            oh.make_tensor_value_info(f"W{i}", TP.FLOAT, [a, b]),
            oh.make_tensor_value_info(f"b{i}", TP.FLOAT, [b]),
        ]
        nodes += [
            oh.make_node("MatMul", [prev, f"W{i}"], [f"mm{i}"]),
            oh.make_node("Add", [f"mm{i}", f"b{i}"], [f"h{i}"]),
        ]
        prev = f"h{i}"
        if i < len(sizes) - 2:
            nodes.append(oh.make_node("Relu", [prev], [f"r{i}"]))
            prev = f"r{i}"
    nodes.append(oh.make_node("ReduceMean", [prev], ["loss"], keepdims=0))
    model = _model(nodes, inputs, "loss")
    return model, [i.name for i in model.graph.input if i.name != "x"], "loss"


def recurrent_model(
    op: str, steps: int = 32, batch: int = 16, size: int = 32, hidden: int = 64
) -> tuple[onnx.ModelProto, list[str], str]:
    """One bidirectional LSTM or GRU layer, loss = mean(Y^2) + mean(Y_h)."""
    f = TP.FLOAT
    gates = {"LSTM": 4, "GRU": 3}[op]
    inputs = [
        oh.make_tensor_value_info("x", f, [steps, batch, size]),
        oh.make_tensor_value_info("W", f, [2, gates * hidden, size]),
        oh.make_tensor_value_info("R", f, [2, gates * hidden, hidden]),
        oh.make_tensor_value_info("B", f, [2, 2 * gates * hidden]),
    ]
    nodes = [
        oh.make_node(op, ["x", "W", "R", "B"], ["Y", "Y_h"], hidden_size=hidden, direction="bidirectional"),
        oh.make_node("Mul", ["Y", "Y"], ["y2"]),
        oh.make_node("ReduceMean", ["y2"], ["m1"], keepdims=0),
        oh.make_node("ReduceMean", ["Y_h"], ["m2"], keepdims=0),
        oh.make_node("Add", ["m1", "m2"], ["loss"]),
    ]
    model = _model(nodes, inputs, "loss")
    return model, ["x", "W", "R", "B"], "loss"


def cnn_model(batch: int = 16) -> tuple[onnx.ModelProto, list[str], str]:
    f = TP.FLOAT
    inputs = [
        oh.make_tensor_value_info("x", f, [batch, 3, 32, 32]),
        oh.make_tensor_value_info("c1w", f, [16, 3, 3, 3]),
        oh.make_tensor_value_info("c1b", f, [16]),
        oh.make_tensor_value_info("c2w", f, [32, 16, 3, 3]),
        oh.make_tensor_value_info("c2b", f, [32]),
        oh.make_tensor_value_info("fcw", f, [10, 32 * 8 * 8]),
        oh.make_tensor_value_info("fcb", f, [10]),
    ]
    nodes = [
        oh.make_node("Conv", ["x", "c1w", "c1b"], ["c1"], pads=[1, 1, 1, 1]),
        oh.make_node("Relu", ["c1"], ["r1"]),
        oh.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        oh.make_node("Conv", ["p1", "c2w", "c2b"], ["c2"], pads=[1, 1, 1, 1]),
        oh.make_node("Relu", ["c2"], ["r2"]),
        oh.make_node("MaxPool", ["r2"], ["p2"], kernel_shape=[2, 2], strides=[2, 2]),
        oh.make_node("Flatten", ["p2"], ["flat"]),
        oh.make_node("Gemm", ["flat", "fcw", "fcb"], ["logits"], transB=1),
        oh.make_node("ReduceMean", ["logits"], ["loss"], keepdims=0),
    ]
    model = _model(nodes, inputs, "loss")
    return model, [i.name for i in model.graph.input if i.name != "x"], "loss"


def encoder_model(layers: int = 6, d_model: int = 256) -> tuple[onnx.ModelProto, list[str], str]:
    """The torch encoder, exported at opset 17; float initializers become graph inputs."""
    import warnings

    import torch
    from torch import nn

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            layer = nn.TransformerEncoderLayer(d_model, 8, 4 * d_model, dropout=0.0, batch_first=True, norm_first=True)
            self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

        def forward(self, x: Any) -> Any:
            return self.enc(x).mean()

    torch.manual_seed(0)
    module = Encoder().eval()
    with torch.no_grad():  # distinct weights per layer, or the exporter shares equal ones
        for name, p in module.named_parameters():
            p.copy_(torch.randn_like(p) * 0.05 + (1.0 if "norm" in name and name.endswith("weight") else 0.0))
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            (torch.randn(2, 32, d_model),),
            buf,
            dynamo=False,
            opset_version=17,
            input_names=["x"],
            output_names=["loss"],
        )
    model = onnx.load_from_string(buf.getvalue())
    graph = model.graph
    weights = [t for t in graph.initializer if t.data_type in FLOATS]
    keep = [t for t in graph.initializer if t.data_type not in FLOATS]
    del graph.initializer[:]
    graph.initializer.extend(keep)
    for t in weights:
        graph.input.append(oh.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    model = onnx.shape_inference.infer_shapes(model)
    return model, [t.name for t in weights], "loss"


# ----------------------------------------------------------------------------
# the two transforms
# ----------------------------------------------------------------------------
REGISTRY = ol.DefaultGradRegistry()
#: ``optimize=`` for GradientOfFunction (None: its default)
OPTIMIZE: bool | None = None


def ours_transform(model: Any, xs: list[str], y: str) -> Any:
    if OPTIMIZE is None:
        return ol.GradientOfFunction(model, xs, y, registry=REGISTRY)
    return ol.GradientOfFunction(model, xs, y, registry=REGISTRY, optimize=OPTIMIZE)


def ours_first_call(model: Any, xs: list[str], y: str) -> Any:
    """``ours_transform`` with the recurrent template cache emptied first (a fresh process's call)."""
    from onnx_light.onnx_extensions.gradient import _recurrent_cache

    _recurrent_cache._CACHE.clear()
    return ours_transform(model, xs, y)


def peak_memory(data: bytes, xs: list[str], y: str) -> tuple[float, float]:
    """(decoded model MB, peak memory of our transform / the model's), with tracemalloc."""
    import tracemalloc

    gc.collect()
    tracemalloc.start()
    model = ol.ModelProto.FromString(data)
    for part in (model.graph.node, model.graph.input, model.graph.value_info, model.graph.output):
        list(part)  # decoded: what the transform reads first
    base = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    ours_transform(model, xs, y)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return base / 1e6, (peak - base) / base


def size_sweep(sizes: list[int], rounds: int, peer_max: int) -> None:
    """The chain at each size: transform time against onnx-ad, time per node, peak memory."""
    import onnx_ad  # noqa: F401  (fails early when missing)

    print("\n| nodes | xs | ours | ours µs/node | onnx-ad | speed-up | emitted | peak memory / model |")
    print("|---|---|---|---|---|---|---|---|")
    for n in sizes:
        model, xs, y = chain_model(max(1, n // 3))
        data = model.SerializeToString()
        ours_in = ol.ModelProto.FromString(data)
        n_fwd = len(model.graph.node)
        fns: dict[str, Callable[[], Any]] = {"ours": lambda m=ours_in, x=xs, yy=y: ours_transform(m, x, yy)}
        if n_fwd <= peer_max:
            fns["onnx_ad"] = lambda m=model, x=xs, yy=y: theirs_transform(m, x, yy)
        ours_transform(ours_in, xs, y)  # warm: the first call of a size builds nothing the others reuse
        med, last = alternate(fns, rounds if n_fwd <= 10_000 else min(rounds, 3))
        mb, peak = peak_memory(data, xs, y)
        t, th = med["ours"], med.get("onnx_ad")
        print(
            f"| {n_fwd:,} | {len(xs):,} | {t * 1e3:.1f} ms | {t / n_fwd * 1e6:.1f} | "
            f"{_fmt(th and th * 1e3, ',.1f')}{' ms' if th else ''} | {_fmt(th and th / t, '.1f')}{'x' if th else ''} | "
            f"{len(last['ours'].node):,} | "
            f"{peak:.2f}x ({mb:.1f} MB model) |"
        )
        sys.stdout.flush()


def theirs_transform(model: onnx.ModelProto, xs: list[str], y: str) -> onnx.ModelProto:
    import onnx_ad

    return onnx_ad.reverse(model, inputs=xs, outputs=[y], layout="onnx")


def _time(fn: Callable[[], Any]) -> tuple[float, Any]:
    if not WARM:
        gc.collect()
        t0 = CLOCK()
        out = fn()
        return CLOCK() - t0, out
    # --warm: a full collection walks the whole heap (torch, onnx, onnxruntime loaded) and
    # evicts the CPU caches, which costs a fixed ~0.4 ms on the next small transform; the
    # young generations only, and no collection during the call, for both sides alike
    gc.collect(1)
    gc.disable()
    try:
        t0 = CLOCK()
        out = fn()
        return CLOCK() - t0, out
    finally:
        gc.enable()


def alternate(fns: dict[str, Callable[[], Any]], rounds: int) -> tuple[dict[str, float], dict[str, Any]]:
    """Median time of each function over ``rounds`` alternating runs (order flips every round)."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    last: dict[str, Any] = {}
    names = list(fns)
    for r in range(rounds):
        for k in names if r % 2 == 0 else reversed(names):
            dt, last[k] = _time(fns[k])
            times[k].append(dt)
    return {k: statistics.median(v) for k, v in times.items()}, last


# ----------------------------------------------------------------------------
# onnxruntime
# ----------------------------------------------------------------------------
def _session(model_bytes: bytes) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.log_severity_level = 3  # no warnings about the exporter's unused initializers
    return ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])


def _feeds(model: onnx.ModelProto, rng: np.random.Generator) -> dict[str, np.ndarray]:
    init = {t.name for t in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in init:
            continue
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        feeds[vi.name] = (rng.standard_normal(shape) * 0.1).astype(np.float32)
    return feeds


def run_times(
    fwd: onnx.ModelProto, xs: list[str], y: str, ours: Any, theirs: onnx.ModelProto | None, runs: int
) -> dict[str, float]:
    """Median onnxruntime run time of the forward model and of both backward models."""
    rng = np.random.default_rng(0)
    feeds = _feeds(fwd, rng)
    our_model = ol.ModelProto.FromString(fwd.SerializeToString())
    y_value = _session(fwd.SerializeToString()).run([y], feeds)[0]
    dy = rng.standard_normal(y_value.shape).astype(np.float32)
    types = input_types(our_model, y, list(ours.input))
    wrapped = backward_model(ours, types, inline=True)
    our_feeds = {n: dy if n == grad_pass.DY else feeds[n] for n in ours.input}
    sessions: dict[str, tuple[Any, list[str], dict[str, np.ndarray]]] = {
        "forward": (_session(fwd.SerializeToString()), [y], feeds),
        "ours": (_session(wrapped.SerializeToString()), list(ours.output), our_feeds),
        "ours_runtime": (InferenceSession(wrapped), list(ours.output), our_feeds),
    }
    # the bundled runtime computes what onnxruntime computes
    for x, ga, gb in zip(
        xs,
        sessions["ours"][0].run(*sessions["ours"][1:]),
        sessions["ours_runtime"][0].run(*sessions["ours_runtime"][1:]),
    ):
        np.testing.assert_allclose(gb, ga, rtol=2e-3, atol=2e-5, err_msg=f"grad_{x} in onnx-light's runtime")
    if theirs is not None:
        seed = next(i.name for i in theirs.graph.input if i.name not in feeds)
        outs = [o.name for o in theirs.graph.output if o.name != y]
        sessions["onnx_ad"] = (_session(theirs.SerializeToString()), outs, {**feeds, seed: dy[..., None]})
    # our gradients agree with onnx-ad's (a sanity check on what is timed)
    if theirs is not None:
        a = sessions["ours"][0].run(*sessions["ours"][1:])
        b = sessions["onnx_ad"][0].run(*sessions["onnx_ad"][1:])
        for x, ga, gb in zip(xs, a, b):
            np.testing.assert_allclose(ga, gb[..., 0], rtol=2e-3, atol=2e-5, err_msg=f"grad_{x}")
    for sess, outs, fd in sessions.values():  # warm-up
        for _ in range(3):
            sess.run(outs, fd)

    def runner(s: tuple[Any, list[str], dict[str, np.ndarray]]) -> Callable[[], Any]:
        return lambda: s[0].run(s[1], s[2])

    med, _ = alternate({k: runner(s) for k, s in sessions.items()}, runs)
    return med


# ----------------------------------------------------------------------------
# per-op node counts
# ----------------------------------------------------------------------------
def per_op_counts(model: Any, xs: list[str], y: str) -> tuple[dict[str, list[int]], dict[str, int]]:
    """Backward nodes emitted per forward node, by op type (rule + unbroadcast), and the rest.

    A node's nodes are those emitted from its rule's context on (``GradContext``) until the
    next node's, until the walk sums the contributions of a value (``_collect``) or until it
    names the gradients (``_name_gradients``), as the walk runs the rules in one loop;
    seed-form rules (no context) are not counted.
    """
    counts: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    open_span: list[Any] = []  # [pass, op_type, backward nodes before] of the node whose rule runs

    def close() -> None:
        if open_span:
            p, op_type, before = open_span
            counts[op_type][1] += len(p.backward) - before
            open_span.clear()

    original_init = ol.GradContext.__init__
    original_collect = grad_pass._GradientPass._collect

    def init(self: Any, p: Any, node: Any, *args: Any, **kwargs: Any) -> None:
        close()
        counts[node.op_type][0] += 1
        open_span[:] = [p, node.op_type, len(p.backward)]
        original_init(self, p, node, *args, **kwargs)

    def collect(self: Any, *args: Any) -> Any:
        close()
        return original_collect(self, *args)

    original_name = grad_pass._GradientPass._name_gradients

    def name(self: Any, *args: Any) -> Any:
        close()
        return original_name(self, *args)

    ol.GradContext.__init__ = init  # type: ignore[method-assign]
    grad_pass._GradientPass._collect = collect  # type: ignore[method-assign]
    grad_pass._GradientPass._name_gradients = name  # type: ignore[method-assign]
    try:
        fn = ours_transform(model, xs, y)
    finally:
        ol.GradContext.__init__ = original_init  # type: ignore[method-assign]
        grad_pass._GradientPass._collect = original_collect  # type: ignore[method-assign]
        grad_pass._GradientPass._name_gradients = original_name  # type: ignore[method-assign]
        close()
    by_op = collections.Counter(n.op_type for n in fn.node)
    return dict(counts), dict(by_op)


# ----------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="alternating transform rounds")
    parser.add_argument("--runs", type=int, default=30, help="alternating onnxruntime runs")
    parser.add_argument("--models", default="chain,chain_x,mlp,cnn,encoder")
    parser.add_argument("--per-op", action="store_true", help="print nodes emitted per forward node by op")
    parser.add_argument("--no-big-chain", action="store_true", help="skip the 10,000-node chain")
    parser.add_argument("--wall", action="store_true", help="wall-clock time instead of process CPU time")
    parser.add_argument("--optimize", choices=["on", "off"], help="optimize= for GradientOfFunction")
    parser.add_argument(
        "--warm", action="store_true", help="no full gc.collect() before each timed call (it evicts the caches)"
    )
    parser.add_argument("--sizes", default="", help="chain sizes to sweep, e.g. 10,100,1000,10000,100000")
    parser.add_argument("--peer-max", type=int, default=20_000, help="largest chain onnx-ad transforms in --sizes")
    args = parser.parse_args()
    global CLOCK, OPTIMIZE, WARM
    WARM = args.warm
    if args.wall:
        CLOCK = time.perf_counter
    if args.optimize:
        OPTIMIZE = args.optimize == "on"

    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    print(f"# {time.strftime('%Y-%m-%d')}  nproc={os.cpu_count()}  cpu={cpu}  python={platform.python_version()}")
    import onnx_ad
    import onnxruntime

    print(f"# onnx {onnx.__version__}, onnx-ad {onnx_ad.__version__}, onnxruntime {onnxruntime.__version__}")
    print(
        f"# clock: {'wall (perf_counter)' if args.wall else 'process CPU time'}, rounds {args.rounds}, runs {args.runs}"
        f", optimize={'default' if OPTIMIZE is None else OPTIMIZE}"
        f"{', warm (no full collection per call)' if WARM else ''}"
    )
    builders: dict[str, Callable[[], tuple[onnx.ModelProto, list[str], str]]] = {
        "chain": lambda: chain_model(2000),
        "chain_x": lambda: chain_model(2000, xs_only_x=True),
        "mlp": mlp_model,
        "cnn": cnn_model,
        "encoder": encoder_model,
        "lstm": lambda: recurrent_model("LSTM"),
        "gru": lambda: recurrent_model("GRU"),
    }
    rows = []
    per_op: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    for name in args.models.split(","):
        if name == "none":
            continue
        try:
            model, xs, y = builders[name]()
        except ImportError as e:
            print(f"{name}: skipped ({e})")
            continue
        ours_in = ol.ModelProto.FromString(model.SerializeToString())
        n_fwd = len(model.graph.node)
        fns: dict[str, Callable[[], Any]] = {"ours": lambda m=ours_in, x=xs, yy=y: ours_transform(m, x, yy)}
        theirs_err = None
        try:
            theirs_transform(model, xs, y)
            fns["onnx_ad"] = lambda m=model, x=xs, yy=y: theirs_transform(m, x, yy)
        except Exception as e:  # noqa: BLE001  (a peer failure is reported, not fatal)
            theirs_err = f"{type(e).__name__}: {e}"
            print(f"{name}: onnx_ad failed: {theirs_err}")
        try:
            ours_transform(ours_in, xs, y)
        except Exception as e:  # noqa: BLE001
            print(f"{name}: ours failed: {type(e).__name__}: {e}")
            continue
        med, last = alternate(fns, args.rounds)
        ours_fn, theirs_m = last["ours"], last.get("onnx_ad")
        row = {
            "model": name,
            "fwd_nodes": n_fwd,
            "t_ours": med["ours"],
            "t_theirs": med.get("onnx_ad"),
            "n_ours": len(ours_fn.node),
            "n_theirs": len(theirs_m.graph.node) if theirs_m is not None else None,
        }
        if not name.startswith("chain"):
            rt = run_times(model, xs, y, ours_fn, theirs_m, args.runs)
            row["rt_fwd"] = rt["forward"]
            row["rt_ours"] = rt["ours"]
            row["rt_theirs"] = rt.get("onnx_ad")
            row["rt_ours_runtime"] = rt["ours_runtime"]
        rows.append(row)
        _print_row(row)
        if name in ("lstm", "gru") and "onnx_ad" in fns:
            cold = {"ours": lambda m=ours_in, x=xs, yy=y: ours_first_call(m, x, yy), "onnx_ad": fns["onnx_ad"]}
            first, _ = alternate(cold, args.rounds)
            print(
                f"{name}: first call (template cache empty) ours {first['ours'] * 1e3:.1f} ms, onnx_ad "
                f"{first['onnx_ad'] * 1e3:.1f} ms = {first['onnx_ad'] / first['ours']:.1f}x; warm call "
                f"{med['ours'] * 1e3:.1f} ms = {med['onnx_ad'] / med['ours']:.1f}x"
            )
        if args.per_op:
            counts, _ = per_op_counts(ours_in, xs, y)
            for op, (n, e) in counts.items():
                per_op[op][0] += n
                per_op[op][1] += e
        sys.stdout.flush()

    print()
    print(_table(rows))
    if not args.no_big_chain:
        print()
        for only_x in (False, True):
            model, xs, y = chain_model(3334, xs_only_x=only_x)
            big = ol.ModelProto.FromString(model.SerializeToString())
            med, last = alternate({"ours": lambda m=big, x=xs, yy=y: ours_transform(m, x, yy)}, 3)
            print(
                f"{len(model.graph.node)}-node chain, {len(xs)} xs: ours {med['ours']:.3f} s, "
                f"{len(last['ours'].node)} nodes emitted"
            )
    if args.sizes:
        size_sweep([int(s) for s in args.sizes.split(",")], args.rounds, args.peer_max)
    if args.per_op:
        print("\nbackward nodes emitted per forward node, by op (rule + unbroadcast), all models:")
        for op, (n, e) in sorted(per_op.items(), key=lambda kv: -kv[1][1] / kv[1][0]):
            print(f"  {op:20s} {n:6d} nodes  {e:7d} emitted  {e / n:5.2f} per node")


def _fmt(v: float | None, spec: str) -> str:
    return "n/a" if v is None else format(v, spec)


def _print_row(r: dict[str, Any]) -> None:
    print(
        f"{r['model']}: fwd {r['fwd_nodes']} nodes | transform ours {r['t_ours'] * 1e3:.1f} ms, "
        f"onnx_ad {_fmt(r['t_theirs'] and r['t_theirs'] * 1e3, '.1f')} ms | nodes ours {r['n_ours']}, "
        f"onnx_ad {_fmt(r['n_theirs'], 'd')}"
        + (
            f" | ort fwd {r['rt_fwd'] * 1e3:.2f} ms, ours {r['rt_ours'] * 1e3:.2f} ms, "
            f"onnx_ad {_fmt(r['rt_theirs'] and r['rt_theirs'] * 1e3, '.2f')} ms"
            f" | ours in onnx-light's runtime {r['rt_ours_runtime'] * 1e3:.2f} ms"
            if "rt_fwd" in r
            else ""
        )
    )


def _table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| model | fwd nodes | transform ours | transform onnx-ad | speed-up | nodes/fwd ours | "
        "nodes/fwd onnx-ad | bwd/fwd run ours | bwd/fwd run onnx-ad | bwd in onnx-light runtime / in ORT |"
    )
    lines = [head, "|---" * (head.count("|") - 1) + "|"]
    for r in rows:
        t, th = r["t_ours"], r["t_theirs"]
        rt = r.get("rt_fwd")
        lines.append(
            f"| {r['model']} | {r['fwd_nodes']} | {t * 1e3:.1f} ms | {_fmt(th and th * 1e3, '.1f')} ms | "
            f"{_fmt(th and th / t, '.1f')}x | {r['n_ours'] / r['fwd_nodes']:.2f} | "
            f"{_fmt(r['n_theirs'] and r['n_theirs'] / r['fwd_nodes'], '.2f')} | "
            f"{_fmt(rt and r['rt_ours'] / rt, '.2f')} | {_fmt(rt and r['rt_theirs'] and r['rt_theirs'] / rt, '.2f')} | "
            f"{_fmt(rt and r['rt_ours_runtime'] / r['rt_ours'], '.2f')} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
