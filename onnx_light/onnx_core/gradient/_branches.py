"""Branches taken before run time: an op choosing between subgraphs on a condition the pass
already knows (trait ``branches``: If) is replaced by the taken subgraph's nodes before
differentiation, so neither the forward nor the backward graph holds the branch.

The taken graph's values are renamed to fresh names (its outputs to the node's outputs),
inside nested subgraphs too, so nothing collides with the enclosing graph's names.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .._inline import _rename_graph
from .._proto import GraphProto, NodeProto
from ..helper import make_node

__all__ = ["condition_value", "inline_graph"]


def condition_value(value: np.ndarray | None) -> bool | None:
    """The truth of a known one-element condition (None when unknown or not one element)."""
    if value is None or np.size(value) != 1:
        return None
    return bool(np.asarray(value).reshape(-1)[0])


def inline_graph(graph: GraphProto, outputs: list[str], new_name: Callable[[str], str]) -> list[NodeProto]:
    """The nodes of ``graph`` (no inputs) computing its outputs into the names ``outputs``."""
    produced = {o for n in graph.node for o in n.output if o}
    rename: dict[str, str] = {}
    taken: set[str] = set()
    for info, target in zip(graph.output, outputs):
        if info.name in produced and info.name not in rename and target:
            rename[info.name] = target
            taken.add(target)
    nodes: list[NodeProto] = []
    for init in graph.initializer:
        rename[init.name] = new_name(init.name)
        nodes.append(make_node("Constant", [], [rename[init.name]], value=init))
    for node in graph.node:
        copy = NodeProto()
        copy.CopyFrom(node)
        copy.input[:] = [rename.get(n, n) for n in node.input]
        for n in node.output:
            if n and n not in rename:
                rename[n] = new_name(n)
        copy.output[:] = [rename.get(n, n) for n in node.output]
        for attr in copy.attribute:
            for g in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                _rename_graph(g, rename, {})
        nodes.append(copy)
    for info, target in zip(graph.output, outputs):
        if target and target not in taken:  # an outer value, an initializer or a repeated output
            nodes.append(make_node("Identity", [rename.get(info.name, info.name)], [target]))
            taken.add(target)
    return nodes
