"""onnx_light.shape_inference: the dims onnx's inference finds, symbolic names kept.

The reference is ``onnx.shape_inference.infer_shapes`` on the same file: every value
whose dims onnx knows (an integer, or a symbolic name from the model's inputs: onnx's
own ``unk__`` names are fresh symbols, not facts) must get the same dims and element
type from ours. Models: the onnx wheel's nine light models, the torch exports stored in
tests/models/data, and torch exports with a dynamic batch axis (``dynamic_axes``).
"""

from __future__ import annotations

import glob
import os
import pathlib
import sys
from typing import Any

import pytest

import onnx_light as ol
from onnx_light import TensorProto as T
from onnx_light import helper as h
from onnx_light import shape_inference

onnx = pytest.importorskip("onnx")

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
MODELS = pathlib.Path(__file__).resolve().parents[1] / "models"

Dims = list[int | str | None]


def _dims(value_infos: Any) -> dict[str, tuple[int, Dims | None]]:
    out: dict[str, tuple[int, Dims | None]] = {}
    for v in value_infos:
        tt = v.type.tensor_type
        if not tt.HasField("shape"):
            out[v.name] = (tt.elem_type, None)
            continue
        dims: Dims = []
        for d in tt.shape.dim:
            if d.HasField("dim_value"):
                dims.append(d.dim_value)
            elif d.HasField("dim_param") and not d.dim_param.startswith("unk__"):
                dims.append(d.dim_param)
            else:
                dims.append(None)
        out[v.name] = (tt.elem_type, dims)
    return out


def _compare(data: bytes) -> int:
    """Asserts ours equals onnx's wherever onnx knows a dim; returns the number of values compared."""
    ref = onnx.shape_inference.infer_shapes(onnx.load_from_string(data))
    want = _dims(list(ref.graph.value_info) + list(ref.graph.output))
    got_model = shape_inference.infer_shapes(ol.load_from_string(data))
    got = _dims(list(got_model.graph.value_info) + list(got_model.graph.output))
    compared = 0
    for name, (dtype, dims) in want.items():
        if dims is None or all(d is None for d in dims) and dims:
            continue
        assert name in got, f"{name}: onnx infers {dtype} {dims}, ours nothing"
        g_dtype, g_dims = got[name]
        assert g_dtype == dtype, f"{name}: element type {g_dtype} != onnx's {dtype}"
        assert g_dims is not None and len(g_dims) == len(dims), f"{name}: dims {g_dims} != onnx's {dims}"
        for k, (a, b) in enumerate(zip(g_dims, dims)):
            assert b is None or a == b, f"{name}: dim {k} is {a!r}, onnx's {b!r} (all: {g_dims} vs {dims})"
        compared += 1
    return compared


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(LIGHT, "*.onnx"))), ids=os.path.basename)
def test_light_models_match_onnx(path: str) -> None:
    with open(path, "rb") as f:
        assert _compare(f.read()) > 10


@pytest.mark.parametrize("path", sorted((MODELS / "data").glob("*_opset1[78].onnx")), ids=lambda p: p.name)
def test_torch_fixtures_match_onnx(path: pathlib.Path) -> None:
    assert _compare(path.read_bytes()) > 3


@pytest.mark.parametrize("name", ["mlp_mse", "cnn_bn_eval", "transformer"])
def test_torch_dynamic_batch_keeps_the_symbol(name: str) -> None:
    pytest.importorskip("torch")
    sys.path.insert(0, str(MODELS))
    import torch_models as tm

    data = tm.export(tm.SPECS[name], 17, dynamic_batch=True)
    assert _compare(data) > 3
    got = shape_inference.infer_shapes(ol.load_from_string(data))
    named = [v.name for v in got.graph.value_info if any(d.dim_param == "N" for d in v.type.tensor_type.shape.dim)]
    assert named, f"{name}: no intermediate keeps the symbolic batch dim 'N'"


def _vi(name: str, dtype: int = T.FLOAT, shape: Any = None) -> Any:
    return h.make_tensor_value_info(name, dtype, shape)


def _symbolic_model() -> Any:
    """x[N, 3] @ W[3, 4] -> Relu -> Reshape to [N, 2, 2] through Shape/Slice/Concat."""
    w = h.make_tensor("W", T.FLOAT, [3, 4], [0.1] * 12)
    tail = h.make_tensor("tail", T.INT64, [2], [2, 2])
    nodes = [
        h.make_node("MatMul", ["x", "W"], ["xw"]),
        h.make_node("Relu", ["xw"], ["r"]),
        h.make_node("Shape", ["x"], ["s"], start=0, end=1),
        h.make_node("Concat", ["s", "tail"], ["target"], axis=0),
        h.make_node("Reshape", ["r", "target"], ["y"]),
    ]
    graph = h.make_graph(nodes, "g", [_vi("x", shape=["N", 3])], [_vi("y")], initializer=[w, tail])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 21)])


def test_symbolic_dims_and_new_model() -> None:
    model = _symbolic_model()
    before = model.SerializeToString()
    got = shape_inference.infer_shapes(model)
    assert model.SerializeToString() == before, "the input model was modified"
    dims = _dims(list(got.graph.value_info) + list(got.graph.output))
    assert dims["xw"] == (T.FLOAT, ["N", 4])
    assert dims["r"] == (T.FLOAT, ["N", 4])
    assert dims["s"] == (T.INT64, [1])
    assert dims["target"] == (T.INT64, [3])
    assert dims["y"] == (T.FLOAT, ["N", 2, 2]), "the output declared without a shape is completed"
    assert [v.name for v in got.graph.value_info] == ["xw", "r", "s", "target"]
    assert _compare(before) >= 4  # onnx (without data_prop) does not follow Shape -> Reshape: y unknown


def test_bytes_input() -> None:
    got = shape_inference.infer_shapes(_symbolic_model().SerializeToString())
    assert len(got.graph.value_info) == 4


def _custom_op_model() -> Any:
    nodes = [h.make_node("Relu", ["x"], ["a"]), h.make_node("Foo", ["a"], ["b"], domain="my", name="foo0")]
    graph = h.make_graph(nodes, "g", [_vi("x", shape=[2])], [_vi("b")])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 21), h.make_opsetid("my", 1)])


def test_unknown_op_leaves_outputs_untyped_and_strict_mode_raises() -> None:
    got = shape_inference.infer_shapes(_custom_op_model())
    assert [v.name for v in got.graph.value_info] == ["a"]
    with pytest.raises(shape_inference.InferenceError, match=r"node 1 'foo0' \(my::Foo\).*no shape inference"):
        shape_inference.infer_shapes(_custom_op_model(), strict_mode=True)


def test_contradiction_kept_or_raised() -> None:
    graph = h.make_graph([h.make_node("Relu", ["x"], ["y"])], "g", [_vi("x", shape=[2])], [_vi("y", T.DOUBLE, [2])])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 21)])
    kept = shape_inference.infer_shapes(model)
    assert kept.graph.output[0].type.tensor_type.elem_type == T.DOUBLE
    with pytest.raises(shape_inference.InferenceError, match="'y'"):
        shape_inference.infer_shapes(model, check_type=True)


def test_infer_shapes_path(tmp_path: pathlib.Path) -> None:
    src = tmp_path / "in.onnx"
    ol.save(_symbolic_model(), src)
    shape_inference.infer_shapes_path(src, tmp_path / "out.onnx")
    assert len(ol.load(tmp_path / "out.onnx").graph.value_info) == 4
    assert len(ol.load(src).graph.value_info) == 0


def _single(op: str, inputs: list[Any], n_out: int = 1, opset: int = 21, inits: Any = (), **attrs: Any) -> bytes:
    outs = [f"o{i}" for i in range(n_out)]
    graph = h.make_graph(
        [h.make_node(op, [v.name for v in inputs] + [t.name for t in inits], outs, **attrs)],
        "g",
        inputs,
        [_vi(o, 0) for o in outs],
        initializer=list(inits),
    )
    return h.make_model(graph, opset_imports=[h.make_opsetid("", opset)]).SerializeToString()


#: ops whose inference shape_inference added to the engine: op -> the model (checked against onnx's)
ADDED_OPS: dict[str, Any] = {
    "ReverseSequence": lambda: _single(
        "ReverseSequence", [_vi("x", shape=[4, 2, 3]), _vi("l", T.INT64, [2])], batch_axis=1, time_axis=0
    ),
    "CumProd": lambda: _single(
        "CumProd", [_vi("x", shape=["N", 3])], opset=26, inits=[h.make_tensor("a", T.INT64, [], [1])]
    ),
    "RandomUniformLike": lambda: _single("RandomUniformLike", [_vi("x", T.INT64, ["N", 3])], dtype=T.DOUBLE),
    "RandomNormalLike": lambda: _single("RandomNormalLike", [_vi("x", shape=[2, 3])]),
    "Bernoulli": lambda: _single("Bernoulli", [_vi("x", shape=[5])]),
    "RandomUniform": lambda: _single("RandomUniform", [], shape=[2, 7]),
    "RandomNormal": lambda: _single("RandomNormal", [], shape=[3], dtype=T.DOUBLE),
    "QuantizeLinear": lambda: _single(
        "QuantizeLinear",
        [_vi("x", shape=["N", 4])],
        inits=[h.make_tensor("s", T.FLOAT, [], [0.1]), h.make_tensor("z", T.INT8, [], [0])],
    ),
    "QuantizeLinear no zero point": lambda: _single(
        "QuantizeLinear", [_vi("x", shape=[2])], inits=[h.make_tensor("s", T.FLOAT, [], [0.1])]
    ),
    "DequantizeLinear": lambda: _single(
        "DequantizeLinear", [_vi("x", T.UINT8, [3, 2])], inits=[h.make_tensor("s", T.FLOAT16, [], [0.1])]
    ),
    "Det": lambda: _single("Det", [_vi("x", shape=["B", 3, 3])]),
    "Compress axis": lambda: _single("Compress", [_vi("x", shape=[3, 4]), _vi("c", T.BOOL, [4])], axis=1),
    "NonMaxSuppression": lambda: _single("NonMaxSuppression", [_vi("b", shape=[1, 6, 4]), _vi("s", shape=[1, 1, 6])]),
    "LSTM": lambda: _single(
        "LSTM",
        [_vi("x", shape=[5, "N", 3]), _vi("w", shape=[2, 16, 3]), _vi("r", shape=[2, 16, 4])],
        3,
        hidden_size=4,
        direction="bidirectional",
    ),
    "GRU layout 1": lambda: _single(
        "GRU",
        [_vi("x", shape=[2, 5, 3]), _vi("w", shape=[1, 12, 3]), _vi("r", shape=[1, 12, 4])],
        2,
        hidden_size=4,
        layout=1,
    ),
    "RNN": lambda: _single(
        "RNN", [_vi("x", shape=[5, 2, 3]), _vi("w", shape=[1, 4, 3]), _vi("r", shape=[1, 4, 4])], 2, hidden_size=4
    ),
}


@pytest.mark.parametrize("case", sorted(ADDED_OPS))
def test_added_op_inference_matches_onnx(case: str) -> None:
    assert _compare(ADDED_OPS[case]()) >= 1


def test_check_type_applies_the_type_constraints() -> None:
    graph = h.make_graph(
        [h.make_node("Add", ["a", "b"], ["c"], name="add0")],
        "g",
        [_vi("a", shape=[2]), _vi("b", T.DOUBLE, [2])],
        [_vi("c", 0)],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 21)])
    shape_inference.infer_shapes(model)  # best effort: no error
    with pytest.raises(shape_inference.InferenceError, match=r"'add0' \(ai.onnx::Add\).*inconsistent type"):
        shape_inference.infer_shapes(model, check_type=True)


def _if_model() -> Any:
    then = h.make_graph(
        [h.make_node("Relu", ["x"], ["t1"]), h.make_node("Unsqueeze", ["t1", "ax"], ["t"])],
        "then",
        [],
        [_vi("t", 0)],
    )
    other = h.make_graph(
        [h.make_node("Neg", ["x"], ["e1"]), h.make_node("Unsqueeze", ["e1", "ax"], ["e"])], "else", [], [_vi("e", 0)]
    )
    nodes = [
        h.make_node("Constant", [], ["ax"], value=h.make_tensor("v", T.INT64, [1], [0])),
        h.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
        h.make_node("Relu", ["y"], ["z"]),
    ]
    graph = h.make_graph(nodes, "g", [_vi("x", shape=["N", 3]), _vi("c", T.BOOL, [])], [_vi("z")])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 21)])


def test_if_branches_and_their_value_info() -> None:
    """The branches see the outer values (types and constants); the If's output is their merge."""
    got = shape_inference.infer_shapes(_if_model())
    dims = _dims(list(got.graph.value_info) + list(got.graph.output))
    assert dims["y"] == (T.FLOAT, [1, "N", 3])
    assert dims["z"] == (T.FLOAT, [1, "N", 3])
    then = next(a.g for a in got.graph.node[1].attribute if a.name == "then_branch")
    assert _dims(then.value_info) == {"t1": (T.FLOAT, ["N", 3])}
    assert _dims(then.output) == {"t": (T.FLOAT, [1, "N", 3])}
    assert _compare(_if_model().SerializeToString()) >= 1


@pytest.mark.parametrize(
    "name", ["test_if", "test_loop11", "test_scan9_sum", "test_range_float_type_positive_delta_expanded"]
)
def test_control_flow_node_cases(name: str) -> None:
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "runtime"))
    from test_conformance import all_cases

    case = next(c for c in all_cases() if c.name == name)
    model = onnx.load_from_string(case.model)
    for vi in model.graph.output:  # what the model declares would hide what inference finds
        vi.type.tensor_type.ClearField("shape")
    assert _compare(model.SerializeToString()) >= 1


def test_stft_with_frame_length_known_only_at_run_time() -> None:
    # onnx's backend model test_stft: frame_length is a graph input, the window omitted; the
    # bin count is then unknown (it was taken from the signal length: 65 instead of 9)
    node = h.make_node("STFT", ["signal", "frame_step", "", "frame_length"], ["output"])
    graph = h.make_graph(
        [node],
        "g",
        [
            h.make_tensor_value_info("signal", T.FLOAT, [1, 128, 1]),
            h.make_tensor_value_info("frame_step", T.INT64, []),
            h.make_tensor_value_info("frame_length", T.INT64, []),
        ],
        [h.make_tensor_value_info("output", T.FLOAT, [1, 15, 9, 2])],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    from onnx_light import checker, shape_inference

    checker.check_model(model, full_check=True)  # raised: declared 9 vs inferred 65
    out = shape_inference.infer_shapes(model).graph.output[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in out] == [1, 15, 9, 2]
