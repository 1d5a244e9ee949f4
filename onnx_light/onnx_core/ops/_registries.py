"""The layer's own tables: inference functions and upgrades, each an :class:`OpTable`.

Both are asked once per node in hot loops, so :class:`OpsetTable` adds a per-opset view
(a plain dict by op type, rebuilt only after a registration).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from ._table import DEFAULT_DOMAIN, Entry, OpTable, normalise_domain

__all__ = ["OpsetTable", "INFER", "UPGRADES", "upgrade"]

T = TypeVar("T")


class OpsetTable(OpTable[T]):
    """An :class:`OpTable` with a cached view of one domain at one opset.

    ``table.at(opset)`` is ``{op_type: value}`` of the entries covering ``opset``;
    ``op_type in table`` and iterating work on default-domain op types.
    """

    __slots__ = ("_views",)

    def __init__(self, what: str, how: str = "") -> None:
        super().__init__(what, how)
        self._views: dict[tuple[str, int], dict[str, T]] = {}

    def register(self, domain: str, op_type: str, value: T, *, since: int = 1, until: int | None = None) -> Entry[T]:
        """Adds ``value`` for ``domain::op_type`` from opset ``since`` (see :meth:`OpTable.register`)."""
        self._views.clear()
        return super().register(domain, op_type, value, since=since, until=until)

    def at(self, opset: int, domain: str = DEFAULT_DOMAIN) -> dict[str, T]:
        """``{op_type: value}`` of ``domain`` at ``opset`` (do not mutate)."""
        key = (normalise_domain(domain), opset)
        view = self._views.get(key)
        if view is None:
            view = {}
            for e in self.entries():
                if e.domain == key[0] and e.covers(opset):
                    view[e.op_type] = e.value  # entries come by since: the newest wins
            self._views[key] = view
        return view

    def copy(self) -> OpsetTable[T]:
        """An independent table with the same entries."""
        new: OpsetTable[T] = OpsetTable(self.what, self.how)
        for e in self.entries():
            new.register(e.domain, e.op_type, e.value, since=e.since, until=e.until)
        return new

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            key = (DEFAULT_DOMAIN, key)
        return isinstance(key, tuple) and super().__contains__(key)

    def __iter__(self) -> Iterator[str]:
        return iter(sorted({op for domain, op in self.ops() if domain == DEFAULT_DOMAIN}))


#: shape/type inference: fn(ctx: InferContext) -> one ValueType per output (and
#: optionally, as a tuple's second element, the outputs' known values)
INFER: OpsetTable[Callable[..., Any]] = OpsetTable(
    "shape inference", "register one with onnx_core.gradient.infer (unknown shapes otherwise)"
)

#: upgrades of a node from its source opset: fn(upgrader, node) appends the node's
#: replacement (or the node itself) to ``upgrader.out``; keyed by the SOURCE opset
UPGRADES: OpsetTable[Callable[..., None]] = OpsetTable(
    "upgrade", "the op's signature did not change (nodes pass through unchanged)"
)


def upgrade(*op_types: str, until: int | None, since: int = 1) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Registers an upgrade for default-domain nodes of ``op_types`` at source opsets ``since..until``.

    Args:
        *op_types: the op types the function rewrites.
        until: the last source opset whose nodes need it (the op changed at ``until + 1``;
            None: every opset, for ops the spec removed).
        since: the first such opset.

    Returns:
        The decorator (it returns the function unchanged).
    """

    def register(fn: Callable[..., None]) -> Callable[..., None]:
        for op in op_types:
            UPGRADES.register(DEFAULT_DOMAIN, op, fn, since=since, until=until)
        return fn

    return register
