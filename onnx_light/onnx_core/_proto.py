"""The ONNX IR: one class per message of onnx 1.23's ``onnx.proto`` and ``onnx-data.proto``.

Field names, numbers and enum values are the schema's own, so code written for the
``onnx`` package ports by changing the import. The rows below are the schema's facts;
``_message.py`` turns them into slotted classes and ``_wire.py`` encodes them.
"""

from __future__ import annotations

from typing import Any

from ._message import (
    Field,
    Message,
)

__all__ = [
    "AttributeProto",
    "ValueInfoProto",
    "NodeProto",
    "IntIntListEntryProto",
    "NodeDeviceConfigurationProto",
    "ShardingSpecProto",
    "ShardedDimProto",
    "SimpleShardedDimProto",
    "TrainingInfoProto",
    "ModelProto",
    "DeviceConfigurationProto",
    "StringStringEntryProto",
    "TensorAnnotation",
    "GraphProto",
    "TensorProto",
    "SparseTensorProto",
    "TensorShapeProto",
    "TypeProto",
    "OperatorSetIdProto",
    "FunctionProto",
    "SequenceProto",
    "MapProto",
    "OptionalProto",
    "Version",
    "OperatorStatus",
    "EnumType",
]


class EnumType:
    """A protobuf-style enum descriptor: ``Name(number)``, ``Value(name)``, ``items()``."""

    def __init__(self, name: str, values: dict[str, int]) -> None:
        self.name = name
        self._values = dict(values)
        self._names: dict[int, str] = {}
        for key, number in values.items():
            self._names.setdefault(number, key)

    def Name(self, number: int) -> str:  # noqa: N802  (protobuf's name)
        """The name of enum value ``number``."""
        try:
            return self._names[number]
        except KeyError:
            raise ValueError(f"enum {self.name} has no value {number}") from None

    def Value(self, name: str) -> int:  # noqa: N802
        """The number of enum value ``name``."""
        try:
            return self._values[name]
        except KeyError:
            raise ValueError(f"enum {self.name} has no name {name!r}") from None

    def keys(self) -> list[str]:
        """The value names in declaration order."""
        return list(self._values)

    def values(self) -> list[int]:
        """The value numbers in declaration order."""
        return list(self._values.values())

    def items(self) -> list[tuple[str, int]]:
        """``(name, number)`` pairs in declaration order."""
        return list(self._values.items())

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(name) from None


Version = EnumType(
    "Version",
    {
        "_START_VERSION": 0,
        "IR_VERSION_2017_10_10": 1,
        "IR_VERSION_2017_10_30": 2,
        "IR_VERSION_2017_11_3": 3,
        "IR_VERSION_2019_1_22": 4,
        "IR_VERSION_2019_3_18": 5,
        "IR_VERSION_2019_9_19": 6,
        "IR_VERSION_2020_5_8": 7,
        "IR_VERSION_2021_7_30": 8,
        "IR_VERSION_2023_5_5": 9,
        "IR_VERSION_2024_3_25": 10,
        "IR_VERSION_2025_05_12": 11,
        "IR_VERSION_2025_08_26": 12,
        "IR_VERSION_2025_11_06": 13,
        "IR_VERSION": 14,
    },
)
OperatorStatus = EnumType("OperatorStatus", {"EXPERIMENTAL": 0, "STABLE": 1})


class AttributeProto(Message):
    """ONNX AttributeProto (onnx.proto)."""

    AttributeType = EnumType(
        "AttributeType",
        {
            "UNDEFINED": 0,
            "FLOAT": 1,
            "INT": 2,
            "STRING": 3,
            "TENSOR": 4,
            "GRAPH": 5,
            "SPARSE_TENSOR": 11,
            "TYPE_PROTO": 13,
            "FLOATS": 6,
            "INTS": 7,
            "STRINGS": 8,
            "TENSORS": 9,
            "GRAPHS": 10,
            "SPARSE_TENSORS": 12,
            "TYPE_PROTOS": 14,
        },
    )
    UNDEFINED = 0
    FLOAT = 1
    INT = 2
    STRING = 3
    TENSOR = 4
    GRAPH = 5
    SPARSE_TENSOR = 11
    TYPE_PROTO = 13
    FLOATS = 6
    INTS = 7
    STRINGS = 8
    TENSORS = 9
    GRAPHS = 10
    SPARSE_TENSORS = 12
    TYPE_PROTOS = 14

    name: str
    ref_attr_name: str
    doc_string: str
    type: int
    f: float
    i: int
    s: bytes
    t: TensorProto
    g: GraphProto
    sparse_tensor: SparseTensorProto
    tp: TypeProto
    floats: list[float]
    ints: list[int]
    strings: list[bytes]
    tensors: list[TensorProto]
    graphs: list[GraphProto]
    sparse_tensors: list[SparseTensorProto]
    type_protos: list[TypeProto]
    FULL_NAME = "AttributeProto"
    FIELDS = (
        Field("name", 1, "string"),
        Field("ref_attr_name", 21, "string"),
        Field("doc_string", 13, "string"),
        Field("type", 20, "enum"),
        Field("f", 2, "float"),
        Field("i", 3, "int64"),
        Field("s", 4, "bytes"),
        Field("t", 5, "message", message="TensorProto"),
        Field("g", 6, "message", message="GraphProto"),
        Field("sparse_tensor", 22, "message", message="SparseTensorProto"),
        Field("tp", 14, "message", message="TypeProto"),
        Field("floats", 7, "float", repeated=True),
        Field("ints", 8, "int64", repeated=True),
        Field("strings", 9, "bytes", repeated=True),
        Field("tensors", 10, "message", repeated=True, message="TensorProto"),
        Field("graphs", 11, "message", repeated=True, message="GraphProto"),
        Field("sparse_tensors", 23, "message", repeated=True, message="SparseTensorProto"),
        Field("type_protos", 15, "message", repeated=True, message="TypeProto"),
    )


class ValueInfoProto(Message):
    """ONNX ValueInfoProto (onnx.proto)."""

    name: str
    type: TypeProto
    doc_string: str
    metadata_props: list[StringStringEntryProto]
    FULL_NAME = "ValueInfoProto"
    FIELDS = (
        Field("name", 1, "string"),
        Field("type", 2, "message", message="TypeProto"),
        Field("doc_string", 3, "string"),
        Field("metadata_props", 4, "message", repeated=True, message="StringStringEntryProto"),
    )


class NodeProto(Message):
    """ONNX NodeProto (onnx.proto)."""

    input: list[str]
    output: list[str]
    name: str
    op_type: str
    domain: str
    overload: str
    attribute: list[AttributeProto]
    doc_string: str
    metadata_props: list[StringStringEntryProto]
    device_configurations: list[NodeDeviceConfigurationProto]
    FULL_NAME = "NodeProto"
    FIELDS = (
        Field("input", 1, "string", repeated=True),
        Field("output", 2, "string", repeated=True),
        Field("name", 3, "string"),
        Field("op_type", 4, "string"),
        Field("domain", 7, "string"),
        Field("overload", 8, "string"),
        Field("attribute", 5, "message", repeated=True, message="AttributeProto"),
        Field("doc_string", 6, "string"),
        Field("metadata_props", 9, "message", repeated=True, message="StringStringEntryProto"),
        Field(
            "device_configurations",
            10,
            "message",
            repeated=True,
            message="NodeDeviceConfigurationProto",
        ),
    )


class IntIntListEntryProto(Message):
    """ONNX IntIntListEntryProto (onnx.proto)."""

    key: int
    value: list[int]
    FULL_NAME = "IntIntListEntryProto"
    FIELDS = (
        Field("key", 1, "int64"),
        Field("value", 2, "int64", repeated=True),
    )


class NodeDeviceConfigurationProto(Message):
    """ONNX NodeDeviceConfigurationProto (onnx.proto)."""

    configuration_id: str
    sharding_spec: list[ShardingSpecProto]
    pipeline_stage: int
    FULL_NAME = "NodeDeviceConfigurationProto"
    FIELDS = (
        Field("configuration_id", 1, "string"),
        Field("sharding_spec", 2, "message", repeated=True, message="ShardingSpecProto"),
        Field("pipeline_stage", 3, "int32"),
    )


class ShardingSpecProto(Message):
    """ONNX ShardingSpecProto (onnx.proto)."""

    tensor_name: str
    device: list[int]
    index_to_device_group_map: list[IntIntListEntryProto]
    sharded_dim: list[ShardedDimProto]
    FULL_NAME = "ShardingSpecProto"
    FIELDS = (
        Field("tensor_name", 1, "string"),
        Field("device", 2, "int64", repeated=True),
        Field("index_to_device_group_map", 3, "message", repeated=True, message="IntIntListEntryProto"),
        Field("sharded_dim", 4, "message", repeated=True, message="ShardedDimProto"),
    )


class ShardedDimProto(Message):
    """ONNX ShardedDimProto (onnx.proto)."""

    axis: int
    simple_sharding: list[SimpleShardedDimProto]
    FULL_NAME = "ShardedDimProto"
    FIELDS = (
        Field("axis", 1, "int64"),
        Field("simple_sharding", 2, "message", repeated=True, message="SimpleShardedDimProto"),
    )


class SimpleShardedDimProto(Message):
    """ONNX SimpleShardedDimProto (onnx.proto)."""

    dim_value: int
    dim_param: str
    num_shards: int
    FULL_NAME = "SimpleShardedDimProto"
    FIELDS = (
        Field("dim_value", 1, "int64", oneof="dim"),
        Field("dim_param", 2, "string", oneof="dim"),
        Field("num_shards", 3, "int64"),
    )


class TrainingInfoProto(Message):
    """ONNX TrainingInfoProto (onnx.proto)."""

    initialization: GraphProto
    algorithm: GraphProto
    initialization_binding: list[StringStringEntryProto]
    update_binding: list[StringStringEntryProto]
    FULL_NAME = "TrainingInfoProto"
    FIELDS = (
        Field("initialization", 1, "message", message="GraphProto"),
        Field("algorithm", 2, "message", message="GraphProto"),
        Field("initialization_binding", 3, "message", repeated=True, message="StringStringEntryProto"),
        Field("update_binding", 4, "message", repeated=True, message="StringStringEntryProto"),
    )


class ModelProto(Message):
    """ONNX ModelProto (onnx.proto)."""

    ir_version: int
    opset_import: list[OperatorSetIdProto]
    producer_name: str
    producer_version: str
    domain: str
    model_version: int
    doc_string: str
    graph: GraphProto
    metadata_props: list[StringStringEntryProto]
    training_info: list[TrainingInfoProto]
    functions: list[FunctionProto]
    configuration: list[DeviceConfigurationProto]
    FULL_NAME = "ModelProto"
    FIELDS = (
        Field("ir_version", 1, "int64"),
        Field("opset_import", 8, "message", repeated=True, message="OperatorSetIdProto"),
        Field("producer_name", 2, "string"),
        Field("producer_version", 3, "string"),
        Field("domain", 4, "string"),
        Field("model_version", 5, "int64"),
        Field("doc_string", 6, "string"),
        Field("graph", 7, "message", message="GraphProto"),
        Field("metadata_props", 14, "message", repeated=True, message="StringStringEntryProto"),
        Field("training_info", 20, "message", repeated=True, message="TrainingInfoProto"),
        Field("functions", 25, "message", repeated=True, message="FunctionProto"),
        Field("configuration", 26, "message", repeated=True, message="DeviceConfigurationProto"),
    )


class DeviceConfigurationProto(Message):
    """ONNX DeviceConfigurationProto (onnx.proto)."""

    name: str
    num_devices: int
    device: list[str]
    FULL_NAME = "DeviceConfigurationProto"
    FIELDS = (
        Field("name", 1, "string"),
        Field("num_devices", 2, "int32"),
        Field("device", 3, "string", repeated=True),
    )


class StringStringEntryProto(Message):
    """ONNX StringStringEntryProto (onnx.proto)."""

    key: str
    value: str
    FULL_NAME = "StringStringEntryProto"
    FIELDS = (
        Field("key", 1, "string"),
        Field("value", 2, "string"),
    )


class TensorAnnotation(Message):
    """ONNX TensorAnnotation (onnx.proto)."""

    tensor_name: str
    quant_parameter_tensor_names: list[StringStringEntryProto]
    FULL_NAME = "TensorAnnotation"
    FIELDS = (
        Field("tensor_name", 1, "string"),
        Field(
            "quant_parameter_tensor_names",
            2,
            "message",
            repeated=True,
            message="StringStringEntryProto",
        ),
    )


class GraphProto(Message):
    """ONNX GraphProto (onnx.proto)."""

    node: list[NodeProto]
    name: str
    initializer: list[TensorProto]
    sparse_initializer: list[SparseTensorProto]
    doc_string: str
    input: list[ValueInfoProto]
    output: list[ValueInfoProto]
    value_info: list[ValueInfoProto]
    quantization_annotation: list[TensorAnnotation]
    metadata_props: list[StringStringEntryProto]
    FULL_NAME = "GraphProto"
    FIELDS = (
        Field("node", 1, "message", repeated=True, message="NodeProto"),
        Field("name", 2, "string"),
        Field("initializer", 5, "message", repeated=True, message="TensorProto"),
        Field("sparse_initializer", 15, "message", repeated=True, message="SparseTensorProto"),
        Field("doc_string", 10, "string"),
        Field("input", 11, "message", repeated=True, message="ValueInfoProto"),
        Field("output", 12, "message", repeated=True, message="ValueInfoProto"),
        Field("value_info", 13, "message", repeated=True, message="ValueInfoProto"),
        Field("quantization_annotation", 14, "message", repeated=True, message="TensorAnnotation"),
        Field("metadata_props", 16, "message", repeated=True, message="StringStringEntryProto"),
    )


class TensorProto(Message):
    """ONNX TensorProto (onnx.proto)."""

    DataType = EnumType(
        "DataType",
        {
            "UNDEFINED": 0,
            "FLOAT": 1,
            "UINT8": 2,
            "INT8": 3,
            "UINT16": 4,
            "INT16": 5,
            "INT32": 6,
            "INT64": 7,
            "STRING": 8,
            "BOOL": 9,
            "FLOAT16": 10,
            "DOUBLE": 11,
            "UINT32": 12,
            "UINT64": 13,
            "COMPLEX64": 14,
            "COMPLEX128": 15,
            "BFLOAT16": 16,
            "FLOAT8E4M3FN": 17,
            "FLOAT8E4M3FNUZ": 18,
            "FLOAT8E5M2": 19,
            "FLOAT8E5M2FNUZ": 20,
            "UINT4": 21,
            "INT4": 22,
            "FLOAT4E2M1": 23,
            "FLOAT8E8M0": 24,
            "UINT2": 25,
            "INT2": 26,
            "FLOAT6E2M3": 27,
            "FLOAT6E3M2": 28,
        },
    )
    UNDEFINED = 0
    FLOAT = 1
    UINT8 = 2
    INT8 = 3
    UINT16 = 4
    INT16 = 5
    INT32 = 6
    INT64 = 7
    STRING = 8
    BOOL = 9
    FLOAT16 = 10
    DOUBLE = 11
    UINT32 = 12
    UINT64 = 13
    COMPLEX64 = 14
    COMPLEX128 = 15
    BFLOAT16 = 16
    FLOAT8E4M3FN = 17
    FLOAT8E4M3FNUZ = 18
    FLOAT8E5M2 = 19
    FLOAT8E5M2FNUZ = 20
    UINT4 = 21
    INT4 = 22
    FLOAT4E2M1 = 23
    FLOAT8E8M0 = 24
    UINT2 = 25
    INT2 = 26
    FLOAT6E2M3 = 27
    FLOAT6E3M2 = 28

    DataLocation = EnumType("DataLocation", {"DEFAULT": 0, "EXTERNAL": 1})
    DEFAULT = 0
    EXTERNAL = 1

    class Segment(Message):
        """ONNX TensorProto.Segment (onnx.proto)."""

        begin: int
        end: int
        FULL_NAME = "TensorProto.Segment"
        FIELDS = (
            Field("begin", 1, "int64"),
            Field("end", 2, "int64"),
        )

    dims: list[int]
    data_type: int
    segment: TensorProto.Segment
    float_data: list[float]
    int32_data: list[int]
    string_data: list[bytes]
    int64_data: list[int]
    name: str
    doc_string: str
    raw_data: bytes
    external_data: list[StringStringEntryProto]
    data_location: int
    double_data: list[float]
    uint64_data: list[int]
    metadata_props: list[StringStringEntryProto]
    FULL_NAME = "TensorProto"
    FIELDS = (
        Field("dims", 1, "int64", repeated=True),
        Field("data_type", 2, "int32"),
        Field("segment", 3, "message", message="TensorProto.Segment"),
        Field("float_data", 4, "float", repeated=True, packed=True),
        Field("int32_data", 5, "int32", repeated=True, packed=True),
        Field("string_data", 6, "bytes", repeated=True),
        Field("int64_data", 7, "int64", repeated=True, packed=True),
        Field("name", 8, "string"),
        Field("doc_string", 12, "string"),
        Field("raw_data", 9, "bytes"),
        Field("external_data", 13, "message", repeated=True, message="StringStringEntryProto"),
        Field("data_location", 14, "enum"),
        Field("double_data", 10, "double", repeated=True, packed=True),
        Field("uint64_data", 11, "uint64", repeated=True, packed=True),
        Field("metadata_props", 16, "message", repeated=True, message="StringStringEntryProto"),
    )


class SparseTensorProto(Message):
    """ONNX SparseTensorProto (onnx.proto)."""

    values: TensorProto
    indices: TensorProto
    dims: list[int]
    FULL_NAME = "SparseTensorProto"
    FIELDS = (
        Field("values", 1, "message", message="TensorProto"),
        Field("indices", 2, "message", message="TensorProto"),
        Field("dims", 3, "int64", repeated=True),
    )


class TensorShapeProto(Message):
    """ONNX TensorShapeProto (onnx.proto)."""

    class Dimension(Message):
        """ONNX TensorShapeProto.Dimension (onnx.proto)."""

        dim_value: int
        dim_param: str
        denotation: str
        FULL_NAME = "TensorShapeProto.Dimension"
        FIELDS = (
            Field("dim_value", 1, "int64", oneof="value"),
            Field("dim_param", 2, "string", oneof="value"),
            Field("denotation", 3, "string"),
        )

    dim: list[TensorShapeProto.Dimension]
    FULL_NAME = "TensorShapeProto"
    FIELDS = (Field("dim", 1, "message", repeated=True, message="TensorShapeProto.Dimension"),)


class TypeProto(Message):
    """ONNX TypeProto (onnx.proto)."""

    class Tensor(Message):
        """ONNX TypeProto.Tensor (onnx.proto)."""

        elem_type: int
        shape: TensorShapeProto
        FULL_NAME = "TypeProto.Tensor"
        FIELDS = (
            Field("elem_type", 1, "int32"),
            Field("shape", 2, "message", message="TensorShapeProto"),
        )

    class Sequence(Message):
        """ONNX TypeProto.Sequence (onnx.proto)."""

        elem_type: TypeProto
        FULL_NAME = "TypeProto.Sequence"
        FIELDS = (Field("elem_type", 1, "message", message="TypeProto"),)

    class Map(Message):
        """ONNX TypeProto.Map (onnx.proto)."""

        key_type: int
        value_type: TypeProto
        FULL_NAME = "TypeProto.Map"
        FIELDS = (
            Field("key_type", 1, "int32"),
            Field("value_type", 2, "message", message="TypeProto"),
        )

    class Optional(Message):
        """ONNX TypeProto.Optional (onnx.proto)."""

        elem_type: TypeProto
        FULL_NAME = "TypeProto.Optional"
        FIELDS = (Field("elem_type", 1, "message", message="TypeProto"),)

    class SparseTensor(Message):
        """ONNX TypeProto.SparseTensor (onnx.proto)."""

        elem_type: int
        shape: TensorShapeProto
        FULL_NAME = "TypeProto.SparseTensor"
        FIELDS = (
            Field("elem_type", 1, "int32"),
            Field("shape", 2, "message", message="TensorShapeProto"),
        )

    class Opaque(Message):
        """ONNX TypeProto.Opaque (onnx.proto)."""

        domain: str
        name: str
        FULL_NAME = "TypeProto.Opaque"
        FIELDS = (
            Field("domain", 1, "string"),
            Field("name", 2, "string"),
        )

    tensor_type: TypeProto.Tensor
    sequence_type: TypeProto.Sequence
    map_type: TypeProto.Map
    optional_type: TypeProto.Optional
    sparse_tensor_type: TypeProto.SparseTensor
    opaque_type: TypeProto.Opaque
    denotation: str
    FULL_NAME = "TypeProto"
    FIELDS = (
        Field("tensor_type", 1, "message", message="TypeProto.Tensor", oneof="value"),
        Field("sequence_type", 4, "message", message="TypeProto.Sequence", oneof="value"),
        Field("map_type", 5, "message", message="TypeProto.Map", oneof="value"),
        Field("optional_type", 9, "message", message="TypeProto.Optional", oneof="value"),
        Field("sparse_tensor_type", 8, "message", message="TypeProto.SparseTensor", oneof="value"),
        Field("opaque_type", 7, "message", message="TypeProto.Opaque", oneof="value"),
        Field("denotation", 6, "string"),
    )


class OperatorSetIdProto(Message):
    """ONNX OperatorSetIdProto (onnx.proto)."""

    domain: str
    version: int
    FULL_NAME = "OperatorSetIdProto"
    FIELDS = (
        Field("domain", 1, "string"),
        Field("version", 2, "int64"),
    )


class FunctionProto(Message):
    """ONNX FunctionProto (onnx.proto)."""

    name: str
    input: list[str]
    output: list[str]
    attribute: list[str]
    attribute_proto: list[AttributeProto]
    node: list[NodeProto]
    doc_string: str
    opset_import: list[OperatorSetIdProto]
    domain: str
    overload: str
    value_info: list[ValueInfoProto]
    metadata_props: list[StringStringEntryProto]
    FULL_NAME = "FunctionProto"
    FIELDS = (
        Field("name", 1, "string"),
        Field("input", 4, "string", repeated=True),
        Field("output", 5, "string", repeated=True),
        Field("attribute", 6, "string", repeated=True),
        Field("attribute_proto", 11, "message", repeated=True, message="AttributeProto"),
        Field("node", 7, "message", repeated=True, message="NodeProto"),
        Field("doc_string", 8, "string"),
        Field("opset_import", 9, "message", repeated=True, message="OperatorSetIdProto"),
        Field("domain", 10, "string"),
        Field("overload", 13, "string"),
        Field("value_info", 12, "message", repeated=True, message="ValueInfoProto"),
        Field("metadata_props", 14, "message", repeated=True, message="StringStringEntryProto"),
    )


class SequenceProto(Message):
    """ONNX SequenceProto (onnx.proto)."""

    DataType = EnumType(
        "DataType",
        {"UNDEFINED": 0, "TENSOR": 1, "SPARSE_TENSOR": 2, "SEQUENCE": 3, "MAP": 4, "OPTIONAL": 5},
    )
    UNDEFINED = 0
    TENSOR = 1
    SPARSE_TENSOR = 2
    SEQUENCE = 3
    MAP = 4
    OPTIONAL = 5

    name: str
    elem_type: int
    tensor_values: list[TensorProto]
    sparse_tensor_values: list[SparseTensorProto]
    sequence_values: list[SequenceProto]
    map_values: list[MapProto]
    optional_values: list[OptionalProto]
    FULL_NAME = "SequenceProto"
    FIELDS = (
        Field("name", 1, "string"),
        Field("elem_type", 2, "int32"),
        Field("tensor_values", 3, "message", repeated=True, message="TensorProto"),
        Field("sparse_tensor_values", 4, "message", repeated=True, message="SparseTensorProto"),
        Field("sequence_values", 5, "message", repeated=True, message="SequenceProto"),
        Field("map_values", 6, "message", repeated=True, message="MapProto"),
        Field("optional_values", 7, "message", repeated=True, message="OptionalProto"),
    )


class MapProto(Message):
    """ONNX MapProto (onnx.proto)."""

    name: str
    key_type: int
    keys: list[int]
    string_keys: list[bytes]
    values: SequenceProto
    FULL_NAME = "MapProto"
    FIELDS = (
        Field("name", 1, "string"),
        Field("key_type", 2, "int32"),
        Field("keys", 3, "int64", repeated=True),
        Field("string_keys", 4, "bytes", repeated=True),
        Field("values", 5, "message", message="SequenceProto"),
    )


class OptionalProto(Message):
    """ONNX OptionalProto (onnx.proto)."""

    DataType = EnumType(
        "DataType",
        {"UNDEFINED": 0, "TENSOR": 1, "SPARSE_TENSOR": 2, "SEQUENCE": 3, "MAP": 4, "OPTIONAL": 5},
    )
    UNDEFINED = 0
    TENSOR = 1
    SPARSE_TENSOR = 2
    SEQUENCE = 3
    MAP = 4
    OPTIONAL = 5

    name: str
    elem_type: int
    tensor_value: TensorProto
    sparse_tensor_value: SparseTensorProto
    sequence_value: SequenceProto
    map_value: MapProto
    optional_value: OptionalProto
    FULL_NAME = "OptionalProto"
    FIELDS = (
        Field("name", 1, "string"),
        Field("elem_type", 2, "int32"),
        Field("tensor_value", 3, "message", message="TensorProto"),
        Field("sparse_tensor_value", 4, "message", message="SparseTensorProto"),
        Field("sequence_value", 5, "message", message="SequenceProto"),
        Field("map_value", 6, "message", message="MapProto"),
        Field("optional_value", 7, "message", message="OptionalProto"),
    )
