"""The cases of onnx's own helper unit tests, restated against onnx_light (issue 14 §1).

Checks that need ``onnx.checker`` or ``onnx.reference`` are left out; the rest (attribute
inference, nodes / graphs / models, IR versions, tensors of every element type,
optionals, sequences, printable_graph, dtype mappings) is restated here.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from onnx_light import (
    AttributeProto,
    GraphProto,
    OptionalProto,
    SequenceProto,
    TensorProto,
    TypeProto,
    helper,
    numpy_helper,
)
from onnx_light.onnx_core import _dtypes

RNG = np.random.default_rng(0)


def test_attributes_of_python_values() -> None:
    assert helper.make_attribute("float", 1e10).f == 1e10
    assert helper.make_attribute("int", 0o1701).i == 0o1701
    assert helper.make_attribute("a", "value").doc_string == ""
    assert helper.make_attribute("a", "value", "doc").doc_string == "doc"
    assert helper.make_attribute("s", b"test").s == b"test" == helper.make_attribute("s", "test").s
    assert helper.get_attribute_value(helper.make_attribute("s", "")) == b""
    assert list(helper.make_attribute("fs", [1.0, 2.0]).floats) == [1.0, 2.0]
    assert list(helper.make_attribute("is", [1, 2]).ints) == [1, 2]
    assert list(helper.make_attribute("mixed", [1, 2, 3.0, 4.5]).floats) == [1.0, 2.0, 3.0, 4.5]
    assert list(helper.make_attribute("ss", ["a", "b"]).strings) == [b"a", b"b"]
    tensors = [helper.make_tensor(n, TensorProto.FLOAT, (1,), np.ones(1)) for n in "ab"]
    assert list(helper.make_attribute("ts", tensors).tensors) == tensors
    graphs = [GraphProto(name="a"), GraphProto(name="b")]
    assert list(helper.make_attribute("gs", graphs).graphs) == graphs
    tp = helper.make_attribute("tp", TypeProto())
    assert tp.type == AttributeProto.TYPE_PROTO and tp.tp == TypeProto()
    tps = helper.make_attribute("tps", [TypeProto(), TypeProto()])
    assert tps.type == AttributeProto.TYPE_PROTOS and len(tps.type_protos) == 2


def test_attribute_errors_and_refs() -> None:
    empty = helper.make_attribute("empty", [], attr_type=AttributeProto.STRINGS)
    assert empty.type == AttributeProto.STRINGS and len(empty.strings) == 0
    with pytest.raises(ValueError):
        helper.make_attribute("empty", [])
    with pytest.raises(TypeError, match="Inferred attribute type 'FLOAT'"):
        helper.make_attribute("test", 6.4, attr_type=AttributeProto.STRING)
    ref = helper.make_attribute_ref("alpha", AttributeProto.FLOAT, ref_attr_name="parent_alpha")
    assert (ref.name, ref.type, ref.ref_attr_name) == ("alpha", AttributeProto.FLOAT, "parent_alpha")
    with pytest.raises(ValueError):
        helper.get_attribute_value(ref)  # a reference carries no value
    ref = helper.make_attribute_ref("alpha", AttributeProto.FLOAT, doc_string="doc", ref_attr_name="p")
    assert ref.doc_string == "doc" and ref.ref_attr_name == "p"
    positional = helper.make_attribute_ref("alpha", AttributeProto.FLOAT, "doc")
    assert positional.ref_attr_name == "alpha" and positional.doc_string == "doc"
    with pytest.raises(ValueError):
        helper.make_attribute_ref("alpha", AttributeProto.FLOAT, ref_attr_name="")


def test_sparse_tensor_attributes_print() -> None:
    values = helper.make_tensor("v", TensorProto.FLOAT, [3], np.array([1.7, 0.4, 0.9], np.float32))
    indices = helper.make_tensor("i", TensorProto.INT64, [3], np.array([2, 3, 5], np.int64))
    sparse = helper.make_sparse_tensor(values, indices, [3, 3])
    assert sparse.values == values and sparse.indices == indices and list(sparse.dims) == [3, 3]
    assert "<Sparse Tensor>" in helper.printable_attribute(helper.make_attribute("st", sparse))
    assert "[<Sparse Tensor>, ...]" in helper.printable_attribute(helper.make_attribute("sts", [sparse, sparse]))


def test_nodes_graphs_models() -> None:
    node = helper.make_node("Relu", ["X"], ["Y"], name="test", doc_string="doc", domain="test.domain", arg_value=1)
    assert (node.op_type, node.name, node.doc_string, node.domain) == ("Relu", "test", "doc", "test.domain")
    assert node.attribute[0] == helper.make_attribute("arg_value", 1)
    vi = [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 2])]
    n2 = helper.make_node("Add", ["X", "Y"], ["Z"])
    graph = helper.make_graph([node, n2], "test", [], [], doc_string=None, value_info=vi)
    assert graph.node[1] == n2 and graph.doc_string == "" and graph.value_info[0] == vi[0]
    assert helper.make_graph([], "g", [], [], None, "my docs").doc_string == "my docs"
    with pytest.raises(AttributeError):
        helper.make_model(graph, xxx=1)
    model = helper.make_model(graph, producer_name="test", doc_string="d")
    assert model.producer_name == "test" and model.doc_string == "d" and not hasattr(model, "name")
    helper.set_model_props(model, {"Title": "my graph", "Keywords": "test;graph"})
    helper.set_model_props(model, {"Title": "my graph", "Keywords": "test;graph"})
    assert [p.key for p in model.metadata_props] == ["Title", "Keywords"]  # replaced, not duplicated


@pytest.mark.parametrize(
    ("opsets", "ir"),
    [
        *[([("", v)], ir) for v, ir in [(9, 4), (10, 5), (11, 6), (12, 7), (14, 7), (15, 8), (18, 8), (19, 9)]],
        *[([("", v)], ir) for v, ir in [(20, 9), (21, 10), (22, 10), (23, 11), (24, 12), (25, 13), (27, 13), (28, 14)]],
        ([("ai.onnx", 9)], 4),
        ([("ai.onnx.ml", 2)], 6),
        ([("ai.onnx.ml", 3)], 8),
        ([("ai.onnx.ml", 4)], 9),
        ([("ai.onnx.ml", 5)], 10),
        ([("ai.onnx.training", 1)], 7),
        ([("", 10), ("ai.onnx.ml", 2)], 6),
    ],
)
def test_model_gen_version_ir(opsets: list[tuple[str, int]], ir: int) -> None:
    graph = helper.make_graph([], "g", [], [])
    model = helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid(*o) for o in opsets])
    assert model.ir_version == ir


def test_model_gen_version_unknown_opset() -> None:
    with pytest.raises(ValueError):
        helper.make_model_gen_version(helper.make_graph([], "g", [], []), opset_imports=[helper.make_opsetid("", 100)])


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint16 if a.dtype.itemsize == 2 else np.uint8)


F32 = np.array([[1.0, 2.0], [3.0, 4.0], [0.099853515625, 0.099365234375], [0.0998535081744, 0.1], [np.nan, np.inf]])


@pytest.mark.parametrize(
    ("data_type", "vals", "expected"),
    [
        (TensorProto.BFLOAT16, F32.astype(np.float32), F32.astype(np.float32).astype(ml_dtypes.bfloat16)),
        (TensorProto.FLOAT8E4M3FN, [0, 0.5, 1, 50000, 10.1], np.array([0, 0.5, 1, 448, 10], ml_dtypes.float8_e4m3fn)),
        (
            TensorProto.FLOAT8E4M3FNUZ,
            [0, 0.5, 1, 50000, 10.1, -0.00001, 0.00001],
            np.array([0, 0.5, 1, 240, 10, 0, 0], ml_dtypes.float8_e4m3fnuz),
        ),
        (TensorProto.FLOAT8E5M2, [0, 0.5, 1, 50000, 96], np.array([0, 0.5, 1, 49152, 96], ml_dtypes.float8_e5m2)),
        (
            TensorProto.FLOAT8E5M2FNUZ,
            [0, 0.5, 1, 50000, 96, -1e-7, 1e-7],
            np.array([0, 0.5, 1, 49152, 96, 0, 0], ml_dtypes.float8_e5m2fnuz),
        ),
        (
            TensorProto.FLOAT8E8M0,
            [0, 0.124, 1.0, 1.5, 2.0, 2.1, np.finfo(np.float32).max],
            np.array([0, 124, 127, 128, 128, 129, 254], np.uint8),
        ),
        (
            TensorProto.FLOAT4E2M1,
            [0, 0.5, 1, 50000, -0.6, -100, -5],
            np.array([0, 0.5, 1, 6, -0.5, -6, -4], ml_dtypes.float4_e2m1fn),
        ),
    ],
    ids=lambda v: TensorProto.DataType.Name(v) if isinstance(v, int) else "",
)
def test_make_small_float_tensor(data_type: int, vals: object, expected: np.ndarray) -> None:
    shape = np.shape(vals)
    t = helper.make_tensor("t", data_type, shape, vals)
    np.testing.assert_equal(_bits(numpy_helper.to_array(t)), _bits(expected))


@pytest.mark.parametrize(
    ("data_type", "expected"),
    [
        (TensorProto.BFLOAT16, F32.astype(ml_dtypes.bfloat16)),
        (TensorProto.FLOAT8E4M3FN, np.array([0, 0.5, 1, 448, 10], ml_dtypes.float8_e4m3fn)),
        (TensorProto.FLOAT8E4M3FNUZ, np.array([0, 0.5, 1, 240, 10], np.float32).astype(ml_dtypes.float8_e4m3fnuz)),
        (TensorProto.FLOAT8E5M2, np.array([0, 0.5, 1, 49152, 10], ml_dtypes.float8_e5m2)),
        (TensorProto.FLOAT8E5M2FNUZ, np.array([0, 0.5, 1, 49152, 10], ml_dtypes.float8_e5m2fnuz)),
        (TensorProto.FLOAT8E8M0, np.array([0.0078125, 0.125, 1.0, 2.0, 4.0, 8192], ml_dtypes.float8_e8m0fnu)),
    ],
    ids=lambda v: TensorProto.DataType.Name(v) if isinstance(v, int) else "",
)
def test_make_small_float_tensor_raw(data_type: int, expected: np.ndarray) -> None:
    raw = numpy_helper.tobytes_little_endian(_bits(expected))
    t = helper.make_tensor("t", data_type, list(expected.shape), raw, raw=True)
    np.testing.assert_equal(_bits(numpy_helper.to_array(t)), _bits(expected))


@pytest.mark.parametrize(
    ("data_type", "lo", "hi", "per_byte"),
    [
        (TensorProto.UINT4, 0, 15, 2),
        (TensorProto.INT4, -8, 7, 2),
        (TensorProto.UINT2, 0, 3, 4),
        (TensorProto.INT2, -2, 1, 4),
    ],
    ids=["UINT4", "INT4", "UINT2", "INT2"],
)
@pytest.mark.parametrize("dims", [(5, 4, 6), (4, 6, 5), (3, 3), (1,), (2**10,)])
def test_make_sub_byte_int_tensor(data_type: int, lo: int, hi: int, per_byte: int, dims: tuple[int, ...]) -> None:
    data = RNG.integers(lo, hi + 1, size=dims)
    t = helper.make_tensor("y", data_type, data.shape, data)
    assert len(bytes(t.int32_data)) == math.ceil(data.size / per_byte)
    np.testing.assert_equal(numpy_helper.to_array(t), data)
    negative = np.full(dims, lo // 2 if lo < 0 else 0, np.int8)  # negative values must not inflate the size
    assert len(bytes(helper.make_tensor("y", data_type, dims, negative).int32_data)) == math.ceil(data.size / per_byte)
    codes = RNG.integers(0, 2 ** (8 // per_byte), size=dims, dtype=np.uint8)
    packed = _dtypes.pack_bits(codes, 8 // per_byte).tobytes()
    back = numpy_helper.to_array(helper.make_tensor("p", data_type, dims, packed, raw=True))
    np.testing.assert_equal(back.astype(np.int64) & (2 ** (8 // per_byte) - 1), codes)


def test_make_float4_raw_tensor() -> None:
    data = np.array([0, 0.5, 1, 240, 10, -2], dtype=ml_dtypes.float4_e2m1fn)
    packed = _dtypes.pack_bits(data.view(np.uint8), 4).tobytes()
    t = helper.make_tensor("p", TensorProto.FLOAT4E2M1, data.shape, packed, raw=True)
    np.testing.assert_equal(numpy_helper.to_array(t).view(np.uint8), data.view(np.uint8))


def test_make_tensor_sizes() -> None:
    strings = [s.encode() for s in ["Amy", "Billy", "Cindy", "David"]]
    assert list(helper.make_tensor("s", TensorProto.STRING, (2, 2), strings).string_data) == strings
    with pytest.raises(ValueError, match=r"Number of values (.*) does not match tensor dimensions"):
        helper.make_tensor("m", TensorProto.FLOAT, (2, 2), [1.0, 2.0, 3.0])
    for data_type, vals in [
        (TensorProto.FLOAT, [1.0, 2.0, 3.0]),
        (TensorProto.INT4, [1]),
        (TensorProto.COMPLEX64, [1 + 2j]),
    ]:
        with pytest.raises(ValueError):
            helper.make_tensor("m", data_type, (2,), vals)
    scalar = helper.make_tensor("s", TensorProto.FLOAT, (), [42.0])
    assert list(scalar.dims) == [] and list(scalar.float_data) == [42.0]
    empty = helper.make_tensor("z", TensorProto.FLOAT, (0,), [])
    assert list(empty.dims) == [0] and len(empty.float_data) == 0


def test_optionals_and_sequences() -> None:
    values = helper.make_tensor("test", TensorProto.FLOAT, (5,), [1.1, 2.2, 3.3, 4.4, 5.5])
    opt = helper.make_optional("test", OptionalProto.TENSOR, values)
    assert opt.name == "test" and opt.elem_type == OptionalProto.TENSOR and opt.tensor_value == values
    seq = helper.make_sequence("test", SequenceProto.TENSOR, [values, values])
    assert helper.make_optional("test", OptionalProto.SEQUENCE, seq).sequence_value == seq
    none = helper.make_optional("test", OptionalProto.UNDEFINED, None)
    assert none.elem_type == OptionalProto.UNDEFINED and not none.HasField("tensor_value")
    tensor_type = helper.make_tensor_type_proto(elem_type=2, shape=[5])
    info = helper.make_value_info("test", helper.make_optional_type_proto(tensor_type))
    assert info.type.optional_type.elem_type == helper.make_value_info("test", tensor_type).type
    seq_type = helper.make_optional_type_proto(helper.make_sequence_type_proto(tensor_type))
    info = helper.make_value_info("test", seq_type)
    assert info.type.optional_type.elem_type.sequence_type.elem_type == tensor_type
    untyped = helper.make_tensor_type_proto(elem_type=2, shape=None)
    assert helper.make_value_info("t", helper.make_sequence_type_proto(untyped)) == (
        helper.make_tensor_sequence_value_info("t", 2, None)
    )


def test_printable_graph_initializers() -> None:
    add = helper.make_node("Add", ["X", "Y_Initializer"], ["Z"])
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("Y_Initializer", TensorProto.FLOAT, [1])
    z = helper.make_tensor_value_info("Z", TensorProto.FLOAT, [1])
    init = [helper.make_tensor("Y_Initializer", TensorProto.FLOAT, [1], [1])]
    with_input = helper.printable_graph(helper.make_graph([add], "test", [x, y], [z], init))
    assert ") optional inputs with matching initializers (\n  %Y_Initializer[FLOAT, 1]" in with_input
    without = helper.printable_graph(helper.make_graph([add], "test", [x], [z], init))
    assert ") initializers (\n  %Y_Initializer[FLOAT, 1]" in without
    unknown = helper.make_tensor_value_info("X", TensorProto.FLOAT, [None])
    assert "X[FLOAT, ?]" in helper.printable_graph(helper.make_graph([add], "test", [unknown], [z], init))


NON_STRING = [t for t in helper.get_all_tensor_dtypes() if t != TensorProto.STRING]


def _random_of(tensor_dtype: int) -> np.ndarray:
    np_type = helper.tensor_dtype_to_np_dtype(tensor_dtype)
    if tensor_dtype in (TensorProto.UINT8, TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64):
        return numpy_helper.create_random_int((2, 3), np_type)
    return RNG.standard_normal((2, 3)).astype(np_type)


@pytest.mark.parametrize("tensor_dtype", NON_STRING, ids=helper.tensor_dtype_to_string)
@pytest.mark.parametrize("raw", ["values", "raw_array", "raw_bytes"])
def test_make_tensor_round_trips_every_type(tensor_dtype: int, raw: str) -> None:
    arr = _random_of(tensor_dtype)
    vals: object = arr
    if raw == "raw_bytes":
        bits = _dtypes.bits_per_element(tensor_dtype)
        codes = arr.view(np.uint8) if arr.dtype.itemsize == 1 else arr
        vals = _dtypes.pack_bits(codes, bits).tobytes() if bits < 8 else numpy_helper.tobytes_little_endian(arr)
    t = helper.make_tensor("test", tensor_dtype, arr.shape, vals, raw=raw != "values")
    back = numpy_helper.to_array(t)
    assert back.shape == arr.shape and back.dtype == arr.dtype
    assert back.tobytes() == arr.tobytes()  # bitwise (ml_dtypes' == has known bugs)


def test_dtype_mapping_bfloat16() -> None:
    assert helper.tensor_dtype_to_np_dtype(TensorProto.BFLOAT16) == ml_dtypes.bfloat16
    assert helper.tensor_dtype_to_storage_tensor_dtype(TensorProto.BFLOAT16) == TensorProto.INT32
    assert helper.tensor_dtype_to_field(TensorProto.BFLOAT16) == "int32_data"
