"""The op-schema layer: per op and opset range its signature, inference, upgrade and traits.

Everything else (the gradient pass, the runtime's planner, the checker, shape inference and
the version converter) asks this layer about ops instead of naming them.
"""

from __future__ import annotations

from ._reduction import REDUCE_OPS, REDUCE_VERSIONS, axes_input_since
from ._registries import INFER, UPGRADES, OpsetTable, upgrade
from ._schema import (
    OPTIONAL,
    SINGLE,
    VARIADIC,
    AttributeSpec,
    FormalParameter,
    OpSchema,
    SchemaError,
    TypeConstraint,
    get_schema,
    has_schema,
    schema_table,
)
from ._signature import ATTRIBUTE_TYPE_NAMES, Signature, UnknownOp, signature
from ._table import DEFAULT_DOMAIN, Entry, MissingEntry, OpTable, normalise_domain, op_label
from ._traits import NO_TRAITS, Traits, declare_traits, is_random, op_types_with, trait_table, traits
from ._window import (
    SAME_PADS,
    TransposeWindow,
    Window,
    legacy_transpose_split,
    resolve_pads,
    split_padding,
    transpose_out_dim,
    transpose_window,
    window,
    window_out_dim,
)

__all__ = [
    "OpTable",
    "Entry",
    "MissingEntry",
    "normalise_domain",
    "op_label",
    "DEFAULT_DOMAIN",
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
    "SAME_PADS",
    "Window",
    "TransposeWindow",
    "window",
    "window_out_dim",
    "transpose_window",
    "transpose_out_dim",
    "resolve_pads",
    "split_padding",
    "legacy_transpose_split",
    "Traits",
    "NO_TRAITS",
    "declare_traits",
    "traits",
    "trait_table",
    "op_types_with",
    "is_random",
    "REDUCE_OPS",
    "REDUCE_VERSIONS",
    "axes_input_since",
    "OpsetTable",
    "INFER",
    "UPGRADES",
    "upgrade",
    "Signature",
    "signature",
    "UnknownOp",
    "ATTRIBUTE_TYPE_NAMES",
]
