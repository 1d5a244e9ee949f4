"""onnx's ``onnx.shape_inference`` for onnx-light models: ``infer_shapes(model)``.

The implementation is :mod:`onnx_light.onnx_core.shape_inference`; this module gives it onnx's import path.
"""

from __future__ import annotations

from .onnx_core.shape_inference import InferenceError, infer_shapes, infer_shapes_path

__all__ = ["InferenceError", "infer_shapes", "infer_shapes_path"]
