"""Gradient rules for control flow (If, Scan), checked by ``gradcheck.check_gradient``.

The bodies read outer-scope values (weights) that receive gradients; Scan rows cover
several states and scan inputs/outputs, axes, directions and a zero-length scan.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from gradcheck import Case, build_model, check_gradient, check_tangent, gradient, tangent, to_ours
from onnx import TensorProto
from onnx import helper as oh

import onnx_light as ol

D = TensorProto.DOUBLE
_rng = np.random.default_rng(10)


def rnd(*shape: int) -> np.ndarray:
    return _rng.standard_normal(shape)


def vi(name: str, shape: list[Any] | None, dtype: int = D) -> Any:
    return oh.make_tensor_value_info(name, dtype, shape)


def node(op: str, inputs: list[str], outputs: list[str], **attrs: Any) -> Any:
    return oh.make_node(op, inputs, outputs, **attrs)


# an RNN-like body: h' = tanh(h W + x_t) * s, y_t = h' * h' + b
_RNN_BODY = oh.make_graph(
    [
        node("MatMul", ["h", "W"], ["hw"]),
        node("Add", ["hw", "xt"], ["pre"]),
        node("Tanh", ["pre"], ["act"]),
        node("Mul", ["act", "s"], ["h_next"]),
        node("Mul", ["h_next", "h_next"], ["sq"]),
        node("Add", ["sq", "b"], ["yt"]),
    ],
    "rnn_body",
    [vi("h", [2, 3]), vi("xt", [2, 3])],
    [vi("h_next", [2, 3]), vi("yt", [2, 3])],
)


def _scan(name: str, x_shape: tuple[int, ...], **attrs: Any) -> Case:
    return Case(
        name,
        [
            node("Scan", ["h0", "x"], ["h_final", "ys"], body=_RNN_BODY, num_scan_inputs=1, **attrs),
            node("Mul", ["ys", "ys"], ["y2"]),
            node("ReduceSum", ["y2"], ["r"], keepdims=0),
            node("ReduceSum", ["h_final"], ["rh"], keepdims=0),
            node("Add", ["r", "rh"], ["loss"]),
        ],
        {"h0": rnd(2, 3), "x": rnd(*x_shape) * 0.5, "W": rnd(3, 3) * 0.5, "s": rnd(2, 3), "b": rnd(3)},
        ["h0", "x", "W", "s", "b"],
    )


SCAN_CASES = [
    _scan("Scan", (4, 2, 3)),
    _scan("Scan_reverse_input", (4, 2, 3), scan_input_directions=[1]),
    _scan("Scan_axis1_reverse_output", (2, 4, 3), scan_input_axes=[1], scan_output_directions=[1]),
    _scan("Scan_output_axis2", (4, 2, 3), scan_output_axes=[2], scan_input_directions=[1]),
    _scan("Scan_negative_axes", (2, 3, 4), scan_input_axes=[-1], scan_output_axes=[-2]),
]


def _branch(name: str, nodes: list[Any], out: str) -> Any:
    return oh.make_graph(nodes, name, [], [vi(out, None)])


_THEN = _branch("then", [node("Mul", ["a", "w"], ["t1"]), node("Sin", ["t1"], ["t_out"])], "t_out")
_ELSE = _branch("else", [node("Add", ["a", "v"], ["e1"]), node("Exp", ["e1"], ["e_out"])], "e_out")


def _if(name: str, flag: bool) -> Case:
    return Case(
        name,
        [
            node("Greater", ["c", "zero"], ["cond"]),
            node("If", ["cond"], ["z"], then_branch=_THEN, else_branch=_ELSE),
            node("Mul", ["z", "a"], ["y"]),
        ],
        {"a": rnd(2, 3), "w": rnd(2, 3), "v": rnd(3), "c": np.array(1.0 if flag else -1.0), "zero": np.array(0.0)},
        ["a", "w", "v"],
    )


IF_CASES = [_if("If_then", True), _if("If_else", False)]

CONTROL_FLOW_CASES = [*SCAN_CASES, *IF_CASES]


@pytest.mark.parametrize("case", CONTROL_FLOW_CASES, ids=lambda c: c.name)
def test_control_flow_rule(case: Case) -> None:
    check_gradient(case)


# a Loop body: v' = tanh(v * w) + a, out_t = v' * v'; continues while i + 1 < K
_LOOP_BODY = oh.make_graph(
    [
        node("Mul", ["v", "w"], ["vw"]),
        node("Tanh", ["vw"], ["t"]),
        node("Add", ["t", "a"], ["v_next"]),
        node("Mul", ["v_next", "v_next"], ["out"]),
        node("Add", ["i", "one"], ["i1"]),
        node("Less", ["i1", "K"], ["go"]),
    ],
    "loop_body",
    [vi("i", [], TensorProto.INT64), vi("cond_in", [], TensorProto.BOOL), vi("v", [2, 3])],
    [vi("go", [], TensorProto.BOOL), vi("v_next", [2, 3]), vi("out", [2, 3])],
)


def _loop(name: str, trips: int, k: int, use_outs: bool = True) -> Case:
    loss = [node("ReduceSum", ["outs"], ["r"], keepdims=0), node("Add", ["r", "rv"], ["loss"])]
    return Case(
        name,
        [
            node("Loop", ["M", "", "v0"], ["v_final", "outs"], body=_LOOP_BODY),
            node("Mul", ["v_final", "v_final"], ["vf2"]),
            node("ReduceSum", ["vf2"], ["rv"], keepdims=0),
            *(loss if use_outs else []),
        ],
        {
            "M": np.array(trips, np.int64),
            "K": np.array(k, np.int64),
            "one": np.array(1, np.int64),
            "v0": rnd(2, 3),
            "w": rnd(2, 3),
            "a": rnd(3),
        },
        ["v0", "w", "a"],
        initializers=["one"],
    )


LOOP_CASES = [
    _loop("Loop_trip_count", 3, 10),
    _loop("Loop_cond_stops", 10, 2),
    # our runtime's Loop gives an empty scan output a float32 (0,) shape (its element type is
    # not known to the kernel), so the zero-iteration row's loss reads the carried value only
    _loop("Loop_zero_iterations", 0, 10, use_outs=False),
]


@pytest.mark.parametrize("case", LOOP_CASES, ids=lambda c: c.name)
def test_loop_rule(case: Case) -> None:
    check_gradient(case)


# nesting: an If inside a Scan body, its branches reading the body's state and outer weights
_NESTED_BODY = oh.make_graph(
    [
        node(
            "If",
            ["flag"],
            ["h_next"],
            then_branch=_branch(
                "nt", [node("MatMul", ["h", "W"], ["nt1"]), node("Tanh", ["nt1"], ["nt_out"])], "nt_out"
            ),
            else_branch=_branch("ne", [node("Mul", ["h", "s"], ["ne_out"])], "ne_out"),
        ),
        node("Add", ["h_next", "xt"], ["yt"]),
    ],
    "nested_body",
    [vi("h", [2, 3]), vi("xt", [2, 3])],
    [vi("h_next", [2, 3]), vi("yt", [2, 3])],
)


def _nested(name: str, flag: bool) -> Case:
    return Case(
        name,
        [
            node("Scan", ["h0", "x"], ["h_final", "ys"], body=_NESTED_BODY, num_scan_inputs=1),
            node("Mul", ["ys", "ys"], ["y2"]),
            node("ReduceSum", ["y2"], ["loss"], keepdims=0),
        ],
        {"h0": rnd(2, 3), "x": rnd(3, 2, 3), "W": rnd(3, 3) * 0.5, "s": rnd(2, 3), "flag": np.array(flag)},
        ["h0", "x", "W", "s"],
    )


NESTED_CASES = [_nested("Scan_If_then", True), _nested("Scan_If_else", False)]


@pytest.mark.parametrize("case", NESTED_CASES, ids=lambda c: c.name)
def test_if_nested_in_scan(case: Case) -> None:
    check_gradient(case)


# an If whose condition is known before run time: the taken branch replaces it
_CONST_THEN = _branch(
    "ct",
    [node("Mul", ["a", "w"], ["ct1"]), node("Sin", ["ct1"], ["ct_out"])],
    "ct_out",
)
_CONST_ELSE = _branch("ce", [node("Identity", ["v"], ["ce_out"])], "ce_out")  # reads an outer value only


def _const_if(name: str, cond_nodes: list[Any], extra: dict[str, np.ndarray], inits: list[str]) -> Case:
    return Case(
        name,
        [
            *cond_nodes,
            node("If", ["cond"], ["z"], then_branch=_CONST_THEN, else_branch=_CONST_ELSE),
            node("Mul", ["z", "a"], ["y"]),
        ],
        {"a": rnd(2, 3), "w": rnd(2, 3), "v": rnd(2, 3), **extra},
        ["a", "w", "v"],
        initializers=inits,
    )


_TRUE = oh.make_tensor("c", TensorProto.BOOL, [], [1])
CONSTANT_IF_CASES = [
    _const_if("If_const_initializer_true", [], {"cond": np.array(True)}, ["cond"]),
    _const_if("If_const_initializer_false", [], {"cond": np.array(False)}, ["cond"]),
    _const_if("If_const_node_true", [node("Constant", [], ["cond"], value=_TRUE)], {}, []),
    # a branch on a static shape (what torch exports for `if x.shape[0] > 1`)
    _const_if(
        "If_const_from_shape_false",
        [
            node("Shape", ["a"], ["sh"], start=0, end=1),
            node("Greater", ["sh", "five"], ["cond1"]),
            node("Squeeze", ["cond1"], ["cond"]),
        ],
        {"five": np.array([5], np.int64)},
        ["five"],
    ),  # fmt: skip
]


@pytest.mark.parametrize("case", CONSTANT_IF_CASES, ids=lambda c: c.name)
def test_constant_if_is_inlined(case: Case) -> None:
    """Neither the forward nodes re-emitted nor the backward ones hold an If; the gradient is right."""
    _, bwd = gradient(case)
    ops = {n.op_type for n in bwd.node}
    assert "If" not in ops, f"{case.name}: the emitted graph still holds an If: {sorted(ops)}"
    grads = check_gradient(case)
    taken_then = "true" in case.name
    if not taken_then:
        assert not np.any(grads["w"]), "the branch not taken contributes nothing"


@pytest.mark.parametrize("case", CONSTANT_IF_CASES, ids=lambda c: c.name)
def test_constant_if_is_inlined_in_forward_mode(case: Case) -> None:
    """Forward mode inlines the taken branch too (the same helper): the tangent graph holds no If,
    and its tangent matches reverse mode and finite differences (check_tangent)."""
    _, fwd = tangent(case)
    ops = {n.op_type for n in fwd.node}
    assert "If" not in ops, f"{case.name}: the tangent graph still holds an If: {sorted(ops)}"
    check_tangent(case)


# zero iterations: Scan over an empty axis, Loops whose trip count or condition is data
# (known only at run time) and stops before the first iteration; the empty scan outputs
# keep their element type (float64 here), so the loss reading them is float64 too
def _loop_data(name: str, cond_nodes: list[Any], m: str, cond: str, feeds: dict[str, np.ndarray]) -> Case:
    return Case(
        name,
        [
            *cond_nodes,
            node("Loop", [m, cond, "v0"], ["v_final", "outs"], body=_LOOP_BODY),
            node("Mul", ["v_final", "v_final"], ["vf2"]),
            node("ReduceSum", ["vf2"], ["rv"], keepdims=0),
            node("ReduceSum", ["outs"], ["r"], keepdims=0),
            node("Add", ["r", "rv"], ["loss"]),
        ],
        {"K": np.array(10, np.int64), "one": np.array(1, np.int64), "v0": rnd(2, 3), "w": rnd(2, 3), "a": rnd(3),
         **feeds},
        ["v0", "w", "a"],
        initializers=["one"],
    )  # fmt: skip


_ZERO_SCAN = _scan("Scan_zero_length", (0, 2, 3))
# onnxruntime 1.32 cannot run a Scan over an empty axis, not even the forward one
# (ort_value_tensor_slicer.cc: "Invalid dim0_offset of 0. Dimension 0 is 0")
_ZERO_SCAN.skip_ort = "onnxruntime fails on a zero-length Scan (forward included)"
ZERO_ITERATION_CASES = [
    _ZERO_SCAN,
    _loop("Loop_zero_iterations_outs_read", 0, 10),
    # the trip count computed from a fed integer: 2 - 2 = 0 iterations, unknown to the pass
    _loop_data("Loop_data_trip_count_zero", [node("Sub", ["n", "two"], ["m"])], "m", "",
               {"n": np.array(2, np.int64), "two": np.array(2, np.int64)}),
    # no trip count; the first condition computed from float data is false
    _loop_data("Loop_data_condition_false", [node("ReduceSum", ["v0"], ["sv"], keepdims=0),
                                             node("Greater", ["sv", "big"], ["go0"])], "", "go0",
               {"big": np.array(1e3)}),
    # the same Loop, the data condition true: it runs until i + 1 == K
    _loop_data("Loop_data_condition_true", [node("ReduceSum", ["v0"], ["sv"], keepdims=0),
                                            node("Less", ["sv", "big"], ["go0"])], "", "go0",
               {"big": np.array(1e3), "K": np.array(3, np.int64)}),
]  # fmt: skip


@pytest.mark.parametrize("case", ZERO_ITERATION_CASES, ids=lambda c: c.name)
def test_zero_iterations(case: Case) -> None:
    check_gradient(case)


def test_zero_length_scan_output_keeps_its_dtype() -> None:
    """An empty scan output has the element type (and element shape) the body declares."""
    case = _scan("Scan_zero_length", (0, 2, 3))
    model = to_ours(build_model(case, np.float64), ol.ModelProto)
    model.graph.output.append(ol.helper.make_tensor_value_info("ys", 0, None))
    feeds = {k: v for k, v in case.inputs.items() if k != "x"}
    _, ys = ol.runtime.InferenceSession(model).run(["loss", "ys"], {**feeds, "x": np.zeros((0, 2, 3))})
    assert ys.dtype == np.float64 and ys.shape == (0, 2, 3), (ys.dtype, ys.shape)


# nesting: a Loop inside an If inside a Scan; the Loop's body reads W2 (computed outside
# the Scan from the variable W: a captured value two scopes up) and the Scan's state
_INNER_LOOP = oh.make_graph(
    [node("MatMul", ["lv", "W2"], ["lvw"]), node("Tanh", ["lvw"], ["lv_next"]), node("Identity", ["lc"], ["lc_out"])],
    "inner_loop",
    [vi("li", [], TensorProto.INT64), vi("lc", [], TensorProto.BOOL), vi("lv", [2, 3])],
    [vi("lc_out", [], TensorProto.BOOL), vi("lv_next", [2, 3])],
)
_LOOP_IN_IF_BODY = oh.make_graph(
    [
        node(
            "If",
            ["flag"],
            ["h_next"],
            then_branch=_branch("lt", [node("Loop", ["two", "", "h"], ["lt_out"], body=_INNER_LOOP)], "lt_out"),
            else_branch=_branch("le", [node("Mul", ["h", "s"], ["le_out"])], "le_out"),
        ),
        node("Add", ["h_next", "xt"], ["yt"]),
    ],
    "loop_if_body",
    [vi("h", [2, 3]), vi("xt", [2, 3])],
    [vi("h_next", [2, 3]), vi("yt", [2, 3])],
)


def _loop_in_if_in_scan(name: str, flag: bool) -> Case:
    return Case(
        name,
        [
            node("Mul", ["W", "g"], ["W2"]),  # an intermediate the nested body captures
            node("Scan", ["h0", "x"], ["h_final", "ys"], body=_LOOP_IN_IF_BODY, num_scan_inputs=1),
            node("Mul", ["ys", "ys"], ["y2"]),
            node("ReduceSum", ["y2"], ["r"], keepdims=0),
            node("ReduceSum", ["h_final"], ["rh"], keepdims=0),
            node("Add", ["r", "rh"], ["loss"]),
        ],
        {"h0": rnd(2, 3), "x": rnd(3, 2, 3), "W": rnd(3, 3) * 0.5, "g": rnd(3, 3), "s": rnd(2, 3),
         "flag": np.array(flag), "two": np.array(2, np.int64)},
        ["h0", "x", "W", "g", "s"],
    )  # fmt: skip


LOOP_IF_SCAN_CASES = [_loop_in_if_in_scan("Scan_If_Loop_then", True), _loop_in_if_in_scan("Scan_If_Loop_else", False)]


@pytest.mark.parametrize("case", LOOP_IF_SCAN_CASES, ids=lambda c: c.name)
def test_loop_in_if_in_scan(case: Case) -> None:
    check_gradient(case)


@pytest.mark.parametrize("flag", [True, False])
def test_if_untyped_branches_both_modes(flag: bool) -> None:
    """Nothing tells the If's output type (untyped branches, an untyped variable: an export
    without shape inference): forward and reverse mode still differentiate through it (forward
    mode used to give zeros)."""
    h = ol.helper
    then = h.make_graph([h.make_node("Sin", ["a"], ["t"])], "then", [], [h.make_tensor_value_info("t", 0, None)])
    other = h.make_graph([h.make_node("Cos", ["a"], ["e"])], "else", [], [h.make_tensor_value_info("e", 0, None)])
    nodes = [
        h.make_node("If", ["c"], ["z"], then_branch=then, else_branch=other),
        h.make_node("Mul", ["z", "z"], ["y"]),
    ]
    a, t = np.array([0.3, 0.7]), np.array([1.0, -2.0])
    c = np.array(flag)
    f, df = (np.sin, np.cos) if flag else (np.cos, lambda v: -np.sin(v))
    want = 2 * f(a) * df(a) * t  # d(z^2) along t
    (jt,) = ol.runtime.InferenceSession(ol.TangentOfNodes(nodes, ["a"], ["y"])).run(None, {"a": a, "c": c, "fwd_a": t})
    np.testing.assert_allclose(jt, want, rtol=1e-12)
    bwd = ol.GradientOfNodes(nodes, ["a"], "y")
    (ga,) = ol.runtime.InferenceSession(bwd).run(None, {"a": a, "c": c, bwd.input[-1]: np.ones(2)})
    np.testing.assert_allclose(ga * t, want, rtol=1e-12)


def test_if_reading_an_if_whose_branches_differ_in_rank() -> None:
    """silero-vad's pattern, as torch exports it (no value_info, no shape inference run): an If
    whose branches declare float outputs of different ranks feeds an If whose branches declare
    untyped outputs. The pass types the first If's output from its branches, so the backward
    If's branch outputs get a float type (an output of type 0 is invalid: onnxruntime refuses
    the model)."""
    import onnxruntime as ort

    def branch(node: Any, rank: int | None) -> Any:
        name = node.output[0]
        out = oh.make_empty_tensor_value_info(name)  # no type, as torch declares some
        if rank:
            out = oh.make_tensor_value_info(name, TensorProto.FLOAT, ["a"] * rank)
        return oh.make_graph([node], name, [], [out])

    axes = oh.make_tensor("axes", TensorProto.INT64, [1], [0])
    unsq = branch(oh.make_node("Unsqueeze", ["x", "axes"], ["u"]), 3)
    ident = branch(oh.make_node("Identity", ["x"], ["i"]), 2)
    square = branch(oh.make_node("Mul", ["a", "a"], ["s"]), None)
    exp = branch(oh.make_node("Exp", ["a"], ["e"]), None)
    nodes = [
        oh.make_node("Constant", [], ["axes"], value=axes),
        oh.make_node("If", ["c"], ["a"], then_branch=unsq, else_branch=ident),
        oh.make_node("If", ["c"], ["r"], then_branch=square, else_branch=exp),
        oh.make_node("ReduceSum", ["r"], ["loss"], keepdims=0),
    ]
    inputs = [oh.make_tensor_value_info("c", TensorProto.BOOL, []), oh.make_tensor_value_info("x", 1, [2, 3])]
    graph = oh.make_graph(nodes, "g", inputs, [oh.make_tensor_value_info("loss", 1, [])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    bwd = ol.gradient_model(ol.load_from_string(model.SerializeToString()), ["x"], "loss")
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    for c in (True, False):
        feeds = {"c": np.array(c), "x": x}
        theirs = ort.InferenceSession(bwd.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
        ours = ol.runtime.InferenceSession(bwd).run(None, feeds)
        want = 2 * x if c else np.exp(x)
        np.testing.assert_allclose(ours[0].reshape(want.shape), want, rtol=1e-6)
        np.testing.assert_allclose(theirs[0], ours[0], rtol=1e-6)


def test_forward_mode_through_an_if_nested_in_a_branch_with_untyped_outputs() -> None:
    """An If inside an If's branch reading a value of that branch, its outputs undeclared (as
    torch exports silero-vad's): the tangent flows through it (it was taken for zero)."""
    inner = oh.make_node(
        "If",
        ["c"],
        ["r", "k"],
        then_branch=oh.make_graph(
            [oh.make_node("Exp", ["a"], ["e"]), oh.make_node("Shape", ["a"], ["ke"])],
            "then",
            [],
            [oh.make_empty_tensor_value_info("e"), oh.make_empty_tensor_value_info("ke")],
        ),
        else_branch=oh.make_graph(
            [oh.make_node("Neg", ["a"], ["n"]), oh.make_node("Shape", ["a"], ["kn"])],
            "else",
            [],
            [oh.make_empty_tensor_value_info("n"), oh.make_empty_tensor_value_info("kn")],
        ),
    )
    nodes = [oh.make_node("Sin", ["x"], ["a"]), inner, oh.make_node("Reshape", ["r", "k"], ["m"])]
    mid = oh.make_graph(nodes, "mid", [], [oh.make_empty_tensor_value_info("m")])
    cos = oh.make_graph([oh.make_node("Cos", ["x"], ["o"])], "cos", [], [oh.make_empty_tensor_value_info("o")])
    outer = oh.make_node("If", ["c"], ["y"], then_branch=mid, else_branch=cos)
    inputs = [oh.make_tensor_value_info("c", TensorProto.BOOL, []), oh.make_tensor_value_info("x", 11, [2, 3])]
    graph = oh.make_graph([outer], "g", inputs, [oh.make_tensor_value_info("y", 11, [2, 3])])
    model = ol.load_from_string(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]).SerializeToString())
    fwd = ol.TangentOfFunction(model, ["x"], ["y"])
    rng = np.random.default_rng(0)
    x, t = rng.standard_normal((2, 3)), rng.standard_normal((2, 3))
    for c, dydx in ((True, np.cos(x) * np.exp(np.sin(x))), (False, -np.sin(x))):
        got = ol.runtime.InferenceSession(fwd).run(None, {"x": x, "c": np.array(c), "fwd_x": t})[0]
        np.testing.assert_allclose(got, dydx * t, rtol=1e-12)
