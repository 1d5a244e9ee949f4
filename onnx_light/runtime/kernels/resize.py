"""Resize (opsets 10, 11, 13, 18, 19): separable nearest, N-linear and N-cubic resampling.

Each resized axis gets a table of input indices and weights, one row per output position,
computed once from the spec's coordinate transformation; the data then goes through one
gather-and-weigh pass per axis (a whole-array step per filter tap), never a loop over pixels.

For an output coordinate ``x_resized`` the source coordinate ``x`` comes from
``coordinate_transformation_mode``; with ``i0 = floor(x)`` and ``t = x - i0`` the taps are the
input indices ``i0 + j`` and their weights ``f(|j - t| * s)``, ``f`` the triangle (linear) or
Keys cubic filter with coefficient ``a``, ``s = min(scale, 1)`` with ``antialias`` (the filter
stretched when downscaling, weights renormalised) and 1 otherwise. Taps outside the input read
the edge, or get weight 0 (renormalised) with ``exclude_outside``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from onnx_light.runtime._native import lent, replicate2d, resample_axis
from onnx_light.runtime._registry import kernel
from onnx_light.runtime.kernels import _dtypes

_MODES = ("nearest", "linear", "cubic")
_TRANSFORMS = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_crop_and_resize",
    "tf_half_pixel_for_nn",  # Resize-11 only
)
_NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple")
_POLICIES = ("stretch", "not_larger", "not_smaller")


class AxisTable(NamedTuple):
    """How one axis is resampled: ``out[i] = sum_j weights[i, j] * in[indices[i, j]]``."""

    indices: np.ndarray  # (out, taps) intp, already clamped into the input
    weights: np.ndarray | None  # (out, taps) float64; None for nearest (one tap, weight 1)
    outside: np.ndarray | None  # (out,) bool: tf_crop_and_resize positions left of / right of the input


def source_coords(
    transform: str, out_size: int, in_size: int, scale: float, width: float, roi: tuple[float, float]
) -> np.ndarray:
    """The source coordinate of every output position along one axis.

    ``scale`` is the axis' scale factor (``out / in`` when sizes were given) and ``width`` the
    spec's ``output_width``: ``scale * in_size`` from scales (possibly fractional), ``out_size``
    from sizes. The arithmetic is float32, as the scales are: at exact ties of the nearest
    modes (``1 / 0.4``) float64 would round the other way than onnxruntime does.
    """
    f = np.float32
    y = np.arange(out_size, dtype=f)
    s, n, w, half = f(scale), f(in_size), f(width), f(0.5)
    if transform == "half_pixel":
        x = (y + half) / s - half
    elif transform == "half_pixel_symmetric":
        x = n / f(2) * (f(1) - f(out_size) / w) + (y + half) / s - half
    elif transform == "pytorch_half_pixel":
        x = (y + half) / s - half if out_size > 1 else np.zeros_like(y)
    elif transform == "align_corners":
        x = y * (n - f(1)) / (w - f(1)) if w != 1 else np.zeros_like(y)
    elif transform == "asymmetric":
        x = y / s
    elif transform == "tf_half_pixel_for_nn":
        x = (y + half) / s
    else:  # tf_crop_and_resize
        start, end = f(roi[0]), f(roi[1])
        if w == 1:
            x = np.full_like(y, half * (start + end) * (n - f(1)))
        else:
            x = start * (n - f(1)) + y * (end - start) * (n - f(1)) / (w - f(1))
    return x.astype(np.float64)


def _nearest_index(x: np.ndarray, nearest_mode: str, scale: float) -> np.ndarray:
    if nearest_mode == "simple":  # Resize-10 / Upsample: ceil when downsampling, else truncate
        return np.ceil(x) if scale < 1 else np.trunc(x)
    if nearest_mode == "round_prefer_floor":
        return np.ceil(x - 0.5)
    if nearest_mode == "round_prefer_ceil":
        return np.floor(x + 0.5)
    return np.floor(x) if nearest_mode == "floor" else np.ceil(x)


def _filter(d: np.ndarray, mode: str, a: float) -> np.ndarray:
    """The resampling filter at distances ``d >= 0``: triangle or Keys cubic."""
    if mode == "linear":
        return np.maximum(1 - d, 0)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def axis_table(
    x: np.ndarray,
    in_size: int,
    mode: str,
    *,
    nearest_mode: str,
    scale: float,
    cubic_coeff_a: float,
    antialias: bool,
    exclude_outside: bool,
) -> AxisTable:
    """Index and weight table of one axis for source coordinates ``x``."""
    if mode == "nearest":
        idx = np.clip(_nearest_index(x, nearest_mode, scale), 0, in_size - 1).astype(np.intp)
        return AxisTable(idx[:, None], None, None)
    radius = 1 if mode == "linear" else 2
    s = min(scale, 1.0) if antialias else 1.0
    start = math.floor(-radius / s) + 1
    taps = np.arange(start, 2 - start)
    i0 = np.floor(x)
    t = x - i0
    weights = _filter(np.abs(taps[None, :] - t[:, None]) * s, mode, cubic_coeff_a)
    index = i0.astype(np.int64)[:, None] + taps[None, :]
    if exclude_outside:
        weights = np.where((index < 0) | (index >= in_size), 0.0, weights)
    if antialias or exclude_outside:
        total = weights.sum(axis=1, keepdims=True)
        weights = weights / np.where(total == 0, 1.0, total)
    return AxisTable(np.clip(index, 0, in_size - 1).astype(np.intp), weights, None)


def apply_axis(data: np.ndarray, axis: int, table: AxisTable) -> np.ndarray:
    """One separable pass: ``data`` resampled along ``axis`` with ``table``.

    Nearest is one gather (the indices are already clamped, so ``mode="clip"`` lets numpy
    gather without buffering); the filters are a weighted gather over the axis viewed as
    ``(outer, in, inner)``, by the native loop or its numpy twin (``runtime/_native.py``).
    """
    out_shape = list(data.shape)
    out_shape[axis] = table.indices.shape[0]
    if table.weights is None:
        out = np.empty(out_shape, dtype=data.dtype)
        return np.take(data, table.indices[:, 0], axis=axis, out=out, mode="clip")
    outer = math.prod(data.shape[:axis])
    view = data.reshape(outer, data.shape[axis], -1)
    return resample_axis(view, table.indices, table.weights).reshape(out_shape)


class Plan(NamedTuple):
    """A resolved Resize call: the output shape and one table per resized axis."""

    out_shape: tuple[int, ...]
    tables: dict[int, AxisTable]
    #: per axis the whole factor of an integer nearest upsampling (``_replication``), else None
    replicate: list[int] | None = None


def _fail(message: str) -> ValueError:
    return ValueError(f"Resize: {message}")


def _given(v: np.ndarray | None) -> bool:
    return v is not None and np.asarray(v).size > 0


def output_geometry(
    shape: Sequence[int],
    scales: np.ndarray | None,
    sizes: np.ndarray | None,
    axes: Sequence[int] | None,
    policy: str = "stretch",
) -> tuple[list[int], list[float], list[int], list[float]]:
    """(resized axes, their scales, output sizes, output widths) from ``scales`` or ``sizes``.

    The width is the spec's ``output_width``: ``scale * in`` (fractional) from scales, the size
    itself from sizes.
    """
    r = len(shape)
    axes = [a + r if a < 0 else a for a in (axes if axes is not None else range(r))]
    if any(not 0 <= a < r for a in axes) or len(set(axes)) != len(axes):
        raise _fail(f"axes {axes} must be distinct axes of the rank-{r} input")
    if _given(scales) == _given(sizes):
        raise _fail("give exactly one of 'scales' and 'sizes' (the other omitted or empty)")
    if policy not in _POLICIES:
        raise _fail(f"keep_aspect_ratio_policy must be one of {_POLICIES}, got {policy!r}")
    given = np.asarray(scales if _given(scales) else sizes).ravel()
    if given.size != len(axes):
        what = "scales" if _given(scales) else "sizes"
        raise _fail(f"'{what}' holds {given.size} values for {len(axes)} axes")
    ins = [int(shape[a]) for a in axes]
    if _given(scales):
        factors = [float(v) for v in given.astype(np.float64)]
        if any(not f > 0 for f in factors):
            raise _fail(f"scales must be positive, got {factors}")
        return axes, factors, [math.floor(f * n) for f, n in zip(factors, ins)], [f * n for f, n in zip(factors, ins)]
    outs = [int(v) for v in given]
    if any(o < 0 for o in outs) or any(n == 0 and o > 0 for n, o in zip(ins, outs)):
        raise _fail(f"sizes {outs} cannot be reached from the input sizes {ins}")
    factors = [float(np.float32(o) / np.float32(n)) if n else 1.0 for o, n in zip(outs, ins)]
    if policy != "stretch" and factors:
        common = min(factors) if policy == "not_larger" else max(factors)
        factors = [common] * len(axes)
        outs = [math.floor(common * n + 0.5) for n in ins]
    return axes, factors, outs, [float(o) for o in outs]


def plan_resize(
    shape: Sequence[int],
    roi: np.ndarray | None,
    scales: np.ndarray | None,
    sizes: np.ndarray | None,
    *,
    mode: str,
    coordinate_transformation_mode: str,
    nearest_mode: str,
    cubic_coeff_a: float = -0.75,
    exclude_outside: int = 0,
    antialias: int = 0,
    axes: Sequence[int] | None = None,
    keep_aspect_ratio_policy: str = "stretch",
) -> Plan:
    """Resolves one Resize call into its output shape and per-axis tables."""
    transform = coordinate_transformation_mode
    for name, value, known in (
        ("mode", mode, _MODES),
        ("coordinate_transformation_mode", transform, _TRANSFORMS),
        ("nearest_mode", nearest_mode, _NEAREST),
    ):
        if value not in known:
            raise _fail(f"{name} must be one of {known}, got {value!r}")
    resized, factors, outs, widths = output_geometry(shape, scales, sizes, axes, keep_aspect_ratio_policy)
    crop = transform == "tf_crop_and_resize"
    boxes = np.asarray(roi, dtype=np.float64).ravel() if crop and _given(roi) else None
    if crop and (boxes is None or boxes.size != 2 * len(resized)):
        raise _fail(f"tf_crop_and_resize needs 'roi' of 2 x {len(resized)} values (starts, then ends)")
    out_shape = list(shape)
    tables: dict[int, AxisTable] = {}
    for k, (a, f, o, w) in enumerate(zip(resized, factors, outs, widths)):
        out_shape[a] = o
        box = (0.0, 1.0) if boxes is None else (float(boxes[k]), float(boxes[k + len(resized)]))
        if (f == 1.0 and o == shape[a] and box == (0.0, 1.0)) or o == 0:
            continue
        x = source_coords(transform, o, int(shape[a]), f, w, box)
        table = axis_table(
            x,
            int(shape[a]),
            mode,
            nearest_mode=nearest_mode,
            scale=f,
            cubic_coeff_a=cubic_coeff_a,
            antialias=bool(antialias),
            exclude_outside=bool(exclude_outside),
        )
        if crop:
            table = table._replace(outside=(x < 0) | (x > shape[a] - 1))
        tables[a] = table
    plan = Plan(tuple(out_shape), tables)
    return plan._replace(replicate=_replication(shape, plan))


#: a gather along the last axis costs about this many row-gathered elements (numpy's take)
_LAST_AXIS_COST = 4


def pass_order(shape: Sequence[int], plan: Plan) -> tuple[int, ...]:
    """The order of the separable passes with the least estimated work.

    A pass costs its output size times its taps, more along the last axis (an element-wise
    gather instead of whole rows): so narrowing axes go first and, upsampling, the last axis
    goes while the data is still small. The passes commute; only the rounding differs.
    """

    def cost(order: tuple[int, ...]) -> float:
        current, total = list(shape), 0.0
        for a in order:
            current[a] = plan.out_shape[a]
            total += (
                math.prod(current) * plan.tables[a].indices.shape[1] * (_LAST_AXIS_COST if a == len(shape) - 1 else 1)
            )
        return total

    return min(itertools.permutations(sorted(plan.tables)), key=cost)


def _compute_dtype(x: np.ndarray) -> np.dtype:
    if x.dtype.kind == "c" or x.dtype == np.float64:
        return x.dtype
    if x.dtype.kind in "iu":
        return np.dtype(np.float64)
    if x.dtype.kind == "f":
        return np.dtype(np.float32)
    raise _fail(f"linear and cubic modes need a numeric input, got {x.dtype}")


def _replication(shape: Sequence[int], plan: Plan) -> list[int] | None:
    """Per axis the whole factor ``k`` when every resized axis is nearest with output cell ``i``
    reading input cell ``i // k`` (an integer upsampling, as torch's nearest ``Upsample`` exports
    it), else None."""
    factors = [1] * len(shape)
    for a, table in plan.tables.items():
        n, o = int(shape[a]), table.indices.shape[0]
        if table.weights is not None or table.outside is not None or o % n or o == n:
            return None
        k = o // n
        if not np.array_equal(table.indices[:, 0], np.arange(o) // k):
            return None
        factors[a] = k
    return factors if plan.tables else None


def _replicate(x: np.ndarray, factors: list[int], into: np.ndarray | None = None) -> np.ndarray:
    """``x`` with each cell repeated ``factors[a]`` times along each axis ``a``: the gathers of
    nearest resampling, as strided copies (each axis's cell ``i`` at ``(i, j)`` of an
    interleaved ``(d0, k0, d1, k1, ...)`` array): the last replicated axis from ``x``, each
    earlier one from the slabs already written. Factors on the last two axes only (torch's
    2-D nearest ``Upsample``) go through :func:`replicate2d` (one native pass), into ``into``
    (the buffer pool's array) when :func:`lent` takes it."""
    shape = tuple(d * k for d, k in zip(x.shape, factors))
    if x.ndim >= 2 and all(k == 1 for k in factors[:-2]) and x.dtype.kind in "biufc":
        y = lent(into, x.dtype, shape, x)
        y = np.empty(shape, dtype=x.dtype) if y is None else y
        h, w = x.shape[-2:]
        replicate2d(np.ascontiguousarray(x).reshape(-1, h, w), y.reshape(-1, shape[-2], shape[-1]))
        return y
    out = np.empty([v for d, k in zip(x.shape, factors) for v in (d, k)], dtype=x.dtype)
    axes = [a for a, k in enumerate(factors) if k > 1]

    def at(axis: int, j: int) -> tuple[Any, ...]:
        # position j on `axis`, 0 on the replication positions before it, all of them after it
        return tuple(
            v for b in range(x.ndim) for v in (slice(None), j if b == axis else 0 if b < axis else slice(None))
        )

    last = axes[-1]
    for j in range(factors[last]):
        out[tuple(v for b in range(x.ndim) for v in (slice(None), j if b == last else 0))] = x
    for a in reversed(axes[:-1]):
        for j in range(1, factors[a]):
            out[at(a, j)] = out[at(a, 0)]
    return out.reshape([d * k for d, k in zip(x.shape, factors)])


def run_plan(x: np.ndarray, plan: Plan, extrapolation_value: float = 0.0, into: np.ndarray | None = None) -> np.ndarray:
    """Applies a resolved plan to ``x`` (already decoded to numbers); ``into``: the buffer
    pool's array, which an integer nearest upsampling writes into when it fits."""
    if any(n == 0 for n in plan.out_shape) or x.size == 0:
        return np.zeros(plan.out_shape, dtype=x.dtype)
    if plan.replicate is not None:
        return _replicate(x, plan.replicate, into)
    interpolating = any(t.weights is not None for t in plan.tables.values())
    y = x.astype(_compute_dtype(x), copy=False) if interpolating else x
    for a in pass_order(x.shape, plan):
        y = apply_axis(y, a, plan.tables[a])
    outside = [(a, t.outside) for a, t in plan.tables.items() if t.outside is not None and t.outside.any()]
    if outside:
        mask = np.zeros(plan.out_shape, dtype=bool)
        for a, o in outside:
            mask |= o.reshape((-1,) + (1,) * (x.ndim - a - 1))
        y = np.where(mask, np.asarray(extrapolation_value).astype(y.dtype), y)
    if y.dtype == x.dtype:
        return y if plan.tables else y.copy()
    if x.dtype.kind in "iu":
        info = np.iinfo(x.dtype)
        return np.clip(np.rint(y), info.min, info.max).astype(x.dtype)
    return y.astype(x.dtype)


#: resolved plans by call (``resize``); at most ``_PLANS_KEPT``
_PLANS: dict[tuple[Any, ...], Plan] = {}
_PLANS_KEPT = 64


def _key(v: np.ndarray | None) -> tuple[Any, ...] | None:
    """A hashable form of a small ``roi`` / ``scales`` / ``sizes`` input (its dtype and values)."""
    if v is None:
        return None
    a = np.asarray(v)
    return (a.dtype.str, a.shape, a.tobytes())


def resize(
    x: np.ndarray,
    roi: np.ndarray | None,
    scales: np.ndarray | None,
    sizes: np.ndarray | None,
    extrapolation_value: float = 0.0,
    out: np.ndarray | None = None,
    **attrs: Any,
) -> np.ndarray:
    """Resize of ``x`` with the attributes of :func:`plan_resize`; bit-pattern floats decoded.

    The resolved plans of the last calls are kept by input shape, ``roi``/``scales``/``sizes``
    values and attributes (a session's Resize nodes see the same ones every run). ``out``: the
    buffer pool's array (``KernelOptions.writes_out``), a hint an integer nearest upsampling takes.
    """
    key = (
        x.shape,
        _key(roi),
        _key(scales),
        _key(sizes),
        tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in sorted(attrs.items())),
    )
    plan = _PLANS.get(key)
    if plan is None:
        plan = plan_resize(x.shape, roi, scales, sizes, **attrs)
        if len(_PLANS) >= _PLANS_KEPT:
            _PLANS.clear()
        _PLANS[key] = plan
    values = _dtypes.decode(x)
    exact = all(t.weights is None and t.outside is None for t in plan.tables.values())
    if values is x or exact:
        return run_plan(x, plan, extrapolation_value, out)
    return _dtypes.encode_like(run_plan(values, plan, extrapolation_value), x)


@kernel("", "Resize", since=10, writes_out=True)
def resize_10(x: np.ndarray, scales: np.ndarray, *, mode: str = "nearest", out: np.ndarray | None = None) -> np.ndarray:
    """Resize-10: ``floor(in * scale)`` outputs, asymmetric coordinates, Upsample's nearest rule."""
    return resize(
        x, None, scales, None, mode=mode, coordinate_transformation_mode="asymmetric", nearest_mode="simple", out=out
    )


@kernel("", "Resize", since=(11, 13), writes_out=True)
def resize_11(
    x: np.ndarray,
    roi: np.ndarray | None = None,
    scales: np.ndarray | None = None,
    sizes: np.ndarray | None = None,
    *,
    coordinate_transformation_mode: str = "half_pixel",
    cubic_coeff_a: float = -0.75,
    exclude_outside: int = 0,
    extrapolation_value: float = 0.0,
    mode: str = "nearest",
    nearest_mode: str = "round_prefer_floor",
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Resize-11/13: roi, scales or sizes; every coordinate transformation and nearest mode."""
    return resize_18(
        x,
        roi,
        scales,
        sizes,
        coordinate_transformation_mode=coordinate_transformation_mode,
        cubic_coeff_a=cubic_coeff_a,
        exclude_outside=exclude_outside,
        extrapolation_value=extrapolation_value,
        mode=mode,
        nearest_mode=nearest_mode,
        out=out,
    )


@kernel("", "Resize", since=(18, 19), writes_out=True)
def resize_18(
    x: np.ndarray,
    roi: np.ndarray | None = None,
    scales: np.ndarray | None = None,
    sizes: np.ndarray | None = None,
    *,
    antialias: int = 0,
    axes: list[int] | None = None,
    coordinate_transformation_mode: str = "half_pixel",
    cubic_coeff_a: float = -0.75,
    exclude_outside: int = 0,
    extrapolation_value: float = 0.0,
    keep_aspect_ratio_policy: str = "stretch",
    mode: str = "nearest",
    nearest_mode: str = "round_prefer_floor",
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Resize-18/19: adds antialias, axes and keep_aspect_ratio_policy (19: half_pixel_symmetric)."""
    return resize(
        x,
        roi,
        scales,
        sizes,
        extrapolation_value,
        out,
        mode=mode,
        coordinate_transformation_mode=coordinate_transformation_mode,
        nearest_mode=nearest_mode,
        cubic_coeff_a=cubic_coeff_a,
        exclude_outside=exclude_outside,
        antialias=antialias,
        axes=axes,
        keep_aspect_ratio_policy=keep_aspect_ratio_policy,
    )
