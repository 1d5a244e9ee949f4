"""onnx-light: a protobuf-free ONNX toolkit whose heart is symbolic differentiation.

The IR mirrors the ``onnx`` package (``ModelProto``, ``helper``, ``numpy_helper``,
``load``, ``save``) so code ports by changing the import; ``GradientOfFunction``
returns the backward graph as an ordinary ONNX function; ``runtime.InferenceSession``
runs forward and backward graphs with numpy.
"""

from __future__ import annotations

import sys as _sys
from collections.abc import Sequence

# Importing changes no process-wide state (no environment variables, BLAS threads or gc
# settings): the session sets numpy's BLAS thread count when it runs (its blas_threads
# option) and the gradient pass pauses the collector while it runs (pause_gc).
from . import onnx_core, runtime
from ._family import family
from ._gradcheck import GradcheckResult, gradcheck
from .onnx_core import *  # noqa: F403  (the IR classes, errors, load/save)
from .onnx_core import ModelProto, helper, numpy_helper
from .onnx_core import __all__ as _core_all
from .onnx_core.gradient import (
    AccumulateGrad,
    GradContext,
    GradFn,
    GradRegistry,
    GradRule,
    NewGradName,
    RegisterGradientFunction,
    TangentContext,
    function_to_model,
)
from .onnx_core.gradient import GradientOfFunction as _GradientOfFunction
from .onnx_core.gradient import GradientOfNodes as _GradientOfNodes
from .onnx_core.gradient import TangentOfFunction as _TangentOfFunction
from .onnx_core.gradient import TangentOfNodes as _TangentOfNodes
from .onnx_core.gradient import gradient_model as _gradient_model
from .onnx_core.optimizer import optimize
from .onnx_extensions.gradient import DefaultGradRegistry

# `import onnx_light.helper` works like `import onnx.helper`
_sys.modules[__name__ + ".helper"] = helper
_sys.modules[__name__ + ".numpy_helper"] = numpy_helper

__version__ = "0.1.0"


def GradientOfFunction(  # noqa: N802
    fn, xs, y, zs=None, registry=None, *, allow_unused=False, pause_gc=True, optimize=True
):
    """Differentiates a FunctionProto, GraphProto or ModelProto (default rules unless ``registry``).

    See :func:`onnx_light.onnx_core.gradient.GradientOfFunction`.
    """
    reg = registry if registry is not None else DefaultGradRegistry()
    return _GradientOfFunction(fn, xs, y, zs, reg, allow_unused=allow_unused, pause_gc=pause_gc, optimize=optimize)


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


def gradient_model(
    model: ModelProto,
    xs: Sequence[str],
    y: str,
    *,
    keep_initializers: bool = True,
    with_loss: bool = False,
    inline: bool = False,
    allow_unused: bool = False,
    registry: GradRegistry | None = None,
) -> ModelProto:
    """An ordinary ModelProto computing ``grad_<x>`` of ``y`` for each ``x`` in ``xs``.

    onnxruntime and ``runtime.InferenceSession`` run it as it is. The forward's
    initializers that are not differentiated stay initializers (weights and shape
    constants need no feed); a scalar ``y`` gets ``dy`` = 1 by default.

    Args:
        model: the forward ModelProto (or an ``onnx.ModelProto``).
        xs: names to differentiate with respect to.
        y: the output to differentiate.
        keep_initializers: keep the non-differentiated initializers (else they are inputs).
        with_loss: output ``y`` first, computed by the forward's nodes.
        inline: every node in the main graph (no model-local function).
        allow_unused: an ``x`` that does not reach ``y`` gets zeros instead of an error.
        registry: the rules (default: ``DefaultGradRegistry()``).

    Returns:
        The backward ModelProto: inputs ``[*xs, *other free inputs, "dy"]``.
    """
    return _gradient_model(
        model,
        xs,
        y,
        registry if registry is not None else DefaultGradRegistry(),
        keep_initializers=keep_initializers,
        with_loss=with_loss,
        inline=inline,
        allow_unused=allow_unused,
    )


def TangentOfFunction(fn, xs=None, ys=None, zs=None, registry=None, *, seeds=None, allow_unused=False, optimize=True):  # noqa: N802
    """Forward mode (JVP) of a FunctionProto, GraphProto or ModelProto (default rules unless ``registry``).

    See :func:`onnx_light.onnx_core.gradient.TangentOfFunction`.
    """
    reg = registry if registry is not None else DefaultGradRegistry()
    return _TangentOfFunction(fn, xs, ys, zs, reg, seeds=seeds, allow_unused=allow_unused, optimize=optimize)


def TangentOfNodes(nodes, xs, ys, zs=None, registry=None, **kwargs):  # noqa: N802
    """Forward mode over a list of nodes (default rules unless ``registry``).

    See :func:`onnx_light.onnx_core.gradient.TangentOfNodes`.
    """
    return _TangentOfNodes(nodes, xs, ys, zs, registry if registry is not None else DefaultGradRegistry(), **kwargs)


__all__ = [
    *_core_all,
    "gradient_model",
    "function_to_model",
    "gradcheck",
    "GradcheckResult",
    "family",
    "helper",
    "numpy_helper",
    "runtime",
    "onnx_core",
    "GradientOfFunction",
    "GradientOfNodes",
    "TangentOfFunction",
    "TangentOfNodes",
    "TangentContext",
    "DefaultGradRegistry",
    "RegisterGradientFunction",
    "GradRegistry",
    "GradRule",
    "GradFn",
    "GradContext",
    "NewGradName",
    "AccumulateGrad",
    "optimize",
]
