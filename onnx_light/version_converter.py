"""onnx's ``onnx.version_converter`` for onnx-light models: ``convert_version(model, target_version)``.

The implementation is :mod:`onnx_light.onnx_core.version_converter`; this module gives it onnx's import path.
"""

from __future__ import annotations

from .onnx_core.version_converter import ConvertError, convert_version, newest_opset

__all__ = ["ConvertError", "convert_version", "newest_opset"]
