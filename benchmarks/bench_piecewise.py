"""The HardSwish backward forms, alone, in onnxruntime (1 thread) and onnx-light's runtime.

``where``: nested Where (the form before the masks); ``masks``: the two-mask form of the last
session (10 elementwise nodes, constants 3 and 1/2); ``hardsigmoid``: the rule's form now
(H = HardSigmoid(X), slope H + [|H - 1/2| < 1/2] (H - 1/2): 8 nodes, constant 1/2). Each
graph maps (X, dY) to dX on a MobileNetV3-sized feature map, alternating, median CPU time.

    PYTHONPATH=. python benchmarks/bench_piecewise.py [--shape 1,96,28,28] [--rounds 30]
    PYTHONPATH=. python benchmarks/bench_piecewise.py --real [--rounds 10]

``--real``: the whole MobileNetV3 backward (bench_real_models.py --gradient) with the HardSwish
rule of the last session (``masks``) against the rule now, in both runtimes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper as oh

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from onnx_light.runtime import InferenceSession  # noqa: E402


def _c(name: str, v: float) -> Any:
    return oh.make_node("Constant", [], [name], value=oh.make_tensor(name, TP.FLOAT, [], [v]))


def forms() -> dict[str, list[Any]]:
    n = oh.make_node
    where = [
        _c("three", 3.0), _c("mthree", -3.0), _c("half", 0.5), _c("zero", 0.0),
        n("Div", ["x", "three"], ["d"]), n("Add", ["d", "half"], ["mid"]), n("Mul", ["dy", "mid"], ["gm"]),
        n("Less", ["x", "mthree"], ["lo"]), n("Greater", ["x", "three"], ["hi"]),
        n("Where", ["hi", "dy", "gm"], ["w1"]), n("Where", ["lo", "zero", "w1"], ["dx"]),
    ]  # fmt: skip
    masks = [
        _c("three", 3.0), _c("half", 0.5),
        n("Div", ["x", "three"], ["d"]), n("Add", ["d", "half"], ["mid"]), n("Abs", ["x"], ["a"]),
        n("Less", ["a", "three"], ["in_b"]), n("Cast", ["in_b"], ["in"], to=TP.FLOAT),
        n("GreaterOrEqual", ["x", "three"], ["ab_b"]), n("Cast", ["ab_b"], ["ab"], to=TP.FLOAT),
        n("Mul", ["in", "mid"], ["im"]), n("Add", ["im", "ab"], ["slope"]), n("Mul", ["dy", "slope"], ["dx"]),
    ]  # fmt: skip
    hardsigmoid = [
        _c("half", 0.5),
        n("HardSigmoid", ["x"], ["h"], alpha=1.0 / 6.0, beta=0.5), n("Sub", ["h", "half"], ["dd"]),
        n("Abs", ["dd"], ["a"]), n("Less", ["a", "half"], ["in_b"]), n("Cast", ["in_b"], ["in"], to=TP.FLOAT),
        n("Mul", ["in", "dd"], ["im"]), n("Add", ["h", "im"], ["slope"]), n("Mul", ["dy", "slope"], ["dx"]),
    ]  # fmt: skip
    return {"where": where, "masks": masks, "hardsigmoid": hardsigmoid}


def _masks_rule(ctx: Any, dy: str) -> str:
    """The HardSwish rule of the last session: [|X| < 3] (X/3 + 1/2) + [X >= 3]."""
    x = ctx.input(0)

    def c(v: float) -> str:
        return ctx.const(v, like=x)

    def as_mask(cond: str) -> str:
        return ctx.op.Cast(cond, to=ctx.dtype(x))

    middle = ctx.op.Add(ctx.op.Div(x, c(3.0)), c(0.5))
    inside = as_mask(ctx.op.Less(ctx.op.Abs(x), c(3.0)))
    above = as_mask(ctx.op.GreaterOrEqual(x, c(3.0)))
    return ctx.op.Mul(dy, ctx.op.Add(ctx.op.Mul(inside, middle), above))


def real(rounds: int) -> None:
    """MobileNetV3's backward with the last session's HardSwish rule and with today's."""
    import bench_real_models as br
    import onnxruntime as ort

    import onnx_light as ol

    old = ol.DefaultGradRegistry()
    ol.RegisterGradientFunction("", "HardSwish", lambda ctx, dy: (_masks_rule(ctx, dy),), registry=old)
    cases = {"masks": br.gradient_case("mobilenetv3", registry=old), "now": br.gradient_case("mobilenetv3")}
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    runs: dict[str, Any] = {}
    for name, case in cases.items():
        data = case["backward"].SerializeToString()
        s_ort = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
        s_ol = InferenceSession(data)
        runs[f"ort {name}"] = lambda s=s_ort, f=case["bwd_feeds"]: s.run(None, f)
        runs[f"ol {name}"] = lambda s=s_ol, f=case["bwd_feeds"]: s.run(None, f)
    for a, b in zip(runs["ort masks"](), runs["ort now"]()):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(a).max())))
    med = _alternate(runs, rounds, 1)
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} load {os.getloadavg()[0]:.1f} mobilenetv3 backward")
    print("| HardSwish rule | bwd nodes | ORT ms | ours ms |")
    print("|---|---|---|---|")
    for name, case in cases.items():
        print(f"| {name} | {case['bwd_nodes']} | {med[f'ort {name}'] * 1e3:.1f} | {med[f'ol {name}'] * 1e3:.1f} |")


def _alternate(runs: dict[str, Any], rounds: int, repeat: int) -> dict[str, float]:
    samples: dict[str, list[float]] = {k: [] for k in runs}
    order = list(runs)
    for r in range(rounds):
        for k in order if r % 2 == 0 else order[::-1]:
            t = time.process_time()  # CPU time: steadier on a shared machine (1 thread each)
            for _ in range(repeat):
                runs[k]()
            samples[k].append((time.process_time() - t) / repeat)
    return {k: statistics.median(v) for k, v in samples.items()}


def main() -> None:
    import onnxruntime as ort

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="1,96,28,28")
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--real", action="store_true", help="the whole MobileNetV3 backward, both HardSwish rules")
    args = p.parse_args()
    if args.real:
        real(args.rounds)
        return
    shape = [int(s) for s in args.shape.split(",")]
    rng = np.random.default_rng(0)
    feeds = {k: rng.uniform(-5, 5, shape).astype(np.float32) for k in ("x", "dy")}
    io = [oh.make_tensor_value_info(k, TP.FLOAT, shape) for k in ("x", "dy")]
    out = [oh.make_tensor_value_info("dx", TP.FLOAT, shape)]
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    runs: dict[str, Any] = {}
    results = {}
    for name, nodes in forms().items():
        model = oh.make_model(oh.make_graph(nodes, name, io, out), opset_imports=[oh.make_opsetid("", 21)])
        data = model.SerializeToString()
        onnx.checker.check_model(model)
        s_ort = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
        s_ol = InferenceSession(data)
        runs[f"ort {name}"] = lambda s=s_ort: s.run(None, feeds)
        runs[f"ol {name}"] = lambda s=s_ol: s.run(None, feeds)
        results[name] = s_ort.run(None, feeds)[0]
        np.testing.assert_allclose(s_ol.run(None, feeds)[0], results[name], rtol=1e-6, atol=1e-6)
    for name in results:
        np.testing.assert_allclose(results[name], results["where"], rtol=1e-5, atol=1e-6)
    med = _alternate(runs, args.rounds, 5)
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} load {os.getloadavg()[0]:.1f} shape {shape}")
    print("| form | nodes | ORT us | ours us | ORT / where | ours / where |")
    print("|---|---|---|---|---|---|")
    for name, nodes in forms().items():
        o, m = med[f"ort {name}"], med[f"ol {name}"]
        print(
            f"| {name} | {len(nodes)} | {o * 1e6:.0f} | {m * 1e6:.0f} | {o / med['ort where']:.2f} | "
            f"{m / med['ol where']:.2f} |"
        )


if __name__ == "__main__":
    main()
