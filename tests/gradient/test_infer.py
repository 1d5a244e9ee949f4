"""Our light type/shape inference against ``onnx.shape_inference`` (a test reference only).

One row per single-node model: inputs are typed graph inputs (shapes may hold symbolic
dims) or constant initializers; every output's dtype and shape must equal what
``onnx.shape_inference.infer_shapes(strict_mode=True, data_prop=True)`` finds, with
onnx's generated ``unk__`` dims read as unknown (None).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as oh
from onnx import numpy_helper as onh

from onnx_light.onnx_core import NodeProto
from onnx_light.onnx_core.gradient._types import INFER, ValueType, infer_types

F, I64, B = T.FLOAT, T.INT64, T.BOOL


class Row(NamedTuple):
    op: str
    #: (dtype, shape) for a graph input, an ndarray for a constant, None for an omitted input
    inputs: list[Any]
    attrs: dict[str, Any] = {}
    n_out: int = 1
    opset: int = 21
    id: str = ""
    #: our expected (dtype, shape) per output, where onnx's inference cannot serve as reference
    expect: list[tuple[int, Any]] | None = None


def i64(*v: int) -> np.ndarray:
    return np.array(v, np.int64)


X4 = (F, ("N", 3, 8, 8))
ROWS: list[Row] = []
for _op in (
    "Abs Acos Acosh Asin Asinh Atan Atanh Cos Cosh Sin Sinh Tan Tanh Relu Sigmoid Erf LeakyRelu Elu Selu "
    "Softplus Softsign HardSigmoid HardSwish Mish Celu ThresholdedRelu Shrink Neg Reciprocal Sqrt Exp Log "
    "Floor Ceil Round Sign Identity Softmax LogSoftmax Hardmax Trilu"
).split():
    ROWS.append(Row(_op, [(F, ("N", 5))]))
ROWS += [
    Row("Gelu", [(F, ("N", 5))], {"approximate": "tanh"}, opset=20),
    Row("Clip", [(F, ("N", 5)), np.float32(0), np.float32(1)]),
    Row("Clip", [(F, ("N", 5))], {"min": 0.0, "max": 1.0}, opset=10, id="Clip-attrs"),
    Row("IsNaN", [(F, ("N", 5))]),
    Row("IsInf", [(F, (2, 5))]),
    Row("Not", [(B, ("N", 5))]),
    Row("Dropout", [(F, ("N", 5)), np.float32(0.2)], n_out=2),
    Row("Dropout", [(F, ("N", 5))], {"ratio": 0.2}, n_out=2, opset=10, id="Dropout-10"),
    Row("Softmax", [(F, ("N", 3, 4))], {"axis": 1}, opset=11, id="Softmax-11"),
    Row("CumSum", [(F, ("N", 5)), np.array(1, np.int64)]),
    Row("LpNormalization", [(F, ("N", 5))]),
    Row("RMSNormalization", [(F, ("N", 4, 6)), (F, (6,))], opset=23),
    # onnx's inference fails inside this op's function body (a Constant without value)
    Row("MeanVarianceNormalization", [X4], expect=[(F, ("N", 3, 8, 8))]),
    Row("Cast", [(F, ("N", 5))], {"to": T.INT32}),
    Row("CastLike", [(F, ("N", 5)), (T.DOUBLE, (1,))]),
]
for _op in "Add Sub Mul Div Pow Max Min Sum Mean".split():
    ROWS.append(Row(_op, [(F, ("N", 1, 4)), (F, (3, 1))]))
for _op in "Equal Less LessOrEqual Greater GreaterOrEqual".split():
    ROWS.append(Row(_op, [(F, ("N", 4)), (F, ("N", 1))]))
for _op in "And Or Xor".split():
    ROWS.append(Row(_op, [(B, (2, "N", 4)), (B, (4,))]))
for _op in "BitwiseAnd BitwiseOr BitwiseXor".split():
    ROWS.append(Row(_op, [(T.INT32, (1, 4)), (T.INT32, (3, 1))]))
ROWS += [
    Row("Mod", [(I64, ("N", 4)), (I64, (4,))]),
    Row("Max", [(F, (2, 1, 4)), (F, (3, 1)), (F, ())], id="Max-3"),
    Row("Sum", [(F, ("N", 1)), (F, ("N", 4)), (F, (1, 4))], id="Sum-3"),
    Row("Add", [(F, ("N", "S", 8)), (F, ("S", 8))], id="Add-sym"),
    Row("PRelu", [(F, ("N", 3, 4)), (F, (3, 1))]),
    Row("Where", [(B, ("N", 1)), (F, (1, 4)), (F, ())]),
    Row("MatMul", [(F, ("N", 3, 4)), (F, (4, 5))]),
    Row("MatMul", [(F, (4,)), (F, (2, 4, 5))], id="MatMul-vec-left"),
    Row("MatMul", [(F, (2, 1, 3, 4)), (F, (4,))], id="MatMul-vec-right"),
    Row("MatMul", [(F, (2, 1, 3, 4)), (F, (7, 4, 5))], id="MatMul-batch"),
    Row("MatMul", [(F, (4,)), (F, (4,))], id="MatMul-dot"),
    Row("Gemm", [(F, ("N", 4)), (F, (5, 4)), (F, (5,))], {"transB": 1}),
    Row("Gemm", [(F, (4, "N")), (F, (4, 5))], {"transA": 1}, id="Gemm-transA"),
    Row("Conv", [X4, (F, (6, 3, 3, 3))], {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    Row("Conv", [X4, (F, (6, 1, 3, 3))], {"group": 3, "dilations": [2, 2]}, id="Conv-group"),
    Row("Conv", [(F, (1, 3, 9, 10)), (F, (4, 3, 3, 2))], {"auto_pad": "SAME_UPPER", "strides": [2, 3]}, id="Conv-same"),
    Row("Conv", [(F, (1, 3, 9)), (F, (4, 3, 4))], {"auto_pad": "VALID", "strides": [2]}, id="Conv-1d-valid"),
    Row("ConvTranspose", [X4, (F, (3, 2, 3, 3))], {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}),
    Row("ConvTranspose", [X4, (F, (3, 2, 3, 3))], {"group": 3}, id="ConvT-group"),
    Row("ConvTranspose", [X4, (F, (3, 2, 3, 3))], {"strides": [2, 2], "output_shape": [17, 16]}, id="ConvT-oshape"),
    Row("ConvTranspose", [X4, (F, (3, 2, 3, 3))], {"strides": [2, 2], "auto_pad": "SAME_UPPER"}, id="ConvT-same"),
    Row("MaxPool", [X4], {"kernel_shape": [3, 3], "strides": [2, 2]}, n_out=2),
    Row("MaxPool", [(F, (1, 2, 7, 8))], {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}, id="MaxPool-ceil"),
    Row(
        "MaxPool",
        [(F, (1, 2, 7, 8))],
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1},
        id="MaxPool-ceil-pad",
    ),
    Row("AveragePool", [X4], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    Row(
        "AveragePool",
        [(F, (1, 2, 7, 8))],
        {"kernel_shape": [3, 3], "auto_pad": "SAME_LOWER", "strides": [2, 2]},
        id="AvgPool-same",
    ),
    Row("LpPool", [X4], {"kernel_shape": [2, 2], "strides": [2, 2]}),
    Row("GlobalAveragePool", [X4]),
    Row("GlobalMaxPool", [(F, ("N", 3, 8))]),
    Row("BatchNormalization", [X4, (F, (3,)), (F, (3,)), (F, (3,)), (F, (3,))]),
    Row(
        "BatchNormalization",
        [X4, (F, (3,)), (F, (3,)), (F, (3,)), (F, (3,))],
        {"training_mode": 1},
        n_out=3,
        id="BN-train",
    ),
    # onnx leaves the opset-9 training statistics untyped
    Row(
        "BatchNormalization",
        [X4, (F, (3,)), (F, (3,)), (F, (3,)), (F, (3,))],
        n_out=5,
        opset=9,
        id="BN-9-train",
        expect=[(F, ("N", 3, 8, 8))] + [(F, (3,))] * 4,
    ),
    Row("BatchNormalization", [X4, (F, (3,)), (F, (3,)), (F, (3,)), (F, (3,))], {"spatial": 1}, opset=7, id="BN-7"),
    Row("InstanceNormalization", [X4, (F, (3,)), (F, (3,))]),
    # onnx infers nothing for this function op's output
    Row("GroupNormalization", [X4, (F, (3,)), (F, (3,))], {"num_groups": 3}, expect=[(F, ("N", 3, 8, 8))]),
    Row("LayerNormalization", [(F, ("N", 4, 6)), (F, (6,)), (F, (6,))], n_out=3),
    Row("LayerNormalization", [(F, ("N", 4, 6)), (F, (4, 6))], {"axis": 1}, n_out=3, id="LN-axis1"),
    Row("Shape", [X4]),
    Row("Shape", [X4], {"start": 1, "end": -1}, id="Shape-slice"),
    Row("Size", [(F, (2, 3))]),
    Row("Reshape", [X4, i64(0, -1)]),
    Row("Reshape", [X4, i64(0, 3, -1, 4)], id="Reshape-sym"),
    Row("Reshape", [(F, (2, 3, 4)), i64(4, 0, -1)], id="Reshape-copy"),
    Row("Reshape", [(F, (2, 0, 4)), i64(0, 4)], {"allowzero": 1}, id="Reshape-allowzero"),
    Row("Reshape", [X4, (I64, (3,))], id="Reshape-dyn"),
    Row("Reshape", [(F, ("N", "S", 8)), i64(-1, 4)], id="Reshape-sym-unknown"),
    Row("Flatten", [X4], {"axis": 2}),
    Row("Flatten", [X4], {"axis": 0}, id="Flatten-0"),
    Row("Squeeze", [(F, ("N", 1, 4, 1)), i64(1, -1)]),
    Row("Squeeze", [(F, (2, 1, 4, 1))], id="Squeeze-all"),
    Row("Squeeze", [(F, ("N", 1, 4, 1))], {"axes": [1]}, opset=11, id="Squeeze-11"),
    Row("Unsqueeze", [(F, ("N", 4)), i64(0, -1)]),
    Row("Unsqueeze", [(F, ("N", 4))], {"axes": [1]}, opset=11, id="Unsqueeze-11"),
    Row("Transpose", [X4], {"perm": [0, 2, 3, 1]}),
    Row("Transpose", [(F, ("N", 3, 5))], id="Transpose-default"),
    Row("Concat", [(F, ("N", 3)), (F, ("N", 4))], {"axis": 1}),
    Row("Concat", [(F, (2, 3)), (F, ("N", 3))], {"axis": 0}, id="Concat-sym"),
    Row("Split", [(F, ("N", 6)), i64(2, 4)], {"axis": 1}, n_out=2),
    Row("Split", [(F, ("N", 7))], {"axis": 1, "num_outputs": 3}, n_out=3, id="Split-num"),
    Row("Split", [(F, ("N", 6))], {"axis": 1, "split": [1, 5]}, n_out=2, opset=11, id="Split-11"),
    Row("Split", [(F, ("N", 6))], {"axis": 1}, n_out=3, opset=11, id="Split-equal"),
    Row("Slice", [(F, ("N", 10, 8)), i64(1, -3), i64(9, 100), i64(1, 2), i64(2, -1)]),
    Row("Slice", [(F, ("N", 10))], {"starts": [2], "ends": [5], "axes": [1]}, opset=9, id="Slice-9"),
    # onnx loses the symbol where a whole symbolic axis is kept; we keep it
    Row("Slice", [(F, ("N", 10)), i64(0), i64(2**62), i64(0)], id="Slice-sym", expect=[(F, ("N", 10))]),
    Row("Gather", [(F, ("N", 5, 4)), (I64, (2, 3))], {"axis": 1}),
    Row("Gather", [(F, (5, 4)), np.array(1, np.int64)], id="Gather-scalar"),
    Row("GatherElements", [(F, ("N", 5)), (I64, ("N", 2))], {"axis": 1}),
    Row("GatherND", [(F, (2, 3, 4)), (I64, (5, 2))]),
    Row("GatherND", [(F, (2, 3, 4)), (I64, (2, 5, 1))], {"batch_dims": 1}, id="GatherND-batch"),
    Row("ScatterElements", [(F, ("N", 5)), (I64, ("N", 2)), (F, ("N", 2))], {"axis": 1}),
    Row("ScatterND", [(F, (4, 5)), (I64, (2, 1)), (F, (2, 5))]),
    Row("Expand", [(F, ("N", 1, 4)), i64(3, 1, 1)]),
    Row("Expand", [(F, (3, 1)), i64(2, 1, 4)], id="Expand-rank"),
    Row("Tile", [(F, ("N", 2)), i64(1, 3)], expect=[(F, ("N", 6))]),
    Row("Tile", [(F, (4, 2)), i64(2, 3)], id="Tile-static"),
    Row("Pad", [X4, i64(0, 0, 1, 2, 0, 0, 3, 4)]),
    Row("Pad", [X4, i64(1, 2, 3, 4), None, i64(2, -1)], id="Pad-axes", expect=[(F, ("N", 3, 12, 14))]),
    Row("Pad", [(F, (1, 3, 8, 8)), i64(1, 2, 3, 4), None, i64(2, -1)], id="Pad-axes-static"),
    Row("Pad", [X4], {"pads": [0, 0, 1, 1, 0, 0, 1, 1], "value": 1.0}, opset=10, id="Pad-10"),
    Row("Pad", [(F, (2, 3)), i64(1, 0, 1, 0), np.float32(2.0)], {"mode": "constant"}, opset=13, id="Pad-13"),
    Row("Constant", [], {"value": onh.from_array(np.ones((2, 3), np.float32))}),
    Row("Constant", [], {"value_ints": [1, 2, 3]}, id="Constant-ints"),
    Row("Constant", [], {"value_float": 2.0}, id="Constant-float"),
    Row("Constant", [], {"value_int": 2}, id="Constant-int"),
    Row("Constant", [], {"value_floats": [1.0, 2.0]}, id="Constant-floats"),
    Row("ConstantOfShape", [i64(2, 3)], {"value": onh.from_array(np.array([1], np.int32))}),
    Row("ConstantOfShape", [(I64, (3,))], id="ConstantOfShape-dyn"),
    Row("Range", [np.int64(1), np.int64(10), np.int64(3)]),
    Row("Range", [np.float32(0), np.float32(1), np.float32(0.3)], id="Range-float"),
    Row("EyeLike", [(F, (3, 4))], {"dtype": T.INT32}),
    Row("OneHot", [(I64, ("N", 3)), np.array([5], np.int64), (F, (2,))], {"axis": 1}),
    Row("NonZero", [(F, (3, 4))]),
    Row("ArgMax", [(F, ("N", 5, 4))], {"axis": 1}),
    Row("ArgMin", [(F, ("N", 5, 4))], {"axis": -1, "keepdims": 0}),
    Row("TopK", [(F, ("N", 5, 4)), i64(2)], {"axis": 1}, n_out=2),
    Row("TopK", [(F, ("N", 5, 4))], {"k": 3}, n_out=2, opset=9, id="TopK-9"),
    Row("Einsum", [(F, ("N", 3, 4)), (F, ("N", 4, 5))], {"equation": "bij,bjk->bik"}),
    Row("Einsum", [(F, (3, 4)), (F, (4, 5))], {"equation": "ij,jk"}, id="Einsum-implicit"),
    Row("Einsum", [(F, (2, 3, 4)), (F, (4,))], {"equation": "...j,j->..."}, id="Einsum-ellipsis"),
    Row("ReduceSum", [X4, i64(1, 2)]),
    Row("ReduceSum", [X4, i64(1)], {"keepdims": 0}, id="ReduceSum-nokeep"),
    Row("ReduceSum", [X4], id="ReduceSum-all"),
    Row("ReduceSum", [X4, i64()], {"noop_with_empty_axes": 1}, id="ReduceSum-noop"),
    Row("ReduceSum", [X4], {"axes": [1]}, opset=11, id="ReduceSum-11"),
    Row("ReduceMean", [X4], {"axes": [-1], "keepdims": 0}, opset=17, id="ReduceMean-17"),
    # axes known only at run time: keepdims keeps the rank (onnx gives up on it)
    Row("ReduceSum", [X4, (I64, (1,))], id="ReduceSum-dyn", expect=[(F, (None,) * 4)]),
]
_REDUCE = "ReduceMean ReduceMax ReduceMin ReduceProd ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp ReduceSumSquare"
for _op in _REDUCE.split():
    ROWS.append(Row(_op, [X4, i64(2, 3)]))
ROWS += [
    Row("SoftmaxCrossEntropyLoss", [(F, ("N", 5)), (I64, ("N",))], n_out=2),
    Row("SoftmaxCrossEntropyLoss", [(F, ("N", 5, 3)), (I64, ("N", 3))], {"reduction": "none"}, n_out=2, id="SCE-none"),
    Row("NegativeLogLikelihoodLoss", [(F, ("N", 5)), (I64, ("N",))], {"reduction": "sum"}),
    Row("NegativeLogLikelihoodLoss", [(F, ("N", 5, 2)), (I64, ("N", 2))], {"reduction": "none"}, id="NLL-none"),
    Row("Resize", [(F, (2, 3, 8, 8)), None, np.array([1, 1, 2, 1.5], np.float32)]),
    Row("Resize", [(F, (2, 3, 8, 8)), None, None, i64(5, 7)], {"axes": [2, 3]}, id="Resize-sizes-axes"),
    Row("Resize", [X4, None, np.array([1, 1, 2, 1.5], np.float32)], id="Resize-sym", expect=[(F, ("N", 3, 16, 12))]),
    Row("Upsample", [(F, (1, 3, 4, 5))], {"scales": [1.0, 1.0, 2.0, 3.0]}, opset=7),
    Row("DepthToSpace", [(F, ("N", 8, 3, 4))], {"blocksize": 2}),
    Row("SpaceToDepth", [(F, ("N", 2, 6, 4))], {"blocksize": 2}),
]


def _row_id(r: Row) -> str:
    return r.id or r.op


def _onnx_dims(t: Any) -> tuple[Any, ...] | None:
    if not t.tensor_type.HasField("shape"):
        return None
    out: list[Any] = []
    for d in t.tensor_type.shape.dim:
        if d.HasField("dim_value"):
            out.append(d.dim_value)
        elif d.HasField("dim_param") and not d.dim_param.startswith("unk__"):
            out.append(d.dim_param)
        else:
            out.append(None)
    return tuple(out)


def _build(row: Row) -> tuple[Any, dict[str, ValueType], dict[str, np.ndarray]]:
    names, graph_in, inits = [], [], []
    known: dict[str, ValueType] = {}
    consts: dict[str, np.ndarray] = {}
    for k, spec in enumerate(row.inputs):
        name = f"x{k}"
        if spec is None:
            names.append("")
            continue
        names.append(name)
        if isinstance(spec, (np.ndarray, np.generic)):
            arr = np.asarray(spec)
            inits.append(onh.from_array(arr, name))
            known[name] = ValueType(oh.np_dtype_to_tensor_dtype(arr.dtype), arr.shape)
            consts[name] = arr
        else:
            graph_in.append(oh.make_tensor_value_info(name, spec[0], spec[1]))
            known[name] = ValueType(spec[0], tuple(spec[1]))
    outs = [f"y{k}" for k in range(row.n_out)]
    node = oh.make_node(row.op, names, outs, **row.attrs)
    graph = oh.make_graph([node], "g", graph_in, [oh.make_empty_tensor_value_info(o) for o in outs], inits)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", row.opset)])
    model.ir_version = 10
    return model, known, consts


def _ours(model: Any, known: dict[str, ValueType], consts: dict[str, np.ndarray], opset: int) -> Any:
    nodes = [NodeProto.FromString(n.SerializeToString()) for n in model.graph.node]
    return infer_types(nodes, known, consts, opset)


@pytest.mark.parametrize("row", ROWS, ids=_row_id)
def test_matches_onnx_shape_inference(row: Row) -> None:
    model, known, consts = _build(row)
    if row.expect is not None:
        ours, _ = _ours(model, known, consts, row.opset)
        assert [(ours[f"y{k}"].dtype, ours[f"y{k}"].shape) for k in range(row.n_out)] == row.expect
        return
    ref = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    ref_types = {v.name: v.type for v in ref.graph.value_info}
    ours, _ = _ours(model, known, consts, row.opset)
    for k in range(row.n_out):
        name = f"y{k}"
        expected = ref_types[name]
        got = ours[name]
        assert got.dtype == expected.tensor_type.elem_type, f"{name}: dtype {got.dtype}"
        assert got.shape == _onnx_dims(expected), f"{name}: shape {got.shape} vs onnx {_onnx_dims(expected)}"


def test_every_listed_op_is_registered() -> None:
    missing = sorted({r.op for r in ROWS} - set(INFER))
    assert not missing, missing


def _chain_model(batch: Any) -> Any:
    """A torch-style flatten: Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1]))."""
    nodes = [
        oh.make_node("Shape", ["x"], ["s"]),
        oh.make_node("Gather", ["s", "zero"], ["b"], axis=0),
        oh.make_node("Unsqueeze", ["b", "zero_axes"], ["b1"]),
        oh.make_node("Concat", ["b1", "minus1"], ["target"], axis=0),
        oh.make_node("Reshape", ["x", "target"], ["y"]),
        oh.make_node("Shape", ["y"], ["ys"]),
        oh.make_node("Cast", ["ys"], ["ysf"], to=T.FLOAT),
        oh.make_node("Mul", ["ys", "two"], ["ys2"]),
        oh.make_node("ConstantOfShape", ["ys2"], ["z"]),
        oh.make_node("Expand", ["x", "s"], ["xe"]),
    ]
    inits = [
        onh.from_array(np.array(0, np.int64), "zero"),
        onh.from_array(i64(0), "zero_axes"),
        onh.from_array(i64(-1), "minus1"),
        onh.from_array(i64(1, 2), "two"),
    ]
    x = oh.make_tensor_value_info("x", F, [batch, 3, 4])
    outs = [oh.make_empty_tensor_value_info(o) for o in ("y", "ysf", "z", "xe")]
    return oh.make_model(oh.make_graph(nodes, "g", [x], outs, inits), opset_imports=[oh.make_opsetid("", 21)])


@pytest.mark.parametrize("batch", [2, "N"])
def test_shape_chain_folds(batch: Any) -> None:
    """Reshape targets computed from the input's shape resolve, symbolic batch included."""
    model = _chain_model(batch)
    known = {"x": ValueType(F, (batch, 3, 4))}
    consts = {i.name: onh.to_array(i) for i in model.graph.initializer}
    types, values = _ours(model, known, consts, 21)
    assert types["y"].shape == (batch, 12)
    assert types["z"].shape == (batch, 24)
    assert types["xe"].shape == (batch, 3, 4)
    if batch == 2:
        import onnxruntime as ort

        model.ir_version = 10
        ref = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
        sess = ort.InferenceSession(ref.SerializeToString(), providers=["CPUExecutionProvider"])
        got = dict(zip(["y", "ysf", "z", "xe"], sess.run(None, {"x": np.ones((2, 3, 4), np.float32)})))
        np.testing.assert_array_equal(values["ysf"], got["ysf"])
        np.testing.assert_array_equal(values["target"], [2, -1])
        np.testing.assert_array_equal(values["z"], got["z"])
    else:
        # partly known values never leak into the public constants
        assert "s" not in values and "target" not in values
        assert all(v.dtype != object for v in values.values())


def test_unknown_op_and_bad_input_stay_unknown() -> None:
    nodes = [
        NodeProto(op_type="NoSuchOp", input=["x"], output=["a"]),
        NodeProto(op_type="Reshape", input=["a", "t"], output=["b"]),
        NodeProto(op_type="MatMul", input=["x", "w"], output=["c"]),
    ]
    types, _ = infer_types(nodes, {"x": ValueType(F, (2, 3)), "w": ValueType(F, (4, 5))}, {}, 21)
    assert types["a"].shape is None and types["a"].dtype == 0
    assert types["b"].shape is None
    # mismatched inner dims: best effort, never a crash
    assert types["c"].dtype == F


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pool_ceil_mode_with_uneven_pads_matches_onnxruntime(op: str) -> None:
    """onnx's own inference guesses the begin pad here; ours uses the real one."""
    import onnxruntime

    node = oh.make_node(op, ["x"], ["y"], kernel_shape=[3], strides=[2], pads=[0, 2], ceil_mode=1)
    graph = oh.make_graph(
        [node], "g", [oh.make_tensor_value_info("x", 1, [1, 1, 4])], [oh.make_tensor_value_info("y", 1, None)]
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)])
    sess = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"x": np.zeros((1, 1, 4), np.float32)})
    ours = NodeProto.FromString(node.SerializeToString())
    types, _ = infer_types([ours], {"x": ValueType(1, (1, 1, 4))}, {}, 21)
    assert types["y"].shape == y.shape


def _ort_mod(a: np.ndarray, b: np.ndarray, fmod: int) -> np.ndarray:
    import onnxruntime as ort

    node = oh.make_node("Mod", ["a", "b"], ["y"], fmod=fmod)
    graph = oh.make_graph([node], "g", [], [oh.make_tensor_value_info("y", onh.from_array(a).data_type, None)],
                          [onh.from_array(a, "a"), onh.from_array(b, "b")])  # fmt: skip
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {})[0]


@pytest.mark.parametrize("fmod", [0, 1])
@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8])
@pytest.mark.parametrize("shapes", [((), ()), ((1,), ()), ((), (1, 1)), ((1,), (1,)), ((3,), (3,)), ((2, 1), (3,))])
def test_mod_of_known_integers_folds_as_onnxruntime_computes(fmod: int, dtype: Any, shapes: Any) -> None:
    # one number each takes Python's ints; several, numpy: both must give onnxruntime's values,
    # signs (mod: the divisor's; fmod: the dividend's), dtype and broadcast shape
    signed = np.dtype(dtype).kind == "i"
    pairs = [(x, y) for x in (-7, 7, 6, 0) for y in (3, -3, 2)] if signed else [(7, 3), (6, 2), (0, 5), (200, 7)]
    for x, y in pairs:
        a = np.full(shapes[0], x, dtype) + np.arange(int(np.prod(shapes[0])), dtype=dtype).reshape(shapes[0])
        b = np.full(shapes[1], y, dtype)
        want = _ort_mod(a, b, fmod)
        node = NodeProto.FromString(oh.make_node("Mod", ["a", "b"], ["y"], fmod=fmod).SerializeToString())
        types, consts = infer_types([node], {}, {"a": a, "b": b}, 21)
        got = consts["y"]
        assert (got.dtype, got.shape, got.tolist()) == (want.dtype, want.shape, want.tolist()), (x, y)
        assert types["y"].shape == want.shape


def test_mod_by_zero_is_not_folded() -> None:
    node = NodeProto(op_type="Mod", input=["a", "b"], output=["y"])
    for a, b in ((i64(5), i64(0)), (i64(5, 6), i64(1, 0))):
        _, consts = infer_types([node], {}, {"a": a, "b": b}, 21)
        assert "y" not in consts
