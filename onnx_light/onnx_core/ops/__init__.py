"""The op-schema layer: per op and opset range its signature, inference, upgrade and traits.

Everything else (the gradient pass, the runtime's planner, the checker, shape inference and
the version converter) asks this layer about ops instead of naming them.

* ``_schema.py`` + generated ``_spec_data.py``: the spec's signatures (:func:`get_schema`);
  ``_signature.py``: what the ``ctx.op`` builder checks of a call (:func:`signature`);
* the family modules ``_infer_math.py``, ``_infer_nn.py``, ``_infer_tensor.py`` (helpers in
  ``_infer_common.py``): each op's shape/type inference, its upgrades (``@upgrade``) and its
  traits (:func:`declare_traits`); ``_reduction.py``: the Reduce* list and versions;
* ``_registries.py``: :data:`INFER` and :data:`UPGRADES`, :class:`OpTable` s by opset range;
  ``_upgrade.py``: the machinery of :func:`upgrade_nodes`;
* ``_expand.py``: :func:`expand`, the expansion of a function op into standard ops (the
  spec's static bodies as generated data in ``_function_bodies.py``, our decompositions of
  the context-dependent ones in ``_expand_attention.py``);
* ``_traits.py``: :func:`traits`, :func:`is_random`; ``_window.py``: Conv / pooling window
  geometry (:func:`window`, :func:`transpose_window`).
"""

from __future__ import annotations

from typing import Any

from ._expand import (
    EXPANSIONS,
    Expander,
    ExpansionError,
    body_op_types,
    expand,
    expandable_op_types,
    expansion,
    has_expansion,
)
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
    RunTimePads,
    TransposeWindow,
    Window,
    legacy_transpose_split,
    output_size,
    resolve_pads,
    runtime_pad_axes,
    split_padding,
    transpose_out_dim,
    transpose_window,
    window,
    window_out_dim,
)


def upgrade_nodes(*args: Any, **kwargs: Any) -> Any:
    """Rewrites default-domain nodes of a source opset so they mean the same at a target
    opset: see ``onnx_core/ops/_upgrade.py``'s ``upgrade_nodes`` for the arguments.

    (Imported on first call: the upgrades read types with the gradient package's inference.)
    """
    from ._upgrade import upgrade_nodes as run

    return run(*args, **kwargs)


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
    "runtime_pad_axes",
    "RunTimePads",
    "split_padding",
    "legacy_transpose_split",
    "output_size",
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
    "upgrade_nodes",
    "EXPANSIONS",
    "Expander",
    "ExpansionError",
    "expand",
    "expansion",
    "has_expansion",
    "body_op_types",
    "expandable_op_types",
]
