"""A sum of zero-padded pieces that tile its result, run as one concatenation.

The gradient of ``Gather(x, i)`` for a scalar ``i`` (torch's ``unbind`` of a fused QKV
projection) pads the slab's gradient with zeros to ``x``'s shape, and the contributions of
the three slabs meet in one ``Sum``: three zero-filled tensors the size of ``x``, written,
then read again to add them. When every input of a step declared ``sums_inputs`` is the
output of a step declared ``zero_pad`` (with constant pads, read by nothing else), the two
are merged into one step that, at run time, checks that the pieces tile the result along one
axis (each padded on that axis only, the pads meeting edge to edge, the other sizes equal)
and then concatenates them; otherwise it pads and adds as the graph says. The answer is the
same (adding zeros is exact, but for the sign of a zero). The planner knows no op here:
kernels declare what may be merged (``KernelOptions``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # _plan imports this module
    from ._plan import Step

__all__ = ["fuse_padded_sums", "concat_of_tiles"]


def concat_of_tiles(pieces: Sequence[Any], pads: Sequence[Sequence[int]]) -> np.ndarray | None:
    """``Sum(Pad(piece_k, pads_k) ...)`` with zero fill as one concatenation, or None when the
    padded pieces do not tile the result edge to edge along one axis (module docstring)."""
    first = pieces[0]
    if not all(type(p) is np.ndarray and p.dtype == first.dtype and p.ndim == first.ndim for p in pieces):
        return None
    rank = first.ndim
    if rank == 0 or any(len(p) != 2 * rank for p in pads):
        return None
    axes = {a for p in pads for a in range(rank) if p[a] or p[a + rank]}
    if len(axes) != 1:
        return None
    (axis,) = axes
    rest = [tuple(n for a, n in enumerate(p.shape) if a != axis) for p in pieces]
    if any(r != rest[0] for r in rest):
        return None
    order = sorted(range(len(pieces)), key=lambda k: pads[k][axis])
    total = pads[0][axis] + pieces[0].shape[axis] + pads[0][axis + rank]
    edge = 0
    for k in order:
        size = pieces[k].shape[axis]
        if pads[k][axis] != edge or pads[k][axis] + size + pads[k][axis + rank] != total:
            return None
        edge += size
    if edge != total:
        return None
    return np.concatenate([pieces[k] for k in order], axis=axis)


def _padded(step: Step, constants: dict[int, Any]) -> list[int] | None:
    spec = step.options.zero_pad
    if spec is None or len(step.outputs) != 1 or not step.inputs:
        return None
    extra = step.inputs[1:]
    if any(s != 0 and s not in constants for s in extra):
        return None
    pads: list[int] | None = spec(*[constants.get(s) for s in extra], **step.kwargs)
    return pads


def fuse_padded_sums(steps: list[Step], constants: dict[int, Any], keep: set[int]) -> list[Step]:
    """The plan with each sum of zero-padded pieces merged into one step (module docstring)."""
    producer = {s: i for i, step in enumerate(steps) for s in step.outputs}
    readers: dict[int, int] = {}
    for step in steps:
        for s in dict.fromkeys(step.inputs):
            readers[s] = readers.get(s, 0) + 1
    merged: dict[int, Step] = {}
    dropped: set[int] = set()
    for i, step in enumerate(steps):
        if not step.options.sums_inputs or len(step.inputs) < 2 or len(set(step.inputs)) != len(step.inputs):
            continue
        pads_steps = [producer.get(s) for s in step.inputs]
        if any(j is None or readers.get(s) != 1 or s in keep for j, s in zip(pads_steps, step.inputs)):
            continue
        pads = [_padded(steps[j], constants) for j in pads_steps if j is not None]
        if any(p is None for p in pads):
            continue
        pad_steps = [steps[j] for j in pads_steps if j is not None]
        merged[i] = _merged(step, pad_steps, [p for p in pads if p is not None], constants)
        dropped.update(j for j in pads_steps if j is not None)
    if not merged:
        return steps
    return [merged.get(i, s) for i, s in enumerate(steps) if i not in dropped]


def _merged(total: Step, pad_steps: list[Step], pads: list[list[int]], constants: dict[int, Any]) -> Step:
    """The step concatenating the pieces, or padding and summing them when they do not tile."""
    from ._plan import Step

    fallbacks: list[tuple[Callable[..., Any], list[Any], dict[str, Any]]] = [
        (p.fn, [constants.get(s) if s else None for s in p.inputs[1:]], p.kwargs) for p in pad_steps
    ]
    sum_fn, sum_kwargs = total.fn, total.kwargs

    def fused(*pieces: Any) -> Any:
        out = concat_of_tiles(pieces, pads)
        if out is not None:
            return out
        padded = [fn(x, *extra, **kw) for (fn, extra, kw), x in zip(fallbacks, pieces)]
        return sum_fn(*padded, **sum_kwargs)

    options = replace(total.options, sums_inputs=False)
    labels = (*total.fused, *(p.node.op_type for p in pad_steps))
    return Step(
        fused, tuple(p.inputs[0] for p in pad_steps), total.outputs, {}, total.node, total.opset, options, labels
    )
