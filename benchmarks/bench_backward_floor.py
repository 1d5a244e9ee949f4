"""The floor of backward/forward per real model: what an ideal emitted backward would reach.

The gradient contract (DESIGN §3) makes the backward self-contained: it takes the forward's
inputs and weights, recomputes the forward values it reads, and then computes the data gradient
dX and the weight gradient dW of every contraction (Conv, Gemm, MatMul, LSTM), each about the
forward's FLOPs. So an ideal backward costs

    recompute (the forward with its weights as graph inputs: no BatchNormalization folded into
    its Conv, no prepacked weights) + (FLOPs of dX + dW) / (the forward's contraction speed)

and its ratio to the (constant-weight, folded) forward is the floor below. Per model this script
prints: the FLOPs of the forward, of dX (every contraction operand that depends on a weight: so
not the first layer's data input, which needs no gradient) and of dW; the forward's time folded
and with weights as inputs; the speed of its contractions (GFLOP/s, from our per-step trace and
from onnxruntime's profile); and so the floor in our runtime and in onnxruntime, with the recompute
as it is (weights as inputs) and as it would be if it ran at the folded forward's cost, next to
the measured emitted backward. 1 thread; every engine's runs alternate in one process (median
process CPU time):

    PYTHONPATH=. python benchmarks/bench_backward_floor.py [--models mobilenetv3,resnet18] [--rounds 7]
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

# one BLAS thread for numpy (our dW Gemms, MatMuls, GEMM ConvTransposes), as onnxruntime runs
# with 1 thread: must be set before numpy is imported. With OpenBLAS's default threads the
# process CPU time counts a second, spinning thread (2-3x the GEMM ConvTranspose's CPU at load 3)
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
    os.environ[_var] = "1"

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_real_models import (  # noqa: E402
    REAL_MODELS,
    _alternate,
    _step_times,
    _weights_as_inputs,
    gradient_case,
)

#: the contractions: the ops whose FLOPs the floor counts (everything else is taken as free)
CONTRACTIONS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul", "LSTM", "GRU"})
#: onnxruntime's profile names of the same kernels (fused forms included)
ORT_CONTRACTIONS = CONTRACTIONS | {"FusedConv", "FusedGemm", "FusedMatMul", "NhwcConv"}


def _dims(v: Any) -> list[int]:
    return [d.dim_value for d in v.type.tensor_type.shape.dim]


def node_flops(node: Any, shape: dict[str, list[int]]) -> list[int]:
    """FLOPs (2 x multiply-adds) of a contraction's forward, split by operand: entry k is the
    forward's FLOPs that operand k's gradient costs again (0 where it has none)."""
    op, ins = node.op_type, list(node.input)
    out = shape[node.output[0]]
    if op == "Conv":
        f = 2 * int(np.prod(out)) * int(np.prod(shape[ins[1]][1:]))
        return [f, f]
    if op == "ConvTranspose":
        f = 2 * int(np.prod(shape[ins[0]])) * int(np.prod(shape[ins[1]][1:]))
        return [f, f]
    if op == "Gemm":
        trans_a = any(a.name == "transA" and a.i for a in node.attribute)
        f = 2 * int(np.prod(out)) * shape[ins[0]][0 if trans_a else -1]
        return [f, f]
    if op == "MatMul":
        f = 2 * int(np.prod(out)) * shape[ins[0]][-1]
        return [f, f]
    if op in ("LSTM", "GRU"):  # X @ W^T and H @ R^T per step and direction
        gates = 4 if op == "LSTM" else 3
        seq, batch, size = shape[ins[0]]
        dirs, hidden = shape[ins[1]][0], shape[ins[2]][-1]
        fx = 2 * seq * batch * dirs * gates * hidden * size
        fh = 2 * seq * batch * dirs * gates * hidden * hidden
        return [fx, fx, 2 * fh]  # dX; dW; dR and the recurrent dH
    return []


def flop_table(model: Any) -> dict[str, int]:
    """Forward, dX and dW FLOPs of ``model``: an operand's gradient is counted when it depends
    on a float initializer (a weight, the backward's xs), as dW when it is read from weights only."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model)
    graph = inferred.graph
    shape = {v.name: _dims(v) for v in [*graph.input, *graph.value_info, *graph.output]}
    shape.update({t.name: list(t.dims) for t in graph.initializer})
    weights = {t.name for t in graph.initializer if t.data_type == onnx.TensorProto.FLOAT}
    data = {v.name for v in graph.input} - weights
    on_weights: set[str] = set(weights)  # depends on a weight
    on_data: set[str] = set(data)  # depends on the data input
    totals = {"fwd": 0, "dx": 0, "dw": 0}
    for node in graph.node:
        ins = [n for n in node.input if n]
        if node.op_type in CONTRACTIONS:
            per_operand = node_flops(node, shape)
            totals["fwd"] += per_operand[0] + (per_operand[2] // 2 if len(per_operand) > 2 else 0)
            for k, f in enumerate(per_operand):
                name = node.input[k] if k < len(node.input) else ""
                if name in on_weights:
                    totals["dx" if name in on_data else "dw"] += f
        if any(n in on_weights for n in ins):
            on_weights.update(node.output)
        if any(n in on_data for n in ins):
            on_data.update(node.output)
    return totals


def _ort_session(blob: bytes, profile: bool = False) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    if profile:
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"floor-{os.getpid()}")
    return ort.InferenceSession(blob, options, providers=["CPUExecutionProvider"])


def ort_contraction_share(blob: bytes, feeds: dict[str, np.ndarray], rounds: int) -> float:
    """The share of onnxruntime's run time in its contraction kernels (its profile, runs after
    the first; a profiled session runs several times slower, so only the share is read)."""
    session = _ort_session(blob, profile=True)
    for _ in range(rounds + 1):
        session.run(None, feeds)
    path = session.end_profiling()
    with open(path) as f:
        events = json.load(f)
    os.remove(path)
    runs = [e["dur"] for e in events if e.get("name") == "model_run"][1:]
    first_run_end = min(e["ts"] + e["dur"] for e in events if e.get("name") == "model_run")
    kernels = 0.0
    for e in events:
        args = e.get("args", {})
        if (
            e.get("cat") == "Node"
            and e["name"].endswith("_kernel_time")
            and args.get("op_name") in ORT_CONTRACTIONS
            and e["ts"] > first_run_end
        ):
            kernels += e["dur"]
    return kernels / max(sum(runs), 1)


def floor_row(name: str, rounds: int) -> dict[str, float]:
    """One model's FLOPs, times, contraction speeds and floors (see the module docstring)."""
    import onnx

    from onnx_light.runtime import InferenceSession

    case = gradient_case(name)
    fwd_model, feeds = case["forward"], case["feeds"]
    flops = flop_table(fwd_model)
    fwd_b, bwd_b = fwd_model.SerializeToString(), case["backward"].SerializeToString()
    fin_b, fin_feeds = _weights_as_inputs(fwd_model, feeds)
    runs = {
        "ol_fwd": (InferenceSession(fwd_b), feeds),
        "ol_fin": (InferenceSession(fin_b), fin_feeds),
        "ol_bwd": (InferenceSession(bwd_b), case["bwd_feeds"]),
        "ort_fwd": (_ort_session(fwd_b), feeds),
        "ort_fin": (_ort_session(fin_b), fin_feeds),
        "ort_bwd": (_ort_session(bwd_b), case["bwd_feeds"]),
    }
    for s, f in runs.values():
        s.run(None, f)
    t = _alternate({k: (lambda s=s, f=f: s.run(None, f)) for k, (s, f) in runs.items()}, rounds)
    steps = _step_times(onnx.load_from_string(fwd_b), feeds, rounds)
    ol_conv = sum(s for n, s, _ in steps if n.op_type in CONTRACTIONS)
    ol_share = ol_conv / max(sum(s for _, s, _ in steps), 1e-12)  # of the generic loop's time
    ort_share = ort_contraction_share(fwd_b, feeds, rounds)
    row: dict[str, float] = {**flops, **t, "ol_conv": ol_share * t["ol_fwd"], "ort_conv": ort_share * t["ort_fwd"]}
    grad = flops["dx"] + flops["dw"]
    for eng in ("ol", "ort"):
        rate = flops["fwd"] / row[f"{eng}_conv"]  # FLOP/s of the forward's contractions
        row[f"{eng}_rate"] = rate
        row[f"{eng}_floor"] = (t[f"{eng}_fin"] + grad / rate) / t[f"{eng}_fwd"]
        row[f"{eng}_floor_folded"] = 1.0 + grad / rate / t[f"{eng}_fwd"]
        row[f"{eng}_ratio"] = t[f"{eng}_bwd"] / t[f"{eng}_fwd"]
    return row


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(REAL_MODELS))
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  load {os.getloadavg()[0]:.1f}")
    print(
        "| model | GFLOP fwd / dX / dW | (dX+dW) / fwd | fwd ms ours, ORT | weights-as-inputs / fwd ours, ORT | "
        "contractions GFLOP/s ours, ORT | floor ours, ORT | floor, folded recompute, ours, ORT | "
        "measured bwd/fwd ours, ORT |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        r = floor_row(name, args.rounds)
        g = 1e-9
        print(
            f"| {name} | {r['fwd'] * g:.2f} / {r['dx'] * g:.2f} / {r['dw'] * g:.2f} | "
            f"{(r['dx'] + r['dw']) / r['fwd']:.2f} | {r['ol_fwd'] * 1e3:.1f}, {r['ort_fwd'] * 1e3:.1f} | "
            f"{r['ol_fin'] / r['ol_fwd']:.2f}, {r['ort_fin'] / r['ort_fwd']:.2f} | "
            f"{r['ol_rate'] * g:.1f}, {r['ort_rate'] * g:.1f} | "
            f"**{r['ol_floor']:.2f}**, **{r['ort_floor']:.2f}** | "
            f"{r['ol_floor_folded']:.2f}, {r['ort_floor_folded']:.2f} | "
            f"{r['ol_ratio']:.2f}, {r['ort_ratio']:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
