"""onnx's ``onnx.defs`` for onnx-light: which ops exist, their schemas, the newest opset.

The data is the spec's own signatures (``onnx_core/ops``, generated from onnx 1.23); this
module gives them onnx's import path and call forms, so ``defs.has("Relu")`` ports as is.
"""

from __future__ import annotations

from .onnx_core.helper import OPSET_VERSION
from .onnx_core.ops import OpSchema, SchemaError, schema_table
from .onnx_core.ops import get_schema as _get_schema

__all__ = ["OpSchema", "SchemaError", "get_all_schemas", "get_schema", "has", "onnx_opset_version"]

#: ``onnx.defs.ONNX_DOMAIN``: the default domain's name
ONNX_DOMAIN = ""
#: ``onnx.defs.ONNX_ML_DOMAIN``
ONNX_ML_DOMAIN = "ai.onnx.ml"


def onnx_opset_version() -> int:
    """The newest default-domain opset this build knows (onnx 1.23: 28)."""
    return OPSET_VERSION


def _split(max_inclusive_version: int | str | None, domain: str) -> tuple[int, str]:
    # onnx accepts (op, domain) and (op, max_inclusive_version, domain)
    if isinstance(max_inclusive_version, str):
        return 1 << 30, max_inclusive_version
    return (1 << 30 if max_inclusive_version is None else max_inclusive_version), domain


def has(op_type: str, max_inclusive_version: int | str | None = None, domain: str = "") -> bool:
    """True when ``domain::op_type`` exists (at ``max_inclusive_version`` or below, if given)."""
    version, domain = _split(max_inclusive_version, domain)
    return schema_table().lookup(domain, op_type, version) is not None


def get_schema(op_type: str, max_inclusive_version: int | str | None = None, domain: str = "") -> OpSchema:
    """The newest schema of ``domain::op_type`` not above ``max_inclusive_version``.

    Raises:
        SchemaError: the op does not exist (at that opset).
    """
    version, domain = _split(max_inclusive_version, domain)
    return _get_schema(op_type, version, domain)


def get_all_schemas() -> list[OpSchema]:
    """The newest schema of every op of every domain."""
    latest: dict[tuple[str, str], OpSchema] = {}
    for entry in schema_table().entries():
        schema = entry.value
        key = (schema.domain, schema.name)
        if key not in latest or latest[key].since_version < schema.since_version:
            latest[key] = schema
    return list(latest.values())
