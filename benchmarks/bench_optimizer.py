"""The cost of ``onnx_light.optimize`` on emitted backward and forward-mode functions.

For bench_gradient's models (and the 10,000-node chain), alternating, median over rounds:
the gradient pass alone (``optimize=False``), the optimizer alone on the pass's result (what
``optimize=True`` adds), their ratio, and the node counts before and after.

    PYTHONPATH=. python benchmarks/bench_optimizer.py [--rounds 5] [--models chain,chain_x,mlp,cnn,encoder,chain10k]
        [--profile MODEL]

Times are process CPU seconds. Writes nothing; numbers go into ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import os
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import bench_gradient as bg  # noqa: E402

import onnx_light as ol  # noqa: E402
from onnx_light.onnx_core.gradient._api import _source_node_ids  # noqa: E402
from onnx_light.onnx_core.optimizer._optimize import optimize_own  # noqa: E402

CLOCK = time.process_time


def _builders() -> dict[str, Callable[[], Any]]:
    return {
        "chain": lambda: bg.chain_model(2000),
        "chain_x": lambda: bg.chain_model(2000, xs_only_x=True),
        "mlp": bg.mlp_model,
        "cnn": bg.cnn_model,
        "encoder": bg.encoder_model,
        "chain10k": lambda: bg.chain_model(3334),
    }


def measure(model: Any, xs: list[str], y: str, rounds: int, tangent: bool) -> dict[str, float]:
    """Median pass time, median optimizer time, nodes before and after."""
    reg = ol.DefaultGradRegistry()

    def transform() -> Any:
        if tangent:
            return ol.TangentOfFunction(model, xs, [y], registry=reg, optimize=False)
        return ol.GradientOfFunction(model, xs, y, registry=reg, optimize=False)

    t_pass, t_opt = [], []
    before = after = 0
    foreign = _source_node_ids(model)
    for _ in range(rounds):
        gc.collect()
        t0 = CLOCK()
        fn = transform()
        gc.disable()  # as the entry points run it: inside the pass's pause of the collector
        t1 = CLOCK()
        opt = optimize_own(fn, foreign, output_identity=True)
        t2 = CLOCK()
        gc.enable()
        t_pass.append(t1 - t0)
        t_opt.append(t2 - t1)
        before, after = len(fn.node), len(opt.node)
    p, o = statistics.median(t_pass), statistics.median(t_opt)
    return {"pass": p, "opt": o, "ratio": o / p, "before": before, "after": after, "fwd": len(model.graph.node)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--models", default="chain,chain_x,mlp,cnn,encoder,chain10k")
    parser.add_argument("--tangent", action="store_true", help="forward mode (TangentOfFunction) instead")
    parser.add_argument("--profile", default="", help="cProfile the optimizer on this model")
    args = parser.parse_args()
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  load {os.getloadavg()[0]:.1f}")
    print("| model | fwd nodes | pass ms | optimizer ms | optimizer/pass | nodes before | after | after/fwd |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        try:
            onnx_model, xs, y = _builders()[name]()
        except ImportError as e:
            print(f"{name}: skipped ({e})")
            continue
        model = ol.ModelProto.FromString(onnx_model.SerializeToString())
        if args.tangent:
            xs = [x for x in xs][:1] if name.startswith("chain") else xs
        r = measure(model, xs, y, args.rounds, args.tangent)
        print(
            f"| {name} | {r['fwd']} | {r['pass'] * 1e3:.1f} | {r['opt'] * 1e3:.1f} | {r['ratio']:.2f} | "
            f"{r['before']} | {r['after']} | {r['after'] / r['fwd']:.2f} |"
        )
        sys.stdout.flush()
        if name == args.profile:
            fn = ol.GradientOfFunction(model, xs, y, optimize=False)
            prof = cProfile.Profile()
            gc.disable()
            prof.enable()
            optimize_own(fn, _source_node_ids(model), output_identity=True)
            prof.disable()
            gc.enable()
            pstats.Stats(prof).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()
