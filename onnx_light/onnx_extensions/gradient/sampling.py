"""The random ops, declared without gradient.

RandomNormal and RandomUniform read no input; RandomNormalLike and RandomUniformLike read
only the shape and type of theirs. Bernoulli(p) draws 0 or 1 (piecewise constant in p: its
pathwise derivative is zero almost everywhere) and Multinomial draws integer class indices.
The pass does not re-run a random op in the backward function: its sampled outputs become
inputs of the backward function, fed from the forward run (see DESIGN.md §3).
"""

from __future__ import annotations

from ._table import no_grad

no_grad("", "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli", "Multinomial")
