"""gradcheck's verdicts and CPU time on the real encoder (input + its float initializers,
2 directions, seeds 1..6): every gradient is correct, so every verdict should be ok.

    PYTHONPATH=. python benchmarks/bench_gradcheck.py [--seeds 6]

Run it in another checkout (e.g. ``git archive <commit> | tar -x -C /tmp/old``) to compare.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import onnx_light as ol

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_real_models import real_model_path  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=6)
    args = parser.parse_args()
    model = ol.load(real_model_path("encoder"))
    xs = ["input"] + [t.name for t in model.graph.initializer if t.data_type == 1 and len(t.dims) >= 1]
    start = time.process_time()
    verdicts = [ol.gradcheck(model, xs, "output", directions=2, seed=s).ok for s in range(1, args.seeds + 1)]
    print(f"encoder, {len(xs)} tensors, seeds 1..{args.seeds}: ok {verdicts}, {time.process_time() - start:.1f} s CPU")


if __name__ == "__main__":
    main()
