"""Checking a node about to be built against its op's schema: the typed ``ctx.op`` builder's core.

``signature(op_type, opset, domain)`` condenses an :class:`OpSchema` into what a builder
checks on every call (input and output counts, attribute names, types and required
ones); :meth:`Signature.problem` returns what is wrong with a call, or None. Ops of a
domain the spec does not know (custom ops) have no signature and are not checked.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._proto import AttributeProto, GraphProto, TensorProto
from ._schema import lookup_schema, schema_table
from ._table import normalise_domain, op_label

__all__ = ["Signature", "signature", "UnknownOp", "ATTRIBUTE_TYPE_NAMES"]

_T = AttributeProto.AttributeType
_INT, _INTS, _FLOAT, _FLOATS = int(_T.INT), int(_T.INTS), int(_T.FLOAT), int(_T.FLOATS)

#: ``AttributeProto.AttributeType`` value -> its name
ATTRIBUTE_TYPE_NAMES: dict[int, str] = {
    0: "UNDEFINED",
    1: "FLOAT",
    2: "INT",
    3: "STRING",
    4: "TENSOR",
    5: "GRAPH",
    6: "FLOATS",
    7: "INTS",
    8: "STRINGS",
    9: "TENSORS",
    10: "GRAPHS",
    11: "SPARSE_TENSOR",
    12: "SPARSE_TENSORS",
    13: "TYPE_PROTO",
    14: "TYPE_PROTOS",
}


class UnknownOp(LookupError):
    """The op does not exist in a known domain at the asked opset."""


def _attribute_type(value: Any) -> int:
    """The AttributeType ``make_attribute`` gives ``value`` (0 when it cannot encode it)."""
    kind = type(value)
    if kind is int or kind is bool:
        return _INT
    if kind is float:
        return _FLOAT
    if (kind is list or kind is tuple) and value and all(type(v) is int for v in value):
        return _INTS
    # a body or a tensor: make_attribute would copy it only to tell the type
    if kind is GraphProto:
        return int(_T.GRAPH)
    if kind is TensorProto:
        return int(_T.TENSOR)
    from ..helper import make_attribute

    try:
        return int(make_attribute("a", value).type)
    except Exception:  # anything make_attribute refuses is of no attribute type
        return 0


class Signature:
    """What a builder checks of one op version (see the module docstring).

    Attributes:
        label: ``domain::op_type``. since: the schema's since_version.
        min_inputs, max_inputs, min_outputs, max_outputs: counts (-1: unbounded).
        attributes: attribute name -> AttributeType. required: required attribute names.
    """

    __slots__ = (
        "label",
        "since",
        "min_inputs",
        "max_inputs",
        "min_outputs",
        "max_outputs",
        "attributes",
        "required",
        "input_limit",
        "one_output",
    )

    def __init__(
        self,
        label: str,
        since: int,
        counts: tuple[int, int, int, int],
        attributes: dict[str, int],
        required: frozenset[str],
    ) -> None:
        self.label, self.since = label, since
        self.min_inputs, self.max_inputs, self.min_outputs, self.max_outputs = counts
        self.attributes, self.required = attributes, required
        #: for a builder's quick test: max_inputs with -1 as a huge number; one output allowed
        self.input_limit = self.max_inputs if self.max_inputs >= 0 else 1 << 30
        self.one_output = self.min_outputs <= 1 and not required

    def problem(self, n_inputs: int, n_outputs: int, attrs: Mapping[str, Any]) -> str | None:
        """What is wrong with a node of ``n_inputs`` inputs, ``n_outputs`` outputs and ``attrs``.

        Args:
            n_inputs: the number of inputs given (omitted optional ones included).
            n_outputs: the number of outputs asked for.
            attrs: the attributes by name (None values are left out of the node).

        Returns:
            A sentence naming the op and what to fix, or None when the call is valid.
        """
        if n_inputs < self.min_inputs or (self.max_inputs >= 0 and n_inputs > self.max_inputs):
            takes = self._range(self.min_inputs, self.max_inputs)
            return f"{self.label}-{self.since} takes {takes} inputs, got {n_inputs}"
        if n_outputs < self.min_outputs or (self.max_outputs >= 0 and n_outputs > self.max_outputs):
            return (
                f"{self.label}-{self.since} has {self._range(self.min_outputs, self.max_outputs)} outputs, "
                f"{n_outputs} asked for"
            )
        known = self.attributes
        for name, value in attrs.items():
            expected = known.get(name)
            if expected is None:
                have = ", ".join(sorted(known)) or "none"
                return f"{self.label}-{self.since} has no attribute {name!r} (its attributes: {have})"
            if value is not None and _attribute_type(value) != expected:
                return (
                    f"attribute {name!r} of {self.label}-{self.since} is {ATTRIBUTE_TYPE_NAMES.get(expected)}, "
                    f"got {type(value).__name__} {value!r:.60}"
                )
        for r in self.required:  # every required one given (the common case): no sorted list built
            if attrs.get(r) is None:
                missing = sorted(self.required.difference(k for k, v in attrs.items() if v is not None))
                return f"{self.label}-{self.since} needs attribute(s) {', '.join(missing)}"
        return None

    @staticmethod
    def _range(low: int, high: int) -> str:
        if high < 0:
            return f"at least {low}"
        return f"{low}" if low == high else f"{low} to {high}"


_CACHE: dict[tuple[str, str, int], Signature | None] = {}


def signature(op_type: str, opset: int, domain: str = "") -> Signature | None:
    """The :class:`Signature` of ``domain::op_type`` at ``opset``; None for a domain the spec lacks.

    Raises:
        UnknownOp: the domain is known but has no such op at ``opset`` (a misspelt op).
    """
    key = (op_type, normalise_domain(domain), opset)
    if key in _CACHE:
        return _CACHE[key]
    schema = lookup_schema(key[1], op_type, opset)  # one op's schema, not the whole table
    if schema is None:
        table = schema_table()
        if key[1] and not any(d == key[1] for d, _ in table.ops()):
            _CACHE[key] = None
            return None
        raise UnknownOp(
            f"{op_label(key[1], op_type)} does not exist at opset {opset}"
            + (f" (it exists from opset {table.versions(key[1], op_type)[0][0]})" if (key[1], op_type) in table else "")
        )
    sig = Signature(
        schema.label,
        schema.since_version,
        (schema.min_input, schema.max_input, schema.min_output, schema.max_output),
        {a.name: a.type for a in schema.attributes.values()},
        frozenset(a.name for a in schema.attributes.values() if a.required),
    )
    _CACHE[key] = sig
    return sig
