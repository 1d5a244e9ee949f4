"""Sequence and optional ops: a sequence is a Python list of arrays, an empty optional is None.

These are the values ``InferenceSession.run`` takes and returns for ``seq(...)`` and
``optional(...)`` types, as onnxruntime does. Kernels never modify a list they are given:
SequenceInsert and SequenceErase return new lists, so a sequence fed by the caller or
read by several nodes stays as it was.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._registry import kernel
from ._axes import axis_index
from .control_flow import _run, _split_scope


def _position(position: np.ndarray | None, length: int, default: int, upper: int, op: str) -> int:
    """A sequence position, negative counting from the back, checked against ``[-length, upper]``."""
    if position is None:
        return default
    pos = int(np.asarray(position).reshape(-1)[0])
    if not -length <= pos <= upper:
        raise ValueError(f"{op}: position {pos} is out of range [{-length}, {upper}] for a sequence of {length}")
    return pos + length if pos < 0 else pos


def _same_dtype(tensors: list[np.ndarray], op: str) -> None:
    """A sequence holds one element type: numpy would silently promote a mix when concatenating."""
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) > 1:
        raise ValueError(f"{op}: a sequence's tensors must share one type, got {sorted(map(str, dtypes))}")


@kernel("", "SequenceConstruct", since=11)
def sequence_construct(*inputs: np.ndarray) -> list[np.ndarray]:
    """SequenceConstruct: the inputs, in order, as one sequence."""
    _same_dtype(list(inputs), "SequenceConstruct")
    return list(inputs)


@kernel("", "SequenceEmpty", since=11)
def sequence_empty(*, dtype: int = 1) -> list[np.ndarray]:
    """SequenceEmpty: a sequence with no tensors (``dtype`` is its element type)."""
    return []


@kernel("", "SequenceAt", since=11)
def sequence_at(seq: list[np.ndarray], position: np.ndarray) -> np.ndarray:
    """SequenceAt: the tensor at ``position`` (negative counts from the back)."""
    n = len(seq)
    return seq[_position(position, n, 0, n - 1, "SequenceAt")]


@kernel("", "SequenceInsert", since=11)
def sequence_insert(seq: list[np.ndarray], tensor: np.ndarray, position: np.ndarray | None = None) -> list[np.ndarray]:
    """SequenceInsert: a new sequence with ``tensor`` inserted before ``position`` (default: at the back)."""
    n = len(seq)
    if seq:
        _same_dtype([seq[0], tensor], "SequenceInsert")
    pos = _position(position, n, n, n, "SequenceInsert")
    return [*seq[:pos], tensor, *seq[pos:]]


@kernel("", "SequenceErase", since=11)
def sequence_erase(seq: list[np.ndarray], position: np.ndarray | None = None) -> list[np.ndarray]:
    """SequenceErase: a new sequence without the tensor at ``position`` (default: the last)."""
    n = len(seq)
    if n == 0:
        raise ValueError("SequenceErase: the sequence is empty")
    pos = _position(position, n, n - 1, n - 1, "SequenceErase")
    return [*seq[:pos], *seq[pos + 1 :]]


@kernel("", "SequenceLength", since=11)
def sequence_length(seq: list[np.ndarray]) -> np.ndarray:
    """SequenceLength: the number of tensors, as an int64 scalar."""
    return np.array(len(seq), dtype=np.int64)


@kernel("", "SplitToSequence", since=(11, 24))
def split_to_sequence(
    x: np.ndarray, split: np.ndarray | None = None, *, axis: int = 0, keepdims: int = 1
) -> list[np.ndarray]:
    """SplitToSequence: chunks of ``split`` along ``axis`` (a scalar size, or one size per chunk).

    Without ``split`` every chunk has size 1, and ``keepdims=0`` drops the split axis.
    """
    axis = axis_index(axis, x.ndim)
    dim = x.shape[axis]
    if split is None:
        parts = [np.take(x, [i], axis=axis) for i in range(dim)]
        return parts if keepdims else [np.squeeze(p, axis=axis) for p in parts]
    sizes = np.asarray(split).astype(np.int64)
    if sizes.ndim == 0:
        step = int(sizes)
        if step <= 0:
            raise ValueError(f"SplitToSequence: split must be positive, got {step}")
        bounds = list(range(step, dim, step))
    else:
        if (sizes < 0).any() or int(sizes.sum()) != dim:
            raise ValueError(f"SplitToSequence: split {sizes.tolist()} must be non-negative and sum to {dim}")
        bounds = np.cumsum(sizes)[:-1].tolist()
    return list(np.split(x, bounds, axis=axis))


@kernel("", "ConcatFromSequence", since=11)
def concat_from_sequence(seq: list[np.ndarray], *, axis: int, new_axis: int = 0) -> np.ndarray:
    """ConcatFromSequence: the tensors concatenated along ``axis``, or stacked on a new one."""
    if not seq:
        raise ValueError("ConcatFromSequence: the sequence is empty")
    if new_axis:
        out = np.stack(seq, axis=axis_index(axis, seq[0].ndim + 1))
    else:
        out = np.concatenate(seq, axis=axis_index(axis, seq[0].ndim))
    # numpy drops a bit-pattern dtype's tag (bfloat16 as tagged uint16); the elements keep it
    return out.view(seq[0].dtype) if out.dtype == seq[0].dtype else out


@kernel("", "SequenceMap", since=17)
def sequence_map(*args: Any, body: Any, _captured: tuple[str, ...] = ()) -> tuple[list[Any], ...]:
    """SequenceMap: ``body`` applied to the i-th element of each sequence input (tensors whole)."""
    own, scope = _split_scope(args, _captured)
    if not isinstance(own[0], list):
        raise ValueError(f"SequenceMap: the first input must be a sequence, got {type(own[0]).__name__}")
    n = len(own[0])
    for k, v in enumerate(own[1:], start=1):
        if isinstance(v, list) and len(v) != n:
            raise ValueError(f"SequenceMap: input {k} holds {len(v)} tensors, the first sequence {n}")
    results: list[list[Any]] = [[] for _ in body.output_slots]
    for i in range(n):
        feeds = [v[i] if isinstance(v, list) else v for v in own]
        for acc, out in zip(results, _run(body, feeds, scope)):
            acc.append(out)
    return tuple(results)


@kernel("", "Optional", since=(15, 28))
def optional(value: Any = None, *, type: Any = None) -> Any:
    """Optional: the input as an optional value, or an empty optional (None) of ``type``."""
    if value is None and type is None:
        raise ValueError("Optional: without an input the 'type' attribute is required")
    return value


@kernel("", "OptionalHasElement", since=(15, 18, 28))
def optional_has_element(value: Any = None) -> np.ndarray:
    """OptionalHasElement: whether the input holds a value (an omitted input holds none)."""
    return np.array(value is not None)


@kernel("", "OptionalGetElement", since=(15, 18, 28))
def optional_get_element(value: Any) -> Any:
    """OptionalGetElement: the value an optional holds (a tensor or sequence passes through)."""
    if value is None:
        raise ValueError("OptionalGetElement: the optional is empty; test it with OptionalHasElement first")
    return value
