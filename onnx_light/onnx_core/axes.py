"""Axis arguments counted from 0, refused outside the range the spec allows.

``axis % rank`` turns an invalid axis into a valid one (axis 5 of a matrix into axis 1), so a
kernel that normalized that way answered an invalid model silently. These raise numpy's
``AxisError`` instead, which the session reports as a ``RuntimeFailure`` naming the node.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

__all__ = ["axes_index", "axis_index"]


def axis_index(axis: int, rank: int) -> int:
    """``axis`` in ``[-rank, rank)`` as an index in ``[0, rank)``.

    Raises:
        numpy.exceptions.AxisError: ``axis`` is outside ``[-rank, rank)``.
    """
    a = int(axis)
    if not -rank <= a < rank:
        raise np.exceptions.AxisError(a, rank)
    return a + rank if a < 0 else a


def axes_index(axes: Iterable[int], rank: int) -> list[int]:
    """Each of ``axes`` through :func:`axis_index`."""
    return [axis_index(a, rank) for a in axes]
