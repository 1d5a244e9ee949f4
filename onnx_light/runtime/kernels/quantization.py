"""Linear quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear and the integer ops.

Scales and zero points are per tensor (a scalar or a one-element 1-D array), per axis
(1-D, one per slice of ``axis``) or blocked (same rank as ``x``, ``block_size``
consecutive elements of ``axis`` share one). Low-precision types (float8, float4,
int4, uint4, int2, uint2, bfloat16) arrive as tagged bit patterns (see ``_dtypes``).
"""

from __future__ import annotations

import numpy as np

from onnx_light.onnx_core import TensorProto as T
from onnx_light.runtime._registry import kernel
from onnx_light.runtime.kernels._dtypes import BIT_PATTERN_TYPES, decode, encode, np_dtype, onnx_type_of
from onnx_light.runtime.kernels.conv import conv

#: integer ranges of the quantized integer types
_INT_RANGE = {
    T.UINT8: (0, 255),
    T.INT8: (-128, 127),
    T.UINT16: (0, 65535),
    T.INT16: (-32768, 32767),
    T.INT32: (-(2**31), 2**31 - 1),
    T.UINT4: (0, 15),
    T.INT4: (-8, 7),
    T.UINT2: (0, 3),
    T.INT2: (-2, 1),
}


def _numbers(x: np.ndarray) -> np.ndarray:
    """Values as numpy computes with them: bit patterns decoded to float32 / small ints."""
    return decode(np.asarray(x))


def _broadcast(param: np.ndarray, x_shape: tuple[int, ...], axis: int, block_size: int) -> np.ndarray:
    """A scale or zero point shaped to broadcast against ``x``: per tensor, per axis or blocked."""
    if param.size == 1 and param.ndim <= 1:
        return param.reshape(())
    rank = len(x_shape)
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < max(rank, 1):
        raise ValueError(f"axis {axis} is out of range for an input of rank {rank}")
    if block_size > 0:
        if param.ndim != rank:
            raise ValueError(f"blocked quantization needs a scale of rank {rank}, got shape {param.shape}")
        full = np.repeat(param, block_size, axis=axis)
        if full.shape[axis] < x_shape[axis]:
            raise ValueError(f"scale shape {param.shape} with block_size {block_size} does not cover {x_shape}")
        return np.take(full, np.arange(x_shape[axis]), axis=axis)
    if param.ndim != 1 or param.shape[0] != x_shape[axis]:
        raise ValueError(f"a per-axis scale must be 1-D of length {x_shape[axis]} (axis {axis}), got {param.shape}")
    shape = [1] * rank
    shape[axis] = param.shape[0]
    return param.reshape(shape)


def _to_type(values: np.ndarray, onnx_type: int, saturate: bool = True) -> np.ndarray:
    """Float values rounded (half to even) and saturated into ``onnx_type``."""
    if onnx_type in _INT_RANGE:
        lo, hi = _INT_RANGE[onnx_type]
        ints = np.clip(np.rint(values.astype(np.float64)), lo, hi)
        if onnx_type in BIT_PATTERN_TYPES:
            return encode(ints.astype(np.int64), onnx_type)
        return ints.astype(np_dtype(onnx_type))
    if onnx_type in BIT_PATTERN_TYPES:
        return encode(values, onnx_type, saturate=bool(saturate))
    return values.astype(np_dtype(onnx_type))


@kernel("", "QuantizeLinear", since=(10, 13, 19, 21, 23, 24, 25, 28))
def quantize_linear(
    x: np.ndarray,
    y_scale: np.ndarray,
    y_zero_point: np.ndarray | None = None,
    *,
    axis: int = 1,
    block_size: int = 0,
    output_dtype: int = 0,
    precision: int = 0,
    saturate: int = 1,
) -> np.ndarray:
    """``y = saturate(round(x / y_scale) + y_zero_point)``, rounding half to even.

    The output type is ``y_zero_point``'s, else ``output_dtype``, else uint8.
    """
    if y_zero_point is not None:
        out_type = onnx_type_of(y_zero_point)
        if output_dtype and output_dtype != out_type:
            raise ValueError(f"output_dtype {output_dtype} differs from y_zero_point's type {out_type}")
    else:
        out_type = output_dtype or T.UINT8
    xv = _numbers(x)
    compute = np.float64 if xv.dtype == np.float64 else np.float32
    scale = _broadcast(_numbers(y_scale).astype(compute), x.shape, axis, block_size)
    y = xv.astype(compute) / scale
    if y_zero_point is not None:
        zp = _broadcast(_numbers(y_zero_point), x.shape, axis, block_size)
        if out_type in _INT_RANGE:
            y = np.rint(y) + zp.astype(np.float64)
        else:
            y = y + zp.astype(compute)
    return _to_type(y, out_type, bool(saturate))


@kernel("", "DequantizeLinear", since=(10, 13, 19, 21, 23, 24, 25, 28))
def dequantize_linear(
    x: np.ndarray,
    x_scale: np.ndarray,
    x_zero_point: np.ndarray | None = None,
    *,
    axis: int = 1,
    block_size: int = 0,
    output_dtype: int = 0,
) -> np.ndarray:
    """``y = (x - x_zero_point) * x_scale``, in the scale's type (or ``output_dtype``)."""
    out_type = output_dtype or onnx_type_of(x_scale)
    xv = _numbers(x).astype(np.float64 if onnx_type_of(x) == T.INT32 else np.float32)
    if x_zero_point is not None:
        xv = xv - _broadcast(_numbers(x_zero_point), x.shape, axis, block_size).astype(xv.dtype)
    scale = _broadcast(_numbers(x_scale), x.shape, axis, block_size)
    y = (xv * scale.astype(np.float32)).astype(np.float32) if scale.dtype != np.float64 else xv * scale
    if out_type in BIT_PATTERN_TYPES:
        return encode(y, out_type)
    return y.astype(np_dtype(out_type))


@kernel("", "DynamicQuantizeLinear", since=11)
def dynamic_quantize_linear(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """uint8 quantization with a scale and zero point computed from ``x``'s range (0 included)."""
    lo = min(0.0, float(x.min())) if x.size else 0.0
    hi = max(0.0, float(x.max())) if x.size else 0.0
    scale = np.float32((hi - lo) / 255.0)
    zp = np.clip(np.rint(0.0 - np.float32(lo) / scale), 0, 255) if scale else np.float64(0)
    y = np.clip(np.rint(x.astype(np.float32) / scale) + zp, 0, 255) if scale else np.zeros(x.shape)
    return y.astype(np.uint8), np.asarray(scale, np.float32), np.asarray(zp, np.uint8)


def _minus_zero_point(x: np.ndarray, zp: np.ndarray | None, axis: int) -> np.ndarray:
    """``x - zp`` as int64; a 1-D ``zp`` applies along ``axis`` (rows of A, columns of B)."""
    xv = _numbers(x).astype(np.int64)
    if zp is None:
        return xv
    z = _numbers(zp).astype(np.int64)
    if z.ndim == 1 and z.size > 1 and axis == -2:
        z = z.reshape(-1, 1)
    elif z.ndim == 1 and z.size > 1 and axis == 0:
        z = z.reshape(-1, *([1] * (x.ndim - 1)))
    return xv - z


@kernel("", "MatMulInteger", since=10)
def matmul_integer(
    a: np.ndarray, b: np.ndarray, a_zero_point: np.ndarray | None = None, b_zero_point: np.ndarray | None = None
) -> np.ndarray:
    """``(A - a_zero_point) @ (B - b_zero_point)`` in int32; zero points per tensor, row of A or column of B."""
    return np.matmul(_minus_zero_point(a, a_zero_point, -2), _minus_zero_point(b, b_zero_point, -1)).astype(np.int32)


_CONV_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


@kernel("", "ConvInteger", since=10)
def conv_integer(
    x: np.ndarray,
    w: np.ndarray,
    x_zero_point: np.ndarray | None = None,
    w_zero_point: np.ndarray | None = None,
    *,
    auto_pad: str = "NOTSET",
    dilations: list[int] | None = None,
    group: int = 1,
    kernel_shape: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> np.ndarray:
    """Conv of ``x - x_zero_point`` and ``w - w_zero_point`` (per output channel), accumulated in int32."""
    xs = _minus_zero_point(x, x_zero_point, -1).astype(np.float64)
    ws = _minus_zero_point(w, w_zero_point, 0).astype(np.float64)
    y = conv(xs, ws, None, auto_pad=auto_pad, dilations=dilations, group=group, pads=pads, strides=strides)
    return np.rint(y).astype(np.int32)


def _requantize(acc: np.ndarray, multiplier: np.ndarray, y_zero_point: np.ndarray | None) -> np.ndarray:
    """An accumulator scaled by ``multiplier`` and shifted into ``y_zero_point``'s type."""
    out_type = onnx_type_of(y_zero_point) if y_zero_point is not None else T.UINT8
    y = acc * multiplier
    if y_zero_point is not None:
        zp = _numbers(y_zero_point).astype(np.float64)
        y = np.rint(y) + zp if out_type in _INT_RANGE else y + zp
    return _to_type(y, out_type)


@kernel("", "QLinearConv", since=10)
def qlinear_conv(
    x: np.ndarray,
    x_scale: np.ndarray,
    x_zero_point: np.ndarray,
    w: np.ndarray,
    w_scale: np.ndarray,
    w_zero_point: np.ndarray,
    y_scale: np.ndarray,
    y_zero_point: np.ndarray,
    b: np.ndarray | None = None,
    *,
    auto_pad: str = "NOTSET",
    dilations: list[int] | None = None,
    group: int = 1,
    kernel_shape: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> np.ndarray:
    """Quantized Conv: the int32 accumulator (plus ``b``) rescaled by ``x_scale * w_scale / y_scale``."""
    acc = conv_integer(
        x,
        w,
        x_zero_point,
        w_zero_point,
        auto_pad=auto_pad,
        dilations=dilations,
        group=group,
        pads=pads,
        strides=strides,
    ).astype(np.float64)
    if b is not None:
        acc = acc + b.astype(np.float64).reshape(-1, *([1] * (acc.ndim - 2)))
    ws = _numbers(w_scale).astype(np.float64)
    ws = ws.reshape(-1, *([1] * (acc.ndim - 2))) if ws.size > 1 else ws.reshape(())
    mult = _numbers(x_scale).astype(np.float64).reshape(()) * ws / _numbers(y_scale).astype(np.float64).reshape(())
    return _requantize(acc, mult, y_zero_point)


@kernel("", "QLinearMatMul", since=(10, 21))
def qlinear_matmul(
    a: np.ndarray,
    a_scale: np.ndarray,
    a_zero_point: np.ndarray,
    b: np.ndarray,
    b_scale: np.ndarray,
    b_zero_point: np.ndarray,
    y_scale: np.ndarray,
    y_zero_point: np.ndarray,
) -> np.ndarray:
    """Quantized MatMul; scales and zero points per tensor, per row of A or per column of B."""
    av = _numbers(a).astype(np.float64) - _row(_numbers(a_zero_point))
    bv = _numbers(b).astype(np.float64) - _numbers(b_zero_point).astype(np.float64)
    acc = np.matmul(av, bv)
    mult = _row(_numbers(a_scale)) * _numbers(b_scale).astype(np.float64) / _numbers(y_scale).astype(np.float64)
    return _requantize(acc, mult, y_zero_point)


def _row(v: np.ndarray) -> np.ndarray:
    """A per-row parameter of A as a column (M, 1); a per-tensor one unchanged."""
    v = v.astype(np.float64)
    return v.reshape(-1, 1) if v.ndim == 1 and v.size > 1 else v
