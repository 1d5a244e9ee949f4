"""In-process A/B of the forward-mode pass: a commit's ``_forward.py`` against the tree's.

The old module is loaded beside the current one (the same shared modules: _pass, rules,
optimizer), and both transform the same model, alternating, process CPU time, warm
(no collection between calls). Prints the medians, their ratio, the median of the paired
ratios and whether both emit the same bytes. Under load this is steadier than two processes.

Run: ``PYTHONPATH=$PWD python benchmarks/ab_forward_pass.py [--base 2f1570f] [--models mlp,cnn]
[--calls 400] [--mode jvp|hvp|k4]`` (``chain`` = the 10,000-node chain, ``chainN`` N layers).
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_gradient as bg  # noqa: E402

import onnx_light as ol  # noqa: E402
from onnx_light.onnx_core.gradient import _forward as new  # noqa: E402

MODULE = "onnx_light/onnx_core/gradient/_forward.py"


def _old(commit: str) -> Any:
    root = Path(__file__).resolve().parents[1]
    source = subprocess.run(["git", "show", f"{commit}:{MODULE}"], cwd=root, capture_output=True, check=True).stdout
    path = Path(tempfile.mkdtemp()) / "_forward_base.py"
    path.write_bytes(source)
    spec = importlib.util.spec_from_file_location("onnx_light.onnx_core.gradient._forward_base", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="2f1570f")
    parser.add_argument("--models", default="mlp,cnn,encoder")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--mode", default="jvp", choices=["jvp", "hvp", "k4"])
    args = parser.parse_args()
    base = _old(args.base)
    for name in args.models.split(","):
        if name.startswith("chain"):
            model, _, y = bg.chain_model(int(name[5:] or 3334))
            x = "x"
        else:
            model, _, y = getattr(bg, f"{name}_model")()
            x = next(i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer})
        src: Any = ol.ModelProto.FromString(model.SerializeToString())
        ys = [y]
        if args.mode == "hvp":
            src = ol.GradientOfFunction(src, [x], y, registry=bg.REGISTRY)
            ys = list(src.output)
        seeds = 4 if args.mode == "k4" else None
        modules = {"base": base, "new": new}
        fns = {
            k: partial(m.TangentOfFunction, src, [x], ys, registry=bg.REGISTRY, seeds=seeds) for k, m in modules.items()
        }
        same = fns["base"]().SerializeToString() == fns["new"]().SerializeToString()
        times: dict[str, list[float]] = {"base": [], "new": []}
        for r in range(args.calls):
            for k in ("base", "new") if r % 2 == 0 else ("new", "base"):
                t0 = time.process_time()
                fns[k]()
                times[k].append(time.process_time() - t0)
        b, n = float(np.median(times["base"])), float(np.median(times["new"]))
        paired = float(np.median(np.array(times["new"]) / np.array(times["base"])))
        print(f"{name:8s} {args.mode} {args.base} {b * 1e3:8.3f}ms  now {n * 1e3:8.3f}ms  now/base {n / b:.3f} "
              f"(paired {paired:.3f})  same bytes: {same}")  # fmt: skip


if __name__ == "__main__":
    main()
