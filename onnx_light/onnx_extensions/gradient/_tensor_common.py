"""Helpers shared by the shape, indexing and reduction rules (not a rule module)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...onnx_core import TensorProto
from ...onnx_core.axes import axis_index
from ...onnx_core.gradient import GradContext
from ...onnx_core.helper import tensor_dtype_to_np_dtype
from ...onnx_core.numpy_helper import from_array

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "const_ints",
    "arg_ints",
    "axis_index",
    "zeros_of_shape",
    "dim_of",
    "merge_axes",
    "reshape_fill",
    "fill_shape",
    "index64",
    "positions",
]

INT64_MAX = int(np.iinfo(np.int64).max)
INT64_MIN = int(np.iinfo(np.int64).min)


def const_ints(ctx: GradContext, name: str) -> list[int] | None:
    """The value of an integer input known when the pass runs (initializer, Constant, folded shape).

    None when ``name`` is omitted or computed at run time.
    """
    if not name:
        return None
    value = ctx.value(name)
    if value is None:
        return None
    return [int(v) for v in np.asarray(value).reshape(-1)]


def arg_ints(ctx: GradContext, index: int, attr: str) -> tuple[str, list[int] | None]:
    """An integer argument given as input ``index`` or (older opsets) attribute ``attr``.

    Returns ``(name, values)``: the input name ("" when the argument is absent) and its
    value when known. An attribute is materialised as an int64 constant.
    """
    name = ctx.input(index)
    if name:
        return name, const_ints(ctx, name)
    values = ctx.attr(attr)
    if values is None:
        return "", None
    values = [int(v) for v in values]
    return ctx.ints(values), values


def pad_axes(ctx: GradContext, x: str, rank: int, axes: list[int], begins: list[int], ends: list[int]) -> str:
    """``Pad(x)`` by ``begins``/``ends`` on non-negative ``axes``, written as full-rank pads
    with no ``axes`` input: onnxruntime's transpose optimizer moves a Transpose across a Pad
    that has ``axes`` without permuting them (wrong shapes, seen on torch's exports)."""
    pads = [0] * (2 * rank)
    for a, b, e in zip(axes, begins, ends):
        pads[a], pads[rank + a] = b, e
    return ctx.op.Pad(x, ctx.ints(pads))


def zeros_of_shape(ctx: GradContext, shape: str, like: str) -> str:
    """``ConstantOfShape(shape)`` holding zeros of ``like``'s element type."""
    dtype = ctx.dtype(like)
    try:
        np_dtype = tensor_dtype_to_np_dtype(dtype) if dtype else None
    except (KeyError, ValueError, TypeError):
        np_dtype = None
    if np_dtype is None or np_dtype.kind != "f" or np_dtype.itemsize < 2:
        return ctx.op.CastLike(ctx.op.ConstantOfShape(shape), like)
    return ctx.op.ConstantOfShape(shape, value=from_array(np.zeros((1,), np_dtype)))


def dim_of(ctx: GradContext, name: str, axis: int) -> str:
    """A 1-D int64 holding dimension ``axis`` (non-negative) of ``name``."""
    shape = ctx.shape(name)
    if shape is not None and axis < len(shape) and isinstance(shape[axis], int):
        return ctx.ints([shape[axis]])
    return ctx.op.Shape(name, start=axis, end=axis + 1)


def merge_axes(ctx: GradContext, t: str, start: int, end: int | None = None, shape: Sequence[Any] | None = None) -> str:
    """``t`` (shaped ``shape``, default its inferred shape) with axes ``start..end-1`` merged
    into one, in a form defined on empty tensors.

    Reshape's -1 is ambiguous when another dim is 0 (an empty batch: ``[0, 0, -1]`` of a
    (0, C, H, W) tensor fits any last dim; onnxruntime refuses it). So the target is
    ``[0.., -1, tail..]`` only when every other dim is known and >= 1, ``[0.., P, tail..]``
    when the merged dims are static (P their product), else computed from ``Shape(t)``.
    """
    dims = list(ctx.require_shape(t) if shape is None else shape)
    end = len(dims) if end is None else end
    head, merged, tail = dims[:start], dims[start:end], dims[end:]
    if all(isinstance(d, int) for d in merged + tail):
        cells = int(np.prod(merged, dtype=np.int64))
        safe = cells > 0 and all(isinstance(d, int) and d >= 1 for d in head + tail)
        return str(ctx.op.Reshape(t, ctx.ints([0] * start + [-1 if safe else cells] + tail)))
    parts = [ctx.op.Shape(t, end=start)] if start else []
    parts.append(ctx.op.ReduceProd(ctx.op.Shape(t, start=start, end=end), keepdims=1))
    if tail:
        parts.append(ctx.op.Shape(t, start=end))
    return str(ctx.op.Reshape(t, ctx.op.Concat(*parts, axis=0)))


def reshape_fill(ctx: GradContext, t: str, target: Sequence[int], shape: Sequence[Any] | None = None) -> str:
    """``Reshape(t, target)``, ``target``'s 0s copying ``t``'s dims (shaped ``shape``, default
    its inferred shape) and its one -1 taking the cells left, in a form defined on empty
    tensors (see ``fill_shape``)."""
    return str(ctx.op.Reshape(t, fill_shape(ctx, t, target, shape)))


def fill_shape(ctx: GradContext, t: str | None, target: Sequence[int], shape: Sequence[Any] | None = None) -> str:
    """The shape input of ``reshape_fill``; ``t`` (None: not built yet, when every dim but
    the copied ones is static) is read only when that shape is computed at run time.

    The -1 is ambiguous when a copied dim is 0 (an empty batch; onnxruntime refuses it), so
    ``target`` stays as written only when every copied dim is known and >= 1; else the -1
    becomes its size, prod(dims not copied) / prod(target's other sizes): static when those
    dims are, else computed from ``Shape(t)``.
    """
    target = [int(v) for v in target]
    copied = [i for i, v in enumerate(target) if v == 0]
    sizes = int(np.prod([v for v in target if v > 0], dtype=np.int64))
    dims = (None if t is None else ctx.shape(t)) if shape is None else list(shape)
    if dims is not None and sizes > 0 and all(isinstance(dims[i], int) and dims[i] >= 1 for i in copied):
        return ctx.ints(target)
    fill = target.index(-1)
    if dims is not None:
        rest = [d for i, d in enumerate(dims) if i not in copied]
        if all(isinstance(d, int) for d in rest):
            return ctx.ints(target[:fill] + [int(np.prod(rest, dtype=np.int64)) // max(sizes, 1)] + target[fill + 1 :])
    if t is None:
        raise ValueError(f"fill_shape: the size of {target}'s -1 in {dims} is read from the tensor; pass it")
    k = len(copied)
    if copied != list(range(k)):  # not the leading dims (no caller): as written
        return ctx.ints(target)
    cells = ctx.op.ReduceProd(ctx.op.Shape(t, start=k), keepdims=1)
    # the copied dims from Shape(t), not 0s: onnxruntime's optimizer reads a Concat of
    # constants and one computed size as a -1 again (wrong at N = 0)
    parts = [ctx.op.Shape(t, end=k)] if k else []
    parts += [ctx.ints(target[k:fill])] if fill > k else []
    parts.append(ctx.op.Div(cells, ctx.ints([max(sizes, 1)])))
    if fill + 1 < len(target):
        parts.append(ctx.ints(target[fill + 1 :]))
    return str(ctx.op.Concat(*parts, axis=0))


def index64(ctx: GradContext, name: str) -> str:
    """``name`` (indices of int32 or int64) as int64: the index arithmetic rules emit (Add,
    Less, Concat with int64 constants) and ScatterND/GatherND take int64 only."""
    if ctx.dtype(name) == TensorProto.INT64:
        return name
    return str(ctx.op.Cast(name, to=TensorProto.INT64))


def positions(ctx: GradContext, name: str, axis: int) -> str:
    """``[0, 1, ..., n-1]`` (int64) for dimension ``axis`` of ``name``: a constant when n is
    known (no Range, whose forward rule a tangent graph would need), else ``Range`` at run time."""
    shape = ctx.shape(name)
    if shape is not None and isinstance(shape[axis], int):
        return ctx.ints(list(range(shape[axis])))
    n = ctx.op.Squeeze(ctx.op.Shape(name, start=axis, end=axis + 1), ctx.ints([0]))
    return ctx.op.Range(ctx.ints(0), n, ctx.ints(1))
