"""The gradient rule registry: rules keyed by ``(domain, op_type)`` and opset range.

A rule (``GradFn``) comes in one of two forms:

* the short form ``fn(ctx, dy) -> gradient name (or None) per input``, where ``ctx``
  is a :class:`~onnx_light.onnx_core.gradient.GradContext`;
* the seed's five-argument form ``fn(node, output_grad, grad_accum, counter, func) ->
  bool``, which appends nodes to ``func`` and records contributions in ``grad_accum``
  (with :func:`AccumulateGrad`).

An op registered with ``no_grad`` passes no gradient: its outputs are constants as
far as differentiation goes (Shape, Floor, comparisons, ...).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

from ..ops import OpTable, normalise_domain, op_label

if TYPE_CHECKING:
    from .._proto import FunctionProto, NodeProto
    from ._context import GradContext
    from ._names import GradCounter

__all__ = [
    "GradFn",
    "Grads",
    "ShortGradFn",
    "SeedGradFn",
    "GradRule",
    "JvpFn",
    "Tangents",
    "GradRegistry",
    "RegisterGradientFunction",
    "normalise_domain",
]

#: what a short-form rule returns: one gradient name (or None) per input, or a single one
Grads: TypeAlias = str | None | Sequence[str | None]


class ShortGradFn(Protocol):
    """The short form ``fn(ctx, dy) -> Grads``.

    ``dy`` is the gradient of output 0; for a multi-output op whose output 0 has none it
    is None, and the rule reads ``ctx.output_grads``.
    """

    def __call__(self, ctx: GradContext, dy: str, /) -> Grads: ...


class SeedGradFn(Protocol):
    """The seed's form ``fn(node, output_grad, grad_accum, counter, func) -> bool``."""

    def __call__(
        self, node: NodeProto, output_grad: str, grad_accum: Any, counter: GradCounter, func: FunctionProto, /
    ) -> bool | None: ...


#: a gradient rule, in either form
GradFn: TypeAlias = ShortGradFn | SeedGradFn

#: what a forward rule returns: one tangent name (or None for zero) per output, or a single one
Tangents: TypeAlias = str | None | Sequence[str | None]


class JvpFn(Protocol):
    """A forward (JVP) rule ``fn(ctx, ts) -> Tangents``: ``ts[i]`` is the tangent of input i
    (None where it is zero); ``ctx`` is a :class:`~onnx_light.onnx_core.gradient.TangentContext`."""

    def __call__(self, ctx: Any, ts: Sequence[str | None], /) -> Tangents: ...


def _is_seed_form(fn: Callable[..., Any]) -> bool:
    try:
        params = [
            p
            for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        return False
    return len(params) == 5


@dataclass(frozen=True)
class GradRule:
    """One registered rule.

    Attributes:
        domain: the op's domain ("" for ai.onnx).
        op_type: the op's name.
        fn: the rule (None for ``no_grad`` ops).
        since: first opset version the rule applies to.
        until: last opset version it applies to (None: open-ended).
        seed_form: True when ``fn`` has the five-argument signature.
        broadcast: contributions come shaped like output 0 and the core sums them
            back to each input's shape (numpy broadcasting undone).
        no_grad: the op passes no gradient.
        nondiff: input indices that are legitimately not differentiable (e.g. the
            ``ratio`` of Dropout); a rule returning None for any other input that
            needs a gradient is an error.
        jvp: the forward-mode rule of the same op (None: forward mode unsupported).
        straight_through: the op's integer (non-float) outputs carry a float gradient to
            ops that also declare it, which take one for their integer inputs: a
            straight-through estimator (QuantizeLinear -> DequantizeLinear). Other ops
            reading such a value pass nothing through it, as for any integer value.
    """

    domain: str
    op_type: str
    fn: GradFn | None
    since: int = 1
    until: int | None = None
    seed_form: bool = False
    broadcast: bool = False
    no_grad: bool = False
    nondiff: frozenset[int] = field(default_factory=frozenset)
    jvp: JvpFn | None = None
    straight_through: bool = False

    def covers(self, opset: int) -> bool:
        """True when the rule applies at ``opset``."""
        return self.since <= opset and (self.until is None or opset <= self.until)


_HOW = "register one with onnx_light.RegisterGradientFunction(domain, op_type, rule, registry=reg)"


class GradRegistry:
    """Gradient rules by ``(domain, op_type)``, each with an opset range.

    Attributes:
        table: the ``OpTable[GradRule]`` behind it (the one registry type of ``onnx_core.ops``).
    """

    __slots__ = ("table",)

    def __init__(self, table: OpTable[GradRule] | None = None) -> None:
        self.table: OpTable[GradRule] = OpTable("gradient rule", _HOW) if table is None else table

    def register(
        self,
        domain: str,
        op_type: str,
        fn: GradFn | None,
        *,
        since: int = 1,
        until: int | None = None,
        broadcast: bool = False,
        no_grad: bool = False,
        nondiff: Sequence[int] = (),
        jvp: JvpFn | None = None,
        straight_through: bool = False,
    ) -> GradRule:
        """Adds (or replaces, for the same ``since``) a rule for ``domain::op_type``."""
        if fn is None and not no_grad:
            raise ValueError(f"{op_label(domain, op_type)}: a rule needs a function unless no_grad=True")
        seed = _is_seed_form(fn) if fn is not None else False
        rule = GradRule(
            normalise_domain(domain),
            op_type,
            fn,
            since,
            until,
            seed,
            broadcast,
            no_grad,
            frozenset(nondiff),
            jvp,
            straight_through,
        )
        self.table.register(rule.domain, op_type, rule, since=since, until=until)
        return rule

    def set_jvp(self, domain: str, op_type: str, jvp: JvpFn) -> None:
        """Attaches the forward rule ``jvp`` to every registered entry of ``domain::op_type``."""
        entries = [e for e in self.table.entries() if (e.domain, e.op_type) == (normalise_domain(domain), op_type)]
        if not entries:
            raise ValueError(f"{op_label(domain, op_type)}: register its reverse rule before its forward rule")
        for e in entries:
            self.table.register(e.domain, op_type, replace(e.value, jvp=jvp), since=e.since, until=e.until)

    def lookup(self, domain: str, op_type: str, opset: int) -> GradRule | None:
        """The newest rule for ``domain::op_type`` that covers ``opset``, or None."""
        return self.table.lookup(domain, op_type, opset)

    def versions(self, domain: str, op_type: str) -> list[tuple[int, int | None]]:
        """The ``(since, until)`` ranges registered for ``domain::op_type``."""
        return self.table.versions(domain, op_type)

    def ops(self) -> list[tuple[str, str]]:
        """Every registered ``(domain, op_type)``, sorted."""
        return self.table.ops()

    def rules(self) -> list[GradRule]:
        """Every registered rule."""
        return [e.value for e in self.table.entries()]

    def copy(self) -> GradRegistry:
        """An independent registry with the same rules."""
        return GradRegistry(self.table.copy())

    def __contains__(self, key: tuple[str, str]) -> bool:
        return key in self.table

    def __len__(self) -> int:
        return len(self.table)


def RegisterGradientFunction(  # noqa: N802  (the seed's name)
    domain: str,
    op_type: str,
    fn: GradFn | None = None,
    *,
    registry: GradRegistry,
    since: int = 1,
    until: int | None = None,
    broadcast: bool = False,
    nondiff: Sequence[int] = (),
) -> Any:
    """Registers a gradient rule for ``domain::op_type`` in ``registry``.

    Usable directly, ``RegisterGradientFunction("my.domain", "MyOp", rule, registry=reg)``,
    or as a decorator, ``@RegisterGradientFunction("my.domain", "MyOp", registry=reg)``.
    Both rule forms are accepted (see the module docstring).

    Returns:
        The rule function (so the decorator form leaves it usable).
    """

    def add(f: Any) -> Any:
        registry.register(domain, op_type, f, since=since, until=until, broadcast=broadcast, nondiff=nondiff)
        return f

    if fn is None:
        return add
    return add(fn)
