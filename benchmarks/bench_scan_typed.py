"""The LSTM/GRU gradient models of ``bench_gradient.py``: backward run time with the Scan
bodies typed (their generated functions specialised on the bodies' declared inputs and
captured values) against the same session with untyped bodies (how every Scan body ran
before), alternated in one process, CPU time, one BLAS thread.

    PYTHONPATH=. python benchmarks/bench_scan_typed.py [--rounds 15]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from bench_gradient import recurrent_model  # noqa: E402
from bench_recurrent import _gradient_feeds  # noqa: E402

import onnx_light  # noqa: E402
from onnx_light.runtime import InferenceSession  # noqa: E402
from onnx_light.runtime._codegen import generate  # noqa: E402


def _untyped(sess: InferenceSession) -> InferenceSession:
    for step in sess._plan.steps:
        body = step.kwargs.get("body")
        if body is not None:
            body.input_types.clear()
            body.scope_specialised = True  # never specialised on its captured values
            body.fast = generate(body)
    return sess


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=15)
    args = p.parse_args()
    print("| model | bwd untyped bodies | bwd typed bodies | typed / untyped |")
    print("|---|---|---|---|")
    for op in ("LSTM", "GRU"):
        model, xs, y = recurrent_model(op)
        ours = onnx_light.load_from_string(model.SerializeToString())
        bwd = onnx_light.gradient_model(ours, xs=xs, y=y, registry=onnx_light.DefaultGradRegistry())
        _, feeds = _gradient_feeds(model, bwd.graph)
        runs = {"untyped": _untyped(InferenceSession(bwd)), "typed": InferenceSession(bwd)}
        want = runs["untyped"].run(None, feeds)
        got = runs["typed"].run(None, feeds)
        assert all(abs(g - w).max() <= 1e-6 * (1 + abs(w).max()) for g, w in zip(got, want))
        times: dict[str, list[float]] = {k: [] for k in runs}
        for r in range(args.rounds):
            for k in list(runs) if r % 2 == 0 else list(runs)[::-1]:
                start = time.process_time()
                for _ in range(5):
                    runs[k].run(None, feeds)
                times[k].append((time.process_time() - start) / 5)
        ratios = [t / u for t, u in zip(times["typed"], times["untyped"])]
        u, t = (statistics.median(times[k]) * 1e3 for k in ("untyped", "typed"))
        print(f"| {op.lower()} | {u:.2f} ms | {t:.2f} ms | {statistics.median(ratios):.3f} |", flush=True)


if __name__ == "__main__":
    main()
