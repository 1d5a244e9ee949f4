"""The generic fallback of both passes: a node whose op has no rule but an expansion (a
function body, see ``onnx_core/ops/_expand.py``) is replaced by that expansion at the
node's types and opset before differentiating, so that function ops differentiate without
a rule of their own. A registered rule always wins."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

import numpy as np

from .._errors import GradientError
from .._proto import NodeProto
from ..ops import ExpansionError, expand, expandable_op_types, has_expansion, normalise_domain
from ._types import UNKNOWN, ValueType, infer_types

__all__ = ["expand_ruleless"]

#: expansions whose bodies hold ops expanded again deeper than this are refused (a cycle)
MAX_DEPTH = 16


def expand_ruleless(
    nodes: list[NodeProto],
    types: dict[str, ValueType],
    constants: dict[str, np.ndarray],
    opset: int,
    has_rule: Callable[[str, str], bool],
    new_name: Callable[[str], str],
    kinds: Collection[tuple[str, str]] | None = None,
) -> list[NodeProto]:
    """``nodes`` with every node that has no rule but an expansion replaced by it (recursively).

    Returns ``nodes`` itself when there is none (``kinds``: the nodes' distinct ``(op_type,
    domain)`` when the caller has read them, as the pass has: the common case costs one set
    lookup per kind).
    Types of the values before each expanded node are inferred (only then), since a
    decomposition may depend on ranks and dtypes.

    Raises:
        GradientError: an expansion is impossible at the node's types (it names the node).
    """

    cache: dict[tuple[str, str], bool] = {}

    def wanted_kind(op_type: str, domain: str) -> bool:
        key = (op_type, domain)
        hit = cache.get(key)
        if hit is None:
            d = normalise_domain(domain)
            hit = cache[key] = has_expansion(d, op_type, opset) and not has_rule(d, op_type)
        return hit

    def wanted(node: NodeProto) -> bool:
        return wanted_kind(node.op_type, node.domain)

    if kinds is None:
        kinds = {(n.op_type, n.domain) for n in nodes}
    expandable = expandable_op_types()
    # each kind of node asked once (the rule lookup behind `wanted_kind` costs more than a set)
    if not any(op_type in expandable and wanted_kind(op_type, domain) for op_type, domain in kinds):
        return nodes
    out: list[NodeProto] = []
    pending: list[NodeProto] = []
    known = {"types": types}
    folded = {"constants": constants}

    def flush() -> None:
        if pending:
            known["types"], folded["constants"] = infer_types(pending, known["types"], folded["constants"], opset)
            pending.clear()

    def type_of(name: str) -> tuple[int, tuple[Any, ...] | None]:
        t = known["types"].get(name, UNKNOWN)
        return t.dtype, t.shape

    def visit(node: NodeProto, depth: int) -> None:
        if not wanted(node):
            pending.append(node)
            out.append(node)
            return
        if depth >= MAX_DEPTH:
            raise GradientError(f"node {node.name!r} ({node.op_type}): expansions nest deeper than {MAX_DEPTH}")
        flush()
        try:
            body = expand(node, type_of, opset, new_name)
        except ExpansionError as err:
            raise GradientError(f"{err}; register a gradient rule for the op instead") from err
        assert body is not None
        for inner in body:
            visit(inner, depth + 1)

    for node in nodes:
        visit(node, 0)
    return out
