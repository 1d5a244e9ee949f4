"""The kernels' axis arguments: :mod:`onnx_light.onnx_core.axes`, refused outside the spec's range."""

from onnx_light.onnx_core.axes import axes_index, axis_index

__all__ = ["axes_index", "axis_index"]
