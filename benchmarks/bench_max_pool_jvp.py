"""MaxPool's forward rule: the run time of its tangent forms in onnxruntime and ours.

Forms: ``tree`` (what the rule emits), ``indices`` (tX gathered at the forward's Indices),
``pools`` (the Indices-free prefix pools, also for float32). ``--model pool`` is one MaxPool 2x2/2 on
16x16x32x32 (``--dtype f32|f64``), ``--model cnn`` the CNN of bench_jvp.py (float32), whose
forward runs too (the ratios are JVP / forward).

Run: ``PYTHONPATH=$PWD python benchmarks/bench_max_pool_jvp.py [--model cnn] [--dtype f64]
[--rounds 60]``. Process CPU time, medians over alternating rounds, one onnxruntime thread;
the outputs of all forms are checked equal.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper as oh

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_gradient as bg  # noqa: E402

import onnx_light as ol  # noqa: E402
from onnx_light.onnx_extensions.gradient import pool  # noqa: E402

_TYPES = {"f32": (1, np.float32), "f64": (11, np.float64)}


@contextmanager
def _form(name: str) -> Iterator[None]:
    """The rule's module globals set so that it emits form ``name``."""
    saved = {k: pool.__dict__[k] for k in ("_unpool_attrs", "_tiling_geometry")}
    if name == "indices":
        pool.__dict__["_tiling_geometry"] = lambda ctx: None
        pool.__dict__["_unpool_attrs"] = lambda ctx: None
    elif name == "pools":
        pool.__dict__["_unpool_attrs"] = lambda ctx: None
    try:
        yield
    finally:
        pool.__dict__.update(saved)


def _as_model(fn: Any, types: dict[str, Any]) -> onnx.ModelProto:
    f = onnx.FunctionProto.FromString(fn.SerializeToString())
    inputs = [types[n] if n in types else types[n[len("fwd_") :]] for n in f.input]
    inputs = [oh.make_tensor_value_info(n, t.type.tensor_type.elem_type, None) for n, t in zip(f.input, inputs)]
    dtype = inputs[0].type.tensor_type.elem_type
    outputs = [oh.make_tensor_value_info(n, dtype, None) for n in f.output]
    graph = oh.make_graph(list(f.node), "jvp", inputs, outputs)
    return oh.make_model(graph, opset_imports=list(f.opset_import), ir_version=10)


def _pool_model(dtype: str) -> tuple[onnx.ModelProto, str, str, dict[str, np.ndarray]]:
    code, np_type = _TYPES[dtype]
    shape = [16, 16, 32, 32]
    node = oh.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])
    graph = oh.make_graph(
        [node],
        "g",
        [oh.make_tensor_value_info("x", code, shape)],
        [oh.make_tensor_value_info("y", code, shape[:2] + [16, 16])],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)
    rng = np.random.default_rng(0)
    x = np.maximum(rng.standard_normal(shape), 0).astype(np_type)  # ReLU-like: tied all-zero windows
    return model, "x", "y", {"x": x}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="pool", choices=["pool", "cnn"])
    parser.add_argument("--dtype", default="f32", choices=list(_TYPES))
    parser.add_argument("--forms", default="tree,indices,pools")
    parser.add_argument("--rounds", type=int, default=60)
    args = parser.parse_args()
    if args.model == "cnn":
        model, _, y = bg.cnn_model()
        x = "x"
        feeds = {
            **{t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer},
            **bg._feeds(model, np.random.default_rng(0)),
        }
    else:
        model, x, y, feeds = _pool_model(args.dtype)
    feeds[f"fwd_{x}"] = np.random.default_rng(1).standard_normal(feeds[x].shape).astype(feeds[x].dtype)
    types = {i.name: i for i in model.graph.input}
    fns: dict[str, Callable[[], Any]] = {}
    outs = {}
    for name in args.forms.split(","):
        with _form(name):
            fn = ol.TangentOfFunction(ol.ModelProto.FromString(model.SerializeToString()), [x], [y])
        jvp = _as_model(fn, types)
        s, o = bg._session(jvp.SerializeToString()), ol.runtime.InferenceSession(jvp.SerializeToString())
        f = {i.name: feeds[i.name] for i in s.get_inputs()}
        fns[f"ort {name}"] = lambda s=s, f=f: s.run(None, f)
        fns[f"ours {name}"] = lambda o=o, f=f: o.run(None, f)
        outs[name] = (s.run(None, f)[0], o.run(None, f)[0])
        print(f"{name:8s} {len(fn.node)} nodes: {', '.join(sorted({n.op_type for n in fn.node} - {'Constant'}))}")
    first = next(iter(outs.values()))
    assert all(np.array_equal(a, b) for v in outs.values() for a, b in zip(first, v)), "the forms disagree"
    if args.model == "cnn":
        s, o = bg._session(model.SerializeToString()), ol.runtime.InferenceSession(model.SerializeToString())
        f = {i.name: feeds[i.name] for i in s.get_inputs()}
        fns["ort forward"], fns["ours forward"] = (lambda: s.run(None, f)), (lambda: o.run(None, f))
    raw: dict[str, list[float]] = {k: [] for k in fns}
    keys = list(fns)
    for r in range(args.rounds):
        for k in keys if r % 2 == 0 else reversed(keys):
            t0 = time.process_time()
            fns[k]()
            raw[k].append(time.process_time() - t0)
    med = {k: float(np.median(v)) for k, v in raw.items()}
    for k in keys:
        ratio = f"  {med[k] / med[k.split()[0] + ' forward']:.2f}x the forward" if args.model == "cnn" else ""
        print(f"{k:14s} {med[k] * 1e3:7.3f} ms{ratio}")


if __name__ == "__main__":
    main()
