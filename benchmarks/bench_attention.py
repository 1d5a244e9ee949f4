"""The attention family against onnxruntime, one process, one core each.

Forward: one-node models (Attention MHA / GQA causal, RotaryEmbedding, LinearAttention,
CausalConvWithState) run by our kernels and by onnxruntime, alternating; the table gives the
median time per run and the median of the per-round ratios (our output checked first).
Backward: the gradient of ``sum(Attention(Q, K, V) * dY)`` in Q, K, V (Attention has no rule:
it differentiates through its expansion) run in onnxruntime and in our runtime, against the
forward node's time in onnxruntime.

    PYTHONPATH=. python benchmarks/bench_attention.py [--rounds 11]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
from onnx import helper as H  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import onnx_light as ol  # noqa: E402
from onnx_light.runtime import InferenceSession  # noqa: E402


def _model(
    op: str, feeds: dict[str, np.ndarray | None], attrs: dict[str, Any], opset: int, n_out: int
) -> onnx.ModelProto:
    names = [n if v is not None else "" for n, v in feeds.items()]
    outs = [f"y{i}" for i in range(n_out)]
    node = H.make_node(op, names, outs, **attrs)
    inputs = [
        H.make_tensor_value_info(n, H.np_dtype_to_tensor_dtype(v.dtype), v.shape)
        for n, v in feeds.items()
        if v is not None
    ]
    graph = H.make_graph([node], op, inputs, [H.make_empty_tensor_value_info(o) for o in outs])
    model = H.make_model(graph, opset_imports=[H.make_opsetid("", opset)])
    model.ir_version = 10
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    del model.graph.output[:]
    model.graph.output.extend(v for o in outs for v in inferred.graph.value_info if v.name == o)
    return model


def cases() -> dict[str, tuple[onnx.ModelProto, dict[str, np.ndarray]]]:
    r = np.random.default_rng(0)

    def f(*shape: int) -> np.ndarray:
        return r.standard_normal(shape).astype(np.float32)

    qkv = {"q": f(2, 8, 256, 64), "k": f(2, 8, 256, 64), "v": f(2, 8, 256, 64)}
    gqa = {"q": f(2, 8, 256, 64), "k": f(2, 2, 256, 64), "v": f(2, 2, 256, 64)}
    table = {
        "attention-mha": ("Attention", qkv, {}, 23, 1),
        "attention-gqa-causal": ("Attention", gqa, {"is_causal": 1}, 23, 1),
        "rotary-3d": (
            "RotaryEmbedding",
            {"x": f(4, 256, 512), "cos": f(4, 256, 32), "sin": f(4, 256, 32)},
            {"num_heads": 8},
            23,
            1,
        ),
        "linear-attention-gated-delta-t64": (
            "LinearAttention",
            {
                "q": f(2, 64, 512),
                "k": f(2, 64, 512) / 8,
                "v": f(2, 64, 512),
                "p": None,
                "g": -np.abs(f(2, 64, 8)),
                "b": np.abs(f(2, 64, 8)) / 4,
            },
            {"q_num_heads": 8, "kv_num_heads": 8},
            27,
            2,
        ),
        "causal-conv-k4": (
            "CausalConvWithState",
            {"x": f(4, 512, 256), "w": f(512, 1, 4)},
            {"activation": "silu"},
            27,
            2,
        ),
    }
    out = {}
    for name, (op, feeds, attrs, opset, n_out) in table.items():
        out[name] = (_model(op, feeds, attrs, opset, n_out), {k: v for k, v in feeds.items() if v is not None})
    return out


def _timed(fn: Any) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _ort(model: Any) -> Any:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def _race(a: Any, b: Any, rounds: int) -> tuple[float, float, float]:
    """(median a, median b, median a/b) over alternating rounds."""
    ta, tb, ratios = [], [], []
    for i in range(rounds):
        if i % 2 == 0:
            x = _timed(a)
            y = _timed(b)
        else:
            y = _timed(b)
            x = _timed(a)
        ta.append(x)
        tb.append(y)
        ratios.append(x / y)
    return statistics.median(ta), statistics.median(tb), statistics.median(ratios)


def forward(rounds: int) -> None:
    print("| case | ours | onnxruntime | ours / ORT |\n|---|---|---|---|")
    for name, (model, feeds) in cases().items():
        ours, theirs = InferenceSession(ol.ModelProto.FromString(model.SerializeToString())), _ort(model)
        for a, b in zip(ours.run(None, feeds), theirs.run(None, feeds)):
            np.testing.assert_allclose(a, b, rtol=2e-3, atol=2e-3, err_msg=name)
        a, b, ratio = _race(lambda o=ours, f=feeds: o.run(None, f), lambda t=theirs, f=feeds: t.run(None, f), rounds)
        print(f"| {name} | {a * 1e3:.2f} ms | {b * 1e3:.2f} ms | {ratio:.2f}x |")


def backward(rounds: int) -> None:
    model, feeds = cases()["attention-gqa-causal"]
    fwd = _ort(model)
    bwd = ol.GradientOfFunction(ol.ModelProto.FromString(model.SerializeToString()), ["q", "k", "v"], "y0")
    bfeeds = dict(feeds, dy=np.ones((2, 8, 256, 64), np.float32))
    wrapped = ol.helper.make_model(
        ol.helper.make_graph(
            list(bwd.node),
            "bwd",
            [ol.helper.make_tensor_value_info(n, 1, list(bfeeds[n].shape)) for n in bwd.input],
            [ol.helper.make_tensor_value_info(o, 1, None) for o in bwd.output],
        ),
        opset_imports=list(bwd.opset_import),
    )
    theirs = _ort(onnx.ModelProto.FromString(wrapped.SerializeToString()))
    ours = InferenceSession(bwd)
    for a, b in zip(ours.run(None, bfeeds), theirs.run(None, bfeeds)):
        np.testing.assert_allclose(a, b, rtol=2e-3, atol=2e-3)
    b_t, f_t, _ = _race(lambda: theirs.run(None, bfeeds), lambda: fwd.run(None, feeds), rounds)
    o_t, b2_t, _ = _race(lambda: ours.run(None, bfeeds), lambda: theirs.run(None, bfeeds), rounds)
    print(
        f"\nbackward of attention-gqa-causal (through the expansion, {len(bwd.node)} nodes): onnxruntime "
        f"{b_t * 1e3:.2f} ms = {b_t / f_t:.2f}x its forward Attention node ({f_t * 1e3:.2f} ms); "
        f"ours {o_t * 1e3:.2f} ms against onnxruntime's {b2_t * 1e3:.2f} ms in the same rounds"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=11)
    args = p.parse_args()
    forward(args.rounds)
    backward(args.rounds)


if __name__ == "__main__":
    main()
