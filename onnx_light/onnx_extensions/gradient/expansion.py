"""Ops differentiated through their expansion (``onnx_core/ops/_expand.py``): what the
decompositions refuse, declared here beside the rules so the README's table lists it.

The expansions themselves live in the op-schema layer (the spec's function bodies and our
decompositions); the gradient and forward passes expand a node with no rule and
differentiate the expansion.
"""

from __future__ import annotations

from ._table import refuses

refuses(
    "",
    "Attention",
    "RotaryEmbedding",
    "CausalConvWithState",
    what="Q / input of unknown rank; unknown head counts of 4-D Q, K; "
    "unknown channels or kernel size of the conv weight",
    why="the decomposition reshapes heads and groups the convolution with them",
)
