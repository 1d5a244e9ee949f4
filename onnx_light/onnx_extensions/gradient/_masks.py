"""The speed trick of the piecewise rules, in one place: an indicator as a Cast of a comparison.

``Where(cond, dY, 0)`` is the formula; ``Mul(dY, Cast(cond, type of dY))`` computes the same
(for finite dY) and onnxruntime runs it several times faster than ``Where`` (benchmarks/RESULTS.md).
The mask depends on the forward values only, so a rule builds it once and multiplies once.
"""

from __future__ import annotations

from typing import Any

__all__ = ["mask"]


def mask(ctx: Any, condition: str, like: str) -> str:
    """``condition`` (a bool tensor) as 1/0 values of ``like``'s type."""
    dtype = ctx.dtype(like)
    values: str = ctx.op.Cast(condition, to=dtype) if dtype else ctx.op.CastLike(condition, like)
    return values
