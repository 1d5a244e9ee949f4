"""The default registry and the rule constructors bound to it.

Rule modules declare their rules with these one-liners::

    no_grad("", "Shape", "Floor")
    elementwise("", "Exp", lambda ctx, dy: ctx.op.Mul(dy, ctx.output(0)))

    @rule("", "Mul", broadcast=True)
    def mul_grad(ctx, dy): ...
"""

from __future__ import annotations

from functools import partial

from ...onnx_core.gradient import GradRegistry
from ...onnx_core.gradient import elementwise as _elementwise
from ...onnx_core.gradient import jvp_rule as _jvp_rule
from ...onnx_core.gradient import linear as _linear
from ...onnx_core.gradient import no_grad as _no_grad
from ...onnx_core.gradient import rule as _rule

__all__ = ["REGISTRY", "rule", "jvp_rule", "elementwise", "linear", "no_grad"]

#: every default rule, registered as the rule modules are imported
REGISTRY = GradRegistry()

rule = partial(_rule, REGISTRY)
elementwise = partial(_elementwise, REGISTRY)
linear = partial(_linear, REGISTRY)
no_grad = partial(_no_grad, REGISTRY)
jvp_rule = partial(_jvp_rule, REGISTRY)
