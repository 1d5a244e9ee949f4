"""The gradient pass is freed when a transform returns (no reference cycle left for the collector)."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest

import onnx_light as ol
from onnx_light import helper
from onnx_light.onnx_core.gradient import _api, _forward

FLOAT = ol.TensorProto.FLOAT


def _chain(layers: int) -> tuple[ol.ModelProto, list[str], str]:
    inputs = [helper.make_tensor_value_info("x", FLOAT, [4])]
    nodes, prev = [], "x"
    for i in range(layers):
        inputs.append(helper.make_tensor_value_info(f"w{i}", FLOAT, [4]))
        nodes += [helper.make_node("Mul", [prev, f"w{i}"], [f"m{i}"]), helper.make_node("Tanh", [f"m{i}"], [f"t{i}"])]
        prev = f"t{i}"
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info(prev, FLOAT, [4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), [i.name for i in inputs], prev


@pytest.mark.parametrize("mode", ["reverse", "forward", "failing"])
def test_pass_freed_when_the_call_returns(monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    passes: list[weakref.ref[Any]] = []
    run = _api._run

    def recording(grad_pass: Any) -> Any:
        passes.append(weakref.ref(grad_pass))
        return run(grad_pass)

    monkeypatch.setattr(_api, "_run", recording)
    monkeypatch.setattr(_forward, "_run", recording)
    model, xs, y = _chain(5)
    registry = ol.DefaultGradRegistry()
    was = gc.isenabled()
    gc.disable()  # only reference counting may free it
    try:
        if mode == "reverse":
            ol.GradientOfFunction(model, xs, y, registry=registry)
        elif mode == "forward":
            ol.TangentOfFunction(model, xs, [y], registry=registry)
        else:
            with pytest.raises(ol.GradientError):
                ol.GradientOfFunction(model, xs, "no_such_value", registry=registry)
        assert passes and all(ref() is None for ref in passes)
    finally:
        if was:
            gc.enable()
