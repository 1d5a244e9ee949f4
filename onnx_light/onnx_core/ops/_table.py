"""``OpTable[T]``: the one registry type, keyed by ``(domain, op_type)`` and opset range.

Gradient rules, runtime kernels, shape inference and upgrades are all tables of this
type; they differ only in what ``T`` is. An entry applies from ``since`` to ``until``
(inclusive, None: open-ended); a lookup at opset ``v`` returns the newest entry whose
range covers ``v``. Registering again at the same ``since`` replaces the entry.
"""

from __future__ import annotations

from collections.abc import Iterator, KeysView
from dataclasses import dataclass
from typing import Generic, TypeVar

from .._errors import NotImplementedOp

__all__ = ["OpTable", "Entry", "MissingEntry", "normalise_domain", "DEFAULT_DOMAIN", "op_label"]

T = TypeVar("T")

#: the default domain as the registries key it ("ai.onnx" is normalised to it)
DEFAULT_DOMAIN = ""


def normalise_domain(domain: str) -> str:
    """``"ai.onnx"`` and ``""`` name the same domain; tables use ``""``."""
    return DEFAULT_DOMAIN if domain in ("", "ai.onnx") else domain


def op_label(domain: str, op_type: str) -> str:
    """``domain::op_type`` as errors print it (``ai.onnx::Relu`` for the default domain)."""
    return f"{normalise_domain(domain) or 'ai.onnx'}::{op_type}"


class MissingEntry(NotImplementedOp, LookupError):
    """A table has no entry for an op (or for that op at the asked opset)."""


@dataclass(frozen=True)
class Entry(Generic[T]):
    """One registered value and the opset range it applies to."""

    domain: str
    op_type: str
    since: int
    until: int | None
    value: T

    def covers(self, opset: int) -> bool:
        """True when the entry applies at ``opset``."""
        return self.since <= opset and (self.until is None or opset <= self.until)


class OpTable(Generic[T]):
    """Values of type ``T`` by ``(domain, op_type)``, each with an opset range.

    Args:
        what: what the table holds, for error messages ("gradient rule", "kernel", ...).
        how: how to register a missing entry, appended to the error message.
    """

    __slots__ = ("what", "how", "_entries")

    def __init__(self, what: str, how: str = "") -> None:
        self.what = what
        self.how = how
        self._entries: dict[tuple[str, str], list[Entry[T]]] = {}

    def register(self, domain: str, op_type: str, value: T, *, since: int = 1, until: int | None = None) -> Entry[T]:
        """Adds ``value`` for ``domain::op_type`` from opset ``since`` (replacing one at the same ``since``)."""
        entry = Entry(normalise_domain(domain), op_type, since, until, value)
        entries = self._entries.setdefault((entry.domain, op_type), [])
        entries[:] = [e for e in entries if e.since != since]
        entries.append(entry)
        entries.sort(key=lambda e: e.since)
        return entry

    def remove(self, domain: str, op_type: str) -> None:
        """Drops every entry of ``domain::op_type`` (no error when there is none)."""
        self._entries.pop((normalise_domain(domain), op_type), None)

    def entry(self, domain: str, op_type: str, opset: int) -> Entry[T] | None:
        """The newest entry for ``domain::op_type`` covering ``opset``, or None."""
        best = None
        for e in self._entries.get((normalise_domain(domain), op_type), ()):
            if e.covers(opset):
                best = e
        return best

    def lookup(self, domain: str, op_type: str, opset: int) -> T | None:
        """The value of :meth:`entry`, or None."""
        e = self.entry(domain, op_type, opset)
        return None if e is None else e.value

    def require(self, domain: str, op_type: str, opset: int, *, where: str = "") -> T:
        """The value of :meth:`entry`; raises :class:`MissingEntry` saying what exists and how to register."""
        e = self.entry(domain, op_type, opset)
        if e is not None:
            return e.value
        raise MissingEntry(self.missing_message(domain, op_type, opset, where=where))

    def missing_message(self, domain: str, op_type: str, opset: int, *, where: str = "") -> str:
        """The text of the error :meth:`require` raises."""
        label = op_label(domain, op_type)
        ranges = self.versions(domain, op_type)
        at = f" at opset {opset}" if opset else ""
        head = f"{where}: " if where else ""
        if ranges:
            have = ", ".join(f"{s}..{u if u is not None else ''}" for s, u in ranges)
            text = f"{head}no {self.what} for {label}{at} (registered for opsets {have})"
        else:
            text = f"{head}no {self.what} for {label}{at}"
        return f"{text}; {self.how}" if self.how else text

    def versions(self, domain: str, op_type: str) -> list[tuple[int, int | None]]:
        """The ``(since, until)`` ranges registered for ``domain::op_type``."""
        return [(e.since, e.until) for e in self._entries.get((normalise_domain(domain), op_type), ())]

    def entries(self) -> Iterator[Entry[T]]:
        """Every entry, by key then ``since``."""
        for key in sorted(self._entries):
            yield from self._entries[key]

    def ops(self) -> list[tuple[str, str]]:
        """Every registered ``(domain, op_type)``, sorted."""
        return sorted(self._entries)

    def keys(self) -> KeysView[tuple[str, str]]:
        """Every registered ``(domain, op_type)``, unsorted (a live view: equal to a set of the same keys)."""
        return self._entries.keys()

    def copy(self) -> OpTable[T]:
        """An independent table with the same entries."""
        new: OpTable[T] = OpTable(self.what, self.how)
        new._entries = {k: list(v) for k, v in self._entries.items()}
        return new

    def __contains__(self, key: tuple[str, str]) -> bool:
        return (normalise_domain(key[0]), key[1]) in self._entries

    def __len__(self) -> int:
        return len(self._entries)
