"""Normalizations: Batch, Group, Instance, Layer, RMS, Lp, mean-variance and LRN."""

from __future__ import annotations

import math

import numpy as np

from onnx_light.runtime._native import layer_norm_rows_f32
from onnx_light.runtime._registry import kernel
from onnx_light.runtime.kernels._axes import axis_index

# TensorProto data types a ``stash_type`` may name; bfloat16 has no numpy twin and
# is computed in float32.
_STASH = {1: np.float32, 10: np.float16, 11: np.float64, 16: np.float32}


def _per_channel(p: np.ndarray, ndim: int) -> np.ndarray:
    """Shapes a ``(C,)`` (or ``(C, *spatial)``) parameter to broadcast against N, C, ..."""
    return p.reshape(p.shape + (1,) * (ndim - 1 - p.ndim))


def _stash(x: np.ndarray, stash_type: int) -> np.dtype:
    """The computation dtype: the stash type, never less precise than ``x`` itself."""
    return np.promote_types(_STASH.get(stash_type, np.float32), x.dtype)


def _batch_stats(x: np.ndarray, ndim_param: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean and population variance per channel (or per ``(C, *spatial)`` cell)."""
    axes = (0,) + tuple(range(1 + ndim_param, x.ndim))
    return x.mean(axis=axes), x.var(axis=axes)


#: inference BatchNormalization runs as ``x * s + t`` where every channel's ``|mean|`` is at
#: most this many of its ``sqrt(var + eps)``: ``t = bias - mean * s`` then cancels at most a
#: few bits against ``x * s`` (the outputs' own scale is ``|scale|``); beyond it, and with
#: batch statistics (training), ``(x - mean) * s + bias``
_AFFINE_MEAN_STDS = 4.0


def _bn_apply(
    x: np.ndarray,
    scale: np.ndarray,
    bias: np.ndarray,
    mean: np.ndarray,
    var: np.ndarray,
    epsilon: float,
    affine: bool = False,
) -> np.ndarray:
    """``(x - mean) * s + bias`` per channel, ``s = scale / sqrt(var + eps)``; with ``affine``
    (running statistics) ``x * s + t``, ``t = bias - mean * s``, computed in float64 and
    rounded to x's type, where ``_AFFINE_MEAN_STDS`` allows: two passes over x and one new
    array instead of three and two temporaries (0.6-0.65x the time on MobileNetV3's shapes,
    whose backward recomputes every BatchNormalization, its weights being inputs)."""
    nd = x.ndim
    dt = x.dtype
    if affine and dt.kind == "f":
        wide = np.promote_types(dt, np.float64)
        std = np.sqrt(var.astype(wide) + epsilon)
        m = mean.astype(wide)
        if bool(np.all(np.abs(m) <= _AFFINE_MEAN_STDS * std)):
            s = scale.astype(wide) / std
            y = np.multiply(x, _per_channel(s.astype(dt), nd))
            y += _per_channel((bias.astype(wide) - m * s).astype(dt), nd)
            return y
    inv = _per_channel(scale.astype(dt) / np.sqrt(var.astype(dt) + dt.type(epsilon)), nd)
    return (x - _per_channel(mean.astype(dt), nd)) * inv + _per_channel(bias.astype(dt), nd)


def _bn_affine(
    scale: np.ndarray,
    bias: np.ndarray,
    mean: np.ndarray,
    var: np.ndarray,
    *,
    epsilon: float = 1e-5,
    training_mode: int = 0,
    spatial: int = 1,
    _num_outputs: int = 1,
    **_: object,
) -> tuple[np.ndarray, np.ndarray] | None:
    """Inference BatchNormalization as ``x * s + t`` per channel: ``s = scale / sqrt(var + eps)``,
    ``t = bias - mean * s`` (in float64); None in training mode or for ``(C, *spatial)`` parameters."""
    if training_mode or _num_outputs != 1 or any(p.ndim != 1 for p in (scale, bias, mean, var)):
        return None
    if any(p.dtype.kind != "f" for p in (scale, bias, mean, var)):
        return None
    s = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + epsilon)
    return s, bias.astype(np.float64) - mean.astype(np.float64) * s


@kernel("", "BatchNormalization", since=(7, 9), channel_affine=_bn_affine)
def batch_norm_7(
    x: np.ndarray,
    scale: np.ndarray,
    bias: np.ndarray,
    mean: np.ndarray,
    var: np.ndarray,
    *,
    epsilon: float = 1e-5,
    momentum: float = 0.9,
    spatial: int = 1,
    _num_outputs: int = 1,
) -> np.ndarray | tuple[np.ndarray, ...]:
    """Opset 7/9: one output is inference; five outputs (Y, running mean and var, saved
    batch mean and var) is training. ``spatial=0`` (opset 7) is carried by the
    parameters' ``(C, *spatial)`` shape."""
    if _num_outputs == 1:
        return _bn_apply(x, scale, bias, mean, var, epsilon, affine=True)
    bmean, bvar = _batch_stats(x, scale.ndim)
    y = _bn_apply(x, scale, bias, bmean, bvar, epsilon)
    run_mean = (mean * momentum + bmean * (1 - momentum)).astype(mean.dtype)
    run_var = (var * momentum + bvar * (1 - momentum)).astype(var.dtype)
    return (y, run_mean, run_var, bmean.astype(mean.dtype), bvar.astype(var.dtype))[:_num_outputs]


@kernel("", "BatchNormalization", since=(14, 15), channel_affine=_bn_affine)
def batch_norm(
    x: np.ndarray,
    scale: np.ndarray,
    bias: np.ndarray,
    mean: np.ndarray,
    var: np.ndarray,
    *,
    epsilon: float = 1e-5,
    momentum: float = 0.9,
    training_mode: int = 0,
    _num_outputs: int = 1,
) -> np.ndarray | tuple[np.ndarray, ...]:
    """Opset 14+: ``training_mode=1`` normalizes with batch statistics and also returns
    the momentum-updated running mean and variance."""
    if not training_mode:
        return _bn_apply(x, scale, bias, mean, var, epsilon, affine=True)
    bmean, bvar = _batch_stats(x, 1)
    y = _bn_apply(x, scale, bias, bmean, bvar, epsilon)
    run_mean = (mean * momentum + bmean * (1 - momentum)).astype(mean.dtype)
    run_var = (var * momentum + bvar * (1 - momentum)).astype(var.dtype)
    return (y, run_mean, run_var)[: max(_num_outputs, 1)]


def _standardize(x: np.ndarray, axes: tuple[int, ...], epsilon: float) -> np.ndarray:
    mean = x.mean(axis=axes, keepdims=True)
    centered = x - mean
    var = (centered * centered).mean(axis=axes, keepdims=True)
    return centered / np.sqrt(var + x.dtype.type(epsilon))


@kernel("", "InstanceNormalization", since=(6, 22))
def instance_norm(x: np.ndarray, scale: np.ndarray, bias: np.ndarray, *, epsilon: float = 1e-5) -> np.ndarray:
    """Standardizes each (sample, channel) over its spatial axes, then scales per channel."""
    y = _standardize(x, tuple(range(2, x.ndim)), epsilon)
    return y * _per_channel(scale, x.ndim) + _per_channel(bias, x.ndim)


def _group_norm(x: np.ndarray, num_groups: int, epsilon: float, dtype: np.dtype) -> np.ndarray:
    n, c = x.shape[:2]
    per_group = c // num_groups * math.prod(x.shape[2:])  # not -1: ambiguous at n = 0
    grouped = x.astype(dtype, copy=False).reshape(n, num_groups, per_group)
    return _standardize(grouped, (2,), epsilon).reshape(x.shape)


@kernel("", "GroupNormalization", since=18)
def group_norm_18(
    x: np.ndarray, scale: np.ndarray, bias: np.ndarray, *, epsilon: float = 1e-5, num_groups: int
) -> np.ndarray:
    """Opset 18: ``scale`` and ``bias`` hold one value per *group*."""
    y = _group_norm(x, num_groups, epsilon, x.dtype)
    per = x.shape[1] // num_groups
    return y * _per_channel(np.repeat(scale, per), x.ndim) + _per_channel(np.repeat(bias, per), x.ndim)


@kernel("", "GroupNormalization", since=21)
def group_norm(
    x: np.ndarray,
    scale: np.ndarray,
    bias: np.ndarray,
    *,
    epsilon: float = 1e-5,
    num_groups: int,
    stash_type: int = 1,
) -> np.ndarray:
    """Opset 21: statistics in ``stash_type``; ``scale`` and ``bias`` per *channel*."""
    y = _group_norm(x, num_groups, epsilon, _stash(x, stash_type)).astype(x.dtype, copy=False)
    return y * _per_channel(scale, x.ndim) + _per_channel(bias, x.ndim)


def _times_plus(y: np.ndarray, scale: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """``y * scale (+ bias)``, written into ``y`` (a fresh array) when that is the result's dtype
    and shape, else as new arrays."""
    for operand, ufunc in ((scale, np.multiply), (bias, np.add)):
        if operand is None:
            continue
        fits = np.result_type(y, operand) == y.dtype and np.broadcast_shapes(y.shape, operand.shape) == y.shape
        y = ufunc(y, operand, out=y) if fits else ufunc(y, operand)
    return y


def _float32_rows(x: np.ndarray, scale: np.ndarray, bias: np.ndarray | None, stash_type: int) -> bool:
    """Whether LayerNormalization can run over the rows of ``x`` natively: float32 throughout,
    computed in float32, a C-contiguous ``x``."""
    f32 = np.dtype(np.float32)
    return (
        x.__class__ is np.ndarray
        and x.dtype == f32
        and x.size > 0
        and x.flags.c_contiguous
        and _STASH.get(stash_type) is np.float32
        and scale.dtype == f32
        and (bias is None or bias.dtype == f32)
    )


def _layer_norm_rows(
    x: np.ndarray, first: int, scale: np.ndarray, bias: np.ndarray | None, epsilon: float, outputs: int = 1
) -> np.ndarray | tuple[np.ndarray, ...] | None:
    """LayerNormalization of float32 ``x`` over the axes from ``first``, as rows: one native
    pass per row in numpy's order of operations (the same bits as the general path), with
    ``outputs`` > 1 also Mean and InvStdDev (shaped ``x``'s leading axes, then ones); None
    when ``scale`` or ``bias`` does not broadcast to the normalized shape."""
    width = math.prod(x.shape[first:])
    trailing = x.shape[first:]
    try:
        s = np.ascontiguousarray(np.broadcast_to(scale, trailing)).reshape(width)
        b = None if bias is None else np.ascontiguousarray(np.broadcast_to(bias, trailing)).reshape(width)
    except ValueError:  # not the normalized shape's: numpy's broadcasting decides (the general path)
        return None
    y = np.empty_like(x)
    if outputs == 1:
        layer_norm_rows_f32(x.reshape(-1, width), s, b, np.float32(epsilon), y.reshape(-1, width))
        return y
    stats = x.shape[:first] + (1,) * (x.ndim - first)
    mean, inv_std = np.empty(stats, np.float32), np.empty(stats, np.float32)
    layer_norm_rows_f32(
        x.reshape(-1, width), s, b, np.float32(epsilon), y.reshape(-1, width), mean.reshape(-1), inv_std.reshape(-1)
    )
    return (y, mean, inv_std)[:outputs]


@kernel("", "LayerNormalization", since=17)
def layer_norm(
    x: np.ndarray,
    scale: np.ndarray,
    bias: np.ndarray | None = None,
    *,
    axis: int = -1,
    epsilon: float = 1e-5,
    stash_type: int = 1,
    _num_outputs: int = 1,
) -> np.ndarray | tuple[np.ndarray, ...]:
    """Standardizes over axes ``axis..`` in ``stash_type``; Mean and InvStdDev are optional."""
    first = axis_index(axis, x.ndim)
    if _float32_rows(x, scale, bias, stash_type):
        rows = _layer_norm_rows(x, first, scale, bias, epsilon, _num_outputs)
        if rows is not None:
            return rows
    axes = tuple(range(first, x.ndim))
    xs = x.astype(_stash(x, stash_type), copy=False)
    mean = xs.mean(axis=axes, keepdims=True)
    centered = xs - mean  # a new array: the steps below write into it (the same values, no temporaries)
    square = np.multiply(centered, centered)
    inv_std = 1 / np.sqrt(square.mean(axis=axes, keepdims=True) + xs.dtype.type(epsilon))
    y = np.multiply(centered, inv_std, out=centered).astype(x.dtype, copy=False)
    y = _times_plus(y, scale, bias)
    if _num_outputs == 1:
        return y
    out_type = _STASH.get(stash_type, np.float32)
    return (y, mean.astype(out_type), inv_std.astype(out_type))[:_num_outputs]


@kernel("", "RMSNormalization", since=23)
def rms_norm(
    x: np.ndarray,
    scale: np.ndarray,
    *,
    axis: int = -1,
    epsilon: float = 1e-5,
    stash_type: int = 1,
) -> np.ndarray:
    """``x / sqrt(mean(x**2 over axis..) + epsilon) * scale``, reduced in ``stash_type``."""
    axes = tuple(range(axis_index(axis, x.ndim), x.ndim))
    xs = x.astype(_stash(x, stash_type), copy=False)
    rms = np.sqrt((xs * xs).mean(axis=axes, keepdims=True) + xs.dtype.type(epsilon))
    return (xs / rms).astype(x.dtype, copy=False) * scale


@kernel("", "LpNormalization", since=(1, 22))
def lp_norm(x: np.ndarray, *, axis: int = -1, p: int = 2) -> np.ndarray:
    """Divides by the L1 or L2 norm along ``axis``; an all-zero slice stays zero."""
    if p == 1:
        norm = np.abs(x).sum(axis=axis, keepdims=True)
    else:
        norm = np.sqrt((x * x).sum(axis=axis, keepdims=True))
    return x / np.where(norm == 0, norm.dtype.type(1), norm)


@kernel("", "MeanVarianceNormalization", since=(9, 13))
def mean_variance_norm(x: np.ndarray, *, axes: list[int] | None = None) -> np.ndarray:
    """``(x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9)`` over ``axes`` (default 0, 2, 3)."""
    red = tuple(axes if axes is not None else [0, 2, 3])
    mean = x.mean(axis=red, keepdims=True)
    var = (x * x).mean(axis=red, keepdims=True) - mean * mean
    return (x - mean) / (np.sqrt(var) + x.dtype.type(1e-9))


@kernel("", "LRN", since=(1, 13))
def lrn(
    x: np.ndarray,
    *,
    size: int,
    alpha: float = 1e-4,
    beta: float = 0.75,
    bias: float = 1.0,
) -> np.ndarray:
    """Local response normalization: each value divided by a power of the sum of squares
    over a window of ``size`` neighbouring channels."""
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    c = x.shape[1]
    sq = np.pad(x * x, [(0, 0), (before, after)] + [(0, 0)] * (x.ndim - 2))
    window = sq[:, 0:c].copy()
    for i in range(1, size):
        window += sq[:, i : i + c]
    t = x.dtype.type
    return x / (t(bias) + t(alpha / size) * window) ** t(beta)
