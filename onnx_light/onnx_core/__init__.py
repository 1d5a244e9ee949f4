"""onnx_core: the ONNX IR, its hand-written wire codec, and the gradient algorithm.

Nothing here imports the rest of onnx-light.
"""

from __future__ import annotations

from . import _proto
from ._errors import (
    DecodeError,
    GradientError,
    InvalidFeed,
    NotImplementedOp,
    OnnxLightError,
    RuntimeFailure,
)
from ._io import (
    load,
    load_external_data_for_model,
    load_from_string,
    load_model,
    load_model_from_string,
    load_tensor,
    load_tensor_from_string,
    save,
    save_model,
    save_tensor,
)
from ._proto import *  # noqa: F403  (the IR classes, listed in _proto.__all__)

__all__ = [
    *_proto.__all__,
    "OnnxLightError",
    "DecodeError",
    "GradientError",
    "InvalidFeed",
    "NotImplementedOp",
    "RuntimeFailure",
    "load",
    "load_model",
    "load_from_string",
    "load_model_from_string",
    "load_tensor",
    "load_tensor_from_string",
    "load_external_data_for_model",
    "save",
    "save_model",
    "save_tensor",
]
