"""Forward mode (JVP) speed: onnxruntime run time of the JVP model against the forward
model (1 seed, k seeds vs k single runs), and transform time against ``onnx_ad.forward``.

Also ``family()``'s files against ``onnx_ad.family``'s: the onnxruntime run time of
``adj_f`` and ``fwd_adj_f`` with one seed of each kind.

Run: ``PYTHONPATH=$PWD python benchmarks/bench_jvp.py [--runs 30] [--k 4]``. Process
CPU time, medians of alternating runs, one onnxruntime thread (see bench_gradient.py,
whose models and helpers it reuses; this is the jvp section of that benchmark). Transform
times are medians of 5 calls after one warm-up call. The last columns run the forward and
the one-seed JVP in our runtime. ``--profile cnn`` prints onnxruntime's per-node profile
(op types summed, medians over the runs) of that model's forward and one-seed JVP.
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_gradient as bg  # noqa: E402

import onnx_light as ol  # noqa: E402


def _median_time(fn: Any, calls: int = 5) -> tuple[float, Any]:
    out = fn()  # warm-up: first-call costs (schema tables, builder methods) are not the transform's
    times = []
    for _ in range(calls):
        dt, out = bg._time(fn)
        times.append(dt)
    return float(np.median(times)), out


def _jvp_model(model: onnx.ModelProto, x: str, y: str, seeds: Any) -> tuple[onnx.ModelProto, float]:
    ours = ol.ModelProto.FromString(model.SerializeToString())
    dt, fwd = _median_time(lambda: ol.TangentOfFunction(ours, [x], [y], registry=bg.REGISTRY, seeds=seeds))
    inputs = [onnx.helper.make_tensor_value_info(n, 1, None) for n in fwd.input]
    outputs = [onnx.helper.make_tensor_value_info(n, 1, None) for n in fwd.output]
    nodes = [onnx.NodeProto.FromString(n.SerializeToString()) for n in fwd.node]
    imports = [onnx.helper.make_opsetid(o.domain, o.version) for o in fwd.opset_import]
    graph = onnx.helper.make_graph(nodes, "jvp", inputs, outputs)
    return onnx.helper.make_model(graph, opset_imports=imports, ir_version=10), dt


def bench(name: str, runs: int, k: int) -> dict[str, Any]:
    model, _, y = getattr(bg, f"{name}_model")()
    x = next(i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer})
    feeds = bg._feeds(model, np.random.default_rng(0))
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    one, t_ours = _jvp_model(model, x, y, None)
    many, _ = _jvp_model(model, x, y, k)
    rng = np.random.default_rng(1)
    t1 = rng.standard_normal(feeds[x].shape).astype(np.float32)
    tk = rng.standard_normal((*feeds[x].shape, k)).astype(np.float32)
    base = {**inits, **feeds}
    s_f, s_1, s_k = (bg._session(m.SerializeToString()) for m in (model, one, many))
    f1 = {n.name: (t1 if n.name == f"fwd_{x}" else base[n.name]) for n in s_1.get_inputs()}
    fk = {n.name: (tk if n.name == f"fwd_{x}" else base[n.name]) for n in s_k.get_inputs()}
    ff = {n.name: base[n.name] for n in s_f.get_inputs()}
    o_f = ol.runtime.InferenceSession(model.SerializeToString())
    o_1 = ol.runtime.InferenceSession(one.SerializeToString())
    times, _ = bg.alternate(
        {
            "forward": lambda: s_f.run(None, ff),
            "jvp1": lambda: s_1.run(None, f1),
            "jvpk": lambda: s_k.run(None, fk),
            "ours_forward": lambda: o_f.run(None, ff),
            "ours_jvp1": lambda: o_1.run(None, f1),
        },
        runs,
    )
    row = {"model": name, **times, "ours_transform": t_ours}
    try:
        import onnx_ad

        dt, _ = _median_time(lambda: onnx_ad.forward(model, inputs=[x], outputs=[y], layout="onnx"))
        row["onnx_ad_transform"] = dt
    except Exception as err:  # onnx-ad absent or refusing the model: reported, not fatal
        row["onnx_ad_transform"] = f"n/a ({type(err).__name__})"
    return row


def _seed_dim(dim: Any) -> int:
    """A declared seed dim with one seed of each kind: ``nadj`` 1, ``nadj_x4`` 4, ``nfwd_nadj_x4`` 4."""
    if isinstance(dim, int) and dim > 0:
        return dim
    return int(str(dim).rpartition("_x")[2]) if "_x" in str(dim) else 1


def _family_feeds(sess: Any, base: dict[str, np.ndarray], rng: np.random.Generator) -> dict[str, np.ndarray]:
    feeds = {}
    for i in sess.get_inputs():
        if i.name in base:
            feeds[i.name] = base[i.name]
        else:
            dtype = np.float64 if "double" in i.type else np.float32
            feeds[i.name] = rng.standard_normal([_seed_dim(d) for d in i.shape]).astype(dtype)
    return feeds


def bench_family(name: str, runs: int) -> dict[str, Any]:
    """onnxruntime run time of our adj_f / fwd_adj_f against onnx-ad's, one seed of each kind."""
    import tempfile

    import onnx_ad

    model, _, _ = getattr(bg, f"{name}_model")()
    model = onnx.ModelProto.FromString(model.SerializeToString())
    del model.graph.output[1:]  # the loss only
    base = bg._feeds(model, np.random.default_rng(0))
    base.update({t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer})
    row: dict[str, Any] = {"model": name}
    with tempfile.TemporaryDirectory() as tmp:
        ours_dir, theirs_dir = Path(tmp, "ours"), Path(tmp, "theirs")
        ol.family(ol.ModelProto.FromString(model.SerializeToString()), ours_dir / "f.onnx")
        try:
            onnx_ad.family(model, str(theirs_dir / "f.onnx"))
        except Exception as err:  # onnx-ad refusing its own second order: first order only, reported
            row["onnx_ad_error"] = f"{type(err).__name__}: {str(err)[:80]}"
            onnx_ad.family(model, str(theirs_dir / "f.onnx"), second_order=False)
        for file in ("adj_f.onnx", "fwd_adj_f.onnx"):
            s_o = bg._session((ours_dir / file).read_bytes())
            feeds = _family_feeds(s_o, base, np.random.default_rng(1))
            fns = {"ours": partial(s_o.run, None, feeds)}
            if (theirs_dir / file).exists():
                s_t = bg._session((theirs_dir / file).read_bytes())
                fns["onnx_ad"] = partial(s_t.run, None, {i.name: feeds[i.name] for i in s_t.get_inputs()})
            row[file], _ = bg.alternate(fns, runs)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--models", default="mlp,cnn,encoder")
    parser.add_argument("--family-models", default="mlp,cnn")
    parser.add_argument("--profile", default="", help="a model whose onnxruntime per-node profile to print")
    args = parser.parse_args()
    if args.profile:
        profile(args.profile, args.runs)
        return
    print(f"{'model':8s} {'forward':>9s} {'jvp 1':>9s} {'ratio':>6s} {'jvp k':>9s} {'k x jvp1':>9s} "
          f"{'transform':>10s} {'onnx_ad':>10s} {'ours: fwd':>10s} {'jvp 1':>9s} {'ratio':>6s}")  # fmt: skip
    for name in args.models.split(","):
        r = bench(name, args.runs, args.k)
        ad = r["onnx_ad_transform"]
        ad_s = f"{ad * 1e3:8.1f}ms" if isinstance(ad, float) else ad
        print(
            f"{name:8s} {r['forward'] * 1e3:7.2f}ms {r['jvp1'] * 1e3:7.2f}ms {r['jvp1'] / r['forward']:6.2f} "
            f"{r['jvpk'] * 1e3:7.2f}ms {args.k * r['jvp1'] * 1e3:7.2f}ms "
            f"{r['ours_transform'] * 1e3:8.1f}ms {ad_s:>10s} "
            f"{r['ours_forward'] * 1e3:8.2f}ms {r['ours_jvp1'] * 1e3:7.2f}ms {r['ours_jvp1'] / r['ours_forward']:6.2f}"
        )
    print(f"\n{'family':8s} {'adj_f ours':>11s} {'onnx_ad':>9s} {'fwd_adj_f ours':>15s} {'onnx_ad':>9s}")
    for name in filter(None, args.family_models.split(",")):
        r = bench_family(name, args.runs)
        a, h = r["adj_f.onnx"], r["fwd_adj_f.onnx"]
        cells = [_ms(a["ours"]), _ms(a.get("onnx_ad")), _ms(h["ours"]), _ms(h.get("onnx_ad"))]
        print(f"{name:8s} {cells[0]:>11s} {cells[1]:>9s} {cells[2]:>15s} {cells[3]:>9s}")
        if "onnx_ad_error" in r:
            print(f"         onnx_ad.family: {r['onnx_ad_error']}")


def profile(name: str, runs: int) -> None:
    """onnxruntime's per-node profile of the forward and the one-seed JVP, by op type."""
    import collections
    import json
    import os

    import onnxruntime as ort

    model, _, y = getattr(bg, f"{name}_model")()
    x = next(i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer})
    one, _ = _jvp_model(model, x, y, None)
    base = bg._feeds(model, np.random.default_rng(0))
    base[f"fwd_{x}"] = np.random.default_rng(1).standard_normal(base[x].shape).astype(np.float32)
    for label, m in (("forward", model), ("jvp 1", one)):
        opts = ort.SessionOptions()
        opts.intra_op_num_threads, opts.inter_op_num_threads, opts.enable_profiling = 1, 1, True
        opts.log_severity_level = 3
        sess = ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        feeds = {i.name: base[i.name] for i in sess.get_inputs()}
        for _ in range(runs):
            sess.run(None, feeds)
        path = sess.end_profiling()
        with open(path) as f:
            events = json.load(f)
        os.remove(path)
        per_node: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
        for e in events:
            if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
                per_node[(e["name"], e["args"].get("op_name", "?"))].append(e["dur"])
        by_op: dict[str, float] = collections.defaultdict(float)
        for (_, op), durs in per_node.items():
            by_op[op] += float(np.median(durs))
        total = sum(by_op.values())
        cells = ", ".join(f"{op} {us / 1e3:.2f}" for op, us in sorted(by_op.items(), key=lambda kv: -kv[1]))
        print(f"{name} {label}: {total / 1e3:.2f} ms in kernels: {cells}")


def _ms(t: float | None) -> str:
    return "n/a" if t is None else f"{t * 1e3:.2f}ms"


if __name__ == "__main__":
    main()
