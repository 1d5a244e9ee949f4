"""What ReLU's tangent mask applied after MaxPool's gather would save (not emitted today).

The CNN of bench_jvp.py: its one-seed JVP (MaxPool's tangent gathered at the Indices) against
the same graph rewritten by hand so that each ``GatherElements(flat(t * mask(r)), I)`` becomes
``GatherElements(flat(t), I) * mask(GatherElements(flat(r), I))`` (``gathered``; exact: an elementwise
mask commutes with a gather) or ``* mask(Y)`` (``from_y``): three full-size ops per
Conv-ReLU-MaxPool block become pooled ones.
Checks equal outputs; prints onnxruntime's and our run times and their ratio to the forward.

Run: ``PYTHONPATH=$PWD python benchmarks/jvp_relu_pool_commute.py [ROUNDS]`` (80 alternating rounds,
process CPU time, medians).
"""

import sys
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import helper as oh

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_gradient as bg  # noqa: E402
import bench_max_pool_jvp as b  # noqa: E402

import onnx_light as ol  # noqa: E402

model, _, y = bg.cnn_model()
feeds = bg._feeds(model, np.random.default_rng(0))
feeds["fwd_x"] = np.random.default_rng(1).standard_normal(feeds["x"].shape).astype(np.float32)
types = {i.name: i for i in model.graph.input}
fn = ol.TangentOfFunction(ol.ModelProto.FromString(model.SerializeToString()), ["x"], [y])
base = b._as_model(fn, types)


def commuted(base: onnx.ModelProto, from_y: bool) -> onnx.ModelProto:
    """``base`` with the mask taken after the gather: of the gathered pool input (exact), or
    ``from_y`` of the pool's output Y (equal where Y is the value at the Indices: every window
    in onnxruntime, windows without NaN in ours)."""
    g = onnx.ModelProto.FromString(base.SerializeToString())
    nodes = list(g.graph.node)
    prod = {o: n for n in nodes for o in n.output}
    new = []
    for n in nodes:
        if n.op_type != "GatherElements":
            new.append(n)
            continue
        flat_t = prod[n.input[0]]  # Reshape(Mul(conv_t, mask), -1)
        conv_t = prod[flat_t.input[0]].input[0]
        pool = prod[prod[n.input[1]].input[0]]  # the MaxPool whose Indices are gathered at
        r, flat = n.output[0], flat_t.input[1]
        new += [
            oh.make_node("Reshape", [conv_t, flat], [r + "_ct"]),
            oh.make_node("GatherElements", [r + "_ct", n.input[1]], [r + "_g"], axis=0),
        ]
        if from_y:
            new.append(oh.make_node("Reshape", [pool.output[0], flat], [r + "_rg"]))
        else:
            new += [
                oh.make_node("Reshape", [pool.input[0], flat], [r + "_r"]),
                oh.make_node("GatherElements", [r + "_r", n.input[1]], [r + "_rg"], axis=0),
            ]
        new += [
            oh.make_node("Cast", [r + "_rg"], [r + "_b"], to=9),
            oh.make_node("Cast", [r + "_b"], [r + "_f"], to=1),
            oh.make_node("Mul", [r + "_g", r + "_f"], [r]),
        ]
    live = {o.name for o in g.graph.output}  # the full-size masks are now dead
    keep = []
    for n in reversed(new):
        if any(o in live for o in n.output):
            keep.append(n)
            live.update(n.input)
    del g.graph.node[:]
    g.graph.node.extend(reversed(keep))
    return g


f = {i: feeds[i] for i in fn.input}
fns = {}
outs = {}
forms = {"indices": base, "gathered": commuted(base, False), "from_y": commuted(base, True)}
for label, m in forms.items():
    s, o = bg._session(m.SerializeToString()), ol.runtime.InferenceSession(m.SerializeToString())
    fns["ort " + label], fns["ours " + label] = (lambda s=s: s.run(None, f)), (lambda o=o: o.run(None, f))
    outs[label] = (s.run(None, f)[0], o.run(None, f)[0])
for label in forms:
    same = [np.array_equal(a, c) for a, c in zip(outs["indices"], outs[label])]
    print(f"{label}: {len(forms[label].graph.node)} nodes, outputs equal to the Indices form's (ort, ours): {same}")
s, o = bg._session(model.SerializeToString()), ol.runtime.InferenceSession(model.SerializeToString())
ff = {i.name: feeds[i.name] for i in s.get_inputs()}
fns["ort forward"], fns["ours forward"] = (lambda: s.run(None, ff)), (lambda: o.run(None, ff))
raw = {k: [] for k in fns}
for r in range(int(sys.argv[1]) if len(sys.argv) > 1 else 80):
    for k in list(fns) if r % 2 == 0 else list(fns)[::-1]:
        t0 = time.process_time()
        fns[k]()
        raw[k].append(time.process_time() - t0)
med = {k: np.median(v) for k, v in raw.items()}
for k in fns:
    print(f"{k:14s} {med[k] * 1e3:.3f} ms {med[k] / med[k.split()[0] + ' forward']:.2f}x")
