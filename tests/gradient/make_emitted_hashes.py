"""Writes the structural hashes of the benchmark models' emitted gradient graphs (issue 15).

``PYTHONPATH=$PWD python tests/gradient/make_emitted_hashes.py`` writes
``tests/gradient/data/emitted_hashes.json`` and ``tests/gradient/data/bench_encoder.onnx``
(the benchmark's torch encoder, exported once: weights are graph inputs, so the file is
small and the test needs no torch). Run it on the commit whose graphs are the reference
(the hashes were written at 2f1570f, before the pass was refactored for speed); a change
that alters an emitted graph on purpose rewrites them, and says why in its commit.
"""

from __future__ import annotations

import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "benchmarks"))

import bench_gradient as bench  # noqa: E402
from test_emitted_unchanged import CASES, ENCODER, emitted_hash  # noqa: E402


def main() -> int:
    model, _, _ = bench.encoder_model()
    ENCODER.write_bytes(model.SerializeToString())
    hashes = {(case, optimize): emitted_hash(case, optimize) for case in CASES for optimize in (True, False)}
    out = HERE / "data" / "emitted_hashes.json"
    out.write_text(json.dumps({f"{c}/{'opt' if o else 'raw'}": h for (c, o), h in hashes.items()}, indent=1) + "\n")
    print(f"wrote {out} ({len(hashes)} hashes) and {ENCODER} ({ENCODER.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
