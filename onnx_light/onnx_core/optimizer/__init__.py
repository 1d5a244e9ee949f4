"""The optimizer for emitted graphs: Identity elimination, common-subexpression elimination,
constant folding and dead-node removal on a FunctionProto.

``GradientOfFunction``, ``GradientOfNodes`` and the forward-mode entry points run
:func:`optimize` on their result (``optimize=False`` turns it off); it is public as
``onnx_light.optimize`` too.
"""

from __future__ import annotations

from ._fold import FOLD_MAX_ELEMENTS, FoldFn, fold_numpy
from ._optimize import optimize

__all__ = ["optimize", "fold_numpy", "FoldFn", "FOLD_MAX_ELEMENTS"]
