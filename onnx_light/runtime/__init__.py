"""runtime: executes ONNX models, graphs and functions with numpy kernels.

``InferenceSession`` has onnxruntime's shape, so code can swap one for the other.
"""

from __future__ import annotations

from ._blas import get_blas_threads, set_blas_threads
from ._malloc import keep_freed_memory
from ._registry import kernel, lookup_kernel, registered_kernels
from .session import DEFAULT_OPSET, InferenceSession, NodeArg

__all__ = [
    "InferenceSession",
    "NodeArg",
    "DEFAULT_OPSET",
    "kernel",
    "lookup_kernel",
    "registered_kernels",
    "set_blas_threads",
    "get_blas_threads",
    "keep_freed_memory",
]
