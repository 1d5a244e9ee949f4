"""Rule constructors: the common shapes of gradient rules, declared in one line.

``elementwise`` (one differentiable input), ``linear`` (rules that need no forward
value), ``no_grad`` (ops that pass no gradient) and the ``rule`` decorator, each
registering into a given :class:`GradRegistry`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from ._registry import GradRegistry, Grads, ShortGradFn

if TYPE_CHECKING:
    from ._context import GradContext

__all__ = ["rule", "elementwise", "linear", "no_grad"]

#: a short-form rule, as the ``rule`` decorator returns it unchanged
R = TypeVar("R", bound=ShortGradFn)


def rule(
    registry: GradRegistry,
    domain: str,
    *op_types: str,
    since: int = 1,
    until: int | None = None,
    broadcast: bool = False,
    nondiff: Sequence[int] = (),
) -> Callable[[R], R]:
    """Decorator registering a short-form rule ``fn(ctx, dy)`` for one or more ops."""

    def register(fn: R) -> R:
        for op in op_types:
            registry.register(domain, op, fn, since=since, until=until, broadcast=broadcast, nondiff=nondiff)
        return fn

    return register


def elementwise(
    registry: GradRegistry,
    domain: str,
    op_type: str,
    fn: Callable[[GradContext, str], str | None],
    *,
    since: int = 1,
    nondiff: Sequence[int] = (),
) -> None:
    """An op with one differentiable input: ``fn(ctx, dy)`` returns dX."""

    def grad(ctx: GradContext, dy: str) -> Grads:
        return (fn(ctx, dy),)

    grad.__doc__ = fn.__doc__
    grad.__name__ = f"{op_type}_grad"
    registry.register(domain, op_type, grad, since=since, nondiff=nondiff or tuple(range(1, 8)))


def linear(
    registry: GradRegistry, domain: str, op_type: str, fn: ShortGradFn, *, since: int = 1, broadcast: bool = False
) -> None:
    """An op linear in its inputs: ``fn(ctx, dy)`` returns the transpose applied to dy.

    Such rules read no forward value, so nothing of the forward graph is re-emitted
    for them.
    """
    registry.register(domain, op_type, fn, since=since, broadcast=broadcast)


def no_grad(registry: GradRegistry, domain: str, *op_types: str) -> None:
    """Declares ops that pass no gradient (their outputs are constants to the pass)."""
    for op in op_types:
        registry.register(domain, op, None, no_grad=True)
