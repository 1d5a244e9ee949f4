"""The assembly's index sweeps (``gradient/_assembly.py``) against plain reference walks."""

from __future__ import annotations

import random

import numpy as np
import pytest

import onnx_light as ol
from onnx_light import TensorProto, helper
from onnx_light.onnx_core.gradient._assembly import NEEDED, marked_ancestors, needed_indices, read_order, singles_live


def _reference_ancestors(
    reads: list[list[str]], producer: dict[str, int], roots: list[int], stop: set[int]
) -> set[int]:
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        for name in reads[i]:
            j = producer.get(name)
            if j is not None and j not in stop:
                stack.append(j)
    return seen


@pytest.mark.parametrize("seed", range(20))
def test_marked_ancestors_is_the_walk_on_ordered_graphs(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 40)
    producer = {f"v{i}": i for i in range(n)}
    reads = [[f"v{j}" for j in rng.sample(range(i), min(i, rng.randint(0, 3)))] + ["free"] for i in range(n)]
    roots = rng.sample(range(n), rng.randint(1, min(n, 3)))
    stop = set(rng.sample(range(n), rng.randint(0, min(n, 3)))) - set(roots)
    mark = marked_ancestors(reads, producer, roots, stop)
    assert mark is not None
    assert needed_indices(mark) == sorted(_reference_ancestors(reads, producer, roots, stop))
    assert all(mark[s] != NEEDED for s in stop)


def test_marked_ancestors_refuses_a_read_of_a_later_node() -> None:
    producer = {"a": 0, "b": 1, "c": 2}
    assert marked_ancestors([["c"], ["a"], ["b"]], producer, [2]) is None  # node 0 reads node 2's value
    assert marked_ancestors([["a"]], {"a": 0}, [0]) is None  # a node reading its own output
    # the late read is on a node not followed (behind a stop): no refusal
    mark = marked_ancestors([["c"], ["a"], ["b"]], producer, [2], stop=[1])
    assert mark is not None and needed_indices(mark) == [2]


def test_read_order_and_liveness() -> None:
    io = [(["x", "w"], ["a"], ""), (["a", "x"], ["b"], ""), (["b"], ["c"], "")]
    assert list(read_order(io)) == ["x", "w", "a", "b"]
    read = read_order(io)
    assert singles_live(io, read, {"c"}) == (True, {"a", "b", "c"})
    assert singles_live(io, read, set()) == (False, {"a", "b", "c"})  # c is neither read nor returned
    assert singles_live(io + [(["c"], ["d", "e"], "")], read, {"d"}) is None  # two outputs: the general path


def _chain(layers: int) -> tuple[ol.ModelProto, list[str]]:
    f = TensorProto.FLOAT
    nodes, inputs, prev = [], [helper.make_tensor_value_info("x", f, [4])], "x"
    for i in range(layers):
        inputs.append(helper.make_tensor_value_info(f"w{i}", f, [4]))
        nodes.append(helper.make_node("Mul", [prev, f"w{i}"], [f"m{i}"]))
        nodes.append(helper.make_node("Tanh", [f"m{i}"], [f"t{i}"]))
        prev = f"t{i}"
    nodes.append(helper.make_node("ReduceSum", [prev], ["loss"], keepdims=0))
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("loss", f, [])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), [i.name for i in inputs]


def test_nodes_out_of_order_are_reported_as_before() -> None:
    model, xs = _chain(2)
    nodes = list(model.graph.node)
    nodes[0], nodes[1] = nodes[1], nodes[0]  # Tanh(m0) before Mul -> m0
    model.graph.node[:] = nodes
    with pytest.raises(ol.GradientError, match="not in topological order"):
        ol.GradientOfFunction(model, xs, "loss", registry=ol.DefaultGradRegistry())


def test_inputs_and_value_info_of_the_result() -> None:
    model, xs = _chain(3)
    fn = ol.GradientOfFunction(model, xs[1:], "loss", registry=ol.DefaultGradRegistry())
    assert list(fn.input) == ["w0", "w1", "w2", "x", "dy"]  # xs, then the graph's inputs in order, then dy
    assert [
        (vi.name, vi.type.tensor_type.elem_type, [d.dim_value for d in vi.type.tensor_type.shape.dim])
        for vi in fn.value_info
    ] == [
        ("w0", 1, [4]),
        ("w1", 1, [4]),
        ("w2", 1, [4]),
        ("x", 1, [4]),
        ("dy", 1, []),
    ]
    sess = ol.runtime.InferenceSession(fn)
    feeds = {n: np.full((4,), 0.5, np.float32) for n in ["w0", "w1", "w2", "x"]}
    feeds["dy"] = np.ones((), np.float32)
    assert all(np.isfinite(g).all() for g in sess.run(None, feeds))


def test_the_output_identities_are_recorded_only_when_last() -> None:
    from onnx_light.onnx_core.gradient import _api

    records = []
    finish = _api._finish
    try:
        _api._finish = lambda result, foreign, optimize: records.append(result[1]) or result[0]
        model, xs = _chain(2)
        ol.GradientOfFunction(model, xs, "loss", registry=ol.DefaultGradRegistry())
        # an unused x gets zeros emitted between the Identities: nothing recorded
        ol.GradientOfFunction(model, [*xs, "unused"], "loss", registry=ol.DefaultGradRegistry(), allow_unused=True)
    finally:
        _api._finish = finish
    assert records[0].named == len(xs)
    assert records[1].named == 0
