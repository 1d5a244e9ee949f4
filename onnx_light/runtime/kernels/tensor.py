"""Tensor creation, casting and joining kernels: Cast, Constant, Concat, Split, Pad, ..."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from onnx_light.runtime._registry import kernel
from onnx_light.runtime.kernels._axes import axes_index, axis_index
from onnx_light.runtime.kernels._dtypes import (
    BIT_PATTERN_TYPES,
    STRING,
    decode,
    encode,
    encode_like,
    np_dtype,
    onnx_type_of,
)

# ----------------------------------------------------------------------------- casting


def _parse_number(text: str, to_int: bool) -> Any:
    text = text.strip()
    if to_int:
        try:
            return int(text)
        except ValueError:
            return int(float(text))
    return float(text)  # float() already accepts INF, +INF, -inf and NaN in any case


def _format_number(value: Any) -> str:
    # The spelling onnxruntime uses: 8 significant digits, INF/-INF/NaN, bools as 1/0.
    if isinstance(value, (bool, np.bool_)):
        return "1" if value else "0"
    if isinstance(value, (float, np.floating)):
        if np.isnan(value):
            return "NaN"
        if np.isinf(value):
            return "INF" if value > 0 else "-INF"
        return f"{float(value):.8g}"
    return str(value)


def cast_array(x: np.ndarray, to: int, saturate: int = 1, round_mode: str = "up") -> np.ndarray:
    """Converts ``x`` to ONNX element type ``to`` following the Cast spec.

    Args:
        x: input array; bit-pattern types are recognised by their tagged dtype.
        to: target ONNX element type (``TensorProto.DataType``).
        saturate: float8/E8M0 targets: clamp out-of-range values instead of inf/NaN.
        round_mode: E8M0 target: ``"up"``, ``"down"`` or ``"nearest"``.

    Returns:
        The converted array.
    """
    x = np.asarray(x)
    if onnx_type_of(x) == STRING:
        target = np_dtype(to) if to not in BIT_PATTERN_TYPES else np.dtype(np.float64)
        to_int = target.kind in "iu"
        flat = [_parse_number(str(s), to_int) for s in x.reshape(-1)]
        parsed = np.array(flat, dtype=np.float64 if not to_int else np.int64).reshape(x.shape)
        return cast_array(parsed, to, saturate, round_mode)
    values = decode(x)
    if to == STRING:
        out = np.empty(x.shape, dtype=object)
        out.reshape(-1)[:] = [_format_number(v) for v in values.reshape(-1)]
        return out
    if to in BIT_PATTERN_TYPES:
        return encode(values, to, bool(saturate), round_mode)
    return values.astype(np_dtype(to))


def _cast_into(x: np.ndarray, to: int, out: np.ndarray | None) -> np.ndarray | None:
    """``x`` cast into ``out`` (a pool's buffer) when both are plain numbers and ``out`` has the
    result's dtype and shape (the same conversion loop as ``astype``), else None."""
    if out is None or x.__class__ is not np.ndarray or x.dtype.metadata or x.dtype.kind not in "biuf":
        return None
    if to in BIT_PATTERN_TYPES or to == STRING or out.shape != x.shape or not out.flags.c_contiguous:
        return None
    if out.dtype != np_dtype(to) or out.dtype.metadata:
        return None
    np.copyto(out, x, casting="unsafe")
    return out


@kernel("", "Cast", since=(6, 9, 13), writes_out=True)
def cast_6(x: np.ndarray, *, to: int, out: np.ndarray | None = None) -> np.ndarray:
    """Cast-6: element type conversion (``out``: a pool's buffer, see ``KernelOptions.writes_out``)."""
    into = _cast_into(x, to, out)
    return cast_array(x, to) if into is None else into


@kernel("", "Cast", since=(19, 21, 23), writes_out=True)
def cast_19(x: np.ndarray, *, to: int, saturate: int = 1, out: np.ndarray | None = None) -> np.ndarray:
    """Cast-19: adds ``saturate`` for float8 targets."""
    into = _cast_into(x, to, out)
    return cast_array(x, to, saturate) if into is None else into


@kernel("", "Cast", since=(24, 25, 28), writes_out=True)
def cast_24(
    x: np.ndarray, *, to: int, saturate: int = 1, round_mode: str = "up", out: np.ndarray | None = None
) -> np.ndarray:
    """Cast-24: adds ``round_mode`` for float8e8m0 targets."""
    into = _cast_into(x, to, out)
    return cast_array(x, to, saturate, round_mode) if into is None else into


@kernel("", "CastLike", since=15)
def cast_like_15(x: np.ndarray, target_type: np.ndarray) -> np.ndarray:
    """CastLike-15: Cast to the element type of ``target_type``."""
    return cast_array(x, onnx_type_of(np.asarray(target_type)))


@kernel("", "CastLike", since=(19, 21, 23))
def cast_like_19(x: np.ndarray, target_type: np.ndarray, *, saturate: int = 1) -> np.ndarray:
    """CastLike-19: adds ``saturate``."""
    return cast_array(x, onnx_type_of(np.asarray(target_type)), saturate)


@kernel("", "CastLike", since=(24, 25))
def cast_like_24(x: np.ndarray, target_type: np.ndarray, *, saturate: int = 1, round_mode: str = "up") -> np.ndarray:
    """CastLike-24: adds ``round_mode``."""
    return cast_array(x, onnx_type_of(np.asarray(target_type)), saturate, round_mode)


# ----------------------------------------------------------------------------- creation


@kernel("", "Constant", since=(1, 9))
def constant_1(*, value: np.ndarray) -> np.ndarray:
    """Constant-1: the tensor attribute ``value``."""
    return value


@kernel("", "Constant", since=(11, 12, 13, 19, 21, 23, 24, 25))
def constant(
    *,
    value: np.ndarray | None = None,
    sparse_value: Any = None,
    value_float: float | None = None,
    value_floats: list[float] | None = None,
    value_int: int | None = None,
    value_ints: list[int] | None = None,
    value_string: str | None = None,
    value_strings: list[str] | None = None,
) -> np.ndarray:
    """Constant-11/12: exactly one of the ``value*`` attributes becomes the output."""
    if value is not None:
        return value
    if value_float is not None:
        return np.array(value_float, dtype=np.float32)
    if value_floats is not None:
        return np.array(value_floats, dtype=np.float32)
    if value_int is not None:
        return np.array(value_int, dtype=np.int64)
    if value_ints is not None:
        return np.array(value_ints, dtype=np.int64)
    if value_string is not None:
        return np.array(value_string, dtype=object)
    if value_strings is not None:
        return np.array(value_strings, dtype=object)
    if isinstance(sparse_value, np.ndarray):  # the session densifies sparse_value
        return sparse_value
    if sparse_value is not None:
        raise NotImplementedError("Constant: sparse_value must arrive densified as an ndarray")
    raise ValueError("Constant: no value attribute is set")


@kernel("", "ConstantOfShape", since=(9, 20, 21, 23, 24, 25))
def constant_of_shape(shape: np.ndarray, *, value: np.ndarray | None = None) -> np.ndarray:
    """ConstantOfShape: a tensor of ``shape`` filled with ``value`` (float32 0 by default)."""
    fill = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    return np.full(tuple(int(d) for d in shape), fill[0], dtype=fill.dtype)


@kernel("", "EyeLike", since=(9, 22))
def eye_like(x: np.ndarray, *, dtype: int | None = None, k: int = 0) -> np.ndarray:
    """EyeLike: ones on diagonal ``k`` of a matrix shaped like ``x``."""
    eye = np.eye(x.shape[0], x.shape[1], k=k, dtype=np.float32)
    return encode_like(eye, x) if dtype is None else cast_array(eye, dtype)


@kernel("", "Identity", since=(1, 13, 14, 16, 19, 21, 23, 24, 25))
def identity(x: Any) -> Any:
    """Identity: the input itself (tensors, sequences and optionals alike)."""
    return x


def _range(start: np.ndarray, limit: np.ndarray, delta: np.ndarray, stash: bool) -> np.ndarray:
    # scalars per the spec, but function bodies (AffineGrid's) feed one-element vectors
    start, limit, delta = (np.asarray(v).reshape(-1)[:1].reshape(()) for v in (start, limit, delta))
    if start.dtype.kind in "iu" and onnx_type_of(start) not in BIT_PATTERN_TYPES:
        i0, i1, di = int(start), int(limit), int(delta)
        count = max(-((i0 - i1) // di), 0)  # ceil((i1 - i0) / di) in exact integer arithmetic
        return (i0 + di * np.arange(count, dtype=np.int64)).astype(start.dtype)
    s, lim, d = (float(decode(np.asarray(v))) for v in (start, limit, delta))
    n = max(math.ceil((lim - s) / d), 0)
    if stash or start.dtype.itemsize != 2:
        return encode_like(s + d * np.arange(n, dtype=np.float64), start)
    # No float stash: accumulate in the 16-bit type itself, rounding after every step.
    out, acc = np.empty(n, dtype=np.float32), np.float32(s)
    for i in range(n):
        out[i] = acc
        acc = decode(encode_like(np.array([acc + d], np.float32), start))[0]
    return encode_like(out, start)


@kernel("", "Range", since=11)
def range_11(start: np.ndarray, limit: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """Range-11: ``start + i * delta`` for ``i`` in ``[0, ceil((limit - start) / delta))``."""
    return _range(np.asarray(start), np.asarray(limit), np.asarray(delta), stash=True)


@kernel("", "Range", since=27)
def range_27(start: np.ndarray, limit: np.ndarray, delta: np.ndarray, *, stash_type: int = 1) -> np.ndarray:
    """Range-27: float16/bfloat16 compute in float32 when ``stash_type`` is 1."""
    return _range(np.asarray(start), np.asarray(limit), np.asarray(delta), stash=stash_type == 1)


@kernel("", "OneHot", since=(9, 11, 28))
def one_hot(indices: np.ndarray, depth: np.ndarray, values: np.ndarray, *, axis: int = -1) -> np.ndarray:
    """OneHot: ``values[1]`` where the new axis equals the index, ``values[0]`` elsewhere."""
    n = int(np.asarray(depth).reshape(-1)[0])
    idx = np.asarray(indices).astype(np.int64)
    idx = np.where(idx < 0, idx + n, idx)
    hot = np.moveaxis(idx[..., None] == np.arange(n), -1, axis if axis >= 0 else axis + idx.ndim + 1)
    return np.asarray(values).reshape(-1)[hot.astype(np.intp)]


@kernel("", "Trilu", since=14)
def trilu(x: np.ndarray, k: np.ndarray | None = None, *, upper: int = 1) -> np.ndarray:
    """Trilu: keeps the upper (or lower) triangle from diagonal ``k`` of the last two axes."""
    diag = 0 if k is None else int(np.asarray(k).reshape(-1)[0])
    ones = np.ones(x.shape[-2:], dtype=bool)
    keep = np.triu(ones, diag) if upper else np.tril(ones, diag)
    out = x.copy()
    out[..., ~keep] = 0
    return out


# ----------------------------------------------------------------------------- joining


def _concat_shape(*shapes: tuple[int | None, ...] | None, axis: int) -> tuple[int | None, ...] | None:
    """Concat's result shape: the sizes along ``axis`` added (None where one is not known)."""
    if not shapes or any(s is None or len(s) != len(shapes[0] or ()) for s in shapes) or not shapes[0]:
        return None
    rank = len(shapes[0])
    if not -rank <= axis < rank:
        return None
    axis %= rank
    out: list[int | None] = []
    for j in range(rank):
        dims = [s[j] for s in shapes if s is not None]
        if j == axis:
            out.append(None if None in dims else sum(d for d in dims if d is not None))
        else:
            known = {d for d in dims if d is not None}
            if len(known) > 1:
                return None
            out.append(known.pop() if known else None)
    return tuple(out)


@kernel("", "Concat", since=(4, 11, 13), returns_one=True, fresh_output=True, float_shape=_concat_shape)
def concat(*inputs: np.ndarray, axis: int) -> np.ndarray:
    """Concat: joins the inputs along ``axis``."""
    return np.concatenate(inputs, axis=axis).view(inputs[0].dtype)


def _split(x: np.ndarray, sizes: list[int] | None, axis: int, n: int) -> tuple[np.ndarray, ...]:
    if sizes is None:
        chunk = -(-x.shape[axis] // n)
        sizes = [chunk] * (n - 1) + [x.shape[axis] - chunk * (n - 1)]
    # basic slicing (views, as np.split gives) without np.split's per-call overhead (~20 us):
    # the reverse Scan body of a recurrent gradient runs a Split per step
    axis = axis_index(axis, x.ndim) if x.ndim else axis
    if sum(sizes) != x.shape[axis] or min(sizes, default=0) < 0:
        raise ValueError(f"Split: sizes {sizes} do not add up to dimension {axis} of shape {list(x.shape)}")
    lead = (slice(None),) * axis
    out, start = [], 0
    for size in sizes:
        out.append(x[(*lead, slice(start, start + size))])
        start += size
    return tuple(out)


def _split_shapes(
    x: tuple[int | None, ...],
    split: Any = None,
    *,
    axis: int = 0,
    num_outputs: int | None = None,
    _num_outputs: int = 1,
) -> list[tuple[int | None, ...]] | None:
    """The shapes of Split's outputs (``split``: the sizes, an attribute list or the constant
    input's value); None when they are not certain (the kernel then raises or decides)."""
    n = num_outputs or _num_outputs
    if not x or not -len(x) <= axis < len(x):
        return None
    axis %= len(x)
    dim = x[axis]
    if split is None:
        if dim is None or n < 1:
            return None
        chunk = -(-dim // n)
        sizes = [chunk] * (n - 1) + [dim - chunk * (n - 1)]
    else:
        sizes = [int(v) for v in np.asarray(split).reshape(-1)]
    if len(sizes) != _num_outputs or min(sizes, default=0) < 0 or (dim is not None and sum(sizes) != dim):
        return None
    return [(*x[:axis], size, *x[axis + 1 :]) for size in sizes]


def _equal_parts(x: np.ndarray, axis: int, n: int) -> list[int]:
    """Split-2/11/13 without sizes: ``n`` equal parts (Split-18's ``num_outputs`` allows a smaller last one)."""
    dim = x.shape[axis_index(axis, x.ndim)]
    if n <= 0 or dim % n:
        raise ValueError(
            f"Split: dimension {axis} of shape {list(x.shape)} does not split into {n} equal parts; "
            "give the sizes (the split input or attribute)"
        )
    return [dim // n] * n


@kernel("", "Split", since=(2, 11), float_shape=_split_shapes)
def split_2(
    x: np.ndarray, *, axis: int = 0, split: list[int] | None = None, _num_outputs: int = 1
) -> tuple[np.ndarray, ...]:
    """Split-2: sizes from the ``split`` attribute, else equal parts."""
    return _split(x, split if split else _equal_parts(x, axis, _num_outputs), axis, _num_outputs)


@kernel("", "Split", since=13, float_shape=_split_shapes, shape_values=(1,))
def split_13(
    x: np.ndarray, split: np.ndarray | None = None, *, axis: int = 0, _num_outputs: int = 1
) -> tuple[np.ndarray, ...]:
    """Split-13: sizes from the optional ``split`` input, else equal parts."""
    sizes = _equal_parts(x, axis, _num_outputs) if split is None else [int(s) for s in split]
    return _split(x, sizes, axis, _num_outputs)


@kernel("", "Split", since=18, float_shape=_split_shapes, shape_values=(1,))
def split_18(
    x: np.ndarray,
    split: np.ndarray | None = None,
    *,
    axis: int = 0,
    num_outputs: int | None = None,
    _num_outputs: int = 1,
) -> tuple[np.ndarray, ...]:
    """Split-18: ``split`` input or ``num_outputs`` parts, the last one possibly smaller."""
    sizes = None if split is None else [int(s) for s in split]
    return _split(x, sizes, axis, num_outputs or _num_outputs)


@kernel("", "Tile", since=(6, 13))
def tile(x: np.ndarray, repeats: np.ndarray) -> np.ndarray:
    """Tile: repeats ``x`` ``repeats[i]`` times along axis ``i``."""
    return np.tile(x, [int(r) for r in repeats])


@kernel("", "Expand", since=(8, 13), writes_out=True)
def expand(x: np.ndarray, shape: np.ndarray, *, out: np.ndarray | None = None) -> np.ndarray:
    """Expand: broadcasts ``x`` against ``shape`` (bidirectionally); ``out``: a pool's buffer
    taken when it has the result's dtype and shape (see ``KernelOptions.writes_out``)."""
    target = np.broadcast_shapes(x.shape, tuple(int(d) for d in shape))
    if out is None or out.shape != target or out.dtype != x.dtype or x.dtype.metadata:
        out = np.empty(target, dtype=x.dtype)
    np.copyto(out, x)  # 6x faster than copying a broadcast view (16x64x1x1 -> 16x64x29x29)
    return out


def _pad(x: np.ndarray, pads: Any, mode: str, value: Any, axes: Any = None) -> np.ndarray:
    rank = x.ndim
    pads = [int(p) for p in pads]
    axes = list(range(rank)) if axes is None else axes_index(axes, rank)
    before, after = [0] * rank, [0] * rank
    for i, a in enumerate(axes):
        before[a], after[a] = pads[i], pads[i + len(axes)]
    # Negative pads crop; crop first, then pad what remains.
    x = x[tuple(slice(max(-b, 0), n - max(-e, 0)) for n, b, e in zip(x.shape, before, after))]
    width = [(max(b, 0), max(e, 0)) for b, e in zip(before, after)]
    if mode == "constant":
        return np.pad(x, width, mode="constant", constant_values=value)
    if mode == "reflect":
        return np.pad(x, width, mode="reflect")
    if mode == "edge":
        return np.pad(x, width, mode="edge")
    if mode == "wrap":
        return np.pad(x, width, mode="wrap")
    raise ValueError(f"Pad: unknown mode {mode!r}")


def _zero_pads(pads: Any, value: Any, mode: str) -> list[int] | None:
    """``pads`` when a constant Pad with them fills with zeros and crops nothing, else None."""
    value = np.asarray(value)
    if mode != "constant" or value.size != 1 or value.dtype.kind not in "biuf" or value.reshape(()) != 0:
        return None
    out = [int(p) for p in np.asarray(pads).reshape(-1)]
    return out if all(p >= 0 for p in out) else None


def _zero_pad_2(*, pads: list[int], mode: str = "constant", value: float = 0.0) -> list[int] | None:
    return _zero_pads(pads, value, mode)


def _zero_pad_11(
    pads: np.ndarray,
    constant_value: np.ndarray | None = None,
    axes: np.ndarray | None = None,
    *,
    mode: str = "constant",
) -> list[int] | None:
    return None if axes is not None else _zero_pads(pads, 0 if constant_value is None else constant_value, mode)


@kernel("", "Pad", since=2, zero_pad=_zero_pad_2)
def pad_2(x: np.ndarray, *, pads: list[int], mode: str = "constant", value: float = 0.0) -> np.ndarray:
    """Pad-2: ``pads`` and the fill ``value`` as attributes."""
    return _pad(x, pads, mode, value)


@kernel("", "Pad", since=(11, 13), zero_pad=_zero_pad_11)
def pad_11(
    x: np.ndarray, pads: np.ndarray, constant_value: np.ndarray | None = None, *, mode: str = "constant"
) -> np.ndarray:
    """Pad-11: ``pads`` and the optional fill value as inputs."""
    return _pad(x, pads, mode, 0 if constant_value is None else constant_value[()])


@kernel("", "Pad", since=(18, 19, 21, 23, 24, 25), zero_pad=_zero_pad_11)
def pad_18(
    x: np.ndarray,
    pads: np.ndarray,
    constant_value: np.ndarray | None = None,
    axes: np.ndarray | None = None,
    *,
    mode: str = "constant",
) -> np.ndarray:
    """Pad-18: adds the optional ``axes`` input that ``pads`` refers to."""
    return _pad(x, pads, mode, 0 if constant_value is None else constant_value[()], axes)
