"""Names in the emitted function: the seed's counter, NewGradName and AccumulateGrad."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .._proto import FunctionProto, NodeProto
from ._fastpath import new_node

__all__ = ["GradCounter", "NewGradName", "AccumulateGrad", "EMITTED_OPSET", "DY", "nested_names"]

#: the default-domain opset of emitted functions (or the source's, if newer)
EMITTED_OPSET = 21
#: the name of the output-gradient input
DY = "dy"


class GradCounter:
    """The seed's ``int &counter``: a counter plus every name already taken."""

    __slots__ = ("value", "taken")

    def __init__(self, taken: Iterable[str] = ()) -> None:
        self.value = 0
        self.taken: set[str] = set(taken)

    def __int__(self) -> int:
        return self.value

    __index__ = __int__


#: sanitised name stems by prefix (prefixes are op types and value names: few, reused)
_STEMS: dict[str, str] = {}


def NewGradName(prefix: str, counter: GradCounter) -> str:  # noqa: N802  (the seed's name)
    """A fresh value name ``<prefix>_grad<n>`` that collides with no name in the source.

    Args:
        prefix: readable stem (an op type or value name).
        counter: the pass's counter; advanced by every call.
    """
    stem = _STEMS.get(prefix)
    if stem is None:
        stem = _STEMS[prefix] = "".join(c if c.isalnum() or c in "_./" else "_" for c in prefix) or "v"
    taken = counter.taken
    n = counter.value + 1
    name = f"{stem}_grad{n}"
    while name in taken:
        n += 1
        name = f"{stem}_grad{n}"
    counter.value = n
    taken.add(name)
    return name


def AccumulateGrad(  # noqa: N802  (the seed's name)
    grad_accum: dict[str, str], var: str, grad: str, counter: GradCounter, func: FunctionProto
) -> str:
    """Records ``grad`` as a contribution to ``var``'s gradient (seed-form rules).

    The first contribution is stored as it is; a later one emits ``Add(old, grad)``
    into ``func`` and stores its result.

    Returns:
        The name now holding ``var``'s accumulated gradient.
    """
    old = grad_accum.get(var)
    if old is None:
        grad_accum[var] = grad
        return grad
    name = NewGradName(var, counter)
    func.node.append(new_node("Add", [old, grad], [name]))
    grad_accum[var] = name
    return name


class _SeedAccum(dict):
    """``grad_accum`` as seed-form rules see it: every write becomes a contribution."""

    def __init__(self) -> None:
        super().__init__()
        self.contributions: list[tuple[str, str]] = []

    def get(self, key: Any, default: Any = None) -> Any:
        return default  # the core accumulates; each write is a fresh contribution

    def __contains__(self, key: object) -> bool:
        return False

    def __setitem__(self, key: str, value: str) -> None:
        self.contributions.append((key, value))


def nested_names(nodes: Iterable[NodeProto]) -> set[str]:
    """Every name used inside the subgraphs of ``nodes`` (their inputs, outputs and nodes)."""
    out: set[str] = set()
    for node in nodes:
        for attr in node.attribute:
            for g in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                out.update(i.name for i in [*g.input, *g.output])
                for n in g.node:
                    out.update(n.input)
                    out.update(n.output)
                out |= nested_names(g.node)
    return out
