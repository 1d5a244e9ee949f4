"""The default registry and the rule constructors bound to it.

Rule modules declare their rules with these one-liners::

    no_grad("", "Shape", "Floor")
    elementwise("", "Exp", lambda ctx, dy: ctx.op.Mul(dy, ctx.output(0)))

    @rule("", "Mul", broadcast=True)
    def mul_grad(ctx, dy): ...
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from ...onnx_core.gradient import GradRegistry
from ...onnx_core.gradient import elementwise as _elementwise
from ...onnx_core.gradient import jvp_rule as _jvp_rule
from ...onnx_core.gradient import linear as _linear
from ...onnx_core.gradient import no_grad as _no_grad
from ...onnx_core.gradient import rule as _rule

__all__ = ["REGISTRY", "REFUSALS", "Refusal", "refuses", "rule", "jvp_rule", "elementwise", "linear", "no_grad"]

#: every default rule, registered as the rule modules are imported
REGISTRY = GradRegistry()

rule = partial(_rule, REGISTRY)
elementwise = partial(_elementwise, REGISTRY)
linear = partial(_linear, REGISTRY)
no_grad = partial(_no_grad, REGISTRY)
jvp_rule = partial(_jvp_rule, REGISTRY)


@dataclass(frozen=True)
class Refusal:
    """What the rule of an op refuses, and why (its error says the same, naming the node).

    Attributes:
        op_types: the ops whose rule refuses it.
        what: the attribute values, input forms or shapes refused.
        why: the reason, in a few words.
        domain: the ops' domain ("" for ai.onnx).
    """

    op_types: tuple[str, ...]
    what: str
    why: str
    domain: str = ""


#: every documented refusal, in declaration order (the README's table)
REFUSALS: list[Refusal] = []


def refuses(domain: str, *op_types: str, what: str, why: str) -> None:
    """Documents what the rules of ``op_types`` refuse and why, beside those rules."""
    REFUSALS.append(Refusal(tuple(op_types), what, why, domain))
