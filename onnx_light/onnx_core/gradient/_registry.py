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
from dataclasses import dataclass, field
from typing import Any

__all__ = ["GradFn", "GradRule", "GradRegistry", "RegisterGradientFunction", "normalise_domain"]

GradFn = Callable[..., Any]


def normalise_domain(domain: str) -> str:
    """``"ai.onnx"`` and ``""`` name the same domain; the registry uses ``""``."""
    return "" if domain in ("", "ai.onnx") else domain


def _is_seed_form(fn: GradFn) -> bool:
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

    def covers(self, opset: int) -> bool:
        """True when the rule applies at ``opset``."""
        return self.since <= opset and (self.until is None or opset <= self.until)


class GradRegistry:
    """Gradient rules by ``(domain, op_type)``, each with an opset range."""

    def __init__(self) -> None:
        self._rules: dict[tuple[str, str], list[GradRule]] = {}

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
    ) -> GradRule:
        """Adds (or replaces, for the same ``since``) a rule for ``domain::op_type``."""
        if fn is None and not no_grad:
            raise ValueError(f"{domain or 'ai.onnx'}::{op_type}: a rule needs a function unless no_grad=True")
        rule = GradRule(
            normalise_domain(domain),
            op_type,
            fn,
            since,
            until,
            _is_seed_form(fn) if fn is not None else False,
            broadcast,
            no_grad,
            frozenset(nondiff),
        )
        rules = self._rules.setdefault((rule.domain, op_type), [])
        rules[:] = [r for r in rules if r.since != since]
        rules.append(rule)
        rules.sort(key=lambda r: r.since)
        return rule

    def lookup(self, domain: str, op_type: str, opset: int) -> GradRule | None:
        """The newest rule for ``domain::op_type`` that covers ``opset``, or None."""
        best = None
        for rule in self._rules.get((normalise_domain(domain), op_type), ()):
            if rule.covers(opset):
                best = rule
        return best

    def versions(self, domain: str, op_type: str) -> list[tuple[int, int | None]]:
        """The ``(since, until)`` ranges registered for ``domain::op_type``."""
        return [(r.since, r.until) for r in self._rules.get((normalise_domain(domain), op_type), ())]

    def ops(self) -> list[tuple[str, str]]:
        """Every registered ``(domain, op_type)``, sorted."""
        return sorted(self._rules)

    def rules(self) -> list[GradRule]:
        """Every registered rule."""
        return [r for rs in self._rules.values() for r in rs]

    def copy(self) -> GradRegistry:
        """An independent registry with the same rules."""
        new = GradRegistry()
        new._rules = {k: list(v) for k, v in self._rules.items()}
        return new

    def __contains__(self, key: tuple[str, str]) -> bool:
        return (normalise_domain(key[0]), key[1]) in self._rules

    def __len__(self) -> int:
        return len(self._rules)


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

    def add(f: GradFn) -> GradFn:
        registry.register(domain, op_type, f, since=since, until=until, broadcast=broadcast, nondiff=nondiff)
        return f

    if fn is None:
        return add
    return add(fn)
