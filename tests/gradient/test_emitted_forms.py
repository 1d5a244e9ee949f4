"""The piecewise rules' emitted form (issue 15): one Mul of dY by a mask, no Where."""

from __future__ import annotations

import numpy as np
import pytest

import onnx_light as ol
from onnx_light import helper

FLOAT = ol.TensorProto.FLOAT


def _backward(node: ol.NodeProto, extra: dict[str, np.ndarray]) -> ol.FunctionProto:
    inputs = [helper.make_tensor_value_info("x", FLOAT, [2, 4])]
    inputs += [helper.make_tensor_value_info(k, FLOAT, list(v.shape)) for k, v in extra.items()]
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", FLOAT, [2, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    return ol.GradientOfFunction(model, ["x"], "y")


BOUNDS = {"lo": np.array(-0.5, np.float32), "hi": np.array(0.5, np.float32)}


@pytest.mark.parametrize(
    ("node", "extra"),
    [
        (helper.make_node("HardSwish", ["x"], ["y"]), {}),
        (helper.make_node("HardSigmoid", ["x"], ["y"]), {}),
        (helper.make_node("Clip", ["x", "lo", "hi"], ["y"]), BOUNDS),
    ],
    ids=["HardSwish", "HardSigmoid", "Clip"],
)
def test_one_mul_by_a_mask(node: ol.NodeProto, extra: dict[str, np.ndarray]) -> None:
    bwd = _backward(node, extra)
    ops = [n.op_type for n in bwd.node]
    assert "Where" not in ops, ops
    assert sum(1 for n in bwd.node if "dy" in n.input) == 1


def test_hard_swish_kinks_as_torch() -> None:
    torch = pytest.importorskip("torch")
    x = np.array([[-4.0, -3.0, -1.0, 0.0], [1.0, 2.0, 3.0, 4.0]], np.float32)
    t = torch.tensor(x, requires_grad=True)
    torch.nn.functional.hardswish(t).sum().backward()
    bwd = _backward(helper.make_node("HardSwish", ["x"], ["y"]), {})
    (dx,) = ol.runtime.InferenceSession(bwd).run(None, {"x": x, "dy": np.ones((2, 4), np.float32)})
    np.testing.assert_allclose(dx, t.grad.numpy(), rtol=1e-6)


def test_hard_swish_float32_form_as_torch_both_directions() -> None:
    # float32 takes the HardSigmoid form (the float64 rule rows take the Clip form)
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(0).uniform(-5, 5, (2, 4)).astype(np.float32)
    t = torch.tensor(x, requires_grad=True)
    torch.nn.functional.hardswish(t).sum().backward()
    bwd = _backward(helper.make_node("HardSwish", ["x"], ["y"]), {})
    assert "HardSigmoid" in [n.op_type for n in bwd.node]
    (dx,) = ol.runtime.InferenceSession(bwd).run(None, {"x": x, "dy": np.ones((2, 4), np.float32)})
    np.testing.assert_allclose(dx, t.grad.numpy(), rtol=1e-6, atol=1e-7)
    inputs = [helper.make_tensor_value_info("x", FLOAT, [2, 4])]
    graph = helper.make_graph(
        [helper.make_node("HardSwish", ["x"], ["y"])], "g", inputs, [helper.make_tensor_value_info("y", FLOAT, [2, 4])]
    )
    fwd = ol.TangentOfFunction(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), ["x"], ["y"])
    tx = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    (ty,) = ol.runtime.InferenceSession(fwd).run(None, {"x": x, "fwd_x": tx})
    np.testing.assert_allclose(ty, t.grad.numpy() * tx, rtol=1e-6, atol=1e-7)
