"""Inlining model-local functions into the nodes that call them (``onnx.inliner``'s job).

:class:`FunctionInliner` expands every call of a model-local function into the function's
nodes, with its attribute references bound and its names made unique; the runtime's
planner and the gradient pass both use it.
"""

from __future__ import annotations

from ._inline import MAX_INLINE_DEPTH, FunctionInliner

__all__ = ["FunctionInliner", "MAX_INLINE_DEPTH"]
