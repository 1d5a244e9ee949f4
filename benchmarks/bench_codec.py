"""onnx-light's codec against ``onnx.load`` / ``onnx.save``, in one process, alternating.

Three models are generated with ``onnx`` into a cache folder (default
``benchmarks/_data``, git-ignored):

* ``weights``: 200 float32 initializers of 2.5 MB (~500 MB file), a few nodes;
* ``graph``:   50,000 nodes with attributes and 20,000 small initializers;
* ``mid``:     ~50 MB of initializers and 2,000 nodes.

For each model: load time and save time (median over ``--rounds`` alternating runs,
the order flipping every round) and, for ``weights``, the peak RSS growth during load,
measured in a fresh subprocess per library (``VmHWM`` after the load minus ``VmRSS``
before it, both from ``/proc/self/status``; file-backed mapped pages count).

    PYTHONPATH=. python benchmarks/bench_codec.py [--rounds 5] [--models weights,graph,mid]

Notes on honesty: our ``load`` maps the file and leaves tensor bytes as views, so
its time does not include reading the weights (the OS pages them in on first use);
the ``load+touch`` column adds a pass that reads every byte of every initializer.
Our ``save`` fsyncs the temporary file before renaming it; ``onnx.save`` does not.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import helper as H
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import onnx_light.onnx_core as oc  # noqa: E402

MB = 1 << 20


# ----------------------------------------------------------------------------
# models
# ----------------------------------------------------------------------------
def _attr_nodes(n: int, first: str) -> tuple[list[onnx.NodeProto], str]:
    """A chain of ``n`` nodes with a mix of attribute kinds."""
    nodes = []
    prev = first
    for i in range(n):
        out = f"v{i}"
        k = i % 4
        if k == 0:
            node = H.make_node("Transpose", [prev], [out], name=f"n{i}", perm=[0, 1])
        elif k == 1:
            node = H.make_node("LeakyRelu", [prev], [out], name=f"n{i}", alpha=0.01 * (i % 7))
        elif k == 2:
            node = H.make_node(
                "Custom", [prev, f"c{i % 97}"], [out], name=f"n{i}", domain="bench",
                mode="linear", axes=[0, -1, i % 5], scale=1.5, count=i,
            )  # fmt: skip
        else:
            node = H.make_node("Identity", [prev], [out], name=f"n{i}")
        nodes.append(node)
        prev = out
    return nodes, prev


def _model(nodes: list[Any], last: str, inits: list[onnx.TensorProto]) -> onnx.ModelProto:
    x = H.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 16])
    y = H.make_tensor_value_info(last, onnx.TensorProto.FLOAT, ["N", 16])
    graph = H.make_graph(nodes, "bench", [x], [y], inits)
    return H.make_model(graph, opset_imports=[H.make_opsetid("", 17), H.make_opsetid("bench", 1)])


def build_weights() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    n = int(2.5 * MB) // 4
    inits = [numpy_helper.from_array(rng.standard_normal(n, dtype=np.float32), f"w{i}") for i in range(200)]
    nodes, last = _attr_nodes(10, "x")
    return _model(nodes, last, inits)


def build_graph() -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    inits = [
        numpy_helper.from_array(rng.standard_normal(int(rng.integers(1, 32)), dtype=np.float32), f"c{i}")
        for i in range(20_000)
    ]
    nodes, last = _attr_nodes(50_000, "x")
    return _model(nodes, last, inits)


def build_mid() -> onnx.ModelProto:
    rng = np.random.default_rng(2)
    n = (MB // 2) // 4
    inits = [numpy_helper.from_array(rng.standard_normal(n, dtype=np.float32), f"w{i}") for i in range(100)]
    nodes, last = _attr_nodes(2_000, "x")
    return _model(nodes, last, inits)


BUILDERS: dict[str, Callable[[], onnx.ModelProto]] = {
    "weights": build_weights,
    "graph": build_graph,
    "mid": build_mid,
}


def ensure_model(name: str, cache: str) -> str:
    path = os.path.join(cache, f"bench_{name}.onnx")
    if not os.path.exists(path):
        print(f"generating {path} ...", flush=True)
        os.makedirs(cache, exist_ok=True)
        model = BUILDERS[name]()
        tmp = path + ".part"
        onnx.save(model, tmp)
        os.replace(tmp, path)
    return path


# ----------------------------------------------------------------------------
# measurements
# ----------------------------------------------------------------------------
def _touch(model: Any) -> int:
    total = 0
    for t in model.graph.initializer:
        data = numpy_helper.to_array(t) if isinstance(t, onnx.TensorProto) else t.raw_data
        total += int(np.frombuffer(data, np.uint8).sum(dtype=np.uint64) if len(data) else 0)
    return total


def _timed(fn: Callable[[], Any]) -> float:
    gc.collect()
    start = time.perf_counter()
    result = fn()
    elapsed = time.perf_counter() - start
    del result
    return elapsed


def alternate(fns: dict[str, Callable[[], Any]], rounds: int) -> dict[str, float]:
    """Median seconds per function, over ``rounds`` rounds in flipping order."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    names = list(fns)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            times[name].append(_timed(fns[name]))
    return {k: statistics.median(v) for k, v in times.items()}


_RSS_CHILD = r"""
import json, sys
def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
lib, path = sys.argv[1], sys.argv[2]
if lib == "onnx":
    import onnx
    load = onnx.load
else:
    import onnx_light.onnx_core as oc
    load = oc.load
before = status("VmRSS")
anon0, file0 = status("RssAnon"), status("RssFile")
model = load(path)
anon, file = status("RssAnon"), status("RssFile")
print(json.dumps({"before": before, "hwm": status("VmHWM"), "anon": anon, "file": file,
                  "anon0": anon0, "file0": file0}))
"""


def rss_growth(lib: str, path: str) -> dict[str, int]:
    env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE))
    out = subprocess.run(
        [sys.executable, "-c", _RSS_CHILD, lib, path], capture_output=True, text=True, check=True, env=env
    ).stdout
    info = json.loads(out)
    return {
        "peak": info["hwm"] - info["before"],
        "anon": info["anon"] - info["anon0"],
        "file": info["file"] - info["file0"],
    }


def bench_model(name: str, path: str, rounds: int) -> dict[str, Any]:
    size = os.path.getsize(path)
    row: dict[str, Any] = {"model": name, "size_mb": size / MB}
    load = alternate({"ours": lambda: oc.load(path), "onnx": lambda: onnx.load(path)}, rounds)
    row["load_ours"], row["load_onnx"] = load["ours"], load["onnx"]
    touch = alternate(
        {"ours": lambda: _touch(oc.load(path)), "onnx": lambda: _touch(onnx.load(path))}, max(1, rounds // 2)
    )
    row["touch_ours"], row["touch_onnx"] = touch["ours"], touch["onnx"]
    ours_model, onnx_model = oc.load(path), onnx.load(path)
    with tempfile.TemporaryDirectory(dir=os.path.dirname(path)) as tmp:
        out_ours, out_onnx = os.path.join(tmp, "ours.onnx"), os.path.join(tmp, "onnx.onnx")
        save = alternate(
            {"ours": lambda: oc.save(ours_model, out_ours), "onnx": lambda: onnx.save(onnx_model, out_onnx)},
            rounds,
        )
        with open(out_ours, "rb") as a, open(path, "rb") as b:
            row["bytes_identical"] = a.read() == b.read()
    row["save_ours"], row["save_onnx"] = save["ours"], save["onnx"]
    if name == "weights":
        for lib in ("ours", "onnx"):
            growth = rss_growth(lib, path)
            row[f"rss_{lib}_mb"] = growth["peak"] / MB
            row[f"rss_{lib}_anon_mb"] = growth["anon"] / MB
            row[f"rss_{lib}_file_mb"] = growth["file"] / MB
    return row


def _fmt_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| model | file MB | load ours s | load onnx s | load speed-up | load+touch speed-up "
        "| save ours s | save onnx s | save speed-up | bytes identical |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['size_mb']:.1f} | {r['load_ours']:.4f} | {r['load_onnx']:.4f} "
            f"| {r['load_onnx'] / r['load_ours']:.2f}x | {r['touch_onnx'] / r['touch_ours']:.2f}x "
            f"| {r['save_ours']:.4f} | {r['save_onnx']:.4f} | {r['save_onnx'] / r['save_ours']:.2f}x "
            f"| {r['bytes_identical']} |"
        )
    for r in rows:
        if "rss_ours_mb" in r:
            lines.append("")
            lines.append(
                f"peak RSS growth during load of `{r['model']}` ({r['size_mb']:.0f} MB): "
                f"ours {r['rss_ours_mb']:.1f} MB ({100 * r['rss_ours_mb'] / r['size_mb']:.2f}% of file), "
                f"onnx {r['rss_onnx_mb']:.1f} MB ({100 * r['rss_onnx_mb'] / r['size_mb']:.0f}% of file); "
                f"after load, anonymous/file-backed growth: ours {r['rss_ours_anon_mb']:.1f}"
                f"/{r['rss_ours_file_mb']:.1f} MB, onnx {r['rss_onnx_anon_mb']:.1f}"
                f"/{r['rss_onnx_file_mb']:.1f} MB"
            )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--models", default="weights,graph,mid")
    parser.add_argument("--cache-dir", default=os.path.join(HERE, "_data"))
    parser.add_argument("--json", help="also write the raw numbers here")
    args = parser.parse_args()
    rows = []
    for name in args.models.split(","):
        path = ensure_model(name, args.cache_dir)
        print(f"benchmarking {name} ({os.path.getsize(path) / MB:.1f} MB) ...", flush=True)
        rows.append(bench_model(name, path, args.rounds))
    print(_fmt_table(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
