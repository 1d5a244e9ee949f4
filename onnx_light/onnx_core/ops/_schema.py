"""Op signatures from the spec: :class:`OpSchema` per op version, read from the generated data.

``get_schema("Conv", 21)`` returns the newest version of ``Conv`` not above opset 21, as onnx's
``onnx.defs.get_schema`` does. The data (``_spec_data.py``) is loaded on first use, so importing
onnx-light stays fast.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from ._table import OpTable, normalise_domain, op_label

__all__ = [
    "OpSchema",
    "FormalParameter",
    "AttributeSpec",
    "TypeConstraint",
    "SINGLE",
    "OPTIONAL",
    "VARIADIC",
    "get_schema",
    "has_schema",
    "schema_table",
    "SchemaError",
]

#: FormalParameter.option values (onnx's FormalParameterOption)
SINGLE, OPTIONAL, VARIADIC = 0, 1, 2


class SchemaError(LookupError):
    """No schema for an op at the asked opset."""


@dataclass(frozen=True)
class FormalParameter:
    """One input or output of an op: its name, type string (a constraint or a type) and arity."""

    name: str
    type_str: str
    option: int
    homogeneous: bool
    min_arity: int
    #: 0 unknown, 1 differentiable, 2 not differentiable (the spec's DifferentiationCategory)
    differentiable: int


@dataclass(frozen=True)
class AttributeSpec:
    """One attribute: name, ``AttributeProto.AttributeType``, required, default (a Python value or None)."""

    name: str
    type: int
    required: bool
    default: Any


@dataclass(frozen=True)
class TypeConstraint:
    """A type parameter (``T``) and the type strings it allows (``tensor(float)``, ...)."""

    type_param_str: str
    allowed_type_strs: tuple[str, ...]


@dataclass(frozen=True)
class OpSchema:
    """The signature of one op version, with onnx's ``OpSchema`` field names where they exist."""

    domain: str
    name: str
    since_version: int
    inputs: tuple[FormalParameter, ...]
    outputs: tuple[FormalParameter, ...]
    attributes: dict[str, AttributeSpec]
    type_constraints: tuple[TypeConstraint, ...]
    min_input: int
    max_input: int  # -1: unbounded
    min_output: int
    max_output: int  # -1: unbounded
    deprecated: bool
    has_function: bool
    non_deterministic: bool

    @property
    def label(self) -> str:
        """``domain::op_type`` as errors print it."""
        return op_label(self.domain, self.name)

    def attribute_default(self, name: str) -> Any:
        """The spec default of attribute ``name`` (None when it has none)."""
        spec = self.attributes.get(name)
        return None if spec is None else spec.default


def _build(domain: str, name: str, raw: tuple[Any, ...]) -> OpSchema:
    since, ins, outs, attrs, constraints, (min_in, max_in, min_out, max_out), (dep, fn, nondet) = raw
    return OpSchema(
        domain=normalise_domain(domain),
        name=name,
        since_version=since,
        inputs=tuple(FormalParameter(*p) for p in ins),
        outputs=tuple(FormalParameter(*p) for p in outs),
        attributes={a[0]: AttributeSpec(*a) for a in attrs},
        type_constraints=tuple(TypeConstraint(c, tuple(ts)) for c, ts in constraints),
        min_input=min_in,
        max_input=max_in,
        min_output=min_out,
        max_output=max_out,
        deprecated=dep,
        has_function=fn,
        non_deterministic=nondet,
    )


@functools.cache
def schema_table() -> OpTable[OpSchema]:
    """Every op version of the spec as an :class:`OpTable` (each version until the next's since - 1)."""
    from ._spec_data import SPEC

    table: OpTable[OpSchema] = OpTable("schema", "the op is not in the ONNX spec this build knows (onnx 1.23)")
    for (domain, name), versions in SPEC.items():
        for i, raw in enumerate(versions):
            until = versions[i + 1][0] - 1 if i + 1 < len(versions) else None
            table.register(domain, name, _build(domain, name, raw), since=raw[0], until=until)
    return table


_ONE: dict[tuple[str, str, int], OpSchema | None] = {}


def lookup_schema(domain: str, op_type: str, opset: int) -> OpSchema | None:
    """``schema_table().lookup(domain, op_type, opset)``, building only that op's schema: the
    first transform of a process checks a few dozen ops (``ctx.op``), and building the whole
    table (~700 schemas) cost it ~40 ms."""
    key = (normalise_domain(domain), op_type, opset)
    if key not in _ONE:
        from ._spec_data import SPEC

        newest = None
        for raw in SPEC.get((key[0], op_type), ()):
            if raw[0] <= opset:
                newest = raw
        _ONE[key] = None if newest is None else _build(key[0], op_type, newest)
    return _ONE[key]


def get_schema(op_type: str, max_inclusive_version: int, domain: str = "") -> OpSchema:
    """The newest schema of ``domain::op_type`` whose since_version is not above ``max_inclusive_version``.

    Raises:
        SchemaError: the op does not exist at that opset.
    """
    schema = lookup_schema(domain, op_type, max_inclusive_version)
    if schema is None:
        raise SchemaError(schema_table().missing_message(domain, op_type, max_inclusive_version))
    return schema


def has_schema(op_type: str, max_inclusive_version: int, domain: str = "") -> bool:
    """True when :func:`get_schema` would find a schema."""
    return lookup_schema(domain, op_type, max_inclusive_version) is not None
