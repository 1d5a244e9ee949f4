"""What the recurrent backward runs per step: the ones-seed folded, loop invariants hoisted out of
the reverse Scan body, the lowered forward Scan merged into its tape (issue 10 §4).

The gradients themselves are checked by test_rules_recurrent.py (finite differences, onnxruntime);
here the structure of the emitted graph, and the two Scan passes on hand-built graphs, run in our
runtime against the graph before the pass.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from gradcheck import check_gradient, gradient
from test_rules_recurrent import RECURRENT_CASES, H, _case

import onnx_light as ol
from onnx_light.onnx_core import helper
from onnx_light.onnx_extensions.gradient._hoist import hoist_scan_invariants, merge_tape_scans
from onnx_light.runtime import InferenceSession

F = 1  # float


def _scans(nodes: Any) -> list[Any]:
    return [n for n in nodes if n.op_type == "Scan"]


def _body(node: Any) -> Any:
    return next(a.g for a in node.attribute if a.name == "body")


@pytest.mark.parametrize("case", [RECURRENT_CASES[3], RECURRENT_CASES[6]], ids=lambda c: c.name)
def test_recurrent_backward_runs_the_recurrence_once_per_sweep(case: Any) -> None:
    """One forward Scan (the tape; none for GRU, whose tape is the node's Y) and one reverse Scan;
    the reverse body has no Expand or Mul by the ones-seed and no Transpose of a weight (it reads
    R^T's transpose from outside)."""
    _, bwd = gradient(case)
    scans = _scans(bwd.node)
    assert len(scans) == (1 if case.name == "GRU" else 2), [len(_body(s).node) for s in scans]
    reverse = _body(scans[-1])
    ops = Counter(n.op_type for n in reverse.node)
    assert ops["Expand"] == 0, ops
    local = {i.name for i in reverse.input} | {o for n in reverse.node for o in n.output}
    outer_only = [n.op_type for n in reverse.node if n.input and all(i not in local for i in n.input if i)]
    assert outer_only == [], outer_only


def _scan_model(nodes: list[Any], inputs: list[tuple[str, list[int]]], outputs: list[str]) -> Any:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, F, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, F, None) for n in outputs],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _run(model: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return InferenceSession(model).run(None, feeds)


def _step_body(extra: Sequence[Any] = (), extra_out: Sequence[str] = ()) -> Any:
    """h' = tanh(x_t + h @ Transpose(R)) with R captured; ``extra`` nodes/outputs appended."""
    nodes = [
        helper.make_node("Transpose", ["R"], ["Rt"], perm=[1, 0]),
        helper.make_node("Neg", ["Rt"], ["nRt"]),
        helper.make_node("MatMul", ["h", "nRt"], ["hr"]),
        helper.make_node("Add", ["x", "hr"], ["pre"]),
        helper.make_node("Tanh", ["pre"], ["h2"]),
        helper.make_node("Identity", ["h2"], ["y"]),
        *extra,
    ]
    ins = [helper.make_tensor_value_info("h", F, [2, 3]), helper.make_tensor_value_info("x", F, [2, 3])]
    outs = [helper.make_tensor_value_info(n, F, [2, 3]) for n in ["h2", "y", *extra_out]]
    return helper.make_graph(nodes, "body", ins, outs)


_FEEDS = {
    "h0": np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32),
    "X": np.random.default_rng(1).standard_normal((4, 2, 3)).astype(np.float32),
    "R": np.random.default_rng(2).standard_normal((3, 3)).astype(np.float32),
}
_INPUTS = [("h0", [2, 3]), ("X", [4, 2, 3]), ("R", [3, 3])]


def test_hoist_moves_the_invariant_chain_before_the_scan() -> None:
    scan = helper.make_node("Scan", ["h0", "X"], ["hT", "Y"], body=_step_body(), num_scan_inputs=1)
    before = _run(_scan_model([scan], _INPUTS, ["hT", "Y"]), _FEEDS)
    copy = ol.NodeProto.FromString(scan.SerializeToString())
    nodes = hoist_scan_invariants([copy])
    assert [n.op_type for n in nodes] == ["Transpose", "Neg", "Scan"]
    assert [n.op_type for n in _body(nodes[-1]).node] == ["MatMul", "Add", "Tanh", "Identity"]
    after = _run(_scan_model(nodes, _INPUTS, ["hT", "Y"]), _FEEDS)
    for a, b in zip(before, after):
        np.testing.assert_array_equal(a, b)


def test_hoist_keeps_body_outputs_random_ops_and_lone_constants() -> None:
    body = _step_body()
    body.node.insert(0, helper.make_node("RandomNormalLike", ["R"], ["noise"]))
    body.node.insert(0, helper.make_node("Constant", [], ["k"], value_float=2.0))
    body.node.append(helper.make_node("Identity", ["R"], ["r_out"]))
    body.node.append(helper.make_node("Mul", ["h2", "k"], ["h3"]))
    body.output.append(helper.make_tensor_value_info("r_out", F, [3, 3]))
    scan = helper.make_node("Scan", ["h0", "X"], ["hT", "Y", "Rs"], body=body, num_scan_inputs=1)
    nodes = hoist_scan_invariants([scan])
    assert [n.op_type for n in nodes] == ["Transpose", "Neg", "Scan"]
    kept = [n.op_type for n in _body(nodes[-1]).node]
    assert kept == ["Constant", "RandomNormalLike", "MatMul", "Add", "Tanh", "Identity", "Identity", "Mul"]


def test_merge_reads_the_forward_scan_from_its_tape() -> None:
    tape_body = _step_body([helper.make_node("Identity", ["h"], ["tape_h"])], ["tape_h"])
    fwd = helper.make_node("Scan", ["h0", "X"], ["hT", "Y"], body=_step_body(), num_scan_inputs=1)
    use = helper.make_node("Mul", ["Y", "hT"], ["z"])
    tape = helper.make_node(
        "Scan", ["h0", "X"], ["hT2", "Y2", "H"], body=tape_body, num_scan_inputs=1, scan_output_axes=[0, 0]
    )
    use2 = helper.make_node("Add", ["z", "H"], ["w"])
    model = _scan_model([fwd, use, tape, use2], _INPUTS, ["w"])
    before = _run(model, _FEEDS)
    nodes = merge_tape_scans([ol.NodeProto.FromString(n.SerializeToString()) for n in [fwd, use, tape, use2]])
    assert [n.op_type for n in nodes] == ["Scan", "Identity", "Identity", "Mul", "Add"]
    assert [(list(n.input), list(n.output)) for n in nodes[1:3]] == [(["hT2"], ["hT"]), (["Y2"], ["Y"])]
    np.testing.assert_array_equal(before[0], _run(_scan_model(nodes, _INPUTS, ["w"]), _FEEDS)[0])


def test_toposort_waits_for_producers_lower_on_the_path() -> None:
    """a reads b and c, c reads b: b, c, a (not c before b)."""
    from onnx_light.onnx_extensions.gradient._hoist import _toposorted

    a = helper.make_node("Add", ["b", "c"], ["a"])
    c = helper.make_node("Neg", ["b"], ["c"])
    b = helper.make_node("Neg", ["x"], ["b"])
    assert [n.output[0] for n in _toposorted([a, c, b])] == ["b", "c", "a"]
    assert [n.output[0] for n in _toposorted([a, b, c])] == ["b", "c", "a"]


def test_merge_keeps_scans_that_differ() -> None:
    other = _step_body([helper.make_node("Identity", ["h"], ["tape_h"])], ["tape_h"])
    other.node[4].op_type = "Sigmoid"  # not the same recurrence
    fwd = helper.make_node("Scan", ["h0", "X"], ["hT", "Y"], body=_step_body(), num_scan_inputs=1)
    tape = helper.make_node("Scan", ["h0", "X"], ["hT2", "Y2", "H"], body=other, num_scan_inputs=1)
    tape_body = _step_body([helper.make_node("Identity", ["h"], ["tape_h"])], ["tape_h"])
    reversed_ = helper.make_node(
        "Scan", ["h0", "X"], ["hT3", "Y3", "H3"], body=tape_body, num_scan_inputs=1, scan_output_directions=[1, 0]
    )
    assert len(merge_tape_scans([fwd, tape, reversed_])) == 3


def test_scan_output_changing_shape_is_a_clear_error() -> None:
    body = helper.make_graph(
        [helper.make_node("NonZero", ["x"], ["nz"])],
        "body",
        [helper.make_tensor_value_info("x", F, [3])],
        [helper.make_tensor_value_info("nz", 7, None)],
    )
    scan = helper.make_node("Scan", ["X"], ["Y"], body=body, num_scan_inputs=1)
    model = _scan_model([scan], [("X", [2, 3])], ["Y"])
    with pytest.raises(ol.OnnxLightError, match="Scan"):
        _run(model, {"X": np.array([[1, 0, 1], [1, 1, 1]], np.float32)})


def test_hoisted_names_of_two_bodies_do_not_collide() -> None:
    """Two Scans whose bodies use the same local names (two layers' reverse sweeps): the hoisted
    values get distinct outer names (this was a 'value produced twice' in forward-over-reverse)."""
    scans = [
        helper.make_node("Scan", ["h0", "X"], [f"hT{k}", f"Y{k}"], body=_step_body(), num_scan_inputs=1)
        for k in range(2)
    ]
    nodes = hoist_scan_invariants(scans)
    produced = [o for n in nodes for o in n.output]
    assert len(produced) == len(set(produced)) == 8, produced
    after = _run(_scan_model(nodes, _INPUTS, ["Y0", "Y1"]), _FEEDS)
    np.testing.assert_array_equal(after[0], after[1])


# -- weight-gradient sums after the reverse Scan (_scan_sums), the GRU tape read from Y ----------

_SUMMED = [c for c in RECURRENT_CASES if c.name in ("GRU_bidirectional", "GRU_linear_before_reset_bidir_lens", "LSTM")]


def _fresh_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    """No template built before this test (its limit or rules differ) is served."""
    from onnx_light.onnx_extensions.gradient import _recurrent_cache

    monkeypatch.setattr(_recurrent_cache, "_CACHE", {})


@pytest.mark.parametrize("case", _SUMMED, ids=lambda c: c.name)
def test_weight_gradient_sums_move_after_the_reverse_scan(case: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the size rule allowing it, R's gradient is one product after the loop (no per-step
    Transpose of the state in the reverse body, no MatMul into an accumulator state); the
    gradients still agree with finite differences and onnxruntime."""
    from onnx_light.onnx_extensions.gradient import _scan_sums

    _fresh_rules(monkeypatch)
    monkeypatch.setattr(_scan_sums, "LIMIT", 1e9)
    _, bwd = gradient(case)
    reverse = _body(_scans(bwd.node)[-1])
    assert "Transpose" not in Counter(n.op_type for n in reverse.node)
    check_gradient(case)


def test_weight_gradient_sums_stay_in_the_scan_when_the_stacks_would_be_larger(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """rows * (K + N) > K * N (batch 2, hidden 2): the O(|W|) accumulator of R stays a state of
    the reverse Scan, as with the move switched off; allowed, it leaves."""
    from onnx_light.onnx_extensions.gradient import _scan_sums

    def states(limit: float | None) -> int:
        _fresh_rules(monkeypatch)
        if limit is not None:
            monkeypatch.setattr(_scan_sums, "LIMIT", limit)
        scan = _scans(gradient(RECURRENT_CASES[6])[1].node)[-1]
        return len(scan.input) - next(a.i for a in scan.attribute if a.name == "num_scan_inputs")

    default = states(None)
    assert default == states(0.0)
    assert states(1e9) == default - 1


def _gru_case(name: str, outputs: list[str], count: int = 1, **attrs: Any) -> Any:
    """``count`` GRU nodes of one signature (each its own inputs); the loss reads ``outputs``."""
    from gradcheck import Case
    from onnx import helper as oh

    rng = np.random.default_rng(5)
    inputs: dict[str, np.ndarray] = {}
    nodes, terms = [], []
    for k in range(count):
        for n, shape in [("X", (3, 2, 3)), ("W", (1, 6, 3)), ("R", (1, 6, 2)), ("h0", (1, 2, 2))]:
            inputs[f"{n}{k}"] = rng.standard_normal(shape) * 0.6
        outs = [f"Y{k}" if "Y" in outputs else "", f"Yh{k}"]
        nodes.append(oh.make_node("GRU", [f"X{k}", f"W{k}", f"R{k}", "", "", f"h0{k}"], outs, hidden_size=2, **attrs))
        for o in outputs:
            nodes.append(oh.make_node("Mul", [f"{o}{k}", f"{o}{k}"], [f"{o}{k}_2"]))
            nodes.append(oh.make_node("ReduceSum", [f"{o}{k}_2"], [f"s{o}{k}"], keepdims=0))
            terms.append(f"s{o}{k}")
    nodes.append(oh.make_node("Sum", terms, ["loss"]))
    return Case(name, nodes, inputs, list(inputs), ort_dtype=np.float32)


def test_gru_tape_without_y_is_the_tape_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without Y among the node's outputs the tape is recorded by a forward Scan again."""
    _fresh_rules(monkeypatch)
    case = _gru_case("gru_only_y_h", ["Yh"])
    _, bwd = gradient(case)
    assert len(_scans(bwd.node)) == 2
    check_gradient(case)


def test_gru_tape_of_a_template_copy_reads_its_own_node(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two GRUs of one signature: the second's backward is a renamed copy of the first's, and
    reads the second node's Y (a copy reading the first's would fail the finite differences)."""
    from onnx_light.onnx_extensions.gradient import _recurrent_cache

    _fresh_rules(monkeypatch)
    copies = []
    real = _recurrent_cache._instantiate

    def counted(t: Any, ctx: Any) -> Any:
        copies.append(1)
        return real(t, ctx)

    monkeypatch.setattr(_recurrent_cache, "_instantiate", counted)
    # clip: the lowering (the default attributes are written out directly, uncached)
    case = _gru_case("two_grus", ["Y", "Yh"], count=2, clip=50.0)
    _, bwd = gradient(case)
    assert len(copies) == 1 and len(_scans(bwd.node)) == 2  # one reverse Scan each, no tape Scan
    check_gradient(case)


def test_lstm_without_peepholes_activates_its_three_gates_at_once() -> None:
    """Without peepholes (and input_forget) i, o and f are one activation on a [.., 3H] slab: one
    Sigmoid in the cell instead of three; gradients checked by finite differences and onnxruntime."""
    from dataclasses import replace

    from onnx import helper as oh

    base = _case("LSTM_bidirectional_no_peepholes", "LSTM", dirs=2)
    lstm = base.nodes[0]
    # clip: the lowering (without it the LSTM is written out directly, its gates one Sigmoid there too)
    node = oh.make_node(
        "LSTM", list(lstm.input)[:7], list(lstm.output), hidden_size=H, direction="bidirectional", clip=50.0
    )
    inputs = {k: v for k, v in base.inputs.items() if k != "P"}
    case = replace(base, nodes=[node, *base.nodes[1:]], inputs=inputs, xs=[x for x in base.xs if x != "P"])
    _, bwd = gradient(case)
    tape = _body(_scans(bwd.node)[0])
    assert Counter(n.op_type for n in tape.node)["Sigmoid"] == 1
    check_gradient(case)
