"""Op expansion (``onnx_core/ops/_expand.py``): each expansion computes what the op's kernel
computes, on the runtime, at the node's types; the static bodies are the spec's."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from onnx_light import helper
from onnx_light.onnx_core.dtypes import np_dtype_to_tensor_dtype
from onnx_light.onnx_core.ops import ExpansionError, expand, has_expansion
from onnx_light.runtime import InferenceSession

RNG = np.random.default_rng(7)


def normal(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape)


def _run(nodes: list[Any], names: list[str], inputs: list[np.ndarray | None], outs: list[str], opset: int) -> list[Any]:
    given = [(n, a) for n, a in zip(names, inputs) if a is not None]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, np_dtype_to_tensor_dtype(a.dtype), list(a.shape)) for n, a in given],
        [helper.make_tensor_value_info(o, 0, None) for o in outs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return InferenceSession(model).run(None, dict(given))


def expansion_vs_kernel(
    op: str, inputs: list[np.ndarray | None], attrs: dict[str, Any], n_out: int, opset: int
) -> None:
    """The node run by its kernel and by its expansion (at the inputs' types) agree."""
    names = [f"i{k}" if a is not None else "" for k, a in enumerate(inputs)]
    outs = [f"o{k}" for k in range(n_out)]
    node = helper.make_node(op, names, outs, **attrs)
    types = {n: (np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in zip(names, inputs) if a is not None}
    counter = itertools.count()
    body = expand(node, lambda n: types.get(n, (0, None)), opset, lambda p: f"{p}_{next(counter)}")
    assert body is not None and op not in {n.op_type for n in body}
    assert all(n.name.startswith(f"{op}(o0)/") for n in body)  # errors name the expanded node
    want = _run([node], names, inputs, outs, opset)
    got = _run(body, names, inputs, outs, opset)
    for k, (g, w) in enumerate(zip(got, want)):
        tol = 1e-10 if np.asarray(w).dtype == np.float64 else 1e-5  # float32: the window ops
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=f"{op} {attrs} output {k}")


_Q, _K, _V = normal(2, 4, 3, 8), normal(2, 2, 5, 8), normal(2, 2, 5, 6)
_PK, _PV = normal(2, 2, 2, 8), normal(2, 2, 2, 6)
_BOOL = RNG.random((2, 1, 3, 7)) > 0.3
_BOOL[..., 0] = True
_BOOL[0, 0, 1] = False  # one fully masked row: zero output, not NaN

ROWS = [
    ("Attention", [_Q, _K, _V], {}, 4, 23),
    ("Attention", [_Q, _K, _V], {"is_causal": 1, "softcap": 2.0, "qk_matmul_output_mode": 1}, 4, 23),
    ("Attention", [_Q, _K, _V, _BOOL, _PK, _PV], {"is_causal": 1, "qk_matmul_output_mode": 3}, 4, 23),
    ("Attention", [_Q, _K, _V, normal(3, 4)], {"qk_matmul_output_mode": 2, "scale": 0.2}, 4, 23),
    ("Attention", [_Q, _K, _V, None, None, None, np.array([3, 5])], {"is_causal": 1, "left_window_size": 1}, 1, 25),
    ("Attention", [_Q, _K, _V], {"left_window_size": 1, "right_window_size": 2}, 1, 25),
    (
        "Attention",
        [normal(2, 3, 16), normal(2, 5, 8), normal(2, 5, 8)],
        {"q_num_heads": 4, "kv_num_heads": 2, "softmax_precision": 1},
        1,
        23,
    ),
    (
        "RotaryEmbedding",
        [normal(2, 3, 5, 8), normal(7, 3), normal(7, 3), RNG.integers(0, 7, (2, 5))],
        {"rotary_embedding_dim": 6},
        1,
        23,
    ),
    ("RotaryEmbedding", [normal(2, 3, 5, 8), normal(2, 5, 4), normal(2, 5, 4)], {"interleaved": 1}, 1, 23),
    (
        "RotaryEmbedding",
        [normal(2, 5, 24), normal(7, 3), normal(7, 3), RNG.integers(0, 7, (2, 5))],
        {"interleaved": 1, "rotary_embedding_dim": 6, "num_heads": 3},
        1,
        23,
    ),
    (
        "CausalConvWithState",
        [normal(2, 3, 6), normal(3, 1, 4), normal(3), normal(2, 3, 3)],
        {"activation": "silu"},
        2,
        27,
    ),
    ("CausalConvWithState", [normal(2, 3, 6), normal(3, 1, 1)], {}, 2, 27),
    (
        "LinearAttention",
        [normal(2, 5, 12), normal(2, 5, 6), normal(2, 5, 4)],
        {"q_num_heads": 4, "kv_num_heads": 2, "update_rule": "linear"},
        2,
        27,
    ),
    (
        "LinearAttention",
        [normal(2, 5, 12), normal(2, 5, 6), normal(2, 5, 4), normal(2, 2, 3, 2), -RNG.random((2, 5, 6))],
        {"q_num_heads": 4, "kv_num_heads": 2, "update_rule": "gated", "scale": 0.3},
        2,
        27,
    ),
    (
        "LinearAttention",
        [normal(2, 5, 12), normal(2, 5, 6), normal(2, 5, 4), None, -RNG.random((2, 5, 2)), RNG.random((2, 5, 1))],
        {"q_num_heads": 4, "kv_num_heads": 2},
        2,
        27,
    ),
    ("CenterCropPad", [normal(3, 5, 6), np.array([4, 9])], {"axes": [1, -1]}, 1, 18),
    ("CenterCropPad", [normal(3, 5, 6), np.array([2, 7, 3])], {}, 1, 18),
    # static bodies (the spec's data)
    ("Swish", [normal(3, 4)], {"alpha": 0.7}, 1, 24),
    ("SwiGLU", [normal(3, 4), normal(3, 4)], {}, 1, 28),
    ("Celu", [normal(3, 4)], {"alpha": 0.7}, 1, 28),
    ("Mish", [normal(3, 4)], {}, 1, 22),
    ("MeanVarianceNormalization", [normal(2, 3, 4)], {"axes": [0, 2]}, 1, 18),
    ("HannWindow", [np.array(8)], {"periodic": 0}, 1, 17),
]


@pytest.mark.parametrize("op,inputs,attrs,n_out,opset", ROWS, ids=[f"{r[0]}-{i}" for i, r in enumerate(ROWS)])
def test_expansion_matches_kernel(op: str, inputs: list[Any], attrs: dict[str, Any], n_out: int, opset: int) -> None:
    expansion_vs_kernel(op, inputs, attrs, n_out, opset)


def test_no_expansion_before_the_op_exists() -> None:
    assert has_expansion("", "Attention", 23) and not has_expansion("", "Attention", 22)
    assert has_expansion("", "Celu", 28) and not has_expansion("", "Celu", 22)  # Celu-12 has no body
    node = helper.make_node("Sigmoid", ["x"], ["y"])
    assert expand(node, lambda n: (1, (2,)), 21, str) is None


@pytest.mark.parametrize(
    "node,shapes,message",
    [
        (helper.make_node("Attention", ["q", "k", "v"], ["y"], name="a"), {}, "rank of Q"),
        (helper.make_node("Attention", ["q", "k", "v"], ["y"]), {"q": (1, 2, 8)}, "q_num_heads"),
        (
            helper.make_node("Attention", ["q", "k", "v"], ["y"]),
            {"q": (1, "H", 2, 4), "k": (1, 1, 2, 4)},
            "q_num_heads",
        ),
        (helper.make_node("CausalConvWithState", ["x", "w"], ["y", "s"]), {"w": (3, 1, "k")}, "kernel size"),
        (helper.make_node("LinearAttention", ["q", "k", "v"], ["y", "s"], q_num_heads=2, kv_num_heads=2), {}, "decay"),
    ],
)
def test_impossible_expansion_is_a_clear_error(node: Any, shapes: dict[str, Any], message: str) -> None:
    with pytest.raises(ExpansionError, match=message):
        expand(node, lambda n: (1, shapes.get(n)), 27, str)


def test_static_bodies_are_the_spec_s() -> None:
    """The generated data holds each body's nodes as the onnx wheel defines them at the
    function's opset (op types, inputs, outputs, in order): regenerate with
    tools/gen_op_schemas.py when this fails."""
    onnx = pytest.importorskip("onnx")
    from onnx_light.onnx_core.ops._function_bodies import BODIES

    for (domain, op), versions in BODIES.items():
        for since, _, imports, _, _, nodes in versions:
            schema = onnx.defs.get_schema(op, since, domain)
            body = onnx.FunctionProto.FromString(schema.get_function_with_opset_version(dict(imports)[""]))
            spec = [(n.op_type, tuple(n.input), tuple(n.output)) for n in body.node]
            assert [(n[1], n[2], n[3]) for n in nodes] == spec, f"{op}-{since}"


def test_a_body_applies_from_the_opset_it_is_written_for() -> None:
    """MeanVarianceNormalization-13's body at 13 takes ReduceMean's axes as an attribute, at 18
    as an input; Relu's body (written for 18) does not apply at 14."""
    node = helper.make_node("MeanVarianceNormalization", ["x"], ["y"])
    counter = itertools.count()
    at = {v: expand(node, lambda n: (1, (2, 3)), v, lambda p: f"{p}{next(counter)}") for v in (13, 18)}
    reduce_13 = next(n for n in at[13] or [] if n.op_type == "ReduceMean")
    reduce_18 = next(n for n in at[18] or [] if n.op_type == "ReduceMean")
    assert [a.name for a in reduce_13.attribute] == ["axes"] and len(reduce_13.input) == 1
    assert len(reduce_18.input) == 2
    assert not has_expansion("", "Relu", 14) and has_expansion("", "Relu", 18)
