"""Forward mode (JVP) speed: onnxruntime run time of the JVP model against the forward
model (1 seed, k seeds vs k single runs), and transform time against ``onnx_ad.forward``.

Run: ``PYTHONPATH=$PWD python benchmarks/bench_jvp.py [--runs 30] [--k 4]``. Process
CPU time, medians of alternating runs, one onnxruntime thread (see bench_gradient.py,
whose models and helpers it reuses; this is the jvp section of that benchmark).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_gradient as bg  # noqa: E402

import onnx_light as ol  # noqa: E402


def _jvp_model(model: onnx.ModelProto, x: str, y: str, seeds: Any) -> tuple[onnx.ModelProto, float]:
    ours = ol.ModelProto.FromString(model.SerializeToString())
    dt, fwd = bg._time(lambda: ol.TangentOfFunction(ours, [x], [y], registry=bg.REGISTRY, seeds=seeds))
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
    times, _ = bg.alternate(
        {"forward": lambda: s_f.run(None, ff), "jvp1": lambda: s_1.run(None, f1), "jvpk": lambda: s_k.run(None, fk)},
        runs,
    )
    row = {"model": name, **times, "ours_transform": t_ours}
    try:
        import onnx_ad

        dt, _ = bg._time(lambda: onnx_ad.forward(model, inputs=[x], outputs=[y], layout="onnx"))
        row["onnx_ad_transform"] = dt
    except Exception as err:  # onnx-ad absent or refusing the model: reported, not fatal
        row["onnx_ad_transform"] = f"n/a ({type(err).__name__})"
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--models", default="mlp,cnn,encoder")
    args = parser.parse_args()
    print(f"{'model':8s} {'forward':>9s} {'jvp 1':>9s} {'ratio':>6s} {'jvp k':>9s} {'k x jvp1':>9s} "
          f"{'transform':>10s} {'onnx_ad':>10s}")  # fmt: skip
    for name in args.models.split(","):
        r = bench(name, args.runs, args.k)
        ad = r["onnx_ad_transform"]
        ad_s = f"{ad * 1e3:8.1f}ms" if isinstance(ad, float) else ad
        print(
            f"{name:8s} {r['forward'] * 1e3:7.2f}ms {r['jvp1'] * 1e3:7.2f}ms {r['jvp1'] / r['forward']:6.2f} "
            f"{r['jvpk'] * 1e3:7.2f}ms {args.k * r['jvp1'] * 1e3:7.2f}ms {r['ours_transform'] * 1e3:8.1f}ms {ad_s}"
        )


if __name__ == "__main__":
    main()
