"""onnx_light.onnx_core.helper against onnx.helper: byte-identical protos, same errors.

Each row of ``CALLS`` is one builder call written once against a namespace ``m``
(``m.h`` the helper module, ``m.T`` TensorProto, ...) and run with ours and with
``onnx``; the serialised bytes must match exactly.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import numpy as np
import onnx
import onnx.helper as onnx_helper  # noqa: E402
import onnx.numpy_helper as onnx_numpy_helper  # noqa: E402
import pytest

from onnx_light.onnx_core import _dtypes, _proto, helper, numpy_helper  # noqa: E402

OURS = SimpleNamespace(
    h=helper,
    nh=numpy_helper,
    T=_proto.TensorProto,
    A=_proto.AttributeProto,
    Seq=_proto.SequenceProto,
    Opt=_proto.OptionalProto,
)
THEIRS = SimpleNamespace(
    h=onnx_helper,
    nh=onnx_numpy_helper,
    T=onnx.TensorProto,
    A=onnx.AttributeProto,
    Seq=onnx.SequenceProto,
    Opt=onnx.OptionalProto,
)


def _vi(m: Any, name: str, shape: Any = (2, 3), et: Any = None) -> Any:
    return m.h.make_tensor_value_info(name, m.T.FLOAT if et is None else et, shape)


def _graph(m: Any) -> Any:
    nodes = [
        m.h.make_node("MatMul", ["X", "W"], ["XW"], name="mm"),
        m.h.make_node("Add", ["XW", "B"], ["Y"], doc_string="bias"),
        m.h.make_node("Softmax", ["Y"], ["Z"], axis=-1),
    ]
    w = m.h.make_tensor("W", m.T.FLOAT, [3, 3], np.arange(9, dtype=np.float32))
    b = m.h.make_tensor("B", m.T.FLOAT, [3], [0.5, -1.0, 2.0], raw=False)
    return m.h.make_graph(
        nodes,
        "g",
        [_vi(m, "X", ["N", 3]), _vi(m, "W", [3, 3])],
        [_vi(m, "Z", ["N", None])],
        initializer=[w, b],
        doc_string="a graph",
        value_info=[_vi(m, "XW", ["N", 3])],
    )


def _body(m: Any) -> Any:
    return m.h.make_graph([m.h.make_node("Identity", ["a"], ["b"])], "body", [_vi(m, "a", [])], [_vi(m, "b", [])])


def _leaky(m: Any) -> Any:
    node = m.h.make_node("LeakyRelu", ["y"], ["z"])
    node.attribute.append(m.h.make_attribute_ref("alpha", m.A.FLOAT))
    return node


def _function(m: Any) -> Any:
    return m.h.make_function(
        "custom",
        "Scale",
        ["x"],
        ["y"],
        [
            m.h.make_node("Constant", [], ["s"], value_float=2.0),
            m.h.make_node("Mul", ["x", "s"], ["y"]),
            _leaky(m),
        ],
        [m.h.make_opsetid("", 21)],
        attributes=["alpha"],
        attribute_protos=[m.h.make_attribute("beta", 0.5)],
        doc_string="scales",
        overload="v2",
        value_info=[_vi(m, "s", [])],
    )


def _tensor_rows() -> list[tuple[str, Any]]:
    rng = np.random.default_rng(7)
    floats = (rng.standard_normal(6) * [1, 10, 100, 1e-3, 1e4, 1e6]).tolist()
    specials = [0.0, -0.0, 1.0, -2.5, 1e30, -1e30, float("inf"), -float("inf"), float("nan")]
    rows: list[tuple[str, Any]] = []
    for dt, vals in [
        ("FLOAT", floats),
        ("DOUBLE", floats),
        ("FLOAT16", floats[:4] + [65504.0, 1e-8]),
        ("BFLOAT16", floats + specials),
        ("FLOAT8E4M3FN", floats + specials),
        ("FLOAT8E4M3FNUZ", floats + specials),
        ("FLOAT8E5M2", floats + specials),
        ("FLOAT8E5M2FNUZ", floats + specials),
        ("FLOAT8E8M0", [1.0, 3.0, 0.3, 1e30, 2.0**-127, 5.0]),
        ("FLOAT4E2M1", [0.0, 0.5, -1.5, 2.6, 7.0, -100.0, 0.25]),
        ("FLOAT6E2M3", [0.0, 0.5, -1.5, 2.6, 7.5, -100.0, 0.1]),
        ("FLOAT6E3M2", [0.0, 0.5, -1.5, 2.6, 28.0, -100.0, 0.1]),
        ("INT4", [-8, -1, 0, 3, 7]),
        ("UINT4", [0, 1, 9, 15]),
        ("INT2", [-2, -1, 0, 1, 1]),
        ("UINT2", [0, 1, 2, 3, 3, 2]),
        ("INT8", [-128, -1, 0, 127]),
        ("UINT8", [0, 255, 7]),
        ("INT16", [-32768, -1, 32767]),
        ("UINT16", [0, 65535]),
        ("INT32", [-(2**31), 2**31 - 1]),
        ("INT64", [-(2**63), 2**63 - 1, 0]),
        ("UINT32", [0, 2**32 - 1]),
        ("UINT64", [0, 2**64 - 1]),
        ("BOOL", [True, False, True]),
        ("COMPLEX64", [1 + 2j, -3.5j]),
        ("COMPLEX128", [1 + 2j, -3.5j, 0.1]),
        ("STRING", ["a", "héllo", ""]),
        ("STRING", [b"\x00\xff", b"b"]),
    ]:
        n = len(vals)
        rows.append(
            (
                f"make_tensor-{dt}-{len(rows)}",
                lambda m, dt=dt, vals=vals, n=n: m.h.make_tensor("t", getattr(m.T, dt), [n], vals),
            )
        )
    # raw=True: native arrays and bytes
    for dt, arr in [
        ("FLOAT", np.arange(6, dtype=np.float32).reshape(2, 3)),
        ("INT64", np.arange(4, dtype=np.int64)),
        ("FLOAT16", np.array([1.5, -2], dtype=np.float16)),
        ("BOOL", np.array([True, False])),
        ("UINT8", np.array([1, 2, 3], dtype=np.uint8)),
    ]:
        rows.append(
            (
                f"make_tensor-raw-{dt}",
                lambda m, dt=dt, arr=arr: m.h.make_tensor("r", getattr(m.T, dt), arr.shape, arr, raw=True),
            )
        )
    rows.append(
        (
            "make_tensor-raw-bytes",
            lambda m: m.h.make_tensor("r", m.T.FLOAT, [2], np.array([1, 2], np.float32).tobytes(), raw=True),
        )
    )
    rows.append(("make_tensor-scalar", lambda m: m.h.make_tensor("s", m.T.INT64, [], [5])))
    rows.append(("make_tensor-empty", lambda m: m.h.make_tensor("e", m.T.FLOAT, [0, 3], [])))
    rows.append(("make_tensor-2d", lambda m: m.h.make_tensor("t", m.T.INT32, [2, 2], [[1, 2], [3, 4]])))
    rows.append(
        ("make_tensor-np-float32", lambda m: m.h.make_tensor("t", m.T.FLOAT, (3,), np.float32([0.1, 0.2, 0.3])))
    )
    return rows


CALLS: list[tuple[str, Any]] = [
    # nodes
    ("make_node-plain", lambda m: m.h.make_node("Relu", ["x"], ["y"])),
    ("make_node-name-doc", lambda m: m.h.make_node("Relu", ["x"], ["y"], name="n", doc_string="d")),
    ("make_node-empty-name", lambda m: m.h.make_node("Relu", ["x"], ["y"], name="", doc_string="")),
    ("make_node-domain-empty", lambda m: m.h.make_node("Relu", ["x"], ["y"], domain="")),
    ("make_node-domain", lambda m: m.h.make_node("Foo", ["x", ""], ["y"], domain="com.x", overload="o")),
    ("make_node-optional-inputs", lambda m: m.h.make_node("Clip", ["x", "", "hi"], ["y"])),
    (
        "make_node-attrs-sorted",
        lambda m: m.h.make_node(
            "Conv", ["x", "w"], ["y"], strides=[1, 1], pads=(0, 0, 1, 1), group=1, auto_pad="NOTSET", skip=None
        ),
    ),
    ("make_node-subgraph", lambda m: m.h.make_node("If", ["c"], ["o"], then_branch=_body(m), else_branch=_body(m))),
    # attributes
    ("attr-int", lambda m: m.h.make_attribute("a", 3)),
    ("attr-bool", lambda m: m.h.make_attribute("a", True)),
    ("attr-npint", lambda m: m.h.make_attribute("a", np.int64(-4))),
    ("attr-negint", lambda m: m.h.make_attribute("a", -(2**40))),
    ("attr-float", lambda m: m.h.make_attribute("a", 0.1)),
    ("attr-float-zero", lambda m: m.h.make_attribute("a", 0.0)),
    ("attr-npfloat", lambda m: m.h.make_attribute("a", np.float32(1.5))),
    ("attr-str", lambda m: m.h.make_attribute("a", "héllo")),
    ("attr-bytes", lambda m: m.h.make_attribute("a", b"\x00\x01")),
    ("attr-empty-str", lambda m: m.h.make_attribute("a", "")),
    ("attr-doc", lambda m: m.h.make_attribute("a", 1, doc_string="doc")),
    ("attr-tensor", lambda m: m.h.make_attribute("value", m.h.make_tensor("v", m.T.FLOAT, [2], [1.0, 2.0]))),
    ("attr-graph", lambda m: m.h.make_attribute("body", _body(m))),
    ("attr-type-proto", lambda m: m.h.make_attribute("tp", m.h.make_tensor_type_proto(m.T.FLOAT, [2]))),
    (
        "attr-sparse",
        lambda m: m.h.make_attribute(
            "sp",
            m.h.make_sparse_tensor(
                m.h.make_tensor("v", m.T.FLOAT, [2], [1.0, 2.0]), m.h.make_tensor("i", m.T.INT64, [2], [0, 3]), [4]
            ),
        ),
    ),
    ("attr-ints", lambda m: m.h.make_attribute("a", [1, 2, -3])),
    ("attr-ints-np", lambda m: m.h.make_attribute("a", np.array([1, 2, 3]))),
    ("attr-ints-tuple", lambda m: m.h.make_attribute("a", (4, 5))),
    ("attr-floats", lambda m: m.h.make_attribute("a", [0.5, 1.25])),
    ("attr-floats-mixed", lambda m: m.h.make_attribute("a", [1, 2.5])),
    ("attr-floats-np", lambda m: m.h.make_attribute("a", np.array([0.1, 0.2], dtype=np.float32))),
    ("attr-strings", lambda m: m.h.make_attribute("a", ["x", b"y", "ü"])),
    ("attr-tensors", lambda m: m.h.make_attribute("a", [m.h.make_tensor("v", m.T.INT64, [1], [1])])),
    ("attr-graphs", lambda m: m.h.make_attribute("a", [_body(m), _body(m)])),
    ("attr-type-protos", lambda m: m.h.make_attribute("a", [m.h.make_tensor_type_proto(m.T.INT64, None)])),
    ("attr-empty-ints", lambda m: m.h.make_attribute("a", [], attr_type=m.A.INTS)),
    ("attr-empty-strings", lambda m: m.h.make_attribute("a", [], attr_type=m.A.STRINGS)),
    ("attr-typed-floats", lambda m: m.h.make_attribute("a", [1, 2], attr_type=m.A.FLOATS)),
    ("attr-typed-int", lambda m: m.h.make_attribute("a", 3, attr_type=m.A.INT)),
    ("attr-ref", lambda m: m.h.make_attribute_ref("alpha", m.A.FLOAT)),
    ("attr-ref-named", lambda m: m.h.make_attribute_ref("a", m.A.INTS, "doc", ref_attr_name="perm")),
    # types and value infos
    ("vi-shape", lambda m: _vi(m, "x", [2, "N", None])),
    ("vi-scalar", lambda m: _vi(m, "x", [])),
    ("vi-unknown-rank", lambda m: _vi(m, "x", None)),
    ("vi-zero-dim", lambda m: _vi(m, "x", [0, 1])),
    ("vi-undefined-type", lambda m: _vi(m, "x", [1], et=0)),
    ("vi-doc", lambda m: m.h.make_tensor_value_info("x", m.T.INT64, [1], doc_string="doc")),
    ("vi-denotation", lambda m: m.h.make_tensor_value_info("x", m.T.FLOAT, [1, 3], "", ["DATA_BATCH", "DATA_CHANNEL"])),
    ("vi-empty", lambda m: m.h.make_empty_tensor_value_info("x")),
    ("vi-seq", lambda m: m.h.make_tensor_sequence_value_info("s", m.T.FLOAT, ["N"])),
    ("vi-seq-no-shape", lambda m: m.h.make_tensor_sequence_value_info("s", m.T.FLOAT, None)),
    ("vi-sparse", lambda m: m.h.make_sparse_tensor_value_info("s", m.T.FLOAT, [3, 4])),
    ("vi-value-info", lambda m: m.h.make_value_info("v", m.h.make_tensor_type_proto(m.T.BOOL, [1]), "d")),
    ("type-tensor", lambda m: m.h.make_tensor_type_proto(m.T.FLOAT16, [1, "B"])),
    ("type-seq", lambda m: m.h.make_sequence_type_proto(m.h.make_tensor_type_proto(m.T.FLOAT, [2]))),
    ("type-opt", lambda m: m.h.make_optional_type_proto(m.h.make_tensor_type_proto(m.T.FLOAT, None))),
    ("type-map", lambda m: m.h.make_map_type_proto(m.T.INT64, m.h.make_tensor_type_proto(m.T.FLOAT, []))),
    (
        "type-opt-seq",
        lambda m: m.h.make_optional_type_proto(
            m.h.make_sequence_type_proto(m.h.make_tensor_type_proto(m.T.INT8, [None]))
        ),
    ),
    ("type-sparse", lambda m: m.h.make_sparse_tensor_type_proto(m.T.FLOAT, [5])),
    # graphs, functions, models
    ("opsetid", lambda m: m.h.make_opsetid("", 21)),
    ("opsetid-ml", lambda m: m.h.make_opsetid("ai.onnx.ml", 5)),
    ("operatorsetid", lambda m: m.h.make_operatorsetid("com.x", 1)),
    ("graph", _graph),
    ("graph-empty", lambda m: m.h.make_graph([], "empty", [], [])),
    (
        "graph-sparse-init",
        lambda m: m.h.make_graph(
            [],
            "g",
            [],
            [],
            sparse_initializer=[
                m.h.make_sparse_tensor(
                    m.h.make_tensor("sv", m.T.FLOAT, [1], [3.0]), m.h.make_tensor("si", m.T.INT64, [1], [2]), [4]
                )
            ],
        ),
    ),
    ("function", _function),
    ("function-min", lambda m: m.h.make_function("d", "f", [], [], [], [])),
    ("model-default", lambda m: m.h.make_model(_graph(m))),
    ("model-empty-graph", lambda m: m.h.make_model(m.h.make_graph([], "", [], []))),
    (
        "model-kwargs",
        lambda m: m.h.make_model(
            _graph(m),
            opset_imports=[m.h.make_opsetid("", 18), m.h.make_opsetid("custom", 1)],
            functions=[_function(m)],
            producer_name="onnx-light",
            producer_version="0.1",
            ir_version=8,
            model_version=3,
            doc_string="model",
            domain="ai.test",
        ),
    ),
    ("model-gen-version", lambda m: m.h.make_model_gen_version(_graph(m), opset_imports=[m.h.make_opsetid("", 17)])),
    (
        "model-gen-version-ml",
        lambda m: m.h.make_model_gen_version(
            _graph(m), opset_imports=[m.h.make_opsetid("", 21), m.h.make_opsetid("ai.onnx.ml", 5)]
        ),
    ),
    ("model-gen-version-none", lambda m: m.h.make_model_gen_version(_graph(m), opset_imports=[])),
    ("model-props", lambda m: _with_props(m)),
    (
        "training-info",
        lambda m: m.h.make_training_info(_body(m), [("a", "b")], _body(m), [("c", "d")]),
    ),
    ("training-info-min", lambda m: m.h.make_training_info(_body(m), [], None, None)),
    # sequences, maps, optionals
    (
        "sequence",
        lambda m: m.h.make_sequence("s", m.Seq.TENSOR, [m.h.make_tensor("t", m.T.INT64, [1], [1])]),
    ),
    ("sequence-undefined", lambda m: m.h.make_sequence("s", m.Seq.UNDEFINED, [])),
    (
        "map-str",
        lambda m: m.h.make_map(
            "mp",
            m.T.STRING,
            [b"a", b"b"],
            m.h.make_sequence("v", m.Seq.TENSOR, [m.h.make_tensor("t", m.T.FLOAT, [], [1.0])]),
        ),
    ),
    (
        "map-int",
        lambda m: m.h.make_map("mp", m.T.INT64, [1, 2], m.h.make_sequence("v", m.Seq.UNDEFINED, [])),
    ),
    ("optional", lambda m: m.h.make_optional("o", m.Opt.TENSOR, m.h.make_tensor("t", m.T.INT32, [1], [4]))),
    ("optional-empty", lambda m: m.h.make_optional("o", m.Opt.UNDEFINED, None)),
    *_tensor_rows(),
]


def _with_props(m: Any) -> Any:
    model = m.h.make_model(_graph(m))
    m.h.set_model_props(model, {"author": "me", "license": "MIT"})
    return model


@pytest.mark.parametrize("call", [c for _, c in CALLS], ids=[i for i, _ in CALLS])
def test_bytes_identical_to_onnx(call: Any) -> None:
    ours = call(OURS)
    theirs = call(THEIRS)
    assert ours.SerializeToString() == theirs.SerializeToString()
    # and decoding onnx's bytes with our codec gives an equal message
    assert type(ours).FromString(theirs.SerializeToString()) == ours


def test_call_table_is_broad() -> None:
    assert len(CALLS) >= 100


ERRORS: list[tuple[str, Any]] = [
    ("attr-empty-no-type", lambda m: m.h.make_attribute("a", [])),
    ("attr-mixed", lambda m: m.h.make_attribute("a", [1, "x"])),
    ("attr-none", lambda m: m.h.make_attribute("a", None)),
    ("attr-type-mismatch", lambda m: m.h.make_attribute("a", 1, attr_type=m.A.FLOAT)),
    ("attr-ints-given-floats", lambda m: m.h.make_attribute("a", [1.5], attr_type=m.A.INTS)),
    ("attr-ref-empty", lambda m: m.h.make_attribute_ref("", m.A.INT)),
    ("tensor-count", lambda m: m.h.make_tensor("t", m.T.FLOAT, [3], [1.0, 2.0])),
    ("tensor-raw-size", lambda m: m.h.make_tensor("t", m.T.FLOAT, [3], b"\x00" * 8, raw=True)),
    ("tensor-raw-string", lambda m: m.h.make_tensor("t", m.T.STRING, [1], b"a", raw=True)),
    ("tensor-raw-list", lambda m: m.h.make_tensor("t", m.T.FLOAT, [1], [1.0], raw=True)),
    ("shape-bad-dim", lambda m: m.h.make_tensor_type_proto(m.T.FLOAT, [1.5])),
    ("shape-denotation-len", lambda m: m.h.make_tensor_type_proto(m.T.FLOAT, [1, 2], ["A"])),
    ("gen-version-unknown", lambda m: m.h.make_model_gen_version(_graph(m), opset_imports=[m.h.make_opsetid("", 99)])),
    ("sequence-bad-type", lambda m: m.h.make_sequence("s", 99, [])),
]


@pytest.mark.parametrize("call", [c for _, c in ERRORS], ids=[i for i, _ in ERRORS])
def test_errors_match_onnx(call: Any) -> None:
    with pytest.raises(Exception) as theirs:
        call(THEIRS)
    with pytest.raises(type(theirs.value)):
        call(OURS)


def test_attribute_values_round_trip() -> None:
    for _, call in CALLS:
        ours, theirs = call(OURS), call(THEIRS)
        if not isinstance(ours, _proto.AttributeProto) or ours.ref_attr_name:
            continue
        a, b = helper.get_attribute_value(ours), onnx_helper.get_attribute_value(theirs)
        if isinstance(a, list):
            assert [_plain(x) for x in a] == [_plain(x) for x in b]
        else:
            assert _plain(a) == _plain(b)


def _plain(x: Any) -> Any:
    return x.SerializeToString() if hasattr(x, "SerializeToString") else x


def test_get_attribute_value_reference_and_node() -> None:
    with pytest.raises(ValueError, match="reference"):
        helper.get_attribute_value(helper.make_attribute_ref("a", _proto.AttributeProto.INT))
    node = helper.make_node("Foo", [], [], perm=[1, 0], alpha=0.5, mode="x")
    assert helper.get_node_attr_value(node, "perm") == [1, 0]
    assert helper.get_node_attr_value(node, "mode") == b"x"
    with pytest.raises(ValueError, match="no attribute"):
        helper.get_node_attr_value(node, "nope")
    node.attribute.append(helper.make_attribute("perm", [2]))
    with pytest.raises(ValueError, match="multiple"):
        helper.get_node_attr_value(node, "perm")


def test_get_attribute_value_of_decoded_string_is_bytes() -> None:
    long = "x" * 1000  # decoded as a zero-copy view by the codec
    attr = _proto.AttributeProto.FromString(helper.make_attribute("s", long).SerializeToString())
    value = helper.get_attribute_value(attr)
    assert isinstance(value, bytes) and value == long.encode()


def test_builders_copy_their_inputs() -> None:
    node = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph([node], "g", [], [])
    node.input[0] = "changed"
    assert graph.node[0].input == ["x"]
    model = helper.make_model(graph)
    graph.name = "changed"
    assert model.graph.name == "g"


def test_make_model_rejects_unknown_field() -> None:
    with pytest.raises(AttributeError):
        helper.make_model(helper.make_graph([], "g", [], []), not_a_field=1)


def test_versions_match_onnx() -> None:
    assert helper.IR_VERSION == onnx.IR_VERSION
    assert helper.OPSET_VERSION == onnx.defs.onnx_opset_version()
    for domain, top in (("", helper.OPSET_VERSION), ("ai.onnx.ml", 5), ("ai.onnx.training", 1)):
        for version in range(1, top + 1):
            ours = helper.find_min_ir_version_for([helper.make_opsetid(domain, version)], ignore_unknown=True)
            theirs = onnx_helper.find_min_ir_version_for([onnx_helper.make_opsetid(domain, version)], True)
            assert ours == theirs, (domain, version)


# ----------------------------------------------------------------------------
# dtype tables
# ----------------------------------------------------------------------------
ALL_DTYPES = sorted(onnx_helper.get_all_tensor_dtypes())


@pytest.mark.parametrize("dt", ALL_DTYPES)
def test_dtype_tables_match_onnx(dt: int) -> None:
    assert helper.tensor_dtype_to_field(dt) == onnx_helper.tensor_dtype_to_field(dt)
    assert helper.tensor_dtype_to_string(dt) == onnx_helper.tensor_dtype_to_string(dt)
    assert helper.tensor_dtype_to_storage_tensor_dtype(dt) == onnx_helper.tensor_dtype_to_storage_tensor_dtype(dt)
    theirs = onnx_helper.tensor_dtype_to_np_dtype(dt)
    ours = helper.tensor_dtype_to_np_dtype(dt)
    assert ours == theirs  # ml_dtypes types when ml_dtypes is installed, as onnx
    pattern = _dtypes.pattern_np_dtype(dt)
    assert pattern.itemsize == theirs.itemsize
    if dt in _dtypes.BIT_PATTERN_TYPES:
        assert pattern.kind == "u"  # documented: the bit pattern the runtime computes with
    elif theirs.kind == "V" or theirs.name in ("int4", "uint4", "int2", "uint2"):
        assert pattern == np.dtype(np.int8 if theirs.name.startswith("int") else np.uint8)
    else:
        assert pattern == theirs
        assert helper.np_dtype_to_tensor_dtype(ours) == onnx_helper.np_dtype_to_tensor_dtype(theirs)
    # ml_dtypes arrays are recognised by name
    assert helper.np_dtype_to_tensor_dtype(theirs) == dt


def test_np_dtype_to_tensor_dtype_strings_and_errors() -> None:
    assert helper.np_dtype_to_tensor_dtype(np.dtype("<U3")) == _proto.TensorProto.STRING
    assert helper.np_dtype_to_tensor_dtype(np.dtype(object)) == _proto.TensorProto.STRING
    with pytest.raises(ValueError):
        helper.np_dtype_to_tensor_dtype(np.dtype("datetime64[s]"))
    with pytest.raises(ValueError):
        helper.tensor_dtype_to_np_dtype(999)


def _ml(name: str) -> Any:
    import ml_dtypes

    return getattr(ml_dtypes, name)


SMALL_FLOATS = [
    (_proto.TensorProto.BFLOAT16, "bfloat16", 16),
    (_proto.TensorProto.FLOAT8E4M3FN, "float8_e4m3fn", 8),
    (_proto.TensorProto.FLOAT8E4M3FNUZ, "float8_e4m3fnuz", 8),
    (_proto.TensorProto.FLOAT8E5M2, "float8_e5m2", 8),
    (_proto.TensorProto.FLOAT8E5M2FNUZ, "float8_e5m2fnuz", 8),
    (_proto.TensorProto.FLOAT8E8M0, "float8_e8m0fnu", 8),
    (_proto.TensorProto.FLOAT4E2M1, "float4_e2m1fn", 4),
    (_proto.TensorProto.FLOAT6E2M3, "float6_e2m3fn", 6),
    (_proto.TensorProto.FLOAT6E3M2, "float6_e3m2fn", 6),
]


@pytest.mark.parametrize("dt,name,bits", SMALL_FLOATS, ids=[n for _, n, _ in SMALL_FLOATS])
def test_small_float_codec_matches_ml_dtypes(dt: int, name: str, bits: int) -> None:
    mld = _ml(name)
    store = np.uint16 if bits == 16 else np.uint8
    patterns = np.arange(1 << bits, dtype=store)
    reference = np.array([np.frombuffer(np.array(p, store).tobytes(), mld)[0] for p in patterns]).astype(np.float32)
    decoded = _dtypes.decode_float(patterns, dt)
    np.testing.assert_array_equal(decoded, reference)
    if dt == _proto.TensorProto.FLOAT8E8M0:
        return
    finite = np.unique(np.abs(reference[np.isfinite(reference)]).astype(np.float64))
    ties = (finite[:-1] + finite[1:]) / 2  # exactly half-way: rounds to even
    rng = np.random.default_rng(0)
    x = np.concatenate([finite, -finite, ties, -ties, rng.standard_normal(5000) * finite.max() / 3])
    if bits == 16:
        with np.errstate(over="ignore"):
            x = x.astype(np.float32)  # ml_dtypes rounds double -> float -> bfloat16
        expected = x.astype(mld).view(store)
    else:
        import ml_dtypes

        info = ml_dtypes.finfo(mld)
        expected = np.clip(x, float(info.min), float(info.max)).astype(mld).view(store)
    np.testing.assert_array_equal(_dtypes.encode_float(x, dt), expected)


_E8M0_X = np.concatenate(
    [
        [0.0, -0.0, np.inf, -np.inf, np.nan, 2.0**-127, 1.5 * 2.0**-127, 1e-45, 0.75, 1.5, 3.0],
        [2.0**127, 1.75 * 2.0**127],
        np.random.default_rng(1).standard_normal(2000) * np.exp2(np.random.default_rng(2).integers(-150, 128, 2000)),
    ]
).astype(np.float32)


@pytest.mark.parametrize("round_mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [True, False])
def test_e8m0_encoding_matches_onnx(saturate: bool, round_mode: str) -> None:
    assert hasattr(onnx_numpy_helper, "to_float8e8m0"), "the test extra pins onnx 1.23, which has it"
    want = np.asarray(onnx_numpy_helper.to_float8e8m0(_E8M0_X, saturate, round_mode)).view(np.uint8)
    got = _dtypes.encode_float(_E8M0_X, _proto.TensorProto.FLOAT8E8M0, saturate=saturate, round_mode=round_mode)
    np.testing.assert_array_equal(got, want)


def test_pack_unpack_bits_match_onnx() -> None:
    packers = {4: onnx_numpy_helper._pack_4bitx2, 2: onnx_numpy_helper._pack_2bitx4, 6: onnx_numpy_helper._pack_6bit}
    rng = np.random.default_rng(1)
    for bits, pack in packers.items():
        for n in range(0, 14):
            codes = rng.integers(0, 1 << bits, n).astype(np.uint8)
            packed = _dtypes.pack_bits(codes, bits)
            assert packed.tobytes() == pack(codes).tobytes()
            assert len(packed) == math.ceil(n * bits / 8)
            np.testing.assert_array_equal(_dtypes.unpack_bits(packed.tobytes(), bits, n), codes)
    with pytest.raises(ValueError):
        _dtypes.unpack_bits(b"\x00", 4, 3)


# ----------------------------------------------------------------------------
# printing
# ----------------------------------------------------------------------------
def _printer_graph(m: Any) -> Any:
    nodes = [
        m.h.make_node("If", ["c"], ["o"], then_branch=_body(m), else_branch=_body(m)),
        m.h.make_node(
            "Foo",
            ["o", ""],
            ["p"],
            f=0.1,
            fs=[1.5, 2.0],
            s="x" * 70,
            ss=["a", "b"],
            t=m.h.make_tensor("k", m.T.INT64, [], [3]),
            tt=m.h.make_tensor("k", m.T.FLOAT, [2], [1.0, 2.0]),
            ts=[m.h.make_tensor("k", m.T.FLOAT, [1], [1.0])],
            gs=[_body(m)],
        ),
        m.h.make_node("NoOutputs", ["p"], []),
    ]
    nodes[1].attribute.append(m.h.make_attribute("aaa", 1))  # out of order: printing sorts
    inputs = [_vi(m, "c", []), m.h.make_tensor_value_info("u", m.T.FLOAT, None)]
    inputs.append(m.h.make_empty_tensor_value_info("e"))
    return m.h.make_graph(nodes, "main", inputs, [_vi(m, "p", [1, "N", None])])


PRINTED = [
    ("graph", _graph),
    ("graph-subgraphs", _printer_graph),
    ("graph-empty", lambda m: m.h.make_graph([], "e", [], [])),
]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("build", [b for _, b in PRINTED], ids=[i for i, _ in PRINTED])
def test_printable_graph_matches_onnx(build: Any) -> None:
    ours, theirs = build(OURS), build(THEIRS)
    assert helper.printable_graph(ours) == onnx_helper.printable_graph(theirs)
    assert helper.printable_graph(ours, prefix="  ") == onnx_helper.printable_graph(theirs, prefix="  ")
    for a, b in zip(ours.node, theirs.node):
        assert helper.printable_node(a, "> ") == onnx_helper.printable_node(b, "> ")
    for a, b in zip(ours.input, theirs.input):
        assert helper.printable_value_info(a) == onnx_helper.printable_value_info(b)


TO_TEXT_MODEL = """\
model ir_version=14 opset_import={ai.onnx: 28}
graph g (%X: FLOAT[N,3], %W: FLOAT[3,3]) -> (%Z: FLOAT[N,?])
  initializers: %W: FLOAT[3,3], %B: FLOAT[3]
  %XW = MatMul(%X, %W)
  %Y = Add(%XW, %B)
  %Z = Softmax(%Y) {axis=-1}"""

TO_TEXT_FUNCTION = """\
function custom::Scale:v2 (%x) -> (%y)
  opset_import: {ai.onnx: 21}
  attributes: alpha, beta
  %s = Constant() {value_float=2}
  %y = Mul(%x, %s)
  %z = LeakyRelu(%y) {alpha=@alpha}"""

TO_TEXT_NODE = """\
%o, _ = com.x::If(%c, _) {else_branch=<graph body>, names=['a', 'b'], value=tensor(FLOAT[2] [1.0, 2.0])}
    else_branch:
      graph body (%a: FLOAT[]) -> (%b: FLOAT[])
        %b = Identity(%a)"""


def test_to_text() -> None:
    assert helper.to_text(helper.make_model(_graph(OURS))) == TO_TEXT_MODEL
    assert helper.to_text(_function(OURS)) == TO_TEXT_FUNCTION
    node = helper.make_node(
        "If",
        ["c", ""],
        ["o", ""],
        domain="com.x",
        else_branch=_body(OURS),
        names=["a", "b"],
        value=helper.make_tensor("v", _proto.TensorProto.FLOAT, [2], [1.0, 2.0]),
    )
    assert helper.to_text(node) == TO_TEXT_NODE
    assert helper.to_text(_graph(OURS)) == TO_TEXT_MODEL.split("\n", 1)[1]
    with pytest.raises(TypeError, match="to_text"):
        helper.to_text(_proto.TensorProto())  # type: ignore[arg-type]
