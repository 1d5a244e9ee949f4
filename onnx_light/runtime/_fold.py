"""Plan-time folding: what depends only on constants is computed once, when the plan is built.

Two rewrites of a plan's steps (``runtime/_plan.py`` runs them unless the session is built
with ``optimize=False`` or traces nodes):

* :func:`fold_constant_step`: a deterministic step whose inputs are all constants runs at
  compile time and its outputs become constants (shape arithmetic of torch exports, weight
  transposes, ``Constant`` nodes);
* :func:`fold_affine`: a per-channel affine step (inference BatchNormalization, declared by
  its kernel's ``channel_affine``) whose input comes from a kernel that can absorb it
  (``absorb_affine``: Conv, Gemm) and is read by nothing else disappears into that kernel's
  weights and bias; one that cannot be absorbed runs as ``x * s + t`` with ``s`` and ``t``
  computed once.

The planner knows no op here: kernels declare what may be folded (``KernelOptions``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..onnx_core.ops import is_random, traits
from ._registry import NO_OPTIONS

if TYPE_CHECKING:  # _plan imports this module
    from ._plan import Step

__all__ = ["fold_constant_step", "fold_affine", "FOLD_LIMIT"]

#: folded outputs larger than this many elements stay steps (memory over time)
FOLD_LIMIT = 1 << 22


def _frozen(value: Any) -> Any:
    """``value`` as an array nothing can write: a writeable array is copied and the copy made
    read-only (a read-only view of it would still see writes to it, and whatever else holds it
    may write). Kernels trust such constants never to change (``kernels/conv.py`` keeps the
    Winograd transform and the prepared native call of immutable weights only)."""
    if isinstance(value, np.ndarray) and value.flags.writeable:
        value = value.copy()
        value.flags.writeable = False
    return value


def fold_constant_step(step: Step, constants: dict[int, Any]) -> bool:
    """Runs ``step`` now when all its inputs are constants; its outputs join ``constants``.

    Returns whether it did. Random ops, ops with subgraphs, steps whose kernel raises (the
    run reports that error, as the unoptimised plan would) and outputs that are not arrays
    or exceed :data:`FOLD_LIMIT` elements are left to run.
    """
    node = step.node
    if any(s != 0 and s not in constants for s in step.inputs) or 1 in step.outputs:
        return False
    if is_random(node) or traits(node.domain, node.op_type).subgraphs or "_captured" in step.kwargs:
        return False
    try:
        with np.errstate(all="ignore"):
            result = step.fn(*[constants.get(s) for s in step.inputs], **step.kwargs)
    except Exception:  # noqa: BLE001  (reported by the run, with the node, as without folding)
        return False
    outs = result if type(result) is tuple else (result,)
    if len(outs) < len(step.outputs):
        return False
    outs = outs[: len(step.outputs)]
    if not all(isinstance(o, np.ndarray) and o.size <= FOLD_LIMIT for o in outs):
        return False
    for s, o in zip(step.outputs, outs):
        constants[s] = _frozen(o)
    return True


def _apply_affine(x: np.ndarray, scale: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """``x * scale + shift`` with ``scale``, ``shift`` shaped to broadcast along axis 1."""
    y = np.multiply(x, scale)
    return np.add(y, shift, out=y if y.dtype == x.dtype else None).astype(x.dtype, copy=False)


def fold_affine(
    steps: list[Step], constants: dict[int, Any], keep: set[int], new_slot: Callable[[], int]
) -> list[Step]:
    """Folds per-channel affine steps into their producers, or precomputes their ``s``, ``t``.

    Args:
        steps: the plan's steps, in order.
        constants: slot -> constant value; gains the folded weights.
        keep: slots that must stay visible (graph outputs, ...): never folded away.
        new_slot: allocates a fresh slot.
    """
    from ._plan import Step

    producer = {s: i for i, step in enumerate(steps) for s in step.outputs}
    readers: dict[int, int] = {}
    for step in steps:
        for s in set(step.inputs):
            readers[s] = readers.get(s, 0) + 1
    out = list(steps)
    dropped: set[int] = set()
    for i, step in enumerate(steps):
        affine = step.options.channel_affine
        if affine is None or len(step.outputs) != 1 or not step.inputs:
            continue
        x, params = step.inputs[0], step.inputs[1:]
        if any(p not in constants for p in params):
            continue
        st = affine(*[constants[p] for p in params], **step.kwargs)
        if st is None:
            continue
        scale, shift = st
        j = producer.get(x)
        if j is not None and j not in dropped and x not in keep and readers.get(x) == 1:
            merged = _absorb(out[j], scale, shift, step, constants, new_slot)
            if merged is not None:
                out[j] = merged
                dropped.add(i)
                continue
        # not absorbed: x * s + t with s, t shaped (C, 1, ...) for x's rank (known at run time)
        ss, ts = new_slot(), new_slot()
        constants[ss], constants[ts] = scale, shift
        out[i] = Step(_affine_kernel, (x, ss, ts), step.outputs, {}, step.node, step.opset, NO_OPTIONS, step.fused)
    return [s for i, s in enumerate(out) if i not in dropped]


def _affine_kernel(x: np.ndarray, scale: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """Inference BatchNormalization with its scale and shift computed at plan time (float64)."""
    shape = (-1,) + (1,) * (x.ndim - 2)
    return _apply_affine(x, scale.astype(x.dtype).reshape(shape), shift.astype(x.dtype).reshape(shape))


def _absorb(
    prod: Step, scale: np.ndarray, shift: np.ndarray, step: Step, constants: dict[int, Any], new_slot: Callable[[], int]
) -> Step | None:
    """``prod`` with ``x * scale + shift`` folded into its weights, writing ``step``'s output."""
    from ._plan import Step

    absorb = prod.options.absorb_affine
    if absorb is None or len(prod.outputs) != 1 or len(prod.inputs) < 2:
        return None
    w = prod.inputs[1]
    b = prod.inputs[2] if len(prod.inputs) > 2 else 0
    if w not in constants or (b != 0 and b not in constants):
        return None
    res = absorb(constants[w], constants.get(b) if b else None, scale, shift, **prod.kwargs)
    if res is None:
        return None
    w2, b2, kwargs = res
    ws, bs = new_slot(), new_slot()
    constants[ws], constants[bs] = _frozen(w2), _frozen(b2)
    inputs = (prod.inputs[0], ws, bs, *prod.inputs[3:])
    fused = (*prod.fused, step.node.op_type, *step.fused)
    return Step(prod.fn, inputs, step.outputs, kwargs, prod.node, prod.opset, prod.options, fused)
