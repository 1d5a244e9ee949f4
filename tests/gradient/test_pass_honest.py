"""Issue 8 §3: bad input gets a clear GradientError, and the edge cases users hit work.

An integer ``y``, a cycle, an op without a rule behind a rule that would trip on a
shape, an ``x`` reaching ``y`` only inside a subgraph; an intermediate ``x`` (a cut
point); a model input called ``dy`` (the seed then takes another name).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from gradcheck import Case, backward_model, check_gradient, to_ours
from onnx import TensorProto as TP
from onnx import helper as oh

import onnx_light as ol

RNG = np.random.default_rng(8)


def _model(nodes: list[Any], inputs: list[Any], outputs: list[Any], domains: tuple[str, ...] = ()) -> Any:
    graph = oh.make_graph(nodes, "g", inputs, outputs)
    imports = [oh.make_opsetid("", 21)] + [oh.make_opsetid(d, 1) for d in domains]
    model = oh.make_model(graph, opset_imports=imports)
    model.ir_version = 10
    return to_ours(model, ol.ModelProto)


def _vi(name: str, elem: int = TP.DOUBLE, shape: Any = (3,)) -> Any:
    return oh.make_tensor_value_info(name, elem, None if shape is None else list(shape))


def _run_ort(bwd: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    wrapped = backward_model(bwd, feeds)
    onnx.checker.check_model(wrapped, full_check=True)
    sess = ort.InferenceSession(wrapped.SerializeToString(), providers=["CPUExecutionProvider"])
    return list(sess.run(None, feeds))


@pytest.mark.parametrize("elem", [TP.INT64, TP.INT32, TP.BOOL], ids=["int64", "int32", "bool"])
def test_integer_or_bool_y_is_an_error(elem: int) -> None:
    m = _model([oh.make_node("Cast", ["x"], ["y"], to=elem)], [_vi("x")], [_vi("y", elem)])
    with pytest.raises(ol.GradientError, match=f"y='y' has element type {TP.DataType.Name(elem)}"):
        ol.GradientOfFunction(m, ["x"], "y")


def test_cycle_is_an_error_naming_a_node_on_it() -> None:
    nodes = [
        oh.make_node("Add", ["x", "b"], ["a"], name="add_on_cycle"),
        oh.make_node("Mul", ["a", "x"], ["b"], name="mul_on_cycle"),
        oh.make_node("Neg", ["a"], ["y"]),
    ]
    with pytest.raises(ol.GradientError, match="'add_on_cycle'.*cycle.*ai.onnx::Mul"):
        ol.GradientOfNodes([to_ours(n, ol.NodeProto) for n in nodes], ["x"], "y")


def test_self_loop_is_a_cycle() -> None:
    nodes = [oh.make_node("Add", ["x", "a"], ["a"], name="loop"), oh.make_node("Neg", ["a"], ["y"])]
    with pytest.raises(ol.GradientError, match="'loop'.*cycle"):
        ol.GradientOfNodes([to_ours(n, ol.NodeProto) for n in nodes], ["x"], "y")


def test_unsorted_nodes_are_an_error() -> None:
    nodes = [oh.make_node("Neg", ["a"], ["y"], name="late"), oh.make_node("Exp", ["x"], ["a"])]
    with pytest.raises(ol.GradientError, match="'late'.*not in topological order"):
        ol.GradientOfNodes([to_ours(n, ol.NodeProto) for n in nodes], ["x"], "y")


def _intermediate_model() -> Any:
    nodes = [
        oh.make_node("Exp", ["x"], ["a"]),
        oh.make_node("Mul", ["a", "a"], ["m"]),
        oh.make_node("Sin", ["m"], ["y"]),
    ]
    return _model(nodes, [_vi("x")], [_vi("y")])


def test_intermediate_x_is_an_input_not_recomputed() -> None:
    bwd = ol.GradientOfFunction(_intermediate_model(), ["a"], "y")
    assert list(bwd.input) == ["a", "dy"]
    assert all(n.op_type != "Exp" and "a" not in n.output for n in bwd.node)
    a, dy = RNG.uniform(0.5, 1.0, 3), RNG.standard_normal(3)
    expected = dy * np.cos(a * a) * 2 * a  # d sin(a^2) / da, a taken as given
    (ours,) = ol.runtime.InferenceSession(bwd).run(None, {"a": a, "dy": dy})
    np.testing.assert_allclose(ours, expected, rtol=1e-12)
    (theirs,) = _run_ort(bwd, {"a": a, "dy": dy})
    np.testing.assert_allclose(theirs, expected, rtol=1e-12)


def test_intermediate_x_beside_its_source_matches_finite_differences() -> None:
    """xs=[a, x] with a = Exp(x): grad_a is the gradient at the cut, grad_x the total one."""
    model = _intermediate_model()
    bwd = ol.GradientOfFunction(model, ["a", "x"], "y")
    assert list(bwd.input) == ["a", "x", "dy"]
    x, dy = RNG.uniform(-0.5, 0.0, 3), RNG.standard_normal(3)
    a = np.exp(x)
    feeds = {"a": a, "x": x, "dy": dy}
    ga, gx = ol.runtime.InferenceSession(bwd).run(None, feeds)
    forward = ol.runtime.InferenceSession(model)
    v, h = RNG.standard_normal(3), 1e-6

    def objective(t: float) -> float:
        return float(np.sum(dy * forward.run(["y"], {"x": x + t * v})[0]))

    numeric = (objective(h) - objective(-h)) / (2 * h)
    assert abs(numeric - float(np.sum(gx * v))) <= 1e-6 * max(1.0, abs(numeric))
    np.testing.assert_allclose(ga, dy * np.cos(a * a) * 2 * a, rtol=1e-12)
    for mine, theirs in zip((ga, gx), _run_ort(bwd, feeds)):
        np.testing.assert_allclose(mine, theirs, rtol=1e-12)


def test_missing_rule_is_reported_before_a_shape_problem_further_down() -> None:
    # Foo's output has no known rank: Gather's rule, nearer y, would refuse that first
    nodes = [
        oh.make_node("Foo", ["x"], ["f"], domain="my.ops", name="foo"),
        oh.make_node("Gather", ["f", "i"], ["y"], axis=1),
    ]
    m = _model(nodes, [_vi("x"), _vi("i", TP.INT64, (2,))], [_vi("y", TP.DOUBLE, None)], ("my.ops",))
    with pytest.raises(ol.GradientError, match="'foo'.*no gradient rule for my.ops::Foo"):
        ol.GradientOfFunction(m, ["x"], "y")


def test_x_only_inside_a_subgraph_names_the_node() -> None:
    then = oh.make_graph([oh.make_node("Neg", ["x"], ["t"])], "then", [], [_vi("t")])
    other = oh.make_graph([oh.make_node("Identity", ["w"], ["e"])], "else", [], [_vi("e")])
    nodes = [
        # a custom op with subgraphs and no rule (If itself has one)
        oh.make_node("MyIf", ["c"], ["r"], then_branch=then, else_branch=other, name="branch", domain="my.ops"),
        oh.make_node("Mul", ["r", "w"], ["y"]),
    ]
    m = _model(nodes, [_vi("x"), _vi("w"), _vi("c", TP.BOOL, ())], [_vi("y")], domains=("my.ops",))
    with pytest.raises(
        ol.GradientError, match=r"x='x' reaches y='y' only through the subgraph of node 'branch' \(MyIf\)"
    ):
        ol.GradientOfFunction(m, ["x", "w"], "y")


# -- a model input called "dy" -------------------------------------------------------

DY_NODES = [oh.make_node("Mul", ["x", "dy"], ["p"]), oh.make_node("Tanh", ["p"], ["y"])]


@pytest.mark.parametrize("xs", [["x"], ["x", "dy"]], ids=["dy-as-z", "dy-as-x"])
def test_input_named_dy(xs: list[str]) -> None:
    case = Case("input-dy", DY_NODES, {"x": RNG.standard_normal(3), "dy": RNG.standard_normal(3)}, xs)
    check_gradient(case)  # finite differences, the full checker and onnxruntime


def _dy_model_file(tmp_path: Path) -> Path:
    path = tmp_path / "dy.onnx"
    ol.save(_model(DY_NODES, [_vi("x", TP.FLOAT), _vi("dy", TP.FLOAT)], [_vi("y", TP.FLOAT)]), str(path))
    return path


def test_input_named_dy_through_the_cli_and_export(tmp_path: Path) -> None:
    src = _dy_model_file(tmp_path)
    out = tmp_path / "bwd.onnx"
    cli = [sys.executable, "-c", "import sys; from onnx_light.cli import main; sys.exit(main())"]
    done = subprocess.run([*cli, "grad", str(src), "--wrt", "x,dy", "--of", "y", "-o", str(out)], capture_output=True)
    assert done.returncode == 0, done.stderr.decode()
    exported = onnx.load(str(out))
    onnx.checker.check_model(exported, full_check=True)
    names = [i.name for i in exported.graph.input]
    assert names[:2] == ["x", "dy"] and names[2] not in ("x", "dy")
    x, dy_in, seed = (RNG.standard_normal(3).astype(np.float32) for _ in range(3))
    gx, gdy = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(
        None, {"x": x, "dy": dy_in, names[2]: seed}
    )
    slope = seed * (1 - np.tanh(x.astype(np.float64) * dy_in) ** 2)
    np.testing.assert_allclose(gx, slope * dy_in, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gdy, slope * x, rtol=1e-5, atol=1e-6)
    check = subprocess.run([*cli, "check-grad", str(src), "--wrt", "x,dy", "--of", "y"], capture_output=True)
    assert check.returncode == 0, check.stdout.decode() + check.stderr.decode()
