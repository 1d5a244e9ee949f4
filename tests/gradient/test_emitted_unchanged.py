"""The benchmark models' emitted gradient graphs are those of the reference commit (issue 15).

The reverse pass is tuned for speed; its result must stay the same graph. Each case's
result (optimized, and as the pass emits it) is hashed by ``structure`` (the wire
bytes the codec writes: no code of the gradient pass) and compared with
``data/emitted_hashes.json``, written by ``make_emitted_hashes.py`` at the commit the
graphs were taken from.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import sys
from typing import Any

import pytest

import onnx_light as ol

pytest.importorskip("onnx")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_gradient as bench  # noqa: E402  (the benchmark's models, built with onnx.helper)

HERE = pathlib.Path(__file__).resolve().parent
ENCODER = HERE / "data" / "bench_encoder.onnx"
HASHES = HERE / "data" / "emitted_hashes.json"
CASES = ("chain", "mlp", "cnn", "encoder")


def _chain() -> tuple[Any, list[str], str]:
    return bench.chain_model(40)  # 120 nodes: every rule of the 6,000-node benchmark chain


def _encoder() -> tuple[Any, list[str], str]:
    """The benchmark's 6-layer torch encoder (stored: ``make_emitted_hashes.py`` exports it)."""
    model = ol.load(str(ENCODER))
    return model, [i.name for i in model.graph.input if i.name != "x"], "loss"  # the weights


#: case -> what builds (model, xs, y)
BUILD = {"chain": _chain, "mlp": bench.mlp_model, "cnn": bench.cnn_model, "encoder": _encoder}


def structure(fn: ol.FunctionProto) -> str:
    """A hash of everything in ``fn``: its wire bytes (the codec writes every set field, in
    field order, so equal messages give equal bytes and any difference changes them)."""
    return hashlib.sha256(fn.SerializeToString()).hexdigest()


def emitted_hash(case: str, optimize: bool) -> str:
    model, xs, y = BUILD[case]()
    return structure(ol.GradientOfFunction(model, xs, y, registry=bench.REGISTRY, optimize=optimize))


@pytest.mark.parametrize("optimize", [True, False], ids=["opt", "raw"])
@pytest.mark.parametrize("case", CASES)
def test_emitted_graph_unchanged(case: str, optimize: bool) -> None:
    expected = json.loads(HASHES.read_text())[f"{case}/{'opt' if optimize else 'raw'}"]
    model, xs, y = BUILD[case]()
    first = ol.GradientOfFunction(model, xs, y, registry=bench.REGISTRY, optimize=optimize)
    assert structure(first) == expected, f"{case}: the emitted graph differs from the reference commit's"
    # a second call (caches warm) gives the same graph
    assert structure(ol.GradientOfFunction(model, xs, y, registry=bench.REGISTRY, optimize=optimize)) == expected
