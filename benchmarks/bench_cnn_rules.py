"""Alternative forms of the CNN gradient rules, timed in onnxruntime and in onnx-light's runtime.

Each alternative is a small hand-built graph (inputs X, dY, W; outputs the gradient) on the
shapes of bench_training's conv net and bench_gradient's CNN; every form is checked against the
first of its group before it is timed. All forms of one group alternate in one process, one
thread; the table gives the median per run and the ratio to the group's reference row.

* ``maxpool``: plain MaxPool (the forward), MaxPool with Indices, MaxPool+Indices then MaxUnpool
  (the non-overlapping rule), MaxPool+Indices then a flat ScatterElements-add (the overlapping rule);
* ``dw``: Conv's weight gradient as im2col Conv + MatMul, or as one Conv of X and dY with the batch
  and channel axes swapped (correlation);
* ``dw1``: the same on batch 1 (the real models' shapes): batched im2col, im2col into one Gemm,
  or the correlation Conv;
* ``dwdw``: a depthwise Conv's weight gradient on batch 1: the correlation Conv or im2col + MatMul;
* ``dx``: Conv's data gradient as ConvTranspose, or as a Conv of the padded dY with the weights
  flipped and transposed (stride 1 only);
* ``dx1``: the same on batch 1 (ResNet-18's 3x3 stride-1 shapes);
* ``dx1x1``: a pointwise Conv's data gradient on batch 1: ConvTranspose or one Gemm;
* ``silu``: SiLU's gradient as the rules emit it, or in the optimizer's short form;
* ``jvp``: MaxPool's tangent as a Gather at the Indices, or Indices-free by one-hot Conv cells.

    PYTHONPATH=. python benchmarks/bench_cnn_rules.py [--runs 30] [--groups maxpool,dw,dx]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper as oh  # noqa: E402
from onnx import numpy_helper  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from onnx_light.runtime import InferenceSession  # noqa: E402

F = TP.FLOAT


def _graph(nodes: list[Any], inputs: dict[str, list[int]], outputs: list[str], inits: list[Any] = ()) -> bytes:
    g = oh.make_graph(
        nodes,
        "g",
        [oh.make_tensor_value_info(k, F, v) for k, v in inputs.items()],
        [oh.make_tensor_value_info(o, F, None) for o in outputs],
        list(inits),
    )
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 21)])
    m.ir_version = 10
    return m.SerializeToString()


def _ints(name: str, v: list[int]) -> Any:
    return numpy_helper.from_array(np.array(v, dtype=np.int64), name)


def maxpool_forms(n: int, c: int, h: int) -> dict[str, tuple[bytes, dict[str, list[int]]]]:
    o = h // 2
    ins = {"X": [n, c, h, h], "dY": [n, c, o, o]}
    pool = {"kernel_shape": [2, 2], "strides": [2, 2]}
    plain = [oh.make_node("MaxPool", ["X"], ["Y"], **pool)]
    idx = [oh.make_node("MaxPool", ["X"], ["Y", "I"], **pool)]
    unpool = idx + [oh.make_node("MaxUnpool", ["dY", "I"], ["dX"], **pool)]
    scatter = idx + [
        oh.make_node("Reshape", ["I", "flat"], ["If"]),
        oh.make_node("Reshape", ["dY", "flat"], ["dYf"]),
        oh.make_node("ScatterElements", ["zeros", "If", "dYf"], ["s"], reduction="add"),
        oh.make_node("Reshape", ["s", "xshape"], ["dX"]),
    ]
    inits = [
        _ints("flat", [-1]),
        _ints("xshape", [n, c, h, h]),
        numpy_helper.from_array(np.zeros(n * c * h * h, np.float32), "zeros"),
    ]
    kk = 4
    argmax = plain + [
        oh.make_node("Reshape", ["X", "s_win"], ["xw"]),
        oh.make_node("Transpose", ["xw"], ["xt"], perm=[0, 1, 2, 4, 3, 5]),
        oh.make_node("Reshape", ["xt", "s_k"], ["xk"]),
        oh.make_node("ArgMax", ["xk"], ["am"], axis=-1, keepdims=1),
        oh.make_node("Equal", ["am", "arange"], ["hot"]),
        oh.make_node("Unsqueeze", ["dY", "last"], ["dyu"]),
        oh.make_node("Where", ["hot", "dyu", "zero"], ["gk"]),
        oh.make_node("Reshape", ["gk", "s_win2"], ["gw"]),
        oh.make_node("Transpose", ["gw"], ["gt"], perm=[0, 1, 2, 4, 3, 5]),
        oh.make_node("Reshape", ["gt", "xshape"], ["dX"]),
    ]
    inits += [
        _ints("s_win", [n, c, o, 2, o, 2]),
        _ints("s_k", [n, c, o, o, kk]),
        _ints("s_win2", [n, c, o, o, 2, 2]),
        _ints("arange", list(range(kk))),
        _ints("last", [-1]),
        numpy_helper.from_array(np.zeros((), np.float32), "zero"),
    ]
    prefix = plain + [
        oh.make_node("MaxPool", ["X"], ["q1"], kernel_shape=[1, 1], strides=[2, 2]),
        oh.make_node("MaxPool", ["X"], ["q2"], kernel_shape=[1, 2], strides=[2, 2]),
        oh.make_node("MaxPool", ["X"], ["q3"], kernel_shape=[2, 1], strides=[2, 2]),
    ]
    for i in (1, 2, 3):
        prefix += [oh.make_node("Equal", [f"q{i}", "Y"], [f"e{i}"]), oh.make_node("Cast", [f"e{i}"], [f"c{i}"], to=F)]
    prefix += [
        oh.make_node("Mul", ["dY", "c2"], ["s0"]),
        oh.make_node("Mul", ["s0", "c1"], ["p00"]),
        oh.make_node("Sub", ["s0", "p00"], ["p01"]),
        oh.make_node("Sub", ["dY", "s0"], ["u1"]),
        oh.make_node("Mul", ["u1", "c3"], ["p10"]),
        oh.make_node("Sub", ["u1", "p10"], ["p11"]),
    ]
    for p in ("p00", "p01", "p10", "p11"):
        prefix.append(oh.make_node("Reshape", [p, "s_one"], [p + "r"]))
    prefix += [
        oh.make_node("Concat", ["p00r", "p01r"], ["r0"], axis=5),
        oh.make_node("Concat", ["p10r", "p11r"], ["r1"], axis=5),
        oh.make_node("Concat", ["r0", "r1"], ["rr"], axis=3),
        oh.make_node("Reshape", ["rr", "xshape"], ["dX"]),
    ]
    inits.append(_ints("s_one", [n, c, o, 1, o, 1]))
    return {
        "MaxPool (forward)": (_graph(plain, {"X": ins["X"]}, ["Y"]), {"X": ins["X"]}),
        "prefix pools (rule today)": (_graph(prefix, ins, ["dX"], inits), ins),
        "ArgMax over window axis": (_graph(argmax, ins, ["dX"], inits), ins),
        "MaxPool + Indices": (_graph(idx, {"X": ins["X"]}, ["Y"]), {"X": ins["X"]}),
        "MaxPool+I, MaxUnpool": (_graph(unpool, ins, ["dX"]), ins),
        "MaxPool+I, ScatterElements": (_graph(scatter, ins, ["dX"], inits), ins),
    }


def dw_forms(n: int, c: int, m: int, h: int, k: int = 3, pad: int = 0) -> dict[str, tuple[bytes, dict[str, list[int]]]]:
    o = h + 2 * pad - k + 1
    ins = {"X": [n, c, h, h], "dY": [n, m, o, o]}
    window = k * k
    eye = np.zeros((c * window, 1, window), dtype=np.float32)
    eye[np.arange(c * window), 0, np.tile(np.arange(window), c)] = 1.0
    eye = eye.reshape((c * window, 1, k, k))
    pads = [pad] * 4
    im2col = [
        oh.make_node("Conv", ["X", "eye"], ["cols0"], group=c, pads=pads),
        oh.make_node("Reshape", ["cols0", "s_cols"], ["cols"]),
        oh.make_node("Reshape", ["dY", "s_dy"], ["dy3"]),
        oh.make_node("Transpose", ["dy3"], ["dyt"], perm=[0, 2, 1]),
        oh.make_node("MatMul", ["cols", "dyt"], ["ps"]),
        oh.make_node("ReduceSum", ["ps", "ax0"], ["sum"], keepdims=0),
        oh.make_node("Transpose", ["sum"], ["sumt"], perm=[1, 0]),
        oh.make_node("Reshape", ["sumt", "s_w"], ["dW"]),
    ]
    inits = [
        numpy_helper.from_array(eye, "eye"),
        _ints("s_cols", [0, c * window, -1]),
        _ints("s_dy", [0, m, -1]),
        _ints("ax0", [0]),
        _ints("s_w", [m, c, k, k]),
    ]
    corr = [
        oh.make_node("Transpose", ["X"], ["xt"], perm=[1, 0, 2, 3]),
        oh.make_node("Transpose", ["dY"], ["dyt"], perm=[1, 0, 2, 3]),
        oh.make_node("Conv", ["xt", "dyt"], ["cw"], pads=pads),
        oh.make_node("Transpose", ["cw"], ["dW"], perm=[1, 0, 2, 3]),
    ]
    einsum = [
        im2col[0],
        oh.make_node("Einsum", ["cols0", "dY"], ["mk"], equation="nkhw,nmhw->mk"),
        oh.make_node("Reshape", ["mk", "s_w"], ["dW"]),
    ]
    return {
        "im2col Conv + MatMul": (_graph(im2col, ins, ["dW"], inits), ins),
        "one Conv (correlation)": (_graph(corr, ins, ["dW"]), ins),
        "im2col Conv + Einsum (3 nodes)": (_graph(einsum, ins, ["dW"], inits), ins),
    }


def dw1_forms(c: int, m: int, h: int, k: int = 3, pad: int = 0, s: int = 1) -> dict[str, tuple[bytes, Any]]:
    """Conv's weight gradient on batch 1 (the real models): the batched im2col form, the same
    columns into one Gemm (no per-sample product, no sum over the batch, no transposes), and
    the correlation Conv (X and dY as batches of one channel)."""
    o = (h + 2 * pad - k) // s + 1
    ins = {"X": [1, c, h, h], "dY": [1, m, o, o]}
    window = k * k
    eye = np.zeros((c * window, 1, window), dtype=np.float32)
    eye[np.arange(c * window), 0, np.tile(np.arange(window), c)] = 1.0
    eye = eye.reshape((c * window, 1, k, k))
    geo = {"pads": [pad] * 4, "strides": [s, s]}
    cols = [oh.make_node("Conv", ["X", "eye"], ["cols0"], group=c, **geo)]
    batched = cols + [
        oh.make_node("Reshape", ["cols0", "s_cols"], ["cols"]),
        oh.make_node("Reshape", ["dY", "s_dy"], ["dy3"]),
        oh.make_node("Transpose", ["dy3"], ["dyt"], perm=[0, 2, 1]),
        oh.make_node("MatMul", ["cols", "dyt"], ["ps"]),
        oh.make_node("ReduceSum", ["ps", "ax0"], ["sum"], keepdims=0),
        oh.make_node("Transpose", ["sum"], ["sumt"], perm=[1, 0]),
        oh.make_node("Reshape", ["sumt", "s_w"], ["dW"]),
    ]
    gemm = [
        oh.make_node("Flatten", ["X" if k == 1 and s == 1 and pad == 0 else "cols0"], ["c2"], axis=2),
        oh.make_node("Flatten", ["dY"], ["d2"], axis=2),
        oh.make_node("Gemm", ["d2", "c2"], ["g"], transB=1),
        oh.make_node("Reshape", ["g", "s_w"], ["dW"]),
    ]
    # dW^T = cols dY^T, then one Transpose: numpy / OpenBLAS runs C = A B^T with the long
    # contraction axis 2-4x slower one way round than the other (h-bwd)
    gemm_t = [
        *gemm[:2],
        oh.make_node("Gemm", ["c2", "d2"], ["gt"], transB=1),
        oh.make_node("Transpose", ["gt"], ["g"], perm=[1, 0]),
        gemm[3],
    ]
    if not (k == 1 and s == 1 and pad == 0):
        gemm = cols + gemm
        gemm_t = cols + gemm_t
    inits = [
        numpy_helper.from_array(eye, "eye"),
        _ints("s_cols", [0, c * window, -1]),
        _ints("s_dy", [0, m, -1]),
        _ints("ax0", [0]),
        _ints("s_w", [m, c, k, k]),
        _ints("s_x1", [c, 1, h, h]),
        _ints("s_y1", [m, 1, o, o]),
    ]
    corr = [
        oh.make_node("Reshape", ["X", "s_x1"], ["xt"]),
        oh.make_node("Reshape", ["dY", "s_y1"], ["dyt"]),
        oh.make_node("Conv", ["xt", "dyt"], ["cw"], pads=[pad] * 4, dilations=[s, s]),
        oh.make_node("Transpose", ["cw"], ["dW"], perm=[1, 0, 2, 3]),
    ]
    return {
        "im2col Conv + batched MatMul (rule before)": (_graph(batched, ins, ["dW"], inits), ins),
        "im2col Conv + one Gemm": (_graph(gemm, ins, ["dW"], inits), ins),
        "im2col Conv + Gemm(cols, dY) + Transpose": (_graph(gemm_t, ins, ["dW"], inits), ins),
        "one Conv (correlation)": (_graph(corr, ins, ["dW"], inits), ins),
    }


def dwdw_forms(c: int, h: int, k: int, pad: int, s: int) -> dict[str, tuple[bytes, Any]]:
    """A depthwise Conv's weight gradient on batch 1 (MobileNetV3's stride-1 shapes): the correlation Conv
    (dY as the per-channel kernel), or im2col columns (a one-hot Conv) times dY as a batched MatMul."""
    o = (h + 2 * pad - k) // s + 1
    window = k * k
    ins = {"X": [1, c, h, h], "dY": [1, c, o, o]}
    eye = np.zeros((window, 1, k, k), dtype=np.float32)
    eye.reshape(window, window)[np.arange(window), np.arange(window)] = 1.0
    eye_g = np.tile(eye, (c, 1, 1, 1))
    inits = [
        numpy_helper.from_array(eye, "eye"),
        numpy_helper.from_array(eye_g, "eye_g"),
        _ints("s_y1", [c, 1, o, o]),
        _ints("s_x1", [c, 1, h, h]),
        _ints("s_w", [c, 1, k, k]),
        _ints("s_cols", [c, window, o * o]),
        _ints("s_dy", [c, o * o, 1]),
    ]
    corr = [
        oh.make_node("Reshape", ["dY", "s_y1"], ["dyk"]),
        oh.make_node("Conv", ["X", "dyk"], ["cw"], group=c, pads=[pad] * 4, dilations=[s, s]),
        oh.make_node("Reshape", ["cw", "s_w"], ["dW"]),
    ]
    tail = [
        oh.make_node("Reshape", ["cols0", "s_cols"], ["cols"]),
        oh.make_node("Reshape", ["dY", "s_dy"], ["dyc"]),
        oh.make_node("MatMul", ["cols", "dyc"], ["mv"]),
        oh.make_node("Reshape", ["mv", "s_w"], ["dW"]),
    ]
    batch_c = [
        oh.make_node("Reshape", ["X", "s_x1"], ["xc"]),
        oh.make_node("Conv", ["xc", "eye"], ["cols0"], pads=[pad] * 4, strides=[s, s]),
    ] + tail
    grouped = [oh.make_node("Conv", ["X", "eye_g"], ["cols0"], group=c, pads=[pad] * 4, strides=[s, s])] + tail
    return {
        "correlation Conv, group C (rule before)": (_graph(corr, ins, ["dW"], inits), ins),
        "one-hot Conv on C batches + MatMul": (_graph(batch_c, ins, ["dW"], inits), ins),
        "one-hot grouped Conv + MatMul": (_graph(grouped, ins, ["dW"], inits), ins),
    }


def dx_forms(n: int, c: int, m: int, h: int, k: int = 3, pad: int = 0) -> dict[str, tuple[bytes, dict[str, list[int]]]]:
    o = h + 2 * pad - k + 1
    ins = {"dY": [n, m, o, o], "W": [m, c, k, k]}
    ct = [oh.make_node("ConvTranspose", ["dY", "W"], ["dX"], pads=[pad] * 4)]
    q = k - 1 - pad
    flip = [
        oh.make_node("Transpose", ["W"], ["wt"], perm=[1, 0, 2, 3]),
        oh.make_node("Slice", ["wt", "st", "en", "ax", "step"], ["wf"]),
        oh.make_node("Conv", ["dY", "wf"], ["dX"], pads=[q] * 4),
    ]
    big = (1 << 63) - 1
    inits = [_ints("st", [-1, -1]), _ints("en", [-big, -big]), _ints("ax", [2, 3]), _ints("step", [-1, -1])]
    return {
        "ConvTranspose": (_graph(ct, ins, ["dX"]), ins),
        "Conv of flipped W": (_graph(flip, ins, ["dX"], inits), ins),
    }


def dx1x1_forms(c: int, m: int, h: int) -> dict[str, tuple[bytes, Any]]:
    """A pointwise (1x1, stride 1) Conv's data gradient on batch 1: ConvTranspose, or
    dX = W^T dY as one Gemm(W, Flatten(dY), transA=1) reshaped to X."""
    ins = {"dY": [1, m, h, h], "W": [m, c, 1, 1]}
    ct = [oh.make_node("ConvTranspose", ["dY", "W"], ["dX"])]
    gemm = [
        oh.make_node("Flatten", ["W"], ["w2"], axis=1),
        oh.make_node("Flatten", ["dY"], ["d2"], axis=2),
        oh.make_node("Gemm", ["w2", "d2"], ["g"], transA=1),
        oh.make_node("Reshape", ["g", "s_x"], ["dX"]),
    ]
    return {
        "ConvTranspose": (_graph(ct, ins, ["dX"]), ins),
        "Gemm(W, Flatten(dY), transA=1)": (_graph(gemm, ins, ["dX"], [_ints("s_x", [1, c, h, h])]), ins),
    }


def silu_forms(c: int, h: int) -> dict[str, tuple[bytes, Any]]:
    """SiLU's gradient (y = x * Sigmoid(x), forward included): as the Mul and Sigmoid rules emit
    it, and as the optimizer's ``_silu`` step rewrites it."""
    ins = {"X": [1, c, h, h], "dY": [1, c, h, h]}
    fwd = [oh.make_node("Sigmoid", ["X"], ["s"]), oh.make_node("Mul", ["X", "s"], ["y"])]
    rules = fwd + [
        oh.make_node("Mul", ["dY", "s"], ["a"]),
        oh.make_node("Mul", ["dY", "X"], ["ds"]),
        oh.make_node("Mul", ["ds", "s"], ["t"]),
        oh.make_node("Sub", ["one", "s"], ["u"]),
        oh.make_node("Mul", ["t", "u"], ["b"]),
        oh.make_node("Add", ["a", "b"], ["dX"]),
    ]
    short = fwd + [
        oh.make_node("Sub", ["one", "s"], ["u"]),
        oh.make_node("Mul", ["y", "u"], ["v"]),
        oh.make_node("Add", ["s", "v"], ["w"]),
        oh.make_node("Mul", ["dY", "w"], ["dX"]),
    ]
    one = [numpy_helper.from_array(np.array(1, np.float32), "one")]
    return {
        "Mul and Sigmoid rules (6 nodes)": (_graph(rules, ins, ["dX"], one), ins),
        "dY (s + y (1 - s)) (4 nodes)": (_graph(short, ins, ["dX"], one), ins),
    }


def jvp_forms(n: int, c: int, h: int) -> dict[str, tuple[bytes, dict[str, list[int]]]]:
    """MaxPool 2x2's tangent tY = tX at the first maximum: Gather at the Indices (the rule) or
    the window cells as a one-hot depthwise Conv, ArgMax over them and GatherElements."""
    o = h // 2
    ins = {"X": [n, c, h, h], "T": [n, c, h, h]}
    pool = {"kernel_shape": [2, 2], "strides": [2, 2]}
    gather = [
        oh.make_node("MaxPool", ["X"], ["Y", "I"], **pool),
        oh.make_node("Reshape", ["T", "flat"], ["Tf"]),
        oh.make_node("Gather", ["Tf", "I"], ["tY"], axis=0),
    ]
    eye = np.zeros((c * 4, 1, 2, 2), np.float32)
    for ch in range(c):
        for k in range(4):
            eye[ch * 4 + k, 0, k // 2, k % 2] = 1
    cells = [
        oh.make_node("MaxPool", ["X"], ["Y"], **pool),
        oh.make_node("Conv", ["X", "eye"], ["xc"], group=c, strides=[2, 2]),
        oh.make_node("Reshape", ["xc", "s5"], ["x5"]),
        oh.make_node("ArgMax", ["x5"], ["am"], axis=2, keepdims=1),
        oh.make_node("Conv", ["T", "eye"], ["tc"], group=c, strides=[2, 2]),
        oh.make_node("Reshape", ["tc", "s5"], ["t5"]),
        oh.make_node("GatherElements", ["t5", "am"], ["g"], axis=2),
        oh.make_node("Reshape", ["g", "sy"], ["tY"]),
    ]
    inits = [numpy_helper.from_array(eye, "eye"), _ints("s5", [n, c, 4, o, o]), _ints("sy", [n, c, o, o])]
    return {
        "MaxPool+I, Gather (rule today)": (_graph(gather, ins, ["tY"], [_ints("flat", [-1])]), ins),
        "one-hot Conv cells, ArgMax, GatherElements": (_graph(cells, ins, ["tY"], inits), ins),
    }


def _ort(model: bytes) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])


def _bench(title: str, forms: dict[str, tuple[bytes, dict[str, list[int]]]], runs: int) -> None:
    rng = np.random.default_rng(0)
    feeds_all: dict[str, np.ndarray] = {}
    fns: dict[str, Callable[[], Any]] = {}
    reference = None
    for name, (model, ins) in forms.items():
        for k, shape in ins.items():
            if k not in feeds_all:
                feeds_all[k] = rng.standard_normal(shape).astype(np.float32)
        feeds = {k: feeds_all[k] for k in ins}
        ort_s, our_s = _ort(model), InferenceSession(model)
        a = ort_s.run(None, feeds)[0]
        b = our_s.run(None, feeds)[0]
        np.testing.assert_allclose(
            b, a, rtol=1e-3, atol=1e-4 * float(np.abs(a).max()), err_msg=f"{title} {name}: ours vs ORT"
        )
        if "forward" not in name and name[-7:] != "Indices":
            if reference is None:
                reference = a
            elif reference.shape == a.shape:
                np.testing.assert_allclose(a, reference, rtol=1e-4, atol=1e-3, err_msg=f"{title} {name}")
        fns[f"{name}|ort"] = lambda s=ort_s, f=feeds: s.run(None, f)
        fns[f"{name}|ours"] = lambda s=our_s, f=feeds: s.run(None, f)
    for fn in fns.values():
        for _ in range(3):
            fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    names = list(fns)
    for r in range(runs):
        for k in names if r % 2 == 0 else reversed(names):
            t0 = time.process_time()
            fns[k]()
            times[k].append(time.process_time() - t0)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    first = next(iter(forms))
    print(f"\n{title}\n| form | ORT ms | ours ms | ORT / first | ours / first |\n|---|---|---|---|---|")
    for name in forms:
        o, u = med[f"{name}|ort"], med[f"{name}|ours"]
        print(f"| {name} | {o:.3f} | {u:.3f} | {o / med[f'{first}|ort']:.2f} | {u / med[f'{first}|ours']:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--groups", default="maxpool,dw,dw1,dwdw,dx,dx1,dx1x1,silu,jvp")
    args = parser.parse_args()
    groups = args.groups.split(",")
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"# {stamp}  load {os.getloadavg()[0]:.1f}  onnx {onnx.__version__}")
    if "maxpool" in groups:
        _bench("MaxPool 2x2 gradient, 16x32x62x62 (bench_training)", maxpool_forms(16, 32, 62), args.runs)
        _bench("MaxPool 2x2 gradient, 16x16x32x32 (bench_gradient)", maxpool_forms(16, 16, 32), args.runs)
    if "dw" in groups:
        _bench("Conv dW, X 16x3x64x64, W 32x3x3x3 (bench_training conv 1)", dw_forms(16, 3, 32, 64), args.runs)
        _bench("Conv dW, X 16x32x31x31, W 64x32x3x3 (bench_training conv 2)", dw_forms(16, 32, 64, 31), args.runs)
        _bench("Conv dW, X 16x16x16x16, W 32x16x3x3 pad 1 (bench_gradient)", dw_forms(16, 16, 32, 16, pad=1), args.runs)
    if "dw1" in groups:
        for c, m, h, k, pad, st in (
            (64, 64, 56, 3, 1, 1),
            (256, 256, 14, 3, 1, 1),
            (512, 512, 7, 3, 1, 1),
            (128, 256, 28, 1, 0, 2),
            (96, 24, 28, 1, 0, 1),
            (3, 16, 224, 3, 1, 2),
            (3, 64, 224, 7, 3, 2),  # ResNet-18's stem: 49 cells
        ):
            title = f"Conv dW, batch 1, X 1x{c}x{h}x{h}, W {m}x{c}x{k}x{k}, pad {pad}, stride {st} (real models)"
            _bench(title, dw1_forms(c, m, h, k, pad, st), args.runs)
    if "dwdw" in groups:
        for c, h, k, pad, st in ((240, 14, 5, 2, 1), (576, 7, 5, 2, 1), (88, 28, 3, 1, 1)):
            title = f"depthwise Conv dW, batch 1, X 1x{c}x{h}x{h}, k {k}, pad {pad}, stride {st} (MobileNetV3)"
            _bench(title, dwdw_forms(c, h, k, pad, st), args.runs)
    if "dx" in groups:
        _bench("Conv dX, dY 16x64x29x29, W 64x32x3x3 (bench_training conv 2)", dx_forms(16, 32, 64, 31), args.runs)
        _bench(
            "Conv dX, dY 16x32x16x16, W 32x16x3x3 pad 1 (bench_gradient)", dx_forms(16, 16, 32, 16, pad=1), args.runs
        )

    if "dx1" in groups:
        for c, h in ((64, 56), (128, 28), (256, 14), (512, 7)):
            title = f"Conv dX, batch 1, dY 1x{c}x{h}x{h}, W {c}x{c}x3x3 pad 1 (ResNet-18)"
            _bench(title, dx_forms(1, c, c, h, pad=1), args.runs)

    if "dx1x1" in groups:
        for c, m, h in ((576, 96, 7), (16, 72, 56), (128, 64, 40), (64, 128, 80)):
            title = f"pointwise Conv dX, batch 1, dY 1x{m}x{h}x{h}, W {m}x{c}x1x1 (MobileNetV3, YOLO)"
            _bench(title, dx1x1_forms(c, m, h), args.runs)

    if "silu" in groups:
        for c, h in ((32, 160), (128, 40)):
            _bench(f"SiLU gradient, 1x{c}x{h}x{h} (YOLO)", silu_forms(c, h), args.runs)

    if "jvp" in groups:
        _bench("MaxPool 2x2 tangent, 16x16x32x32 (bench_jvp stage 1)", jvp_forms(16, 16, 32), args.runs)
        _bench("MaxPool 2x2 tangent, 16x32x16x16 (bench_jvp stage 2)", jvp_forms(16, 32, 16), args.runs)


if __name__ == "__main__":
    main()
