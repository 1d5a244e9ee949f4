"""Gradient rules of the sequence ops, checked by ``gradcheck.check_gradient``.

The rows are what torch's tensor_split, unbind, hstack/vstack and list code export to:
a sequence read several times (its gradients summed element-wise), elements never read
(zeros), positions negative, constant (initializers) or known only at run time, and
sequences whose length only the run tells (SplitToSequence of a fed size).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from gradcheck import Case, check_gradient, to_ours
from onnx import TensorProto
from onnx import helper as oh

import onnx_light as ol

D = TensorProto.DOUBLE
_rng = np.random.default_rng(11)


def rnd(*shape: int) -> np.ndarray:
    return _rng.standard_normal(shape)


def node(op: str, inputs: list[str], outputs: list[str], **attrs: Any) -> Any:
    return oh.make_node(op, inputs, outputs, **attrs)


def i64(*values: int) -> np.ndarray:
    return np.array(values if len(values) != 1 else values[0], np.int64)


def _loss(value: str, weight: str = "w") -> list[Any]:
    """loss = ReduceSum(Sin(value) * weight): a non-linear read, so each element matters."""
    return [
        node("Sin", [value], [f"{value}_sin"]),
        node("Mul", [f"{value}_sin", weight], [f"{value}_w"]),
        node("ReduceSum", [f"{value}_w"], ["loss"], keepdims=0),
    ]


_TANH_BODY = oh.make_graph(
    [node("Tanh", ["e"], ["e_t"]), node("Mul", ["e_t", "e"], ["e_out"])],
    "tanh_times",
    [oh.make_tensor_value_info("e", D, None)],
    [oh.make_tensor_value_info("e_out", D, None)],
)

_MUL_BODY = oh.make_graph(  # two sequences, element by element
    [node("Mul", ["p", "q"], ["pq"]), node("Sin", ["pq"], ["pq_out"])],
    "mul_sin",
    [oh.make_tensor_value_info("p", D, None), oh.make_tensor_value_info("q", D, None)],
    [oh.make_tensor_value_info("pq_out", D, None)],
)

# what the dynamo exporter emits for torch.atleast_1d over a list: a SequenceMap whose body's
# input and output are untyped and which holds an If on the element's rank
_ATLEAST_1D_BODY = oh.make_graph(
    [
        node("Shape", ["e"], ["e_shape"]),
        node("Size", ["e_shape"], ["e_rank"]),
        node("Constant", [], ["e_zero"], value=oh.make_tensor("e_zero", TensorProto.INT64, [], [0])),
        node("Equal", ["e_rank", "e_zero"], ["e_scalar"]),
        node(
            "If",
            ["e_scalar"],
            ["e_out"],
            then_branch=oh.make_graph(
                [node("Constant", [], ["one_d"], value_ints=[1]), node("Reshape", ["e", "one_d"], ["e_1d"])],
                "then",
                [],
                [oh.make_tensor_value_info("e_1d", TensorProto.UNDEFINED, None)],
            ),
            else_branch=oh.make_graph(
                [node("Sin", ["e"], ["e_sin"])],
                "else",
                [],
                [oh.make_tensor_value_info("e_sin", TensorProto.UNDEFINED, None)],
            ),
        ),
    ],
    "atleast_1d",
    [oh.make_tensor_value_info("e", TensorProto.UNDEFINED, None)],
    [oh.make_tensor_value_info("e_out", TensorProto.UNDEFINED, None)],
)

SEQUENCE_CASES = [
    # tensor_split: chunks of 2 and 3 rows, read first and last (twice: gradients summed)
    Case(
        "SplitToSequence_At_sum",
        [
            node("SplitToSequence", ["x", "split"], ["s"], axis=0),
            node("SequenceAt", ["s", "zero"], ["a"]),
            node("SequenceAt", ["s", "minus_one"], ["b"]),
            node("Mul", ["a", "a"], ["aa"]),
            node("ReduceSum", ["aa"], ["ra"], keepdims=0),
            node("Sin", ["b"], ["bs"]),
            node("ReduceSum", ["bs"], ["rb"], keepdims=0),
            node("Add", ["ra", "rb"], ["loss"]),
        ],
        {"x": rnd(5, 3), "split": i64(2, 3), "zero": i64(0), "minus_one": i64(-1)},
        ["x"],
        initializers=["split", "zero", "minus_one"],
    ),
    # an element never read gets zeros; the position is fed (known only at run time)
    Case(
        "SplitToSequence_scalar_split_At_fed_position",
        [
            node("SplitToSequence", ["x", "two"], ["s"], axis=1),
            node("SequenceAt", ["s", "pos"], ["a"]),
            *_loss("a"),
        ],
        {"x": rnd(3, 5), "two": i64(2), "pos": i64(-2), "w": rnd(3, 2)},
        ["x", "w"],
        initializers=["two"],
    ),
    # unbind + stack: the axis dropped, then stacked on another one
    Case(
        "SplitToSequence_unbind_ConcatFromSequence_stack",
        [
            node("SplitToSequence", ["x"], ["s"], axis=1, keepdims=0),
            node("ConcatFromSequence", ["s"], ["st"], axis=-1, new_axis=1),
            *_loss("st"),
        ],
        {"x": rnd(2, 4, 3), "w": rnd(2, 3, 4)},
        ["x", "w"],
    ),
    # hstack of three tensors of different widths
    Case(
        "SequenceConstruct_ConcatFromSequence_hstack",
        [
            node("SequenceConstruct", ["a", "b", "c"], ["s"]),
            node("ConcatFromSequence", ["s"], ["h"], axis=1),
            *_loss("h"),
        ],
        {"a": rnd(2, 1), "b": rnd(2, 3), "c": rnd(2, 2), "w": rnd(2, 6)},
        ["a", "b", "c", "w"],
    ),
    # vstack along a negative axis, one input read twice (its two gradients add)
    Case(
        "SequenceConstruct_ConcatFromSequence_vstack_repeated",
        [
            node("SequenceConstruct", ["a", "b", "a"], ["s"]),
            node("ConcatFromSequence", ["s"], ["v"], axis=-2),
            *_loss("v"),
        ],
        {"a": rnd(1, 3), "b": rnd(2, 3), "w": rnd(4, 3)},
        ["a", "b", "w"],
    ),
    # insert before the last element (a negative position), erase the first, read one
    Case(
        "SequenceInsert_Erase_At",
        [
            node("SequenceConstruct", ["a", "b"], ["s"]),
            node("SequenceInsert", ["s", "c", "minus_one"], ["s2"]),
            node("SequenceErase", ["s2", "zero"], ["s3"]),
            node("ConcatFromSequence", ["s3"], ["st"], axis=0, new_axis=1),
            node("SequenceAt", ["s2", "one"], ["c_again"]),
            node("Mul", ["st", "c_again"], ["m"]),
            *_loss("m"),
        ],
        {
            "a": rnd(2, 3),
            "b": rnd(2, 3),
            "c": rnd(2, 3),
            "w": rnd(2, 2, 3),
            "zero": i64(0),
            "one": i64(1),
            "minus_one": i64(-1),
        },
        ["a", "b", "c", "w"],
        initializers=["zero", "one", "minus_one"],
    ),  # fmt: skip
    # positions known only at run time (fed), inserted at the back and erased from it
    Case(
        "SequenceInsert_Erase_fed_positions",
        [
            node("SequenceConstruct", ["a", "b"], ["s"]),
            node("SequenceInsert", ["s", "c", "p_ins"], ["s2"]),
            node("SequenceInsert", ["s2", "a"], ["s3"]),
            node("SequenceErase", ["s3", "p_del"], ["s4"]),
            node("SequenceErase", ["s4"], ["s5"]),
            node("ConcatFromSequence", ["s5"], ["st"], axis=0),
            *_loss("st"),
        ],
        {"a": rnd(1, 3), "b": rnd(2, 3), "c": rnd(3, 3), "w": rnd(5, 3), "p_ins": i64(-1), "p_del": i64(-4)},
        ["a", "b", "c", "w"],
    ),
    # a SequenceMap over one sequence, and over two in step
    Case(
        "SequenceMap_one_and_two_sequences",
        [
            node("SplitToSequence", ["x"], ["s"], axis=0, keepdims=1),
            node("SequenceMap", ["s"], ["t"], body=_TANH_BODY),
            node("SequenceMap", ["t", "s"], ["u"], body=_MUL_BODY),
            node("ConcatFromSequence", ["u"], ["c"], axis=0),
            *_loss("c"),
        ],
        {"x": rnd(3, 2), "w": rnd(3, 2)},
        ["x", "w"],
    ),
    Case(
        "SequenceMap_untyped_body_with_If",
        [
            node("SplitToSequence", ["x"], ["s"], axis=0, keepdims=1),
            node("SequenceMap", ["s"], ["t"], body=_ATLEAST_1D_BODY),
            node("ConcatFromSequence", ["t"], ["c"], axis=0),
            *_loss("c"),
        ],
        {"x": rnd(3, 2), "w": rnd(3, 2)},
        ["x", "w"],
    ),
]


@pytest.mark.parametrize("case", SEQUENCE_CASES, ids=lambda c: c.name)
def test_sequence_rule(case: Case) -> None:
    check_gradient(case)


def test_sequence_map_untyped_body_tangent_without_shape_inference() -> None:
    """An export's SequenceMap body is untyped and its If's branches too (no shape inference
    ran, as the dynamo exporter leaves it): the tangent still flows through the If, not zeros."""
    case = next(c for c in SEQUENCE_CASES if c.name == "SequenceMap_untyped_body_with_If")
    inputs = [oh.make_tensor_value_info(k, D, list(v.shape)) for k, v in case.inputs.items()]
    graph = oh.make_graph(case.nodes, "untyped", inputs, [oh.make_tensor_value_info("loss", D, [])])
    model = to_ours(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)]), ol.ModelProto)
    fwd = ol.TangentOfFunction(model, ["x"], ["loss"])
    x, w = case.inputs["x"], case.inputs["w"]
    t = _rng.standard_normal(x.shape)
    (jt,) = ol.runtime.InferenceSession(fwd).run(None, {"x": x, "w": w, "fwd_x": t})
    sess = ol.runtime.InferenceSession(model)
    h = 1e-6
    numeric = (sess.run(None, {"x": x + h * t, "w": w})[0] - sess.run(None, {"x": x - h * t, "w": w})[0]) / (2 * h)
    assert abs(float(jt) - float(numeric)) <= 1e-6 * max(1.0, abs(float(numeric))), (float(jt), float(numeric))
