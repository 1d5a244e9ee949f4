"""Real-model architectures for the runtime benchmark, written in torch and exported at opset 17.

torchvision is not a dependency, so each architecture is written here: a MobileNetV3-small-like
net (HardSwish, HardSigmoid squeeze-excite, depthwise convolutions, BatchNorm), a ResNet-18, a
CRNN text recogniser (conv stack + bidirectional LSTM + CTC head), a DB-style text detector
(ResNet-ish backbone, FPN with Resize, ConvTranspose head), a YOLO-style detector (Conv-BN-SiLU,
CSP blocks, SPPF, an upsampling neck and three heads) and a transformer encoder (4 layers, d 256).
Every model is in eval mode (BatchNorm as inference BatchNormalization), batch 1, random weights
from a fixed seed, and is exported once into a cache folder (``$TMPDIR/onnx-light-real-models``;
never committed). ``bench_runtime.py --models real`` times them against onnxruntime, and
``--gradient`` here times each one's emitted backward (loss = sum of the outputs, xs = the float
initializers) against its forward, in onnxruntime and in our runtime, and against the forward with
its weights as graph inputs (as the backward takes them, so without constant-weight optimisations):

    PYTHONPATH=. python benchmarks/bench_runtime.py --models real --no-reference [--profile]
    PYTHONPATH=. python benchmarks/bench_real_models.py --gradient [--models mobilenetv3,...] [--rounds 7]
    PYTHONPATH=. python benchmarks/bench_real_models.py --gradient --per-op [--models ...]

``--per-op`` times each step of the plans (the generic loop) and prints, per model, the
backward's time by class (forward nodes recomputed, the dX ConvTransposes, the dW Gemms and
im2col / correlation Convs, other gradient ops) against the forward's convolutions, and the
floor: the forward with weights as inputs (the recompute) plus dX and dW at the forward's conv speed.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

# one BLAS thread for numpy (our dW Gemms, MatMuls, GEMM ConvTransposes), as onnxruntime runs
# with 1 thread: must be set before numpy is imported. With OpenBLAS's default threads the
# process CPU time counts a second, spinning thread (2-3x the GEMM ConvTranspose's CPU at load 3)
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
    os.environ[_var] = "1"

import numpy as np  # noqa: E402

CACHE = os.path.join(tempfile.gettempdir(), "onnx-light-real-models")
#: input shape per model (batch 1)
SHAPES = {
    "mobilenetv3": (1, 3, 224, 224),
    "resnet18": (1, 3, 224, 224),
    "crnn": (1, 1, 32, 160),
    "dbnet": (1, 3, 320, 320),
    "yolo": (1, 3, 320, 320),
    "encoder": (1, 128, 256),
}


def _torch_models() -> dict[str, Callable[[], Any]]:
    import torch
    from torch import nn

    def cbn(cin: int, cout: int, k: int, s: int = 1, groups: int = 1, act: Any = nn.ReLU) -> nn.Sequential:
        layers: list[nn.Module] = [nn.Conv2d(cin, cout, k, s, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
        if act is not None:
            layers.append(act())
        return nn.Sequential(*layers)

    class SE(nn.Module):
        def __init__(self, c: int, r: int = 4) -> None:
            super().__init__()
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc1 = nn.Conv2d(c, max(8, c // r), 1)
            self.fc2 = nn.Conv2d(max(8, c // r), c, 1)

        def forward(self, x: Any) -> Any:
            s = nn.functional.hardsigmoid(self.fc2(torch.relu(self.fc1(self.pool(x)))))
            return x * s

    class InvertedResidual(nn.Module):
        def __init__(self, cin: int, exp: int, cout: int, k: int, s: int, se: bool, hs: bool) -> None:
            super().__init__()
            act = nn.Hardswish if hs else nn.ReLU
            layers: list[nn.Module] = []
            if exp != cin:
                layers.append(cbn(cin, exp, 1, act=act))
            layers.append(cbn(exp, exp, k, s, groups=exp, act=act))
            if se:
                layers.append(SE(exp))
            layers.append(cbn(exp, cout, 1, act=None))
            self.body = nn.Sequential(*layers)
            self.residual = s == 1 and cin == cout

        def forward(self, x: Any) -> Any:
            y = self.body(x)
            return x + y if self.residual else y

    def mobilenetv3() -> nn.Module:
        # (kernel, expansion, out, SE, HardSwish, stride): MobileNetV3-small's table
        table = [
            (3, 16, 16, True, False, 2),
            (3, 72, 24, False, False, 2),
            (3, 88, 24, False, False, 1),
            (5, 96, 40, True, True, 2),
            (5, 240, 40, True, True, 1),
            (5, 240, 40, True, True, 1),
            (5, 120, 48, True, True, 1),
            (5, 144, 48, True, True, 1),
            (5, 288, 96, True, True, 2),
            (5, 576, 96, True, True, 1),
            (5, 576, 96, True, True, 1),
        ]
        layers: list[nn.Module] = [cbn(3, 16, 3, 2, act=nn.Hardswish)]
        cin = 16
        for k, exp, cout, se, hs, s in table:
            layers.append(InvertedResidual(cin, exp, cout, k, s, se, hs))
            cin = cout
        layers += [
            cbn(96, 576, 1, act=nn.Hardswish),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(576, 1024),
            nn.Hardswish(),
            nn.Linear(1024, 1000),
        ]
        return nn.Sequential(*layers)

    class Basic(nn.Module):
        def __init__(self, cin: int, cout: int, s: int) -> None:
            super().__init__()
            self.a = cbn(cin, cout, 3, s)
            self.b = cbn(cout, cout, 3, 1, act=None)
            self.down = cbn(cin, cout, 1, s, act=None) if s != 1 or cin != cout else None

        def forward(self, x: Any) -> Any:
            skip = x if self.down is None else self.down(x)
            return torch.relu(self.b(self.a(x)) + skip)

    def resnet_stages(widths: list[int]) -> list[nn.Module]:
        stages: list[nn.Module] = []
        cin = 64
        for i, c in enumerate(widths):
            stages.append(nn.Sequential(Basic(cin, c, 1 if i == 0 else 2), Basic(c, c, 1)))
            cin = c
        return stages

    def resnet18() -> nn.Module:
        stem = [cbn(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1)]
        head = [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000)]
        return nn.Sequential(*stem, *resnet_stages([64, 128, 256, 512]), *head)

    class CRNN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.cnn = nn.Sequential(
                cbn(1, 32, 3),
                nn.MaxPool2d(2, 2),
                cbn(32, 64, 3),
                nn.MaxPool2d(2, 2),
                cbn(64, 128, 3),
                cbn(128, 128, 3),
                nn.MaxPool2d((2, 1), (2, 1)),
                cbn(128, 256, 3),
                nn.MaxPool2d((2, 1), (2, 1)),
                cbn(256, 256, 3),
            )
            self.rnn = nn.LSTM(256 * 2, 128, num_layers=2, bidirectional=True)
            self.fc = nn.Linear(256, 97)

        def forward(self, x: Any) -> Any:
            f = self.cnn(x)  # [N, 256, 2, W/4]
            n, c, h, w = f.shape
            seq = f.reshape(n, c * h, w).permute(2, 0, 1)  # [T, N, C*H]
            out, _ = self.rnn(seq)
            return self.fc(out).log_softmax(-1)

    class DBNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(cbn(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1))
            self.stages = nn.ModuleList(resnet_stages([64, 128, 256, 512]))
            self.lateral = nn.ModuleList(nn.Conv2d(c, 128, 1, bias=False) for c in (64, 128, 256, 512))
            self.smooth = nn.ModuleList(nn.Conv2d(128, 32, 3, padding=1, bias=False) for _ in range(4))
            self.head = nn.Sequential(
                cbn(128, 32, 3),
                nn.ConvTranspose2d(32, 32, 2, 2),
                nn.BatchNorm2d(32),
                nn.ReLU(),
                nn.ConvTranspose2d(32, 1, 2, 2),
                nn.Sigmoid(),
            )

        def forward(self, x: Any) -> Any:
            x = self.stem(x)
            feats = []
            for stage in self.stages:
                x = stage(x)
                feats.append(x)
            lat = [conv(f) for conv, f in zip(self.lateral, feats)]
            for i in (2, 1, 0):
                lat[i] = lat[i] + nn.functional.interpolate(lat[i + 1], scale_factor=2.0, mode="nearest")
            outs = [
                nn.functional.interpolate(s(p), scale_factor=float(2**i), mode="nearest") if i else s(p)
                for i, (s, p) in enumerate(zip(self.smooth, lat))
            ]
            return self.head(torch.cat(outs, 1))

    def cbs(cin: int, cout: int, k: int = 1, s: int = 1) -> nn.Sequential:
        return cbn(cin, cout, k, s, act=nn.SiLU)

    class C3(nn.Module):
        def __init__(self, cin: int, cout: int, n: int = 1) -> None:
            super().__init__()
            h = cout // 2
            self.a, self.b = cbs(cin, h), cbs(cin, h)
            self.m = nn.ModuleList(nn.Sequential(cbs(h, h), cbs(h, h, 3)) for _ in range(n))
            self.out = cbs(2 * h, cout)

        def forward(self, x: Any) -> Any:
            y = self.a(x)
            for m in self.m:
                y = y + m(y)
            return self.out(torch.cat([y, self.b(x)], 1))

    class SPPF(nn.Module):
        def __init__(self, c: int) -> None:
            super().__init__()
            self.a, self.out = cbs(c, c // 2), cbs(2 * c, c)
            self.pool = nn.MaxPool2d(5, 1, 2)

        def forward(self, x: Any) -> Any:
            x = self.a(x)
            y1 = self.pool(x)
            y2 = self.pool(y1)
            return self.out(torch.cat([x, y1, y2, self.pool(y2)], 1))

    class YOLO(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.b1 = nn.Sequential(cbs(3, 16, 3, 2), cbs(16, 32, 3, 2), C3(32, 32), cbs(32, 64, 3, 2), C3(64, 64, 2))
            self.b2 = nn.Sequential(cbs(64, 128, 3, 2), C3(128, 128, 2))
            self.b3 = nn.Sequential(cbs(128, 256, 3, 2), C3(256, 256), SPPF(256))
            self.up = nn.Upsample(scale_factor=2.0, mode="nearest")
            self.n1, self.c1 = cbs(256, 128), C3(256, 128)
            self.n2, self.c2 = cbs(128, 64), C3(128, 64)
            self.d1, self.c3 = cbs(64, 64, 3, 2), C3(128, 128)
            self.d2, self.c4 = cbs(128, 128, 3, 2), C3(256, 256)
            self.heads = nn.ModuleList(nn.Conv2d(c, 3 * 85, 1) for c in (64, 128, 256))

        def forward(self, x: Any) -> Any:
            p3 = self.b1(x)
            p4 = self.b2(p3)
            p5 = self.b3(p4)
            t5 = self.n1(p5)
            u4 = self.c1(torch.cat([self.up(t5), p4], 1))
            t4 = self.n2(u4)
            o3 = self.c2(torch.cat([self.up(t4), p3], 1))
            o4 = self.c3(torch.cat([self.d1(o3), t4], 1))
            o5 = self.c4(torch.cat([self.d2(o4), t5], 1))
            outs = []
            for head, o in zip(self.heads, (o3, o4, o5)):
                y = head(o)
                n, _, h, w = y.shape
                outs.append(y.reshape(n, 3, 85, h * w).permute(0, 1, 3, 2).reshape(n, -1, 85).sigmoid())
            return torch.cat(outs, 1)

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            layer = nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True)
            self.enc = nn.TransformerEncoder(layer, 4, enable_nested_tensor=False)

        def forward(self, x: Any) -> Any:
            return self.enc(x)

    return {
        "mobilenetv3": mobilenetv3,
        "resnet18": resnet18,
        "crnn": CRNN,
        "dbnet": DBNet,
        "yolo": YOLO,
        "encoder": Encoder,
    }


REAL_MODELS = tuple(SHAPES)
#: exported without torch's constant folding, as third-party exporters often leave them:
#: inference BatchNormalization nodes and shape arithmetic stay in the graph
UNFOLDED = frozenset({"mobilenetv3", "crnn", "dbnet"})


def _randomise_bn(model: Any) -> None:
    """Non-trivial running statistics and affine parameters, so folding BatchNorm is tested."""
    import torch

    g = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) * 0.5 + 0.75)
                m.weight.copy_(torch.rand(m.num_features, generator=g) * 0.5 + 0.75)
                m.bias.copy_(torch.randn(m.num_features, generator=g) * 0.1)


def real_model_path(name: str) -> str:
    """The cached ONNX file of ``name`` (exported from torch on first use)."""
    path = os.path.join(CACHE, f"{name}.onnx")
    if os.path.exists(path):
        return path
    import torch

    torch.manual_seed(0)
    model = _torch_models()[name]().eval()
    _randomise_bn(model)
    x = torch.randn(*SHAPES[name])
    os.makedirs(CACHE, exist_ok=True)
    tmp = path + f".{os.getpid()}.tmp"
    # with gradients enabled: torch's fused inference path of the encoder layer has no export
    torch.onnx.export(
        model,
        (x,),
        tmp,
        input_names=["input"],
        output_names=["output"],
        opset_version=17,
        dynamo=False,
        do_constant_folding=name not in UNFOLDED,
    )
    os.replace(tmp, path)
    return path


def real_model(name: str) -> tuple[Any, dict[str, np.ndarray]]:
    """``(onnx.ModelProto, feeds)`` of a real model (bench_runtime's model protocol)."""
    import onnx

    feeds = {"input": np.random.default_rng(0).standard_normal(SHAPES[name]).astype(np.float32)}
    return onnx.load(real_model_path(name)), feeds


# ----------------------------------------------------------------------------
# --gradient: the emitted backward of each real model against its forward
# ----------------------------------------------------------------------------
def gradient_case(name: str, optimize: bool = True, registry: Any = None) -> dict[str, Any]:
    """The backward of ``name`` (loss = sum of its outputs; xs = its float initializers, or
    the input when it has none): the forward and backward models, their feeds, node counts."""
    import onnx
    from onnx import helper as oh

    import onnx_light as ol
    from onnx_light.onnx_core.gradient import backward_model, input_types

    model, feeds = real_model(name)
    graph = model.graph
    outs = [o.name for o in graph.output]
    sums = [f"sum_{o}" for o in outs]
    graph.node.extend(oh.make_node("ReduceSum", [o], [s], keepdims=0) for o, s in zip(outs, sums))
    loss = sums[0]
    for k, s in enumerate(sums[1:]):
        graph.node.append(oh.make_node("Add", [loss, s], [f"loss{k}"]))
        loss = f"loss{k}"
    del graph.output[:]
    graph.output.append(oh.make_tensor_value_info(loss, onnx.TensorProto.FLOAT, []))
    ours = ol.ModelProto.FromString(model.SerializeToString())
    floats = [t.name for t in graph.initializer if t.data_type == onnx.TensorProto.FLOAT]
    xs = floats or ["input"]
    t0 = time.perf_counter()
    bwd = ol.GradientOfFunction(ours, xs, loss, registry=registry, optimize=optimize)
    transform = time.perf_counter() - t0
    wrapped = backward_model(bwd, input_types(ours, loss, list(bwd.input)), inline=True)
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in graph.initializer}
    bwd_feeds = {n: np.ones((), np.float32) if n == bwd.input[-1] else feeds.get(n, inits.get(n)) for n in bwd.input}
    ops = [n.op_type for n in bwd.node]
    return {
        "forward": model,
        "feeds": feeds,
        "backward": onnx.load_from_string(wrapped.SerializeToString()),
        "bwd_feeds": bwd_feeds,
        "fwd_nodes": len(graph.node),
        "bwd_nodes": len(bwd.node),
        "identity": ops.count("Identity"),
        "where": ops.count("Where"),
        "transform": transform,
    }


def _alternate(fns: dict[str, Callable[[], Any]], rounds: int) -> dict[str, float]:
    import statistics

    samples: dict[str, list[float]] = {k: [] for k in fns}
    order = list(fns)
    for r in range(rounds):
        for k in order if r % 2 == 0 else order[::-1]:
            t = time.process_time()  # CPU time: steadier than wall time on a shared machine
            fns[k]()
            samples[k].append(time.process_time() - t)
    return {k: statistics.median(v) for k, v in samples.items()}


def _weights_as_inputs(model: Any, feeds: dict[str, np.ndarray]) -> tuple[bytes, dict[str, np.ndarray]]:
    """The forward with its float initializers as graph inputs, as the backward takes them (no
    constant-weight optimisations: prepacked or NCHWc weights, BatchNorm folded into the Conv)."""
    import onnx
    from onnx import helper as oh

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    graph = copy.graph
    floats = [t for t in graph.initializer if t.data_type == onnx.TensorProto.FLOAT]
    keep = [t for t in graph.initializer if t.data_type != onnx.TensorProto.FLOAT]
    del graph.initializer[:]
    graph.initializer.extend(keep)
    graph.input.extend(oh.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in floats)
    return copy.SerializeToString(), {**feeds, **{t.name: onnx.numpy_helper.to_array(t) for t in floats}}


def gradient_bench(name: str, rounds: int) -> dict[str, Any]:
    """bwd/fwd run-time ratios in onnxruntime (1 thread) and in our runtime, alternating,
    median process CPU time."""
    import onnxruntime as ort

    from onnx_light.runtime import InferenceSession

    case = gradient_case(name)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    fwd_b, bwd_b = case["forward"].SerializeToString(), case["backward"].SerializeToString()
    fin_b, fin_feeds = _weights_as_inputs(case["forward"], case["feeds"])
    sessions = {
        "ort_fwd": (ort.InferenceSession(fwd_b, options, providers=["CPUExecutionProvider"]), case["feeds"]),
        "ort_fin": (ort.InferenceSession(fin_b, options, providers=["CPUExecutionProvider"]), fin_feeds),
        "ort_bwd": (ort.InferenceSession(bwd_b, options, providers=["CPUExecutionProvider"]), case["bwd_feeds"]),
        "ol_fwd": (InferenceSession(fwd_b), case["feeds"]),
        "ol_fin": (InferenceSession(fin_b), fin_feeds),
        "ol_bwd": (InferenceSession(bwd_b), case["bwd_feeds"]),
    }
    got = {k: s.run(None, f) for k, (s, f) in sessions.items()}
    for a, b in zip(got["ol_bwd"], got["ort_bwd"]):  # both runtimes compute the same gradients
        np.testing.assert_allclose(a, b, rtol=2e-3, atol=1e-3 * max(1.0, float(np.abs(b).max())))
    med = _alternate({k: (lambda s=s, f=f: s.run(None, f)) for k, (s, f) in sessions.items()}, rounds)
    return {**{k: v for k, v in case.items() if type(v) in (int, float)}, **med}


# ----------------------------------------------------------------------------
# --per-op: where the backward's time goes in our runtime, against the forward's convolutions
# ----------------------------------------------------------------------------
def _flops(node: Any, args: list[Any], out: Any) -> int:
    """Multiply-adds x 2 of a Conv, ConvTranspose, Gemm or MatMul step (0 for anything else)."""
    op = node.op_type
    if op == "Conv":
        return 2 * int(out.size) * int(np.prod(args[1].shape[1:]))
    if op == "ConvTranspose":
        return 2 * int(args[0].size) * int(np.prod(args[1].shape[1:]))
    if op == "Gemm":  # the contraction is A's first axis with transA (the head's dW: Gemm(dY, X, transA=1))
        trans_a = any(a.name == "transA" and a.i for a in node.attribute)
        return 2 * int(out.size) * int(args[0].shape[0 if trans_a else -1])
    if op == "MatMul":
        return 2 * int(out.size) * int(args[0].shape[-1])
    return 0


def _step_times(model: Any, feeds: dict[str, np.ndarray], rounds: int) -> list[tuple[Any, float, int]]:
    """(node, median CPU seconds, flops) per step of our runtime's plan (the generic loop, timed
    between consecutive steps: kernels and their Python call, not the fused run function)."""
    import statistics

    from onnx_light.runtime import InferenceSession
    from onnx_light.runtime._plan import run_plan

    session = InferenceSession(model.SerializeToString())
    session.run(None, feeds)
    fed = [session._feed(n, feeds[n]) for n in session._input_names]
    times: list[list[float]] = []
    info: list[tuple[Any, int]] = []
    stamps: list[float] = []

    def trace(step: Any, args: list[Any], outs: list[Any]) -> None:
        stamps.append(time.process_time())  # CPU time: steadier than wall time on a shared machine
        if len(info) < len(stamps):
            info.append((step.node, _flops(step.node, args, outs[0])))

    for _ in range(rounds):
        stamps.clear()
        start = time.process_time()
        run_plan(session._plan, fed, trace=trace)
        times.append(np.diff([start, *stamps]).tolist())
    return [(node, statistics.median(t[k] for t in times), f) for k, (node, f) in enumerate(info)]


def _op_class(node: Any, forward_names: set[str]) -> str:
    if node.name and node.name in forward_names:
        return "recompute Conv" if node.op_type == "Conv" else "recompute other"
    return {"ConvTranspose": "dX ConvTranspose", "Gemm": "dW Gemm", "MatMul": "MatMul", "Conv": "dW Conv"}.get(
        node.op_type, f"grad {node.op_type}"
    )


def per_op_table(name: str, rounds: int) -> str:
    """The backward's time per class of step (recomputed forward, dX, dW, other gradient ops),
    against the forward's convolutions, and the floor (recompute + dX + dW at forward conv speed)."""
    import onnx

    case = gradient_case(name)
    fin_b, fin_feeds = _weights_as_inputs(case["forward"], case["feeds"])
    fwd = _step_times(case["forward"], case["feeds"], rounds)
    fin = sum(t for _, t, _ in _step_times(onnx.load_from_string(fin_b), fin_feeds, rounds))
    bwd = _step_times(case["backward"], case["bwd_feeds"], rounds)
    t_fwd, t_bwd = sum(t for _, t, _ in fwd), sum(t for _, t, _ in bwd)
    t_conv = sum(t for n, t, _ in fwd if n.op_type == "Conv")
    names = {n.name for n in case["forward"].graph.node if n.name}
    classes: dict[str, list[float]] = {}
    for node, t, f in bwd:
        entry = classes.setdefault(_op_class(node, names), [0, 0.0, 0])
        entry[0] += 1
        entry[1] += t
        entry[2] += f
    lines = [
        f"**{name}** (load {os.getloadavg()[0]:.1f}): forward {t_fwd * 1e3:.1f} ms "
        f"(its convolutions {t_conv * 1e3:.1f}), "
        f"forward with weights as inputs {fin * 1e3:.1f}, backward {t_bwd * 1e3:.1f} = **{t_bwd / t_fwd:.2f}x**; "
        f"floor (recompute + dX + dW at forward conv speed) **{(fin + 2 * t_conv) / t_fwd:.2f}x**",
        "",
        "| class | nodes | ms | % of bwd | / forward convs | GFLOP/s |",
        "|---|---|---|---|---|---|",
    ]
    for label, (count, secs, work) in sorted(classes.items(), key=lambda kv: -kv[1][1])[:16]:
        rate = f"{work / secs / 1e9:.1f}" if work and secs else ""
        lines.append(
            f"| {label} | {count:.0f} | {secs * 1e3:.1f} | {100 * secs / t_bwd:.1f} | {secs / t_conv:.2f} | {rate} |"
        )
    conv_flops = sum(f for n, _, f in fwd if n.op_type == "Conv")
    lines.append(f"| (the forward's convolutions) | | {t_conv * 1e3:.1f} | | 1.00 | {conv_flops / t_conv / 1e9:.1f} |")
    return "\n".join(lines)


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gradient", action="store_true", help="backward/forward of each real model")
    parser.add_argument("--models", default=",".join(REAL_MODELS))
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--per-op", action="store_true", help="with --gradient: the backward's time per class of op")
    args = parser.parse_args()
    if args.gradient and args.per_op:
        for name in args.models.split(","):
            print(per_op_table(name, args.rounds), "\n", flush=True)
        return
    if not args.gradient:
        parser.error("the forward benchmark is bench_runtime.py --models real; this script runs --gradient")
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  load {os.getloadavg()[0]:.1f}")
    print(
        "| model | fwd nodes | bwd nodes | bwd/fwd nodes | Identity | Where | transform s | "
        "bwd/fwd ORT | bwd/fwd ours | ours/ORT fwd | ours/ORT bwd | fwd weights-as-inputs / fwd ORT, ours | "
        "bwd / fwd weights-as-inputs ORT, ours |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        r = gradient_bench(name, args.rounds)
        print(
            f"| {name} | {r['fwd_nodes']} | {r['bwd_nodes']} | {r['bwd_nodes'] / r['fwd_nodes']:.2f} | "
            f"{r['identity']} | {r['where']} | {r['transform']:.2f} | {r['ort_bwd'] / r['ort_fwd']:.2f} | "
            f"{r['ol_bwd'] / r['ol_fwd']:.2f} | {r['ol_fwd'] / r['ort_fwd']:.2f} | {r['ol_bwd'] / r['ort_bwd']:.2f} | "
            f"{r['ort_fin'] / r['ort_fwd']:.2f}, {r['ol_fin'] / r['ol_fwd']:.2f} | "
            f"{r['ort_bwd'] / r['ort_fin']:.2f}, {r['ol_bwd'] / r['ol_fin']:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
