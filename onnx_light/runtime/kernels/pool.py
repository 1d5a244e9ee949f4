"""Pooling: MaxPool, AveragePool, LpPool and their global forms.

Every windowed pool loops over kernel offsets (``prod(kernel_shape)`` whole-array
steps), never over output pixels.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from onnx_light.onnx_core.ops import window
from onnx_light.runtime._native import max_pool2d, max_pool2d_f32, mean_rows_f32
from onnx_light.runtime._registry import kernel
from onnx_light.runtime.kernels.conv import kernel_offsets, pad_spatial


class _Geometry:
    """Resolved window geometry of one pooling call."""

    def __init__(
        self,
        in_shape: Sequence[int],
        kernel_shape: Sequence[int],
        strides: Sequence[int] | None,
        dilations: Sequence[int] | None,
        pads: Sequence[int] | None,
        auto_pad: str,
        ceil_mode: int,
    ) -> None:
        self.window = geo = window(in_shape, kernel_shape, strides, dilations, pads, auto_pad, bool(ceil_mode))
        self.kernel, self.strides, self.dilations = geo.kernel, geo.strides, geo.dilations
        self.begin, self.end, self.out = geo.begin, geo.end, geo.out
        for i, (n, k, d, b, e, o) in enumerate(
            zip(in_shape, self.kernel, self.dilations, self.begin, self.end, self.out)
        ):
            if o < 0:
                raise ValueError(
                    f"the window spans {(k - 1) * d + 1} cells on spatial axis {i} (kernel {k}, dilation {d}) but"
                    f" the padded input has {n + b + e} (size {n}, pads {b} + {e}): use a smaller kernel or"
                    " dilation, or more padding"
                )

    def padded(self, x: np.ndarray, value: float) -> np.ndarray:
        """``x`` padded far enough that every (ceil-mode) window is in range."""
        end = [
            max(e, (o - 1) * s + (k - 1) * d + 1 - size - b)
            for size, k, s, d, b, e, o in zip(
                x.shape[2:],
                self.kernel,
                self.strides,
                self.dilations,
                self.begin,
                self.end,
                self.out,
            )
        ]
        return pad_spatial(x, self.begin, end, value)

    def offsets(self):  # noqa: ANN201 - an iterator of (offset, slices)
        return kernel_offsets(self.kernel, self.strides, self.dilations, self.out)

    def counts(self, in_shape: Sequence[int], include_pad: bool) -> np.ndarray:
        """Cells each window covers inside the input (or inside input + pads)."""
        return self.window.counts(include_pad)


#: resolved geometries by input shape and attributes (a session's pooling nodes see the same
#: ones every run: resolving one costs more than a small pool itself); at most _GEOMETRIES_KEPT
_GEOMETRIES: dict[tuple[Any, ...], _Geometry] = {}
_GEOMETRIES_KEPT = 256


def _as_key(v: Sequence[int] | None) -> tuple[int, ...] | None:
    return None if v is None else tuple(v)


def _geometry(
    in_shape: tuple[int, ...],
    kernel_shape: Sequence[int],
    strides: Sequence[int] | None,
    dilations: Sequence[int] | None,
    pads: Sequence[int] | None,
    auto_pad: str,
    ceil_mode: int,
) -> _Geometry:
    """:class:`_Geometry` of one call, from the cache of resolved ones."""
    key = (in_shape, tuple(kernel_shape), _as_key(strides), _as_key(dilations), _as_key(pads), auto_pad, ceil_mode)
    geo = _GEOMETRIES.get(key)
    if geo is None:
        geo = _Geometry(in_shape, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
        if len(_GEOMETRIES) >= _GEOMETRIES_KEPT:
            _GEOMETRIES.clear()
        _GEOMETRIES[key] = geo
    return geo


def _lowest(dtype: np.dtype) -> float:
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


#: the dtypes of the native 2-D max pooling loop (``src/native.cpp``; a numpy twin without it)
_NATIVE_2D = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int8), np.dtype(np.uint8))


def _max_pool(
    x: np.ndarray,
    geo: _Geometry,
    storage_order: int,
    with_indices: bool,
    out: tuple[np.ndarray | None, np.ndarray | None],
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """MaxPool (see :func:`max_pool`); ``out``: the buffer pool's arrays for Y and Indices (or None)."""
    if x.ndim == 4 and x.dtype == np.float32 and not with_indices:
        # separable and without a padded copy (src/pool.cpp, or its numpy twin): kh + kw taps
        # per output instead of kh * kw (3x3/2 on 64x112x112: 0.6 ms instead of 6 ms natively)
        (kh, kw), (sh, sw), (dh, dw), (oh, ow) = geo.kernel, geo.strides, geo.dilations, geo.out
        return max_pool2d_f32(x, kh, kw, sh, sw, dh, dw, oh, ow, geo.begin[0], geo.begin[1], out[0])
    xp = geo.padded(x, _lowest(x.dtype))
    if x.ndim == 4 and x.dtype in _NATIVE_2D and (with_indices or geo.strides[1] > 1 or x.dtype.kind != "f"):
        # native when built (a numpy twin otherwise): the index bookkeeping is a byte loop, and
        # column-strided windows read poorly as numpy views (2-wide stride-2 ones are vectorised:
        # 0.48 vs 2.9 ms on 16x64x64x64 float32). Column stride 1 stays with numpy's maximum over
        # whole taps (1.1 vs 2.8 ms for 2x2/1 on 16x64x32x32).
        (kh, kw), (sh, sw), (dh, dw), (oh, ow) = geo.kernel, geo.strides, geo.dilations, geo.out
        y2, idx2 = max_pool2d(
            xp,
            kh,
            kw,
            sh,
            sw,
            dh,
            dw,
            oh,
            ow,
            geo.begin[0],
            geo.begin[1],
            *x.shape[2:],
            storage_order,
            with_indices,
            out=out[0],
            indices_out=out[1],
        )
        return y2 if idx2 is None else (y2, idx2)
    return _max_pool_taps(x, xp, geo, storage_order, with_indices)


def _max_pool_taps(
    x: np.ndarray, xp: np.ndarray, geo: _Geometry, storage_order: int, with_indices: bool
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """MaxPool over whole-array taps of the padded input ``xp`` (any rank and dtype).

    Only the input's cells count for the indices: a pad (the lowest value) gives way to the first
    input cell, so a window whose cells all equal the pad value reports its first cell; a window
    with no input cell gives the dtype's lowest value and the index of position -1 on every
    axis, as onnxruntime does."""
    padded = xp.shape != x.shape
    lead = (slice(None), slice(None))
    y: np.ndarray | None = None
    idx: np.ndarray | None = None
    inside: np.ndarray | None = None  # whether idx is a cell of the input (not a pad)
    for k, sl in geo.offsets():
        tap = xp[(*lead, *sl)]
        if y is None:
            y = tap.copy()
            if with_indices:
                idx = np.empty(y.shape, dtype=np.int64)
                idx[...] = _spatial_index(geo, k, x.shape[2:], storage_order)
                inside = np.broadcast_to(_in_input(geo, k, x.shape[2:]), y.shape).copy() if padded else None
            continue
        if idx is not None:  # the first maximum in kernel order wins ties
            take = tap > y
            if inside is not None:  # a pad (the lowest value) gives way to the first input cell
                take |= ~inside & _in_input(geo, k, x.shape[2:])
                inside |= take
            np.copyto(idx, _spatial_index(geo, k, x.shape[2:], storage_order), where=take)
        np.maximum(y, tap, out=y)
    assert y is not None
    empty = _no_input_cell(geo, x.shape[2:]) if padded else None
    if empty is not None:
        y[..., empty] = np.finfo(y.dtype).min if y.dtype.kind == "f" else np.iinfo(y.dtype).min
    if idx is None:
        return y
    if empty is not None:
        idx[..., empty] = _spatial_index(geo, None, x.shape[2:], storage_order).item()
    n, c = x.shape[:2]
    planes = np.arange(n * c, dtype=np.int64).reshape((n, c) + (1,) * (x.ndim - 2))
    idx += planes * int(np.prod(x.shape[2:]))
    return y, idx


def _no_input_cell(geo: _Geometry, spatial: Sequence[int]) -> np.ndarray | None:
    """Per output position, whether its window holds no input cell; None when every window does."""
    nd = len(spatial)
    empty = np.zeros((1,) * nd, dtype=bool)
    for i in range(nd):
        pos = np.arange(geo.out[i])[:, None] * geo.strides[i] + np.arange(geo.kernel[i]) * geo.dilations[i]
        pos -= geo.begin[i]
        none = ~((pos >= 0) & (pos < spatial[i])).any(axis=1)
        empty = empty | none.reshape((1,) * i + (-1,) + (1,) * (nd - 1 - i))
    return empty if empty.any() else None


def _in_input(geo: _Geometry, k: Sequence[int], spatial: Sequence[int]) -> np.ndarray:
    """Per output, whether the cell kernel offset ``k`` reads is inside the input (not a pad)."""
    nd = len(spatial)
    inside = np.ones((1,) * nd, dtype=bool)
    for i in range(nd):
        pos = np.arange(geo.out[i]) * geo.strides[i] + k[i] * geo.dilations[i] - geo.begin[i]
        inside = inside & ((pos >= 0) & (pos < spatial[i])).reshape((1,) * i + (-1,) + (1,) * (nd - 1 - i))
    return inside


def _spatial_index(geo: _Geometry, k: Sequence[int] | None, spatial: Sequence[int], storage_order: int) -> np.ndarray:
    """Flat index within one (n, c) plane of the cell kernel offset ``k`` reads, per output
    (``k`` None: of position -1 on every axis, 0-d).

    Row-major for ``storage_order`` 0, column-major for 1.
    """
    nd = len(spatial)
    flat = np.zeros((1,) * nd, dtype=np.int64)
    step = 1
    for i in range(nd) if storage_order else range(nd - 1, -1, -1):
        if k is None:
            flat = flat - step
            step *= spatial[i]
            continue
        pos = np.arange(geo.out[i]) * geo.strides[i] + k[i] * geo.dilations[i] - geo.begin[i]
        flat = flat + pos.reshape((-1,) + (1,) * (nd - 1 - i)) * step
        step *= spatial[i]
    return flat


def _accumulator(dtype: np.dtype) -> np.dtype:
    """float32 for float16 sums (a float16 sum of 2500 values of 100 is inf; their mean is 100),
    else the input's own type."""
    return np.dtype(np.float32) if dtype == np.float16 else dtype


@kernel("", "MaxPool", since=(1, 8, 10, 11, 12, 22), writes_out=True)
def max_pool(
    x: np.ndarray,
    *,
    kernel_shape: list[int],
    auto_pad: str = "NOTSET",
    ceil_mode: int = 0,
    dilations: list[int] | None = None,
    pads: list[int] | None = None,
    storage_order: int = 0,
    strides: list[int] | None = None,
    _num_outputs: int = 1,
    out: np.ndarray | tuple[np.ndarray | None, ...] | None = None,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Max over each window; with a second output, the flat input index of each max.

    ``out``: the buffer pool's array for Y, or with two outputs a tuple (Y's, Indices'), each
    None or taken when it is exactly the result's dtype and shape (``KernelOptions.writes_out``).
    """
    geo = _geometry(x.shape[2:], kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    lent: tuple[np.ndarray | None, np.ndarray | None] = (out, None) if not isinstance(out, tuple) else (None, None)
    if isinstance(out, tuple) and out:
        lent = (out[0], out[1] if len(out) > 1 else None)
    return _max_pool(x, geo, storage_order, _num_outputs > 1, lent)


@kernel("", "AveragePool", since=(7, 10, 11, 19, 22))
def average_pool(
    x: np.ndarray,
    *,
    kernel_shape: list[int],
    auto_pad: str = "NOTSET",
    ceil_mode: int = 0,
    count_include_pad: int = 0,
    dilations: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> np.ndarray:
    """Mean over each window; pads count only with ``count_include_pad``."""
    geo = _geometry(x.shape[2:], kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    xp = geo.padded(x, 0)
    acc = _accumulator(x.dtype)
    y = np.zeros((*x.shape[:2], *geo.out), dtype=acc)
    for _, sl in geo.offsets():
        y += xp[(slice(None), slice(None), *sl)]
    y /= geo.counts(x.shape[2:], bool(count_include_pad)).astype(acc)
    return y.astype(x.dtype, copy=False)


@kernel("", "LpPool", since=(2, 11, 18, 22))
def lp_pool(
    x: np.ndarray,
    *,
    kernel_shape: list[int],
    auto_pad: str = "NOTSET",
    ceil_mode: int = 0,
    dilations: list[int] | None = None,
    p: int = 2,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> np.ndarray:
    """``(sum |x| ** p) ** (1 / p)`` over each window; pads contribute zero."""
    geo = _geometry(x.shape[2:], kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    xp = geo.padded(np.abs(x) ** p, 0)
    y = np.zeros((*x.shape[:2], *geo.out), dtype=x.dtype)
    for _, sl in geo.offsets():
        y += xp[(slice(None), slice(None), *sl)]
    return (y ** (1.0 / p)).astype(x.dtype, copy=False)


@kernel("", "GlobalAveragePool", since=(1, 22))
def global_average_pool(x: np.ndarray) -> np.ndarray:
    """Mean over all spatial axes, kept as size-1 axes.

    Float32: one native pass over the planes (numpy's own pairwise summation order, so the
    same bits as ``x.mean``; small maps with many channels cost a call, not numpy's reduction
    set-up)."""
    if x.dtype == np.float32 and x.ndim >= 3 and x.size and x.flags.c_contiguous:
        y = np.empty(x.shape[:2] + (1,) * (x.ndim - 2), np.float32)
        mean_rows_f32(x.reshape(x.shape[0] * x.shape[1], -1), y.reshape(-1))
        return y
    mean = x.mean(axis=tuple(range(2, x.ndim)), keepdims=True, dtype=_accumulator(x.dtype))
    return mean.astype(x.dtype, copy=False)


@kernel("", "GlobalMaxPool", since=(1, 22))
def global_max_pool(x: np.ndarray) -> np.ndarray:
    """Max over all spatial axes, kept as size-1 axes."""
    return x.max(axis=tuple(range(2, x.ndim)), keepdims=True)


@kernel("", "GlobalLpPool", since=(2, 22))
def global_lp_pool(x: np.ndarray, *, p: int = 2) -> np.ndarray:
    """``(sum |x| ** p) ** (1 / p)`` over all spatial axes."""
    s = (np.abs(x) ** p).sum(axis=tuple(range(2, x.ndim)), keepdims=True)
    return (s ** (1.0 / p)).astype(x.dtype, copy=False)
