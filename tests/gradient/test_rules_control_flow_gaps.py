"""Issue 10's claims that no other row checks on its own.

- A Scan with two states and two scan inputs and outputs whose axes and directions all differ
  (one forward, one reverse, on axes 0 and 1 each way): the backward Scan maps each to its own.
- An RNN/GRU/LSTM's padded steps (beyond ``sequence_lens``) contribute nothing: X's gradient
  there is exactly zero, in both directions and both layouts, with Y, Y_h and Y_c all in the loss.
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
_rng = np.random.default_rng(31)


def _vi(name: str, shape: list[Any] | None) -> Any:
    return oh.make_tensor_value_info(name, D, shape)


# states (h (2, 3), c (2, 3)); scan inputs x1_t (2, 3), x2_t (2, 3); scan outputs y1_t (2, 3), y2_t (3,)
_TWO_BY_TWO = oh.make_graph(
    [
        oh.make_node("MatMul", ["h", "W"], ["hw"]),
        oh.make_node("Add", ["hw", "x1"], ["pre"]),
        oh.make_node("Tanh", ["pre"], ["h_next"]),
        oh.make_node("Mul", ["c", "x2"], ["cx"]),
        oh.make_node("Sin", ["cx"], ["c_sin"]),
        oh.make_node("Add", ["c_sin", "h_next"], ["c_next"]),
        oh.make_node("Mul", ["h_next", "c_next"], ["y1"]),
        oh.make_node("ReduceSum", ["c_next", "axis0"], ["y2"], keepdims=0),
    ],
    "two_by_two",
    [_vi("h", [2, 3]), _vi("c", [2, 3]), _vi("x1", [2, 3]), _vi("x2", [2, 3])],
    [_vi("h_next", [2, 3]), _vi("c_next", [2, 3]), _vi("y1", [2, 3]), _vi("y2", [3])],
)


def _scan_mixed(name: str, in_dirs: list[int], out_dirs: list[int]) -> Case:
    """x1 scanned on axis 0, x2 on axis 1; y1 stacked on axis 1, y2 on axis 0."""
    nodes = [
        oh.make_node(
            "Scan",
            ["h0", "c0", "x1s", "x2s"],
            ["hf", "cf", "y1s", "y2s"],
            body=_TWO_BY_TWO,
            num_scan_inputs=2,
            scan_input_axes=[0, 1],
            scan_input_directions=in_dirs,
            scan_output_axes=[1, 0],
            scan_output_directions=out_dirs,
        ),
        # weights that differ per step: a step read from the wrong end changes the loss
        oh.make_node("Mul", ["y1s", "k1"], ["w1"]),
        oh.make_node("Mul", ["y2s", "k2"], ["w2"]),
        oh.make_node("ReduceSum", ["w1"], ["r1"], keepdims=0),
        oh.make_node("ReduceSumSquare", ["w2"], ["r2"], keepdims=0),
        oh.make_node("ReduceSum", ["hf"], ["r3"], keepdims=0),
        oh.make_node("ReduceSumSquare", ["cf"], ["r4"], keepdims=0),
        oh.make_node("Sum", ["r1", "r2", "r3", "r4"], ["loss"]),
    ]
    t = 4
    inputs = {
        "h0": _rng.standard_normal((2, 3)),
        "c0": _rng.standard_normal((2, 3)),
        "x1s": _rng.standard_normal((t, 2, 3)) * 0.5,
        "x2s": _rng.standard_normal((2, t, 3)) * 0.5,
        "W": _rng.standard_normal((3, 3)) * 0.5,
        "k1": _rng.standard_normal((2, t, 3)),
        "k2": _rng.standard_normal((t, 3)),
        "axis0": np.array([0], np.int64),
    }
    return Case(name, nodes, inputs, ["h0", "c0", "x1s", "x2s", "W"], initializers=["axis0"])


SCAN_MIXED_CASES = [
    _scan_mixed("Scan_two_by_two_in_fwd_rev_out_rev_fwd", [0, 1], [1, 0]),
    _scan_mixed("Scan_two_by_two_in_rev_fwd_out_fwd_rev", [1, 0], [0, 1]),
]


@pytest.mark.parametrize("case", SCAN_MIXED_CASES, ids=lambda c: c.name)
def test_scan_mixed_axes_and_directions(case: Case) -> None:
    check_gradient(case)


_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_padded_steps_get_no_gradient(op: str, layout: int, direction: str) -> None:
    """X's gradient is exactly zero at the steps beyond each batch entry's length, and the
    backward function matches finite differences (Y, Y_h and Y_c all in the loss)."""
    t, b, i, h = 4, 3, 2, 2
    dirs = 2 if direction == "bidirectional" else 1
    g = _GATES[op]
    lens = np.array([4, 1, 2], np.int32)
    x = _rng.standard_normal((b, t, i) if layout else (t, b, i))
    inputs = {
        "X": x,
        "W": _rng.standard_normal((dirs, g * h, i)) * 0.6,
        "R": _rng.standard_normal((dirs, g * h, h)) * 0.6,
    }
    inputs["L"] = lens
    outs = ["Y", "Y_h", "Y_c"] if op == "LSTM" else ["Y", "Y_h"]
    nodes = [oh.make_node(op, ["X", "W", "R", "", "L"], outs, hidden_size=h, layout=layout, direction=direction)]
    for o in outs:
        nodes += [oh.make_node("Sin", [o], [f"{o}_s"]), oh.make_node("ReduceSum", [f"{o}_s"], [f"{o}_r"], keepdims=0)]
    nodes.append(oh.make_node("Sum", [f"{o}_r" for o in outs], ["loss"]))
    case = Case(f"{op}_padded", nodes, inputs, ["X", "W", "R"], skip_ort="checked by the rule tables")
    check_gradient(case, ort=False)
    _, bwd = gradient(case)
    feeds = {"X": x, "W": inputs["W"], "R": inputs["R"], "L": lens, bwd.input[-1]: np.ones(())}
    (gx,) = ol.runtime.InferenceSession(bwd).run(["grad_X"], {n: feeds[n] for n in bwd.input})
    steps = gx if not layout else gx.swapaxes(0, 1)  # (T, B, I)
    for entry, n in enumerate(lens):
        assert np.all(steps[n:, entry] == 0), f"padded steps of entry {entry} got {steps[n:, entry]}"
        assert np.all(np.abs(steps[:n, entry]).sum(axis=-1) > 0), "a step inside the length got no gradient"


def _i64(v: int) -> np.ndarray:
    return np.array(v, np.int64)


# SequenceAt at constant positions of every kind (its gradient keeps a known position as it is)
SEQUENCE_AT_CONSTANT_CASES = [
    Case(
        "SequenceAt_constant_positions",
        [
            oh.make_node("SplitToSequence", ["x"], ["s"], axis=0, keepdims=0),
            oh.make_node("SequenceAt", ["s", "p0"], ["a"]),
            oh.make_node("SequenceAt", ["s", "p2"], ["b"]),
            oh.make_node("SequenceAt", ["s", "m1"], ["c"]),
            oh.make_node("SequenceAt", ["s", "m2"], ["d"]),
            oh.make_node("SequenceAt", ["s", "m4"], ["e"]),
            oh.make_node("Mul", ["a", "b"], ["ab"]),
            oh.make_node("Mul", ["c", "d"], ["cd"]),
            oh.make_node("Sin", ["e"], ["es"]),
            oh.make_node("Sum", ["ab", "cd", "es"], ["t"]),
            oh.make_node("ReduceSum", ["t"], ["loss"], keepdims=0),
        ],
        {
            "x": _rng.standard_normal((4, 3)),
            "p0": _i64(0),
            "p2": _i64(2),
            "m1": _i64(-1),
            "m2": _i64(-2),
            "m4": _i64(-4),
        },
        ["x"],
        initializers=["p0", "p2", "m1", "m2", "m4"],
    )
]


@pytest.mark.parametrize("case", SEQUENCE_AT_CONSTANT_CASES, ids=lambda c: c.name)
def test_sequence_at_constant_positions(case: Case) -> None:
    check_gradient(case)


def _grow_body(h_shape: list[Any]) -> Any:
    """h' = Concat(h, sin(h[-1:] * w)): torch's ``h = torch.cat([h, f(h[-1:])])`` in a loop;
    ``h_shape``: the body input's declared shape (torch declares the first iteration's)."""
    return oh.make_graph(
        [
            oh.make_node("Slice", ["h", "m1", "big", "z"], ["last"]),
            oh.make_node("Mul", ["last", "w"], ["lw"]),
            oh.make_node("Sin", ["lw"], ["nxt"]),
            oh.make_node("Concat", ["h", "nxt"], ["h2"], axis=0),
            oh.make_node("Identity", ["c"], ["co"]),
        ],
        "grow",
        [
            oh.make_tensor_value_info("i", TensorProto.INT64, []),
            oh.make_tensor_value_info("c", TensorProto.BOOL, []),
            _vi("h", h_shape),
        ],
        [oh.make_tensor_value_info("co", TensorProto.BOOL, []), _vi("h2", ["n_out", 2])],
    )


def _grow_case(name: str, h_shape: list[Any], trips: int) -> Case:
    return Case(
        name,
        [
            oh.make_node("Loop", ["M", "", "h0"], ["hf"], body=_grow_body(h_shape)),
            oh.make_node("Sin", ["hf"], ["s"]),
            oh.make_node("ReduceMean", ["s"], ["loss"], keepdims=0),  # the count: the final rows
        ],
        {
            "M": np.array(trips, np.int64),
            "h0": _rng.standard_normal((1, 2)),
            "w": _rng.standard_normal(2),
            "m1": np.array([-1], np.int64),
            "big": np.array([1 << 30], np.int64),
            "z": np.array([0], np.int64),
        },
        ["h0", "w"],
        initializers=["m1", "big", "z"],
    )


# a carried tensor whose shape changes: its tape is a list, its type after the Loop unknown in dim 0
GROWING_LOOP_CASES = [
    _grow_case("Loop_concat_grows_declared_first_shape", [1, 2], 3),
    _grow_case("Loop_concat_grows_symbolic", ["n", 2], 4),
    _grow_case("Loop_concat_grows_zero_iterations", [1, 2], 0),
]


@pytest.mark.parametrize("case", GROWING_LOOP_CASES, ids=lambda c: c.name)
def test_loop_growing_carried_tensor(case: Case) -> None:
    check_gradient(case)


def to_ours_graph(graph: Any) -> Any:
    """An onnx GraphProto read with our codec."""
    return ol.GraphProto.FromString(graph.SerializeToString())


def test_loop_output_type_joins_the_iterations() -> None:
    """The pass's inference types a carried output by what one iteration keeps: a dim the body
    changes is unknown (it took the first iteration's size, [2, 2] here: a wrong static shape)."""
    from onnx_light.onnx_core._infer_control import _loop

    node = ol.helper.make_node("Loop", ["M", "", "h0"], ["hf"], body=to_ours_graph(_grow_body([1, 2])))
    types = {"M": ol.onnx_core.gradient.ValueType(7, ()), "h0": ol.onnx_core.gradient.ValueType(11, (1, 2))}
    types["w"] = ol.onnx_core.gradient.ValueType(11, (2,))
    (hf,) = _loop(node, types, {}, 21, [])
    assert hf.shape == (None, 2), hf


_READS_A_LIST = oh.make_graph(
    [
        oh.make_node("SequenceAt", ["s", "one"], ["row"]),
        oh.make_node("Mul", ["h", "row"], ["hr"]),
        oh.make_node("Add", ["hr", "xt"], ["pre"]),
        oh.make_node("Tanh", ["pre"], ["h_next"]),
    ],
    "reads_a_list",
    [_vi("h", [3]), _vi("xt", [3])],
    [_vi("h_next", [3]), _vi("h_next", [3])],
)
_READS_A_LIST.output[1].name = "y"
_READS_A_LIST.node.append(oh.make_node("Identity", ["h_next"], ["y"]))

# a Scan body reading a list built outside: refused (a Scan's state holds tensors only)
_SCAN_READS_A_LIST = Case(
    "Scan_body_reads_a_captured_list",
    [
        oh.make_node("SplitToSequence", ["m"], ["s"], axis=0, keepdims=0),
        oh.make_node("Scan", ["h0", "x"], ["hf", "ys"], body=_READS_A_LIST, num_scan_inputs=1),
        oh.make_node("Sin", ["ys"], ["ss"]),
        oh.make_node("ReduceSum", ["ss"], ["r1"], keepdims=0),
        oh.make_node("ReduceSum", ["hf"], ["r2"], keepdims=0),
        oh.make_node("Add", ["r1", "r2"], ["loss"]),
    ],
    {
        "m": _rng.standard_normal((2, 3)),
        "h0": _rng.standard_normal(3),
        "x": _rng.standard_normal((4, 3)),
        "one": np.array(1, np.int64),
    },
    ["m", "h0", "x"],
    initializers=["one"],
)


def test_scan_body_reading_a_captured_list_is_refused() -> None:
    """It crashed at run time (a sequence added like a tensor in the backward Scan's state)."""
    with pytest.raises(ol.GradientError, match="reads the list 's' from the outer scope") as info:
        gradient(_SCAN_READS_A_LIST)
    assert "ai.onnx::Scan" in str(info.value)


_LOOP_READS_A_LIST = oh.make_graph(
    [
        oh.make_node("Constant", [], ["one_in"], value=oh.make_tensor("one_in", TensorProto.INT64, [], [1])),
        oh.make_node("SequenceAt", ["s", "one_in"], ["row"]),
        oh.make_node("Mul", ["h", "row"], ["hr"]),
        oh.make_node("Tanh", ["hr"], ["h_next"]),
        oh.make_node("Identity", ["c"], ["co"]),
        oh.make_node("Sin", ["h_next"], ["y"]),
    ],
    "loop_reads_a_list",
    [
        oh.make_tensor_value_info("i", TensorProto.INT64, []),
        oh.make_tensor_value_info("c", TensorProto.BOOL, []),
        _vi("h", [3]),
    ],
    [oh.make_tensor_value_info("co", TensorProto.BOOL, []), _vi("h_next", [3]), _vi("y", [3])],
)

# a Loop body reading a list built outside: the list's gradient accumulates element-wise
CAPTURED_LIST_CASES = [
    Case(
        "Loop_body_reads_a_captured_list",
        [
            oh.make_node("SplitToSequence", ["m"], ["s"], axis=0, keepdims=0),
            oh.make_node("Loop", ["M", "", "h0"], ["hf", "ys"], body=_LOOP_READS_A_LIST),
            oh.make_node("ReduceSumSquare", ["ys"], ["r1"], keepdims=0),
            oh.make_node("ReduceSum", ["hf"], ["r2"], keepdims=0),
            oh.make_node("Add", ["r1", "r2"], ["loss"]),
        ],
        {
            "m": _rng.standard_normal((2, 3)),
            "h0": _rng.standard_normal(3),
            "M": np.array(3, np.int64),
            "one": np.array(1, np.int64),
        },
        ["m", "h0"],
        initializers=["one"],
    )
]


@pytest.mark.parametrize("case", CAPTURED_LIST_CASES, ids=lambda c: c.name)
def test_loop_body_reads_a_captured_list(case: Case) -> None:
    check_gradient(case)
