"""The kernel registry: numpy functions keyed by ``(domain, op_type, since_version)``.

A kernel takes the node's inputs positionally (``None`` for an omitted optional
input) and its attributes keyword-only, with the ONNX default in the signature::

    @kernel("", "Softmax", since=13)
    def softmax(x, *, axis: int = -1):
        ...

One function serves several schema versions when ``since`` is a tuple of them
(``@kernel("", "Relu", since=(6, 13, 14))``).

Attribute values arrive as Python values: ``int``, ``float``, ``str`` (STRING,
decoded from UTF-8), ``list`` (INTS, FLOATS, STRINGS), ``np.ndarray`` (TENSOR)
and ``GraphProto`` (GRAPH). A kernel returns one array or a tuple of arrays. A
kernel that declares the keyword ``_num_outputs`` is told how many outputs the
node has (Split, Dropout, MaxPool's Indices, ...).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["kernel", "KernelInfo", "lookup_kernel", "registered_kernels"]


@dataclass(frozen=True)
class KernelInfo:
    """One registered kernel version."""

    domain: str
    op_type: str
    since: int
    fn: Callable[..., Any]
    attributes: frozenset[str]
    wants_num_outputs: bool


_KERNELS: dict[tuple[str, str], list[KernelInfo]] = {}


def _normalise_domain(domain: str) -> str:
    return "" if domain in ("", "ai.onnx") else domain


def kernel(
    domain: str, op_type: str, since: int | Iterable[int] = 1
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Registers a numpy kernel for ``domain::op_type`` from opset ``since`` on.

    One function may serve several schema versions whose semantics it covers alike:
    ``@kernel("", "Relu", since=(6, 13, 14))`` registers it at each of them.

    Args:
        domain: ONNX domain (``""`` for the default domain).
        op_type: operator name as the spec spells it.
        since: first opset version this kernel implements, or several such versions.

    Returns:
        A decorator that registers the function and returns it unchanged.
    """
    versions = (since,) if isinstance(since, int) else tuple(since)

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        params = inspect.signature(fn).parameters.values()
        attrs = frozenset(
            p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY and not p.name.startswith("_")
        )
        wants = any(p.name == "_num_outputs" for p in params)
        key = (_normalise_domain(domain), op_type)
        registered = _KERNELS.setdefault(key, [])
        for v in versions:
            registered[:] = [r for r in registered if r.since != v]
            registered.append(KernelInfo(key[0], op_type, v, fn, attrs, wants))
        registered.sort(key=lambda r: r.since)
        return fn

    return register


def lookup_kernel(domain: str, op_type: str, opset: int) -> KernelInfo | None:
    """Returns the newest kernel whose ``since`` is not above ``opset``, or None."""
    versions = _KERNELS.get((_normalise_domain(domain), op_type))
    if not versions:
        return None
    best = None
    for v in versions:
        if v.since <= opset:
            best = v
    return best


def registered_kernels() -> dict[tuple[str, str], list[int]]:
    """Maps every registered ``(domain, op_type)`` to its ``since`` versions."""
    return {k: [v.since for v in vs] for k, vs in _KERNELS.items()}
