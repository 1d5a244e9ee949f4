"""onnx-light: a protobuf-free ONNX toolkit whose heart is symbolic differentiation.

The IR mirrors the ``onnx`` package (``ModelProto``, ``helper``, ``numpy_helper``,
``load``, ``save``) so code ports by changing the import; ``GradientOfFunction``
returns the backward graph as an ordinary ONNX function; ``runtime.InferenceSession``
runs forward and backward graphs with numpy.
"""

from __future__ import annotations

import os as _os
import sys as _sys

# One BLAS thread unless the user chose otherwise: on small shared machines a busy
# second core makes multi-threaded GEMMs collapse (ONNX_LIGHT_BLAS_THREADS raises it).
# The variables help when numpy is not imported yet; runtime._blas sets the count in
# the loaded library either way.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    _os.environ.setdefault(_var, _os.environ.get("ONNX_LIGHT_BLAS_THREADS", "1"))

from . import onnx_core, runtime  # noqa: E402
from .onnx_core import *  # noqa: E402,F403  (the IR classes, errors, load/save)
from .onnx_core import __all__ as _core_all  # noqa: E402
from .onnx_core import helper, numpy_helper  # noqa: E402
from .onnx_core.gradient import (  # noqa: E402
    AccumulateGrad,
    GradContext,
    GradFn,
    GradRegistry,
    GradRule,
    NewGradName,
    RegisterGradientFunction,
)
from .onnx_core.gradient import GradientOfFunction as _GradientOfFunction  # noqa: E402
from .onnx_core.gradient import GradientOfNodes as _GradientOfNodes  # noqa: E402
from .onnx_extensions.gradient import DefaultGradRegistry  # noqa: E402

# `import onnx_light.helper` works like `import onnx.helper`
_sys.modules[__name__ + ".helper"] = helper
_sys.modules[__name__ + ".numpy_helper"] = numpy_helper

__version__ = "0.1.0"


def GradientOfFunction(fn, xs, y, zs=None, registry=None, *, allow_unused=False):  # noqa: N802
    """Differentiates a FunctionProto, GraphProto or ModelProto (default rules unless ``registry``).

    See :func:`onnx_light.onnx_core.gradient.GradientOfFunction`.
    """
    return _GradientOfFunction(
        fn, xs, y, zs, registry if registry is not None else DefaultGradRegistry(), allow_unused=allow_unused
    )


def GradientOfNodes(nodes, xs, y, zs=None, registry=None, *, allow_unused=False, **kwargs):  # noqa: N802
    """Differentiates a list of nodes (default rules unless ``registry``).

    See :func:`onnx_light.onnx_core.gradient.GradientOfNodes`.
    """
    return _GradientOfNodes(
        nodes,
        xs,
        y,
        zs,
        registry if registry is not None else DefaultGradRegistry(),
        allow_unused=allow_unused,
        **kwargs,
    )


__all__ = [
    *_core_all,
    "helper",
    "numpy_helper",
    "runtime",
    "onnx_core",
    "GradientOfFunction",
    "GradientOfNodes",
    "DefaultGradRegistry",
    "RegisterGradientFunction",
    "GradRegistry",
    "GradRule",
    "GradFn",
    "GradContext",
    "NewGradName",
    "AccumulateGrad",
]
