"""The public API is part of the contract (DESIGN §2): lock its names and homes."""

from __future__ import annotations

import ast
import pathlib

import onnx_light as ol

PACKAGE = pathlib.Path(ol.__file__).parent

PUBLIC = {
    # IR (onnx's names)
    "ModelProto",
    "GraphProto",
    "NodeProto",
    "AttributeProto",
    "TensorProto",
    "SparseTensorProto",
    "ValueInfoProto",
    "TypeProto",
    "TensorShapeProto",
    "OperatorSetIdProto",
    "FunctionProto",
    "StringStringEntryProto",
    "TensorAnnotation",
    "TrainingInfoProto",
    "DeviceConfigurationProto",
    "NodeDeviceConfigurationProto",
    "ShardingSpecProto",
    "ShardedDimProto",
    "SimpleShardedDimProto",
    "IntIntListEntryProto",
    "SequenceProto",
    "MapProto",
    "OptionalProto",
    # files
    "load",
    "save",
    "load_model",
    "save_model",
    "load_from_string",
    "load_tensor",
    "save_tensor",
    # modules
    "helper",
    "numpy_helper",
    "runtime",
    # gradients (the seed's names)
    "GradientOfFunction",
    "GradientOfNodes",
    "DefaultGradRegistry",
    "RegisterGradientFunction",
    "GradRegistry",
    "NewGradName",
    "AccumulateGrad",
    # runnable models, checks, interop (issue 14)
    "gradient_model",
    "function_to_model",
    "gradcheck",
    "load_function",
    "from_onnx",
    # errors
    "OnnxLightError",
    "DecodeError",
    "GradientError",
}


def test_public_names_exported() -> None:
    missing = PUBLIC - set(ol.__all__)
    assert not missing, f"missing from onnx_light.__all__: {sorted(missing)}"
    for name in ol.__all__:
        assert hasattr(ol, name), name


def test_classes_live_in_onnx_core() -> None:
    for name in ("ModelProto", "TensorProto", "FunctionProto", "DecodeError"):
        assert getattr(ol, name).__module__.startswith("onnx_light.onnx_core"), name
    assert ol.DefaultGradRegistry.__module__ == "onnx_light.onnx_extensions.gradient"
    assert ol.runtime.InferenceSession.__module__ == "onnx_light.runtime.session"


def test_enum_values_match_onnx() -> None:
    import onnx

    assert ol.TensorProto.FLOAT == onnx.TensorProto.FLOAT == 1
    assert ol.AttributeProto.INTS == onnx.AttributeProto.INTS
    for name, value in onnx.TensorProto.DataType.items():
        assert ol.TensorProto.DataType.Value(name) == value


def test_submodule_imports_like_onnx() -> None:
    import onnx_light.helper
    import onnx_light.numpy_helper

    assert onnx_light.helper.make_node is ol.helper.make_node
    assert onnx_light.numpy_helper.to_array is ol.numpy_helper.to_array


def _imports(path: pathlib.Path) -> set[str]:
    """Absolute names of the onnx_light modules a file imports."""
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    package = list(rel.parts[:-1]) if rel.name != "__init__" else list(rel.parts[:-1])
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("onnx_light"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                if node.module:
                    out.add(".".join([*base, node.module]))
                else:  # from .. import name: the names are modules
                    out.update(".".join([*base, a.name]) for a in node.names)
            elif node.module and node.module.startswith("onnx_light"):
                out.add(node.module)
    return out


def test_dependency_direction() -> None:
    """onnx_core imports nothing of ours; extensions and runtime import only onnx_core.

    The native extension (``onnx_light._native``) is a leaf every unit may use.
    """
    allowed = {
        "onnx_core": ("onnx_light.onnx_core", "onnx_light._native"),
        "onnx_extensions": ("onnx_light.onnx_core", "onnx_light.onnx_extensions"),
        "runtime": ("onnx_light.onnx_core", "onnx_light.runtime", "onnx_light._native"),
        "training": (
            "onnx_light.onnx_core",
            "onnx_light.onnx_extensions",
            "onnx_light.runtime",
            "onnx_light.training",
        ),
    }
    bad = []
    for unit, prefixes in allowed.items():
        for path in (PACKAGE / unit).rglob("*.py"):
            for mod in _imports(path):
                if mod.startswith("onnx_light") and not mod.startswith(prefixes):
                    bad.append(f"{path.relative_to(PACKAGE)} imports {mod}")
    assert not bad, "\n".join(bad)
