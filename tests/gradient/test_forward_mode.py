"""Forward mode end to end: seeds, naming, errors, forward over reverse (Hessian-vector
products) on the torch fixtures against finite differences of the gradient."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import onnx_light as ol
from onnx_light import helper

DATA = pathlib.Path(__file__).resolve().parents[1] / "models" / "data"
RNG = np.random.default_rng(7)


def _mlp() -> ol.ModelProto:
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Add", ["h", "b"], ["hb"]),
        helper.make_node("Tanh", ["hb"], ["t"]),
        helper.make_node("Mul", ["t", "t"], ["y"]),
    ]
    inputs = [
        helper.make_tensor_value_info("x", 11, [2, 3]),
        helper.make_tensor_value_info("w", 11, [3, 4]),
        helper.make_tensor_value_info("b", 11, [4]),
    ]
    graph = helper.make_graph(nodes, "mlp", inputs, [helper.make_tensor_value_info("y", 11, [2, 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


FEEDS = {"x": RNG.standard_normal((2, 3)), "w": RNG.standard_normal((3, 4)), "b": RNG.standard_normal(4)}


def _run(fn: ol.FunctionProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ol.runtime.InferenceSession(fn).run(None, {n: feeds[n] for n in fn.input})


def test_signature_and_broadcast_input() -> None:
    fwd = ol.TangentOfFunction(_mlp(), ["w", "b"], ["y"])
    assert list(fwd.input) == ["w", "b", "x", "fwd_w", "fwd_b"]
    assert list(fwd.output) == ["fwd_y"]
    tb = RNG.standard_normal(4)
    (jt,) = _run(fwd, {**FEEDS, "fwd_w": np.zeros((3, 4)), "fwd_b": tb})  # b is broadcast over rows
    t = np.tanh(FEEDS["x"] @ FEEDS["w"] + FEEDS["b"])
    np.testing.assert_allclose(jt, 2 * t * (1 - t**2) * tb, rtol=1e-12)


@pytest.mark.parametrize("seeds", [3, "dynamic"])
def test_seeds_equal_single_runs(seeds: object) -> None:
    single = ol.TangentOfFunction(_mlp(), ["x", "w"], ["y"])
    many = ol.TangentOfFunction(_mlp(), ["x", "w"], ["y"], seeds=seeds)
    tx, tw = RNG.standard_normal((2, 3, 3)), RNG.standard_normal((3, 4, 3))
    (stacked,) = _run(many, {**FEEDS, "fwd_x": tx, "fwd_w": tw})
    assert stacked.shape == (2, 4, 3)
    for k in range(3):
        (one,) = _run(single, {**FEEDS, "fwd_x": tx[..., k], "fwd_w": tw[..., k]})
        np.testing.assert_allclose(stacked[..., k], one, rtol=1e-12, atol=1e-14)


def test_tangent_of_tangent_takes_fwd2_names() -> None:
    first = ol.TangentOfFunction(_mlp(), ["x"], ["y"])
    second = ol.TangentOfFunction(first)
    assert list(second.output) == ["fwd2_fwd_y"]
    # every input of the first function has a tangent by default
    assert [n for n in second.input if n.startswith("fwd2_")] == ["fwd2_x", "fwd2_w", "fwd2_b", "fwd2_fwd_x"]
    # second order along (v, v) with the first tangent v: d/ds fwd_y(x + s v, v) = y''[v, v]
    v = RNG.standard_normal((2, 3))
    zeros = {"fwd2_w": np.zeros((3, 4)), "fwd2_b": np.zeros(4)}
    feeds = {**FEEDS, **zeros, "fwd_x": v, "fwd2_x": v, "fwd2_fwd_x": np.zeros_like(v)}
    (yvv,) = _run(second, feeds)
    h = 1e-5

    def first_at(s: float) -> np.ndarray:
        return _run(first, {**FEEDS, "x": FEEDS["x"] + s * v, "fwd_x": v})[0]

    np.testing.assert_allclose(yvv, (first_at(h) - first_at(-h)) / (2 * h), rtol=1e-6, atol=1e-8)


def test_unused_x_is_an_error_unless_allowed() -> None:
    model = _mlp()
    model.graph.input.append(helper.make_tensor_value_info("z", 11, [2]))
    with pytest.raises(ol.GradientError, match="reaches none of ys"):
        ol.TangentOfFunction(model, ["x", "z"], ["y"])
    fwd = ol.TangentOfFunction(model, ["x", "z"], ["y"], allow_unused=True)
    assert "fwd_z" in fwd.input


def test_op_without_forward_rule_names_the_op() -> None:
    reg = ol.DefaultGradRegistry()
    ol.RegisterGradientFunction("my.domain", "Twice", lambda ctx, dy: (dy,), registry=reg)
    node = helper.make_node("Twice", ["x"], ["y"], domain="my.domain")
    vi = [helper.make_tensor_value_info("x", 11, [2, 3])]
    with pytest.raises(ol.GradientError, match="my.domain::Twice has a reverse rule but no forward"):
        ol.TangentOfNodes([node], ["x"], ["y"], registry=reg, value_info=vi)
    reg.set_jvp("my.domain", "Twice", lambda ctx, ts: ctx.op.Add(ts[0], ts[0]))
    fwd = ol.TangentOfNodes([node], ["x"], ["y"], registry=reg, value_info=vi)
    assert [n.op_type for n in fwd.node if n.domain != "my.domain"][-2:] == ["Add", "Identity"]


FIXTURES = ["mlp_mse_opset18", "cnn_bn_eval_opset18", "transformer_opset18"]


def _reverse_over_reverse(bwd: ol.FunctionProto, params: list[str]) -> ol.FunctionProto:
    """d/dp of s = sum_p <grad_p, v_p> (inputs ``v_<p>``): H v by reverse mode twice."""
    fn = ol.FunctionProto()
    fn.CopyFrom(bwd)
    terms = []
    for p in params:
        fn.node.append(helper.make_node("Mul", [f"grad_{p}", f"v_{p}"], [f"m_{p}"]))
        fn.node.append(helper.make_node("ReduceSum", [f"m_{p}"], [f"r_{p}"], keepdims=0))
        terms.append(f"r_{p}")
    fn.node.append(helper.make_node("Sum", terms, ["s"]))
    fn.input.extend(f"v_{p}" for p in params)
    del fn.output[:]
    fn.output.append("s")
    return ol.GradientOfFunction(fn, params, "s")


@pytest.mark.parametrize("case", FIXTURES)
def test_forward_over_reverse_is_a_hessian_vector_product(case: str) -> None:
    """Forward over reverse against reverse over reverse (other rules, same H v), and H
    symmetric: <u, H v> = <v, H u>. (Finite differences of float32 gradients through ReLU
    kinks are too noisy for these fixtures; the rule table checks them in float64.)"""
    name = case.rpartition("_opset")[0]
    ref = np.load(DATA / f"{name}.npz")
    model = ol.load(DATA / f"{case}.onnx")
    params = [str(p) for p in ref["params"]]
    bwd = ol.GradientOfFunction(model, xs=params, y="loss")
    hvp = ol.TangentOfFunction(bwd, params, [f"grad_{p}" for p in params])
    values = {t.name: ol.numpy_helper.to_array(t) for t in model.graph.initializer}
    values.update({"x": ref["feed:x"], "target": ref["feed:target"], "dy": np.ones((), np.float32)})
    rng = np.random.default_rng(3)
    v = {p: rng.standard_normal(values[p].shape).astype(np.float32) for p in params}
    u = {p: rng.standard_normal(values[p].shape).astype(np.float32) for p in params}
    hv = _run(hvp, {**values, **{f"fwd_{p}": v[p] for p in params}})
    hu = _run(hvp, {**values, **{f"fwd_{p}": u[p] for p in params}})
    rr = _reverse_over_reverse(bwd, params)
    feeds = {**values, **{f"v_{p}": v[p] for p in params}}
    outer_dy = [n for n in rr.input if n not in feeds and n != "dy"]
    rr_feeds = {**feeds, **{n: np.ones((), np.float32) for n in outer_dy}}
    hv_rr = ol.runtime.InferenceSession(rr).run(None, {n: rr_feeds[n] for n in rr.input})
    scale = max(float(np.max(np.abs(x))) for x in hv_rr)
    for p, a, b in zip(params, hv, hv_rr):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4 * scale, err_msg=f"{case}: (H v) for {p}")
    left = sum(float(np.sum(u[p].astype(np.float64) * x)) for p, x in zip(params, hv))
    right = sum(float(np.sum(v[p].astype(np.float64) * x)) for p, x in zip(params, hu))
    assert abs(left - right) <= 1e-4 * max(1.0, abs(left)), f"{case}: <u, H v> = {left} vs <v, H u> = {right}"


def test_cli_jvp_writes_a_model_onnxruntime_runs(tmp_path: pathlib.Path) -> None:
    import onnxruntime as ort

    from onnx_light.cli import main

    src = tmp_path / "mlp.onnx"
    ol.save(_mlp(), src)
    out = tmp_path / "jvp.onnx"
    assert main(["jvp", str(src), "--wrt", "x", "--of", "y", "-o", str(out)]) == 0
    tx = RNG.standard_normal((2, 3))
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    (theirs,) = sess.run(None, {**FEEDS, "fwd_x": tx})
    (ours,) = _run(ol.TangentOfFunction(_mlp(), ["x"], ["y"]), {**FEEDS, "fwd_x": tx})
    np.testing.assert_allclose(theirs, ours, rtol=1e-12)
    assert main(["jvp", str(src), "--wrt", "nope", "--of", "y", "-o", str(out)]) == 2


def test_load_from_string_as_onnx_has_it() -> None:
    data = _mlp().SerializeToString()
    assert ol.load_model_from_string(data).graph.name == "mlp"
    assert ol.load_from_string(data).graph.name == "mlp"


def test_forward_over_reverse_lists_each_input_once() -> None:
    """The backward function's own ``dy`` is an ordinary input of its tangent, listed once
    (onnxruntime refuses a duplicate definition)."""
    bwd = ol.GradientOfFunction(_mlp(), ["w", "b"], "y")
    hvp = ol.TangentOfFunction(bwd, ["w", "b"], ["grad_w", "grad_b"])
    assert len(set(hvp.input)) == len(hvp.input), f"duplicate inputs in {list(hvp.input)}"
    assert "dy" in hvp.input
