"""Names a rule emits never repeat a name defined inside a subgraph of the source: a Loop or
Scan body whose values are named like the pass's own (``<stem>_grad<n>``, as in a backward
function differentiated again) is differentiated to the right numbers."""

from __future__ import annotations

from typing import Any

import numpy as np
from gradcheck import Case, check_gradient
from onnx import TensorProto
from onnx import helper as oh

D = TensorProto.DOUBLE


def _vi(name: str, shape: list[Any], dtype: int = D) -> Any:
    return oh.make_tensor_value_info(name, dtype, shape)


def _body_named_like_the_pass(count: int = 40) -> Any:
    """h' = sin(h) * w through a chain of Identity nodes named as the pass names its values."""
    names = [f"{stem}_grad{n}" for n in range(1, count + 1) for stem in ("vjp_mul", "vjp_sum", "Mul", "h")]
    chain = [oh.make_node("Sin", ["h"], [names[0]])]
    chain += [oh.make_node("Identity", [a], [b]) for a, b in zip(names, names[1:])]
    chain += [oh.make_node("Mul", [names[-1], "w"], ["h_next"]), oh.make_node("Identity", ["c"], ["c_out"])]
    return oh.make_graph(
        chain,
        "named_like_the_pass",
        [_vi("i", [], TensorProto.INT64), _vi("c", [], TensorProto.BOOL), _vi("h", [2, 3])],
        [_vi("c_out", [], TensorProto.BOOL), _vi("h_next", [2, 3])],
    )


def test_loop_body_with_the_pass_own_names() -> None:
    rng = np.random.default_rng(3)
    case = Case(
        "Loop_body_named_like_the_pass",
        [
            oh.make_node("Loop", ["M", "", "h0"], ["hf"], body=_body_named_like_the_pass()),
            oh.make_node("ReduceSumSquare", ["hf"], ["loss"], keepdims=0),
        ],
        {"M": np.array(3, np.int64), "h0": rng.standard_normal((2, 3)), "w": rng.standard_normal((2, 3))},
        ["h0", "w"],
    )
    check_gradient(case)
