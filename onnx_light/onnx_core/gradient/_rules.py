"""Rule constructors: the common shapes of gradient rules, declared in one line.

``elementwise`` (one differentiable input), ``linear`` (rules that need no forward
value), ``no_grad`` (ops that pass no gradient) and the ``rule`` decorator, each
registering into a given :class:`GradRegistry`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ._registry import GradRegistry, Grads, JvpFn, ShortGradFn, Tangents

if TYPE_CHECKING:
    from ._context import GradContext

__all__ = ["rule", "elementwise", "linear", "no_grad", "same_op", "jvp_rule"]

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
    straight_through: bool = False,
) -> Callable[[R], R]:
    """Decorator registering a short-form rule ``fn(ctx, dy)`` for one or more ops
    (``straight_through``: see :class:`GradRule`)."""

    def register(fn: R) -> R:
        for op in op_types:
            registry.register(
                domain,
                op,
                fn,
                since=since,
                until=until,
                broadcast=broadcast,
                nondiff=nondiff,
                straight_through=straight_through,
            )
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

    def jvp(ctx: Any, ts: Sequence[str | None]) -> Tangents:
        # a diagonal Jacobian is its own transpose: the reverse formula applied to the tangent
        return fn(ctx, ts[0]) if ts and ts[0] is not None else None

    grad.__doc__ = fn.__doc__
    grad.__name__ = f"{op_type}_grad"
    registry.register(domain, op_type, grad, since=since, nondiff=nondiff or tuple(range(1, 8)), jvp=jvp)


def linear(
    registry: GradRegistry,
    domain: str,
    op_type: str,
    fn: ShortGradFn,
    *,
    since: int = 1,
    broadcast: bool = False,
    jvp: JvpFn | None = None,
) -> None:
    """An op linear in its inputs: ``fn(ctx, dy)`` returns the transpose applied to dy.

    Such rules read no forward value, so nothing of the forward graph is re-emitted
    for them. The forward rule defaults to the op itself applied to the tangent of
    input 0 (the other inputs, shapes or axes, kept).
    """
    registry.register(domain, op_type, fn, since=since, broadcast=broadcast, jvp=jvp or same_op())


def same_op(*linear_in: int) -> JvpFn:
    """The forward rule of an op linear in the inputs ``linear_in`` (default: input 0) and
    constant in the others: the op itself, re-emitted on the tangents (zeros where one
    of several has none)."""
    which = linear_in or (0,)

    def jvp(ctx: Any, ts: Sequence[str | None]) -> Tangents:
        if all(i >= len(ts) or ts[i] is None for i in which):
            return None
        inputs = list(ctx.inputs)
        for i in which:
            if i < len(inputs) and inputs[i]:
                t = ts[i] if i < len(ts) else None
                inputs[i] = t if t is not None else ctx.zeros_like(inputs[i])
        outs = ctx.emit_like(inputs)
        return outs

    return jvp


def no_grad(registry: GradRegistry, domain: str, *op_types: str) -> None:
    """Declares ops that pass no gradient (their outputs are constants to the pass)."""
    for op in op_types:
        registry.register(domain, op, None, no_grad=True)


J = TypeVar("J", bound=JvpFn)


def jvp_rule(registry: GradRegistry, domain: str, *op_types: str) -> Callable[[J], J]:
    """Decorator attaching a forward rule ``fn(ctx, ts)`` to the registered entries of ops
    (the reverse rule is registered first, beside it)."""

    def register(fn: J) -> J:
        for op in op_types:
            registry.set_jvp(domain, op, fn)
        return fn

    return register
