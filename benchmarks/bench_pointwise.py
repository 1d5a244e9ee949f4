"""An optimizer's update as a pointwise program: compiled (``src/pointwise_compiled.h``) vs interpreted.

AdamW's program over the MLP's weights (401,408 and 131,072 floats): the table's compiled loop
against the interpreter running the same program (one unused temporary more, so the program is
not in the table), alternating, process CPU time, median of rounds. ``--cold`` evicts the
caches (a 48 MB pass) before each call, as a training step's other work does.

    PYTHONPATH=. python benchmarks/bench_pointwise.py [--rounds 41] [--cold]

Writes nothing; numbers go into ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from onnx_light.runtime import _native  # noqa: E402
from onnx_light.runtime._malloc import keep_freed_memory  # noqa: E402

#: AdamW's update as the fuser numbers it (inputs: the parameter, its gradient, its states and
#: seven factors, one value each; outputs: the new parameter and states)
ADAMW = np.array(
    [[2, 14, 0, 1], [1, 15, 2, 3], [2, 16, 15, 4], [0, 11, 3, 16], [2, 17, 5, 6], [2, 18, 2, 2], [2, 19, 18, 7],
     [0, 12, 17, 19], [4, 20, 12, 12], [3, 21, 20, 8], [0, 22, 21, 9], [3, 23, 11, 22], [2, 24, 23, 10],
     [1, 13, 14, 24]],
    np.int32,
)  # fmt: skip
SINGLES = "01001011111"  # per input, whether it is one value


def measure(n: int, rounds: int, cold: bool) -> dict[str, float]:
    """Median CPU milliseconds of one update of ``n`` floats, compiled and interpreted."""
    native = _native.NATIVE
    assert native is not None, "needs the native extension"
    rng = np.random.default_rng(0)
    inputs = [rng.uniform(0.5, 1.5, 1 if c == "1" else n).astype(np.float32) for c in SINGLES]
    singles = sum(1 << r for r, c in enumerate(SINGLES) if c == "1")
    assert native.pointwise_compiled(ADAMW, 11, 3, 11, singles), "AdamW's program is not compiled here"
    junk = np.ones(48 << 18, np.float32)
    times: dict[str, list[float]] = {"compiled": [], "interpreted": []}
    for _ in range(rounds):
        for name, temps in (("compiled", 11), ("interpreted", 12)):
            outs = [np.empty(n, np.float32) for _ in range(3)]
            if cold:
                junk.sum()
            t = time.process_time()
            native.pointwise_f32(inputs, outs, ADAMW, temps)
            times[name].append(time.process_time() - t)
    return {k: 1e3 * statistics.median(v) for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=41)
    parser.add_argument("--cold", action="store_true", help="evict the caches before each call")
    args = parser.parse_args()
    keep_freed_memory()
    for n in (401408, 131072):
        ms = measure(n, args.rounds, args.cold)
        print(
            f"AdamW over {n:>7} floats: compiled {ms['compiled']:.3f} ms, interpreted {ms['interpreted']:.3f} ms, "
            f"x{ms['compiled'] / ms['interpreted']:.2f}"
        )


if __name__ == "__main__":
    main()
