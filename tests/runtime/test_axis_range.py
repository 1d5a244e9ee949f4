"""An axis outside ``[-rank, rank)`` is an error naming the node, never a wrapped-around answer.

Kernels that normalized an axis with ``axis % rank`` answered an invalid model silently:
Softmax-13 with ``axis=5`` on a matrix normalized its rows, Unsqueeze with ``axes=[7]`` on
a matrix gave shape ``[2, 1, 3]``, ReduceSum over axis 7 summed axis 1. Each row below is
such a node; the session must raise ``RuntimeFailure`` (an ``OnnxLightError``) naming it.
"""

from __future__ import annotations

import numpy as np
import pytest

from onnx_light import RuntimeFailure, TensorProto, helper, numpy_helper
from onnx_light.runtime import InferenceSession

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _const(name: str, value: list[int] | int, dtype: type = np.int64) -> object:
    return numpy_helper.from_array(np.array(value, dtype), name)


# (case, opset, op_type, extra inputs as initializers, attributes, outputs)
CASES = [
    ("Softmax-13 axis 5", 13, "Softmax", [], {"axis": 5}, 1),
    ("Softmax-13 axis -3", 13, "Softmax", [], {"axis": -3}, 1),
    ("Softmax-11 axis 5", 11, "Softmax", [], {"axis": 5}, 1),
    ("LogSoftmax-11 axis -3", 11, "LogSoftmax", [], {"axis": -3}, 1),
    ("Hardmax-11 axis 2", 11, "Hardmax", [], {"axis": 2}, 1),
    ("Flatten axis 3", 13, "Flatten", [], {"axis": 3}, 1),
    ("Flatten axis -3", 13, "Flatten", [], {"axis": -3}, 1),
    ("CumSum axis 7", 14, "CumSum", [_const("a", 7)], {}, 1),
    ("Unsqueeze axes [7]", 13, "Unsqueeze", [_const("a", [7])], {}, 1),
    ("Unsqueeze-11 axes [-4]", 11, "Unsqueeze", [], {"axes": [-4]}, 1),
    ("ReduceSum axes [7]", 13, "ReduceSum", [_const("a", [7])], {}, 1),
    ("ReduceMax-11 axes [-3]", 11, "ReduceMax", [], {"axes": [-3]}, 1),
    ("LayerNormalization axis 4", 17, "LayerNormalization", [_const("s", [1.0, 1.0, 1.0], np.float32)], {"axis": 4}, 1),
    ("TopK axis 4", 11, "TopK", [_const("k", [1])], {"axis": 4}, 2),
    ("GatherElements axis 3", 13, "GatherElements", [_const("i", [[0], [1]])], {"axis": 3}, 1),
    ("Gather scalar index axis -3", 13, "Gather", [_const("i", 0)], {"axis": -3}, 1),
    (
        "ScatterElements axis -3",
        18,
        "ScatterElements",
        [_const("i", [[0]]), _const("u", [[1.0]], np.float32)],
        {"axis": -3},
        1,
    ),
    ("Split axis -3", 18, "Split", [_const("s", [1, 2])], {"axis": -3}, 2),
    ("Slice axes [2]", 13, "Slice", [_const("b", [0]), _const("e", [1]), _const("a", [2])], {}, 1),
    ("Pad axes [-3]", 18, "Pad", [_const("p", [1, 1]), _const("c", 0.0, np.float32), _const("a", [-3])], {}, 1),
]


@pytest.mark.parametrize(("case", "opset", "op_type", "extra", "attrs", "n_out"), CASES, ids=[c[0] for c in CASES])
def test_axis_out_of_range_is_an_error(
    case: str, opset: int, op_type: str, extra: list, attrs: dict, n_out: int
) -> None:
    names = ["x", *(t.name for t in extra)]
    outputs = [f"y{k}" for k in range(n_out)]
    node = helper.make_node(op_type, names, outputs, **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", F, [2, 3])],
        [helper.make_tensor_value_info(o, F if k == 0 else I64, None) for k, o in enumerate(outputs)],
        initializer=extra,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    with pytest.raises(RuntimeFailure, match=rf"{op_type}.*out of (bounds|range)"):
        got = InferenceSession(model).run(None, {"x": x})
        pytest.fail(f"{case}: no error; got shapes {[np.shape(g) for g in got]}")


@pytest.mark.parametrize(
    ("op_type", "opset", "attrs", "want"),
    [
        ("Flatten", 13, {"axis": 2}, (6, 1)),
        ("Flatten", 13, {"axis": -2}, (1, 6)),
        ("Flatten", 13, {"axis": 0}, (1, 6)),
        ("Softmax", 13, {"axis": -2}, (2, 3)),
        ("Softmax", 11, {"axis": -1}, (2, 3)),
    ],
)
def test_axis_at_the_edges_of_the_range_still_runs(op_type: str, opset: int, attrs: dict, want: tuple) -> None:
    node = helper.make_node(op_type, ["x"], ["y"], **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", F, [2, 3])], [helper.make_tensor_value_info("y", F, None)]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    (y,) = InferenceSession(model).run(None, {"x": np.arange(6, dtype=np.float32).reshape(2, 3)})
    assert y.shape == want
