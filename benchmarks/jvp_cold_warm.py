"""Forward-mode transform time, ours (``TangentOfFunction``) against ``onnx_ad.forward``, measured
cold (a full ``gc.collect()`` before each call, what ``bench_jvp`` does: with torch and onnx
loaded it evicts the CPU caches) and warm (young generations only, the collector off during the
call), both sides alike, alternating in one process; also ours back to back (hot caches).

Run: ``PYTHONPATH=$PWD python benchmarks/jvp_cold_warm.py [--models mlp,cnn,encoder] [--rounds 21]``.
Process CPU time, medians.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_gradient as bg  # noqa: E402

import onnx_light as ol  # noqa: E402


def _timed(fn: Callable[[], Any], cold: bool) -> float:
    if cold:
        gc.collect()
    else:
        gc.collect(1)
        gc.disable()
    try:
        t0 = time.process_time()
        fn()
        return time.process_time() - t0
    finally:
        gc.enable()


def main() -> None:
    import onnx_ad

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,cnn,encoder")
    parser.add_argument("--rounds", type=int, default=21)
    args = parser.parse_args()
    registry = ol.DefaultGradRegistry()
    for name in args.models.split(","):
        model, _, y = getattr(bg, f"{name}_model")()
        x = next(i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer})
        ours_in = ol.ModelProto.FromString(model.SerializeToString())
        fns = {
            "ours": partial(ol.TangentOfFunction, ours_in, [x], [y], registry=registry),
            "onnx_ad": partial(onnx_ad.forward, model, inputs=[x], outputs=[y], layout="onnx"),
        }
        row = []
        for cold in (True, False):
            times: dict[str, list[float]] = {k: [] for k in fns}
            for f in fns.values():
                f()  # warm-up
            for r in range(args.rounds):
                for k in list(fns) if r % 2 == 0 else list(fns)[::-1]:
                    times[k].append(_timed(fns[k], cold))
            o, t = (statistics.median(times[k]) for k in fns)
            row.append(f"{'cold' if cold else 'warm'}: ours {o * 1e3:.2f} ms, onnx_ad {t * 1e3:.1f} ms = {t / o:.2f}x")
        gc.collect()
        t0 = time.process_time()
        for _ in range(args.rounds):
            fns["ours"]()
        hot = (time.process_time() - t0) / args.rounds
        print(f"{name:8s} " + "; ".join(row) + f"; ours back to back {hot * 1e3:.2f} ms", flush=True)


if __name__ == "__main__":
    main()
