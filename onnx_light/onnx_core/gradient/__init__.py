"""The gradient ALGORITHM: reverse-mode differentiation of ONNX nodes.

It knows no specific op: rules come from a :class:`GradRegistry` (the default rules
live in ``onnx_light.onnx_extensions.gradient``).
"""

from __future__ import annotations

from ..ops import upgrade_nodes
from ._api import GradientOfFunction, GradientOfNodes
from ._context import FLOAT_TYPES, GradContext, OpBuilder
from ._export import backward_model, function_to_model, gradient_model, input_types
from ._fastpath import value_type
from ._forward import TangentContext, TangentOfFunction, TangentOfNodes, diff_prefix
from ._names import DY, EMITTED_OPSET, AccumulateGrad, GradCounter, NewGradName
from ._registry import (
    GradFn,
    GradRegistry,
    GradRule,
    Grads,
    JvpFn,
    RegisterGradientFunction,
    SeedGradFn,
    ShortGradFn,
    Tangents,
)
from ._rules import elementwise, jvp_rule, linear, no_grad, rule, same_op
from ._sequences import sum_body
from ._types import UNKNOWN, ValueType, infer_types

__all__ = [
    "GradientOfNodes",
    "GradientOfFunction",
    "TangentOfNodes",
    "TangentOfFunction",
    "TangentContext",
    "JvpFn",
    "Tangents",
    "diff_prefix",
    "jvp_rule",
    "same_op",
    "GradRegistry",
    "GradRule",
    "GradFn",
    "ShortGradFn",
    "SeedGradFn",
    "Grads",
    "GradContext",
    "OpBuilder",
    "RegisterGradientFunction",
    "NewGradName",
    "AccumulateGrad",
    "GradCounter",
    "ValueType",
    "UNKNOWN",
    "FLOAT_TYPES",
    "EMITTED_OPSET",
    "DY",
    "rule",
    "elementwise",
    "linear",
    "no_grad",
    "backward_model",
    "function_to_model",
    "gradient_model",
    "input_types",
    "upgrade_nodes",
    "value_type",
    "infer_types",
    "sum_body",
]
