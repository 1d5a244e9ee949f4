"""Per Conv layer of the real models: the native conv2d's AVX2 driver against its AVX-512 tile.

Each Conv of ``bench_real_models.py``'s exported models that the native kernel runs (its input
shape from onnx's shape inference, its own weights, a SiLU epilogue for both) is timed with
isa ``avx2`` (with the Winograd transform / packed weights the runtime would give it) and
``avx512``; thread CPU, least of 2 x 7 calls each, the two alternating. The rows, grouped by
geometry (W: Winograd, P: packed weights), show where ``_native.conv2d_isa_for`` sends what.
Needs a CPU with AVX-512F and onnx (to read the models' shapes).

    PYTHONPATH=. python benchmarks/bench_conv_isa.py [--models yolo,mobilenetv3,crnn,resnet18,dbnet]
"""

from __future__ import annotations

import argparse
import collections
import functools
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper, shape_inference

from benchmarks.bench_real_models import real_model_path
from onnx_light.runtime import _native
from onnx_light.runtime.kernels import conv as conv_kernels


def _convs(name: str) -> Iterator[tuple[list[int], np.ndarray, dict[str, Any]]]:
    """(input shape, weights, attributes) of each Conv with constant weights and a known input shape."""
    model = shape_inference.infer_shapes(onnx.load(real_model_path(name)))
    infos = list(model.graph.value_info) + list(model.graph.input)
    shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim] for vi in infos}
    weights = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type != "Conv":
            continue
        w, shape = weights.get(node.input[1]), shapes.get(node.input[0])
        if w is not None and shape and all(shape):
            yield shape, w, {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _least(fn: Callable[[], Any], calls: int = 7) -> float:
    best = float("inf")
    for _ in range(calls):
        start = time.thread_time()
        fn()
        best = min(best, time.thread_time() - start)
    return best


def bench(name: str) -> None:
    ext = _native.NATIVE
    assert ext is not None and ext.conv2d_isa() == "avx512", "needs the extension and a CPU with AVX-512F"
    rows: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0])
    rng = np.random.default_rng(0)
    for shape, w, attrs in _convs(name):
        w = np.ascontiguousarray(w, np.float32)
        w.flags.writeable = False  # a session's weights: the Winograd / packed forms are kept
        group, strides = attrs.get("group", 1), attrs.get("strides", [1, 1])
        dilations, pads = attrs.get("dilations", [1, 1]), attrs.get("pads", [0, 0, 0, 0])
        if not _native._native_conv_pays(tuple(shape), w.shape, strides, dilations, pads[:2], pads[2:], group):
            continue
        x = rng.standard_normal(shape).astype(np.float32)
        u = conv_kernels.winograd_weights(x, w, strides, dilations, pads[:2], pads[2:], group)
        p = None if u is not None else conv_kernels.packed_weights(w, group)
        forms = {k: v for k, v in (("winograd", u), ("packed", p)) if v is not None}
        args = (x, w, np.zeros(w.shape[0], np.float32), *strides, *dilations, *pads, group, False)
        avx2 = functools.partial(ext.conv2d, *args, "avx2", _native.ACT_SILU, 0.0, 0.0, None, **forms)
        avx512 = functools.partial(ext.conv2d, *args, "avx512", _native.ACT_SILU, 0.0, 0.0, None)
        t2, t5 = _least(avx2), _least(avx512)
        t2, t5 = min(t2, _least(avx2)), min(t5, _least(avx512))
        key = f"{shape[1]}->{w.shape[0]} {w.shape[2]}x{w.shape[3]}/{strides[0]} g{group} @{shape[2]}x{shape[3]}"
        key += " W" * (u is not None) + " P" * (p is not None)
        row = rows[key]
        row[0] += 1
        row[1] += t2
        row[2] += t5
    print(f"## {name}\n| geometry | convs | avx2 ms | avx512 ms | avx512 / avx2 |\n|---|---|---|---|---|")
    for key, (count, t2, t5) in sorted(rows.items(), key=lambda kv: -kv[1][1]):
        print(f"| {key} | {count:.0f} | {t2 * 1e3:.3f} | {t5 * 1e3:.3f} | {t5 / t2:.2f} |")
    total2, total5 = sum(r[1] for r in rows.values()), sum(r[2] for r in rows.values())
    print(f"| **all** | | {total2 * 1e3:.2f} | {total5 * 1e3:.2f} | {total5 / total2:.2f} |\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="yolo,mobilenetv3,crnn,resnet18,dbnet")
    for name in parser.parse_args().models.split(","):
        bench(name)


if __name__ == "__main__":
    main()
