"""Loops carrying a sequence (a Python list appended to in a scripted loop), checked by
``gradcheck.check_gradient``; the rows also run in forward mode and twice (test_forward_rules,
test_rule_coverage).

The reverse sweep carries each sequence backwards, undoing the body's SequenceInserts (and
re-inserting what its SequenceErases removed, recorded by the forward Loop): rows append,
insert at the front, pop, read the list inside the body, stop on a data condition and run
zero iterations. Bodies that change the list otherwise are refused with the reason.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from gradcheck import Case, check_gradient, gradient
from onnx import TensorProto
from onnx import helper as oh

import onnx_light as ol

D = TensorProto.DOUBLE
I64 = TensorProto.INT64
_rng = np.random.default_rng(12)


def rnd(*shape: int) -> np.ndarray:
    return _rng.standard_normal(shape)


def vi(name: str, shape: list[Any] | None, dtype: int = D) -> Any:
    return oh.make_tensor_value_info(name, dtype, shape)


def seq(name: str) -> Any:
    return oh.make_tensor_sequence_value_info(name, D, None)


def node(op: str, inputs: list[str], outputs: list[str], **attrs: Any) -> Any:
    return oh.make_node(op, inputs, outputs, **attrs)


def _const(name: str, value: int) -> Any:
    return node("Constant", [], [name], value=oh.make_tensor(name, I64, [], [value]))


_HEAD = [node("MatMul", ["h", "W"], ["hw"]), node("Tanh", ["hw"], ["h_next"])]
_KEEP_GOING = [node("Identity", ["c"], ["c_out"])]


def _body(name: str, nodes: list[Any]) -> Any:
    """(i, c, h, acc) -> (c_out, h_next, acc_next, scan y=h_next*h_next)."""
    return oh.make_graph(
        [*nodes, node("Mul", ["h_next", "h_next"], ["y"])],
        name,
        [vi("i", [], I64), vi("c", [], TensorProto.BOOL), vi("h", [2, 3]), seq("acc")],
        [vi("c_out", [], TensorProto.BOOL), vi("h_next", [2, 3]), seq("acc_next"), vi("y", [2, 3])],
    )


APPEND = _body("append", [*_HEAD, *_KEEP_GOING, node("SequenceInsert", ["acc", "h_next"], ["acc_next"])])
FRONT = _body(
    "front", [*_HEAD, *_KEEP_GOING, _const("zero", 0), node("SequenceInsert", ["acc", "h_next", "zero"], ["acc_next"])]
)
# two pushes and a pop of the front: the reverse sweep re-inserts the popped tensor
POP = _body(
    "pop",
    [
        *_HEAD,
        *_KEEP_GOING,
        node("SequenceInsert", ["acc", "h_next"], ["acc1"]),
        node("Sin", ["h_next"], ["sin_h"]),
        _const("minus_two", -2),
        node("SequenceInsert", ["acc1", "sin_h", "minus_two"], ["acc2"]),
        _const("zero", 0),
        node("SequenceErase", ["acc2", "zero"], ["acc_next"]),
    ],
)
# the list is read inside the body: h' = tanh(h W) * acc[-1]
READ = _body(
    "read",
    [
        node("MatMul", ["h", "W"], ["hw"]),
        node("Tanh", ["hw"], ["t"]),
        _const("last", -1),
        node("SequenceAt", ["acc", "last"], ["prev"]),
        node("Mul", ["t", "prev"], ["h_next"]),
        *_KEEP_GOING,
        node("SequenceInsert", ["acc", "h_next"], ["acc_next"]),
    ],
)
# no trip count: runs while i + 1 < K
UNTIL = _body(
    "until",
    [
        *_HEAD,
        _const("one", 1),
        node("Add", ["i", "one"], ["i1"]),
        node("Less", ["i1", "K"], ["c_out"]),
        node("SequenceInsert", ["acc", "h_next"], ["acc_next"]),
    ],
)


def _loop_case(
    name: str,
    body: Any,
    trips: str,
    cond: str,
    start: list[Any],
    extra: dict[str, np.ndarray],
    stack: bool = True,
    read_ys: bool = True,
) -> Case:
    """Loop(trips, cond, h0, start) -> (hf, sf, ys); loss = sum(sin(stack(sf))) + sum(hf) (+ sum(ys))."""
    read = (
        [node("ConcatFromSequence", ["sf"], ["st"], axis=0, new_axis=1)]
        if stack
        else [node("ConcatFromSequence", ["sf"], ["st"], axis=1)]
    )
    terms = ["r1", "r2", "r3"] if read_ys else ["r1", "r2"]
    return Case(
        name,
        [
            *start,
            node("Loop", [trips, cond, "h0", "s0"], ["hf", "sf", "ys"], body=body),
            *read,
            node("Sin", ["st"], ["ss"]),
            node("ReduceSum", ["ss"], ["r1"], keepdims=0),
            node("ReduceSum", ["hf"], ["r2"], keepdims=0),
            *([node("ReduceSum", ["ys"], ["r3"], keepdims=0)] if read_ys else []),
            node("Sum", terms, ["loss"]),
        ],
        {"h0": rnd(2, 3), "W": rnd(3, 3) * 0.6, "a": rnd(2, 3), **extra},
        ["h0", "W", "a"],
    )


_FROM_A = [node("SequenceConstruct", ["a"], ["s0"])]
_FROM_A_H0 = [node("SequenceConstruct", ["a", "h0"], ["s0"])]
_M = {"M": np.array(3, np.int64)}


def _empty_row(name: str, body: Any, **kw: Any) -> Case:
    # "a" reaches the loss only through the start of the list: zeros from an empty one
    case = _loop_case(name, body, "M", "", [node("SequenceEmpty", [], ["s0"], dtype=D)], _M, **kw)
    case.xs = ["h0", "W"]
    return case


LOOP_SEQUENCE_CASES = [
    _empty_row("Loop_sequence_append", APPEND),
    _loop_case("Loop_sequence_append_from_construct", APPEND, "M", "", _FROM_A, _M),
    _loop_case("Loop_sequence_insert_front_concat", FRONT, "M", "", _FROM_A, _M, stack=False),
    _loop_case("Loop_sequence_push_pop", POP, "M", "", _FROM_A_H0, _M),
    _loop_case("Loop_sequence_read_in_body", READ, "M", "", _FROM_A, _M),
    _loop_case("Loop_sequence_until", UNTIL, "", "go", [*_FROM_A, node("Identity", ["t"], ["go"])],
               {"K": np.array(4, np.int64), "t": np.array(True)}),
    # the trip count computed from fed data: 2 - 2 = 0 iterations (the list is its start); the
    # empty scan output ys is left out of the loss (onnxruntime's Loop types it float32)
    _loop_case("Loop_sequence_zero_iterations", APPEND, "m", "", [*_FROM_A, node("Sub", ["n", "n"], ["m"])],
               {"n": np.array(2, np.int64)}, read_ys=False),
]  # fmt: skip


# two float lists (one started from a variable) and a list of int64 indices in one Loop
_THREE = oh.make_graph(
    [
        *_HEAD,
        *_KEEP_GOING,
        node("SequenceInsert", ["acc", "h_next"], ["acc_next"]),
        node("Sin", ["h_next"], ["s"]),
        node("SequenceInsert", ["acc2", "s"], ["acc2_next"]),
        node("Unsqueeze", ["i", "axis0"], ["i1"]),
        node("SequenceInsert", ["idx", "i1"], ["idx_next"]),
    ],
    "three_lists",
    [vi("i", [], I64), vi("c", [], TensorProto.BOOL), vi("h", [2, 3]), seq("acc"), seq("acc2"),
     oh.make_tensor_sequence_value_info("idx", I64, [1])],
    [vi("c_out", [], TensorProto.BOOL), vi("h_next", [2, 3]), seq("acc_next"), seq("acc2_next"),
     oh.make_tensor_sequence_value_info("idx_next", I64, [1])],
)  # fmt: skip
LOOP_SEQUENCE_CASES.append(
    Case(
        "Loop_sequence_two_lists_and_an_int_list",
        [
            node("SequenceEmpty", [], ["s0"], dtype=D),
            node("SequenceConstruct", ["a"], ["s1"]),
            node("SequenceEmpty", [], ["s2"], dtype=I64),
            node("Loop", ["M", "", "h0", "s0", "s1", "s2"], ["hf", "sf", "sf2", "sidx"], body=_THREE),
            node("ConcatFromSequence", ["sf"], ["st"], axis=0, new_axis=1),
            node("ConcatFromSequence", ["sf2"], ["st2"], axis=0),
            node("ConcatFromSequence", ["sidx"], ["ids"], axis=0),
            node("Cast", ["ids"], ["idf"], to=D),
            node("ReduceSum", ["idf"], ["r0"], keepdims=0),
            node("Sin", ["st"], ["ss"]),
            node("ReduceSum", ["ss"], ["r1"], keepdims=0),
            node("ReduceSumSquare", ["st2"], ["r2"], keepdims=0),
            node("Sum", ["r0", "r1", "r2"], ["loss"]),
        ],
        {
            "M": np.array(3, np.int64),
            "h0": rnd(2, 3),
            "W": rnd(3, 3) * 0.5,
            "a": rnd(2, 3),
            "axis0": np.array([0], np.int64),
        },
        ["h0", "W", "a"],
        initializers=["axis0"],
    )  # fmt: skip
)


@pytest.mark.parametrize("case", LOOP_SEQUENCE_CASES, ids=lambda c: c.name)
def test_loop_sequence_rule(case: Case) -> None:
    check_gradient(case)


def test_loop_sequence_tape_is_not_a_scan_output() -> None:
    """The carried list is not recorded per iteration (a Loop's scan outputs are tensors):
    every Loop of the backward graph has as many scan outputs as the forward body declares, or
    the tape's tensors only."""
    _, bwd = gradient(LOOP_SEQUENCE_CASES[0])
    loops = [n for n in bwd.node if n.op_type == "Loop"]
    assert len(loops) == 2  # the forward Loop recording its tape (it runs once), the reverse sweep
    for loop in loops:
        body = loop.attribute[0].g
        n = len(loop.input) - 2
        scans = body.output[1 + n :]
        assert all(o.type.HasField("tensor_type") for o in scans), [o.name for o in scans]


def _refused(body_nodes: list[Any]) -> Case:
    body = _body("refused", [*_HEAD, *_KEEP_GOING, *body_nodes])
    return _loop_case("refused", body, "M", "", _FROM_A, _M)


@pytest.mark.parametrize(
    ("nodes", "message"),
    [
        ([node("SequenceInsert", ["acc", "h_next", "i"], ["acc_next"])], "position 'i', computed at run time"),
        (
            [node("SequenceMap", ["acc"], ["acc_next"], body=oh.make_graph(
                [node("Neg", ["e"], ["ne"])], "neg", [vi("e", None)], [vi("ne", None)]))],
            "from ai.onnx::SequenceMap",
        ),
    ],
    ids=["run_time_position", "sequence_map"],
)  # fmt: skip
def test_loop_sequence_refusals(nodes: list[Any], message: str) -> None:
    """A body changing its list in a way the reverse sweep cannot undo is refused, naming why."""
    with pytest.raises(ol.GradientError, match=message) as info:
        gradient(_refused(nodes))
    assert "ai.onnx::Loop" in str(info.value)


def _second_order(case: Case, x: str) -> tuple[Any, Any, dict[str, np.ndarray], np.ndarray]:
    """(first backward, second backward wrt ``x`` of grad_x, the second's feeds, H v by central
    differences of the first gradient along v), in float64."""
    from gradcheck import backward_feeds, run_forward

    rng = np.random.default_rng(5)
    model, bwd = gradient(case)
    feeds = dict(case.inputs)
    y = case.y or case.nodes[-1].output[0]
    base = backward_feeds(bwd, feeds, np.ones(np.shape(run_forward(model, feeds, y))), model)
    v = rng.standard_normal(feeds[x].shape)
    first = ol.runtime.InferenceSession(bwd)

    def at(t: float) -> np.ndarray:
        return first.run([f"grad_{x}"], {**base, x: base[x] + t * v})[0]

    numeric = (at(1e-5) - at(-1e-5)) / 2e-5
    second = ol.GradientOfFunction(bwd, [x], f"grad_{x}", allow_unused=True)
    feeds2 = {n: base[n] for n in second.input[:-1]}
    feeds2[second.input[-1]] = v
    return bwd, second, feeds2, numeric


CLOSURE_ROWS = [c for c in LOOP_SEQUENCE_CASES if c.name in ("Loop_sequence_read_in_body", "Loop_sequence_push_pop")]


@pytest.mark.parametrize("x", ["h0", "W", "a"])
@pytest.mark.parametrize("case", CLOSURE_ROWS, ids=lambda c: c.name)
def test_loop_sequence_twice_reverse_over_reverse(case: Case, x: str) -> None:
    """Closure: the backward graph of a Loop carrying (and reading) a list is differentiated
    again; H v matches central differences of the first gradient, and onnxruntime runs the
    second-order graph (full checker first) to the same numbers."""
    import onnx
    import onnxruntime as ort
    from gradcheck import backward_model

    _, second, feeds2, numeric = _second_order(case, x)
    (hv,) = ol.runtime.InferenceSession(second).run(None, feeds2)
    np.testing.assert_allclose(hv, numeric, rtol=1e-6, atol=1e-8)
    wrapped = backward_model(second, feeds2)
    onnx.checker.check_model(wrapped, full_check=True)
    sess = ort.InferenceSession(wrapped.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(sess.run(None, feeds2)[0], hv, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("case", CLOSURE_ROWS, ids=lambda c: c.name)
def test_loop_sequence_twice_forward_over_reverse(case: Case) -> None:
    """Forward mode over the backward graph of a Loop carrying a list: H t vs central differences."""
    from gradcheck import check_forward_over_reverse

    check_forward_over_reverse(case)


@pytest.mark.parametrize("index", [1, 3], ids=["append", "push_pop"])
def test_loop_output_as_an_x(index: int) -> None:
    """One of the Loop's outputs (hf) is among the xs (fed, not computed: the pass does not run
    its producer again): the backward function runs the taping Loop itself, is fed the Loop's
    other outputs (the list typed as a sequence), and its grad_W is the one with xs=[W]."""
    from dataclasses import replace

    from gradcheck import backward_feeds

    case = LOOP_SEQUENCE_CASES[index]
    model, bwd = gradient(replace(case, xs=["W", "hf"]))
    assert not any(name.startswith("tape") for name in bwd.input), list(bwd.input)
    extended = ol.ModelProto()
    extended.CopyFrom(model)
    extended.graph.output.append(ol.helper.make_tensor_sequence_value_info("sf", D, None))
    extended.graph.output.extend(ol.helper.make_tensor_value_info(n, D, None) for n in ("ys", "hf"))
    sess = ol.runtime.InferenceSession(extended)
    feeds = {k: v for k, v in case.inputs.items() if k in {i.name for i in sess.get_inputs()}}
    values = dict(zip(["sf", "ys", "hf"], sess.run(["sf", "ys", "hf"], feeds)))
    run = {**case.inputs, **values, bwd.input[-1]: np.ones(())}
    grad_w, grad_hf = ol.runtime.InferenceSession(bwd).run(["grad_W", "grad_hf"], {n: run[n] for n in bwd.input})
    np.testing.assert_array_equal(grad_hf, np.ones_like(values["hf"]))
    model2, only_w = gradient(replace(case, xs=["W"]))
    (want,) = ol.runtime.InferenceSession(only_w).run(
        ["grad_W"], backward_feeds(only_w, dict(case.inputs), np.ones(()), model2)
    )
    np.testing.assert_allclose(grad_w, want, rtol=1e-12, atol=1e-12)
