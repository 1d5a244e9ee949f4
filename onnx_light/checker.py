"""onnx's ``onnx.checker`` for onnx-light models: ``check_model(model, full_check=False)``.

The implementation is :mod:`onnx_light.onnx_core.checker`; this module gives it onnx's import path.
"""

from __future__ import annotations

from .onnx_core.checker import (
    DEFAULT_CONTEXT,
    LEXICAL_SCOPE_CONTEXT,
    MAXIMUM_IR_VERSION,
    CheckerContext,
    LexicalScopeContext,
    ValidationError,
    check_attribute,
    check_function,
    check_graph,
    check_model,
    check_node,
    check_sparse_tensor,
    check_tensor,
    check_value_info,
)

__all__ = [
    "ValidationError",
    "CheckerContext",
    "LexicalScopeContext",
    "DEFAULT_CONTEXT",
    "LEXICAL_SCOPE_CONTEXT",
    "MAXIMUM_IR_VERSION",
    "check_model",
    "check_graph",
    "check_node",
    "check_function",
    "check_attribute",
    "check_value_info",
    "check_tensor",
    "check_sparse_tensor",
]
