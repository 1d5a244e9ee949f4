"""The optimizer's sweeps are skipped only where they would change nothing (``optimizer._plan``).

For every rule-table row and the benchmark's model shapes (chain, MLP, CNN), reverse mode and
forward mode (one seed and three) give byte-identical functions whether the pass's record lets
the optimizer return early or every sweep runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from gradcheck import Case, build_model, to_ours
from test_rule_coverage import CASES

import onnx_light as ol
from onnx_light import helper
from onnx_light.onnx_core.optimizer import _optimize
from onnx_light.onnx_core.optimizer._plan import EmitRecord, has_work

REGISTRY = ol.DefaultGradRegistry()
F = ol.TensorProto.FLOAT


@contextmanager
def _every_sweep() -> Iterator[None]:
    """The optimizer as it was: every sweep runs, whatever the record says."""
    saved = _optimize.has_work
    _optimize.has_work = lambda fn, record: True
    try:
        yield
    finally:
        _optimize.has_work = saved


def _outcome(make: Callable[[], ol.FunctionProto]) -> tuple[str, bytes | str]:
    try:
        return "ok", make().SerializeToString()
    except ol.OnnxLightError as e:  # a row forward mode refuses: refused alike both ways
        return "error", type(e).__name__


def _same_both_ways(make: Callable[[], ol.FunctionProto]) -> None:
    _outcome(make)  # the recurrent rules' template cache names the first call's nodes otherwise
    planned = _outcome(make)
    with _every_sweep():
        full = _outcome(make)
    assert planned == full


def _transforms(model: Any, xs: list[str], y: str) -> list[Callable[[], ol.FunctionProto]]:
    return [
        lambda: ol.GradientOfFunction(model, xs, y, registry=REGISTRY),
        lambda: ol.TangentOfFunction(model, xs, [y], registry=REGISTRY),
        lambda: ol.TangentOfFunction(model, xs, [y], registry=REGISTRY, seeds=3),
    ]


def _row(case: Case, i: int) -> object:
    """Every row; one in 8 in the fast run (the whole table is ``slow``: ~3 s per 100 rows)."""
    return pytest.param(case, id=f"{case.name}-{i}", marks=[] if i % 8 == 0 else [pytest.mark.slow])


@pytest.mark.parametrize("case", [_row(c, i) for i, c in enumerate(CASES)])
def test_rule_rows_equal_the_full_optimizer(case: Case) -> None:
    model = to_ours(build_model(case, case.dtype), ol.ModelProto)
    for make in _transforms(model, list(case.xs), case.y or case.nodes[-1].output[0]):
        _same_both_ways(make)


def _model(nodes: list[Any], inputs: dict[str, list[int]], y: str) -> ol.ModelProto:
    graph = helper.make_graph(
        nodes,
        "m",
        [helper.make_tensor_value_info(n, F, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(y, F, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _chain(layers: int) -> tuple[ol.ModelProto, list[str], str]:
    inputs: dict[str, list[int]] = {"x": [8]}
    nodes, prev = [], "x"
    for i in range(layers):
        inputs.update({f"w{i}": [8], f"b{i}": [8]})
        nodes += [
            helper.make_node("Mul", [prev, f"w{i}"], [f"m{i}"]),
            helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"]),
            helper.make_node("Tanh", [f"a{i}"], [f"t{i}"]),
        ]
        prev = f"t{i}"
    return _model(nodes, inputs, prev), list(inputs), prev


def _mlp() -> tuple[ol.ModelProto, list[str], str]:
    nodes = [
        helper.make_node("MatMul", ["x", "W0"], ["mm0"]),
        helper.make_node("Add", ["mm0", "b0"], ["h0"]),
        helper.make_node("Relu", ["h0"], ["r0"]),
        helper.make_node("MatMul", ["r0", "W1"], ["mm1"]),
        helper.make_node("Add", ["mm1", "b1"], ["h1"]),
        helper.make_node("ReduceMean", ["h1"], ["loss"], keepdims=0),
    ]
    inputs = {"x": [4, 6], "W0": [6, 5], "b0": [5], "W1": [5, 3], "b1": [3]}
    return _model(nodes, inputs, "loss"), ["W0", "b0", "W1", "b1"], "loss"


def _cnn() -> tuple[ol.ModelProto, list[str], str]:
    nodes = [
        helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "G", "g"], ["o"], transB=1),
        helper.make_node("ReduceMean", ["o"], ["loss"], keepdims=0),
    ]
    inputs = {"x": [2, 3, 8, 8], "W": [4, 3, 3, 3], "B": [4], "G": [5, 64], "g": [5]}
    return _model(nodes, inputs, "loss"), ["W", "B", "G", "g"], "loss"


@pytest.mark.parametrize("build", [lambda: _chain(20), _mlp, _cnn], ids=["chain", "mlp", "cnn"])
def test_benchmark_models_equal_the_full_optimizer(build: Callable[[], tuple[ol.ModelProto, list[str], str]]) -> None:
    model, xs, y = build()
    for make in [*_transforms(model, xs, y), lambda: ol.TangentOfFunction(model, ["x"], [y], registry=REGISTRY)]:
        _same_both_ways(make)
    # and the early return is taken on these: nothing to merge, fold or remove
    assert ol.GradientOfFunction(model, xs, y, registry=REGISTRY, optimize=False).SerializeToString() == (
        ol.GradientOfFunction(model, xs, y, registry=REGISTRY).SerializeToString()
    )


def _record(fn: ol.FunctionProto, constants: tuple[str, ...] = ()) -> EmitRecord:
    """A record of the pass's that made the Constants producing ``constants`` (a liveness claim)."""
    record = EmitRecord(live=True, opset=21)
    for node in list(fn.node):
        if node.op_type != "Constant" or node.output[0] not in constants:
            continue
        value = ol.numpy_helper.to_array(node.attribute[0].t)
        record.constants[id(node)] = (node, (value.dtype.str, value.shape, value.tobytes()))
    return record


def _function(nodes: list[ol.NodeProto], outputs: list[str]) -> ol.FunctionProto:
    """A function holding ``nodes`` themselves, as the pass builds its result."""
    fn = ol.FunctionProto(name="f", domain="t")
    fn.input[:] = ["a", "b"]
    fn.output[:] = outputs
    fn.node[:] = nodes
    fn.opset_import[:] = [helper.make_opsetid("", 21)]
    return fn


def test_each_kind_of_work_is_seen() -> None:
    """Each thing a sweep acts on makes ``has_work`` True; the plain function does not."""
    plain = [helper.make_node("Mul", ["a", "b"], ["m"]), helper.make_node("Identity", ["m"], ["out"])]
    fn = _function(plain, ["out"])
    assert not has_work(fn, _record(fn))
    assert has_work(fn, EmitRecord(live=False, opset=21))  # a dead node may be there
    assert has_work(fn, EmitRecord(live=True, opset=None))  # another domain is imported
    repeated = [helper.make_node("Mul", ["a", "b"], ["m2"]), helper.make_node("Add", ["m", "m2"], ["s"])]
    fn = _function(plain[:1] + repeated + [helper.make_node("Identity", ["s"], ["out"])], ["out"])
    assert has_work(fn, _record(fn))
    other_attrs = [helper.make_node("Mul", ["a", "b"], ["m2"], name="x")]  # the same computation, named
    assert has_work(_function(plain[:1] + other_attrs + plain[1:], ["out"]), _record(fn))
    alias = _function([*plain, helper.make_node("Identity", ["out"], ["o2"])], ["o2"])
    assert has_work(alias, _record(alias))  # an Identity that is not an output

    def const(name: str, v: int) -> ol.NodeProto:
        return helper.make_node("Constant", [], [name], value=ol.numpy_helper.from_array(np.array([v], np.int64)))

    def with_constants(c1: ol.NodeProto, c2: ol.NodeProto) -> ol.FunctionProto:
        sums = [
            helper.make_node("Add", ["c1", "a"], ["s1"]),
            helper.make_node("Add", ["c2", "b"], ["s2"]),
            helper.make_node("Add", ["s1", "s2"], ["s"]),
            helper.make_node("Identity", ["s"], ["out"]),
        ]
        return _function([c1, c2, *sums], ["out"])

    c1, c2, c3 = const("c1", 2), const("c2", 3), const("c2", 2)
    distinct = with_constants(c1, c2)
    assert not has_work(distinct, _record(distinct, ("c1", "c2")))
    assert has_work(distinct, _record(distinct, ("c1",)))  # a constant the pass did not make
    twice = with_constants(c1, c3)
    assert has_work(twice, _record(twice, ("c1", "c2")))  # the same value twice
    folded = _function(
        [c1, helper.make_node("Add", ["c1", "c1"], ["s"]), helper.make_node("Identity", ["s"], ["out"])], ["out"]
    )
    assert has_work(folded, _record(folded, ("c1",)))  # all inputs constant
    sig = _function([helper.make_node("Sigmoid", ["a"], ["s"]), helper.make_node("Identity", ["s"], ["out"])], ["out"])
    assert has_work(sig, _record(sig))
