"""``ctx.op``: every node a rule builds is checked against the op's schema at the pass's opset."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import onnx_light as ol
from onnx_light import GradientError, helper
from onnx_light.onnx_core.ops import get_schema, signature


def _run_rule(body: Callable[[Any, str], Any]) -> ol.FunctionProto:
    """Differentiates one ``my.ops::Twice`` node whose rule is ``body``."""
    reg = ol.DefaultGradRegistry()

    def twice_grad(ctx, dy):  # type: ignore[no-untyped-def]
        return body(ctx, dy)

    ol.RegisterGradientFunction("my.ops", "Twice", twice_grad, registry=reg)
    node = helper.make_node("Twice", ["x"], ["y"], domain="my.ops", name="t0")
    return ol.GradientOfNodes([node], xs=["x"], y="y", registry=reg)


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (lambda ctx, dy: ctx.op.Mull(dy, dy), ["ai.onnx::Mull", "does not exist at opset 21"]),
        (lambda ctx, dy: ctx.op.Softmax(dy, axs=1), ["attribute 'axs'", "its attributes: axis"]),
        (lambda ctx, dy: ctx.op.LeakyRelu(dy, alpha=1), ["'alpha'", "FLOAT, got int"]),
        (lambda ctx, dy: ctx.op.Transpose(dy, perm=1), ["'perm'", "INTS, got int"]),
        (lambda ctx, dy: ctx.op.Add(dy), ["ai.onnx::Add-14 takes 2 inputs, got 1"]),
        (lambda ctx, dy: ctx.op.Relu(dy, dy), ["takes 1 inputs, got 2"]),
        (lambda ctx, dy: ctx.op.Cast(dy), ["needs attribute(s) to"]),
        (lambda ctx, dy: ctx.op.Relu(dy, _outputs=2), ["1 outputs, 2 asked for"]),
    ],
    ids=["op", "attribute-name", "attribute-float", "attribute-ints", "too-few", "too-many", "required", "outputs"],
)
def test_a_bad_node_names_the_rule_the_op_and_the_problem(body: Callable[[Any, str], Any], words: list[str]) -> None:
    with pytest.raises(GradientError) as err:
        _run_rule(body)
    text = str(err.value)
    for part in ["t0", "twice_grad", *words]:
        assert part in text, text


def test_valid_calls_and_custom_domains_pass() -> None:
    def body(ctx, dy):  # type: ignore[no-untyped-def]
        s = ctx.op.Sum(dy, dy, dy)  # variadic
        c = ctx.op.Clip(s, None, np.asarray(1.0, np.float32))  # omitted optional input
        m = ctx.op.Mine(c, _domain="my.ops", whatever=3)  # a domain the spec does not know
        return ctx.op.LeakyRelu(m, alpha=0.5)

    fn = _run_rule(body)
    assert [n.op_type for n in fn.node if n.op_type in ("Sum", "Clip", "Mine", "LeakyRelu")] == [
        "Sum",
        "Clip",
        "Mine",
        "LeakyRelu",
    ]


def test_signature_follows_the_schema() -> None:
    sig = signature("Dropout", 21)
    assert sig is not None and (sig.min_inputs, sig.max_inputs, sig.min_outputs, sig.max_outputs) == (1, 3, 1, 2)
    assert set(sig.attributes) == set(get_schema("Dropout", 21).attributes) == {"seed"}
    assert signature("Frobnicate", 1, "my.ops") is None


def test_the_typed_stub_is_generated_from_the_current_schemas(tmp_path: Any) -> None:
    """``_opset.pyi`` is what ``tools/gen_ctx_opset.py`` writes today (regenerate it after the spec data)."""
    import importlib.util
    import pathlib
    import subprocess

    root = pathlib.Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("gen_ctx_opset", root / "tools" / "gen_ctx_opset.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    fresh = tmp_path / "_opset.pyi"
    fresh.write_text(gen.render(), encoding="utf-8")
    subprocess.run(["ruff", "format", "-q", "--config", str(root / "pyproject.toml"), str(fresh)], check=True)
    committed = root / "onnx_light" / "onnx_core" / "gradient" / "_opset.pyi"
    assert fresh.read_text(encoding="utf-8") == committed.read_text(encoding="utf-8")
