"""Gradient rules for RNN, GRU and LSTM (lowered to Scan), checked by ``gradcheck.check_gradient``.

One row per attribute that changes the lowering: directions, layout, sequence_lens
(padded steps), initial states, peepholes, clip, activations with parameters,
linear_before_reset, input_forget. Y, Y_h and Y_c all feed the loss.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from gradcheck import (
    Case,
    backward_feeds,
    check_gradient,
    check_in_onnxruntime,
    check_second_order,
    check_tangent,
    gradient,
    run_forward,
)
from onnx import helper as oh

import onnx_light as ol

_rng = np.random.default_rng(12)
T, B, I, H = 3, 2, 3, 2
_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def rnd(*shape: int) -> np.ndarray:
    return _rng.standard_normal(shape) * 0.6


def _case(
    name: str,
    op: str,
    *,
    dirs: int = 1,
    layout: int = 0,
    lens: bool = False,
    peepholes: bool = True,
    states: bool = True,
    bias: bool = True,
    loss: tuple[str, ...] = ("Y", "Y_h", "Y_c"),
    **attrs: Any,
) -> Case:
    """``peepholes``, ``states``, ``bias``: whether P, initial_h/initial_c and B are fed;
    ``loss``: the outputs that feed the loss (Y squared, Y_h and Y_c summed)."""
    g = _GATES[op]
    inputs: dict[str, np.ndarray] = {
        "X": rnd(B, T, I) if layout else rnd(T, B, I),
        "W": rnd(dirs, g * H, I),
        "R": rnd(dirs, g * H, H),
    }
    names = ["X", "W", "R", "", "", ""]
    if bias:
        inputs["Bias"] = rnd(dirs, 2 * g * H)
        names[3] = "Bias"
    if lens:
        inputs["L"] = np.array([T, 1], np.int32)
        names[4] = "L"
    if states:
        inputs["h0"] = rnd(B, dirs, H) if layout else rnd(dirs, B, H)
        names[5] = "h0"
    outs = ["Y", "Y_h"]
    if op == "LSTM":
        names += ["", ""]
        if states:
            inputs["c0"] = rnd(B, dirs, H) if layout else rnd(dirs, B, H)
            names[6] = "c0"
        if peepholes:
            inputs["P"] = rnd(dirs, 3 * H)
            names[7] = "P"
        outs.append("Y_c")
    if dirs == 2:
        attrs["direction"] = attrs.get("direction", "bidirectional")
    nodes = [oh.make_node(op, names, outs, hidden_size=H, layout=layout, **attrs)]
    terms = []
    if "Y" in loss:
        nodes += [oh.make_node("Mul", ["Y", "Y"], ["y2"]), oh.make_node("ReduceSum", ["y2"], ["s1"], keepdims=0)]
        terms.append("s1")
    for k, out in enumerate(("Y_h", "Y_c")):
        if out in loss and out in outs:
            nodes.append(oh.make_node("ReduceSum", [out], [f"s{k + 2}"], keepdims=0))
            terms.append(f"s{k + 2}")
    nodes.append(oh.make_node("Sum", terms, ["loss"]))
    xs = [n for n in inputs if n != "L"]
    # onnxruntime has no float64 RNN kernels (the loss reads the forward node's Y)
    skip = "onnxruntime has no layout=1 recurrent kernels (the full checker still runs)" if layout else None
    return Case(name, nodes, inputs, xs, ort_dtype=np.float32, skip_ort=skip)


RECURRENT_CASES = [
    _case("RNN", "RNN"),
    _case("RNN_relu_reverse_lens", "RNN", activations=["Relu"], direction="reverse", lens=True),
    _case("RNN_bidirectional_layout1", "RNN", dirs=2, layout=1, activations=["Tanh", "Softsign"]),
    _case("GRU", "GRU"),
    _case("GRU_linear_before_reset_bidir_lens", "GRU", dirs=2, linear_before_reset=1, lens=True),
    _case("GRU_clip_hardsigmoid", "GRU", clip=1.5, activations=["HardSigmoid", "Tanh"], activation_alpha=[0.3]),
    _case("LSTM", "LSTM"),
    _case("LSTM_bidirectional_lens_layout1", "LSTM", dirs=2, layout=1, lens=True),
    _case("GRU_bidirectional", "GRU", dirs=2),  # one Scan for both directions, X reversed by a Slice
    _case("LSTM_input_forget_reverse", "LSTM", input_forget=1, direction="reverse"),
    _case(
        "LSTM_activations_clip",
        "LSTM",
        clip=2.0,
        activations=["Sigmoid", "Elu", "ScaledTanh"],
        activation_alpha=[0.9, 1.2],
        activation_beta=[0.8],
    ),
    # the common attributes: written out directly (_recurrent_direct), no lowering
    _case("LSTM_direct", "LSTM", peepholes=False),
    _case("LSTM_direct_bidirectional_layout1", "LSTM", dirs=2, layout=1, peepholes=False),
    _case(
        "LSTM_direct_reverse_no_states_no_bias", "LSTM", direction="reverse", peepholes=False, states=False, bias=False
    ),
    _case("LSTM_direct_bidirectional_y_h_only", "LSTM", dirs=2, peepholes=False, loss=("Y_h",)),
    _case("LSTM_direct_y_c_only", "LSTM", peepholes=False, states=False, loss=("Y_c",)),
    _case("GRU_direct_linear_before_reset_reverse", "GRU", linear_before_reset=1, direction="reverse"),
    _case("GRU_direct_bidirectional_layout1_no_states", "GRU", dirs=2, layout=1, states=False),
    _case("GRU_direct_linear_before_reset_no_bias_y_h_only", "GRU", linear_before_reset=1, bias=False, loss=("Y_h",)),
    _case("GRU_direct_reverse_no_bias", "GRU", direction="reverse", bias=False),
    # symbolic batch (layout 1) or steps (layout 0): the run-time shapes of the direct form
    replace(_case("LSTM_direct_layout1_symbolic_n", "LSTM", layout=1, peepholes=False, states=False), dynamic=["X"]),
    replace(_case("GRU_direct_bidirectional_symbolic_steps", "GRU", dirs=2), dynamic=["X"]),
]


@pytest.mark.parametrize("case", RECURRENT_CASES, ids=lambda c: c.name)
def test_recurrent_rule(case: Case) -> None:
    check_gradient(case)
    if case.skip_ort:
        check_in_onnxruntime(case, run=False)


def test_lstm_hessian_vector_product() -> None:
    check_second_order(RECURRENT_CASES[6])


def _case_named(name: str) -> Case:
    return next(c for c in RECURRENT_CASES if c.name == name)


@pytest.mark.parametrize("name", ["LSTM_direct", "GRU_direct_linear_before_reset_reverse"])
def test_direct_hessian_vector_product(name: str) -> None:
    """Second order through the directly written backward (its Scans, Pad, Split, ...)."""
    check_second_order(_case_named(name))


@pytest.mark.parametrize("name", [c.name for c in RECURRENT_CASES])
def test_direct_form_where_it_applies(name: str) -> None:
    """The common attributes take the direct form: one Scan per GRU, two per LSTM (the cell state
    and the reverse sweep), none of the lowering's; the others keep the lowering."""
    _, bwd = gradient(_case_named(name))
    names = [a.g.name for n in bwd.node for a in n.attribute if a.type == 5]  # GRAPH
    direct = "_direct" in name or name in ("GRU", "GRU_bidirectional")
    assert any(n.endswith("vjp_step") for n in names) == direct, names


@pytest.mark.parametrize("name", ["LSTM_direct", "LSTM_direct_bidirectional_layout1", "GRU_direct_reverse_no_bias"])
def test_direct_form_copies_no_weights(name: str) -> None:
    """The direct backward reads W and R only as GEMM operands (through a Transpose, or a Split
    of R by gates for the GRU): no Concat of the weights (a copy of megabytes at crnn's sizes,
    then a Split of [dW, dR]), so x W^T and h R^T are two GEMMs and so are dW and dR."""
    _, bwd = gradient(_case_named(name))
    readers = {n.op_type for n in bwd.node if {"W", "R"} & set(n.input)}
    assert readers <= {"Transpose", "MatMul", "Split", "LSTM", "GRU"}, readers
    assert all(n.op_type != "Concat" or not {"W", "R"} & set(n.input) for n in bwd.node)


def _two_lstms(alias: bool) -> Case:
    """Two LSTM nodes of one signature (each its own inputs) in one graph; ``alias``: the second
    feeds one tensor as both initial_h and initial_c."""
    inputs: dict[str, np.ndarray] = {}
    nodes, terms = [], []
    for k in range(2):
        for name, shape in [("X", (T, B, I)), ("W", (1, 4 * H, I)), ("R", (1, 4 * H, H)), ("h0", (1, B, H))]:
            inputs[f"{name}{k}"] = rnd(*shape)
        c0 = f"h0{k}" if alias and k == 1 else f"c0{k}"
        inputs.setdefault(c0, rnd(1, B, H))
        nodes.append(
            # clip: the general lowering (the common LSTM is written out directly, uncached)
            oh.make_node(
                "LSTM", [f"X{k}", f"W{k}", f"R{k}", "", "", f"h0{k}", c0], [f"Y{k}", f"Yh{k}"], hidden_size=H, clip=50.0
            )
        )
        nodes.append(oh.make_node("Mul", [f"Y{k}", f"Yh{k}"], [f"p{k}"]))
        nodes.append(oh.make_node("ReduceSum", [f"p{k}"], [f"s{k}"], keepdims=0))
        terms.append(f"s{k}")
    nodes.append(oh.make_node("Add", terms, ["loss"]))
    return Case(f"two_lstms_alias{int(alias)}", nodes, inputs, list(inputs), ort_dtype=np.float32)


@pytest.mark.parametrize("alias", [False, True])
def test_one_signature_twice_in_one_graph(alias: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The second node's backward is a renamed copy of the first's (one pass, fresh names inside
    the Scan bodies too); with an aliased state the signature differs and it is built anew."""
    from onnx_light.onnx_extensions.gradient import _recurrent_cache

    monkeypatch.setattr(_recurrent_cache, "_CACHE", {})
    copies = []
    real = _recurrent_cache._instantiate
    monkeypatch.setattr(_recurrent_cache, "_instantiate", lambda t, ctx: copies.append(1) or real(t, ctx))
    case = _two_lstms(alias)
    gradient(case)
    assert len(copies) == (0 if alias else 1)
    check_gradient(case, ort=False)  # float64 finite differences, both nodes' inputs


def test_reregistered_rule_is_not_served_from_the_cache() -> None:
    """A template records the rules it was built with: replacing one rebuilds it."""
    import onnx_light as ol

    case = RECURRENT_CASES[6]
    reg = ol.DefaultGradRegistry()
    gradient(case, registry=reg)
    tanh = reg.lookup("", "Tanh", 21)
    assert tanh is not None and tanh.fn is not None
    calls = []

    def counting(ctx: Any, dy: str) -> Any:
        calls.append(1)
        return tanh.fn(ctx, dy)  # type: ignore[misc, call-arg]

    ol.RegisterGradientFunction("", "Tanh", counting, registry=reg)
    gradient(case, registry=reg)
    assert calls, "the cached backward was reused although the Tanh rule changed"


def _identity(x: str, y: str) -> Any:
    return oh.make_graph([oh.make_node("Identity", [x], [y])], y, [], [oh.make_tensor_value_info(y, 0, None)])


def _lstm_of_unknown_rank() -> Case:
    """An LSTM whose X comes out of an If with branches of different ranks (Unsqueeze or
    Identity, as torch exports silero-vad's "unsqueeze a 2-D input" branch): inference loses
    X's rank, which the spec fixes at 3; an If reads the LSTM's states, as silero-vad's does."""
    axes = oh.make_tensor("axes", 7, [1], [0])
    then = oh.make_graph(
        [oh.make_node("Unsqueeze", ["x2", "axes"], ["xt"])], "then", [], [oh.make_tensor_value_info("xt", 0, None)]
    )
    other = oh.make_graph(
        [oh.make_node("Identity", ["x2"], ["xe"])], "else", [], [oh.make_tensor_value_info("xe", 0, None)]
    )
    nodes = [
        oh.make_node("Constant", [], ["axes"], value=axes),
        oh.make_node("If", ["cond"], ["X"], then_branch=then, else_branch=other),
        oh.make_node("LSTM", ["X", "W", "R", "", "", "h0", "c0"], ["Y", "Y_h", "Y_c"], hidden_size=H),
        oh.make_node("If", ["cond"], ["c"], then_branch=_identity("Y_c", "ct"), else_branch=_identity("Y_h", "ce")),
        oh.make_node("Mul", ["Y", "c"], ["p"]),
        oh.make_node("ReduceSum", ["p"], ["loss"], keepdims=0),
    ]
    inputs = {"cond": np.array(True), "x2": rnd(B, I), "W": rnd(1, 4 * H, I), "R": rnd(1, 4 * H, H)}
    inputs.update(h0=rnd(1, B, H), c0=rnd(1, B, H))
    return Case("LSTM_x_of_unknown_rank", nodes, inputs, ["x2", "W", "R", "h0", "c0"], ort_dtype=np.float32)


def test_input_of_unknown_rank() -> None:
    """The lowering's Scan bodies get the ranks the spec gives the node's inputs and outputs."""
    check_gradient(_lstm_of_unknown_rank())


def test_input_of_unknown_rank_forward_mode() -> None:
    check_tangent(_lstm_of_unknown_rank())


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_direct_form_runs_zero_steps(op: str) -> None:
    """T = 0 at run time (symbolic steps): Y is empty, Y_h (and Y_c) are the initial states,
    so the states' gradients are the loss's ones and every other gradient is zero (the
    direct form's h_{s-1} tape once had one step against X's none)."""
    case = replace(_case(f"{op}_zero_steps", op, **({"peepholes": False} if op == "LSTM" else {})), dynamic=["X"])
    model, bwd = gradient(case)
    feeds = {k: np.asarray(v, np.float64) for k, v in case.inputs.items()}
    feeds["X"] = np.zeros((0, B, I))
    y = run_forward(model, feeds, "loss")
    grads = dict(
        zip(case.xs, ol.runtime.InferenceSession(bwd).run(None, backward_feeds(bwd, feeds, np.ones_like(y), model)))
    )
    for x, g in grads.items():
        want = np.ones_like(feeds[x]) if x in ("h0", "c0") else np.zeros_like(feeds[x])
        np.testing.assert_array_equal(g, want, err_msg=f"grad_{x}")


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
@pytest.mark.parametrize("layout", [0, 1])
def test_direct_form_runs_an_empty_batch(op: str, layout: int) -> None:
    """B = 0, static (layout 0) or symbolic and 0 at run time (layout 1): every gradient is
    zero and X's is empty (the Scan tapes were reshaped with a literal 0 for B, which
    Reshape reads as "copy that dim", so the Scan failed on [D, 0, B', H] tapes)."""
    extra = {"peepholes": False} if op == "LSTM" else {}
    case = _case(f"{op}_empty_batch", op, dirs=2, layout=layout, **extra)
    states = [n for n in ("h0", "c0") if n in case.inputs]

    axis = 0 if layout else 1  # B's axis in X and the states

    def empty(name: str, v: np.ndarray) -> np.ndarray:
        return np.zeros(v.shape[:axis] + (0,) + v.shape[axis + 1 :]) if name in ("X", *states) else v

    feeds = {k: empty(k, np.asarray(v, np.float64)) for k, v in case.inputs.items()}
    case = replace(case, inputs=feeds) if layout == 0 else replace(case, dynamic=["X", *states])
    model, bwd = gradient(case)
    y = run_forward(model, feeds, "loss")
    grads = ol.runtime.InferenceSession(bwd).run(None, backward_feeds(bwd, feeds, np.ones_like(y), model))
    for x, g in zip(case.xs, grads):
        np.testing.assert_array_equal(g, np.zeros_like(feeds[x]), err_msg=f"grad_{x}")
