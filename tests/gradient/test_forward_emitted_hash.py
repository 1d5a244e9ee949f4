"""The tangent graphs of the benchmark models are the ones the start of session 10 emitted.

The forward-mode pass was made faster (h-xfwd); its output must not change. Each case's
function is written with our codec, read back by the ``onnx`` package (the reference)
and hashed from onnx's deterministic serialisation: the hash does not go through the
pass, the optimizer or our readers. The expected hashes were recorded at ``2f1570f``
(one changed on purpose, see its row).
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Any

import pytest

import onnx_light as ol

onnx = pytest.importorskip("onnx")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_gradient as bg  # noqa: E402

#: (model, seeds, forward over reverse) -> sha256 of the function at 2f1570f
EXPECTED = {
    ("mlp", None, False): "4dc9d6f956b4f11151d8e789981f893f4980ef96e2277ad68c30f794842eb546",
    ("mlp", None, True): "78a9d0b257933552ba5bcecddce39dc0fa018f4ff015a5df3afff13cd27efea1",
    ("mlp", 3, False): "693a763cc71b5eb7ad0453c1c94f80f9026c813dc6a15bad3a67d9ccbc1c4087",
    ("mlp", 3, True): "8463e588552fb6c2863f9a9a7ab5c3b1bcae2f900659fef4bde88f41724bf653",
    ("mlp", "dynamic", False): "07cda45c5e54a2d9b3f50c08e522e229a0d4df1f5a8e055cfcaf86b2c8c9df0c",
    ("mlp", "dynamic", True): "17513bbcaf3e457f6c40eade721df42962ee1b3156b1a9cdea62bf24e251ac0e",
    ("cnn", None, False): "62e4ae0b2b00eb9a8575d8da5b5069d06b762d0fc3fcafb41a5565b524d88805",
    ("cnn", None, True): "a86e0a08cce682086b3d6d335d8f81a1e2b92c866a138e30ed50481e25c6f10b",
    ("cnn", 3, False): "87be763eb6d2971a61793cf27ea088ed4604eaa63e9859b7b8fc0dbeeb75fcbc",
    ("cnn", 3, True): "2c7f1fedd13ecc896867442c1586aa9da2c270eab82027bc5515b6defdb87881",
    ("cnn", "dynamic", False): "8762cbe863b1c9ff95117d0c043fe03ef5e0efe8553a99dd3d9f3136276b4978",
    ("cnn", "dynamic", True): "e4d7e4be3a9c7194b700e6f8f09f0b61f61fde16f0e1f3390185bc5e83bef6d9",
    # changed on purpose: LayerNormalization's jvp reads the node's Mean/InvStdDev (float32 X;
    # test_layer_norm_jvp_stats checks it against finite differences and onnxruntime); at 2f1570f:
    # 9f6a95100875acf9fffd4fd41c081f8193bf83e723712fc335423ca89442fcd6
    # changed on purpose again: its tX term is r (tc - xhat mean(xhat tc)), not tc r + c r^3 (..)
    # (r^3 overflowed float16; 732 -> 696 nodes, run time equal); at 7837cdd:
    # 435d929df0793e8ca6a5ff964918e18e30eca436d75b359fc31d6222bcebf6b7
    ("encoder", None, False): "4fc644e0ed372fa24bcf8c920cb60f61fe3fdbd52172e9707a3360f8845382bc",
    ("chain", None, False): "53d6b1ac669ade5103d280117a5ca117c05b798c39c917841678bcf714d6fb3b",
    ("chain", None, True): "c64fd5f720993a3b24bcc2fcd807953e2dcb4b7b565b843eab1e7ab0044f7c5b",
    ("chain", 3, False): "6f97fa2bf80437864d44e348ff353337caf4e80d4a93911bd26781e7ae7dae93",
    ("chain", 3, True): "853fc859619577fc1294885c9784c85950ebb35ef26bac134f6e6362e9ed229a",
    ("chain", "dynamic", False): "b394645089dedf3723966660a27cc8c60a913fad2700ce2f8ca4695d58dcf8cc",
    ("chain", "dynamic", True): "469172068a549ee4aa1ff52acea4975432020767fd4c2db67205d05e19487c75",
}


def _model(name: str) -> tuple[ol.ModelProto, str, str]:
    model, _, y = bg.chain_model(40) if name == "chain" else getattr(bg, f"{name}_model")()
    x = next(i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer})
    return ol.ModelProto.FromString(model.SerializeToString()), x, y


def _tangent(name: str, seeds: Any, hvp: bool) -> ol.FunctionProto:
    model, x, y = _model(name)
    if not hvp:
        return ol.TangentOfFunction(model, [x], [y], registry=bg.REGISTRY, seeds=seeds)
    grad = ol.GradientOfFunction(model, [x], y, registry=bg.REGISTRY)
    return ol.TangentOfFunction(grad, [x], list(grad.output), registry=bg.REGISTRY, seeds=seeds)


def structural_hash(fn: ol.FunctionProto) -> str:
    """sha256 of the function as the onnx package reads and deterministically writes it."""
    ref = onnx.FunctionProto.FromString(fn.SerializeToString())
    return hashlib.sha256(ref.SerializeToString(deterministic=True)).hexdigest()


CASES = [
    (name, seeds, hvp)
    for name in ("mlp", "cnn", "encoder", "chain")
    for seeds in (None, 3, "dynamic")
    for hvp in (False, True)
    if not (name == "encoder" and (hvp or seeds is not None))  # the big ones: one case
]


@pytest.mark.parametrize(("name", "seeds", "hvp"), CASES, ids=[f"{n}-{s}-{'hvp' if h else 'jvp'}" for n, s, h in CASES])
def test_tangent_graph_unchanged(name: str, seeds: Any, hvp: bool) -> None:
    got = structural_hash(_tangent(name, seeds, hvp))
    assert got == EXPECTED[(name, seeds, hvp)], f"{name} seeds={seeds} hvp={hvp}: the emitted tangent graph changed"


if __name__ == "__main__":  # prints the table of hashes (run at the start commit to record them)
    for case in CASES:
        print(f"    {case!r}: {structural_hash(_tangent(*case))!r},")
