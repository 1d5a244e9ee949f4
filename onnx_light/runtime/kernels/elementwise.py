"""Element-wise math kernels: unary functions, activations and broadcasting arithmetic.

Each kernel keeps its input's dtype: Python-float attributes are weak scalars under
numpy's promotion rules, and anything computed at a wider precision is cast back.
Kernels are registered once per opset version where the op's signature or semantics
changed, from the version in force at opset 7 onwards.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from onnx_light.runtime._native import ACT_CLIP, ACT_HARDSIGMOID, ACT_HARDSWISH, ACT_RELU, ACT_SIGMOID, sigmoid_f32
from onnx_light.runtime._registry import kernel
from onnx_light.runtime.kernels._erf import erf_float64

__all__ = ["erf", "relu", "sigmoid"]


# Floating-point warnings (inf/nan out of range, x/0) are the ops' answers, not errors: the
# session runs every plan under np.errstate(all="ignore") once, so kernels don't each pay for it.


def _same_dtype(fn: Callable[[np.ndarray], np.ndarray], name: str) -> Callable[[np.ndarray], np.ndarray]:
    def run(x: np.ndarray) -> np.ndarray:
        y = fn(x)
        if y.__class__ is _ndarray and y.dtype is x.dtype:  # the common case, two identity tests
            return y
        return _as_dtype(y, x.dtype)

    return _name_kernel(run, name, f"ONNX {name}, element-wise.")


def _as_dtype(y: object, dtype: np.dtype) -> np.ndarray:
    """``y`` as a plain ndarray of ``dtype`` (ufuncs return numpy scalars for 0-d inputs)."""
    if type(y) is not np.ndarray:
        y = np.asarray(y)
    return y if y.dtype == dtype else y.astype(dtype)


def _name_kernel(run: Callable, name: str, doc: str) -> Callable:
    """Names a wrapper kernel (its plan-compiler options are in :func:`_ufunc_kernel`)."""
    run.__name__ = run.__qualname__ = name
    run.__doc__ = doc
    return run


def _ufunc_kernel(
    op_type: str, since: tuple[int, ...], run: Callable, fn: Callable, epilogue: Callable | None = None
) -> None:
    """Registers a wrapper kernel of ``fn`` with its options for the plan compiler (``runtime/_codegen.py``).

    ``returns_one``: the kernel always returns one array, never a tuple.
    ``inline_ufunc``: whenever ``fn(*args)`` is an ndarray whose dtype *is* the first
    input's, the kernel returns exactly that array, so the compiled plan may call the
    ufunc itself and fall back to the kernel only otherwise.
    ``float_ufunc``: on exact ndarrays of one builtin float dtype with a result of rank >= 1,
    the kernel returns exactly ``float_ufunc(*args)`` (a ufunc; ``"relu"`` and ``"sigmoid"``
    name the steps of :func:`relu` and :func:`sigmoid`), so a plan that knows its types may
    call it bare, and with ``out=`` a dying buffer of the result's shape. Div's ``fn`` is a
    lambda that differs from ``np.divide`` only on integers, where ``np.divide``'s answer is a
    float (never the first input's dtype): ``np.divide`` is its inline ufunc too, so the AdamW
    update's divisions write into dying buffers as Mul and Sub do.
    """
    ufunc = np.divide if op_type == "Div" else fn if isinstance(fn, np.ufunc) else None
    float_ufunc = ufunc
    kernel("", op_type, since=since, returns_one=True, inline_ufunc=ufunc, float_ufunc=float_ufunc, epilogue=epilogue)(
        run
    )


_ndarray = np.ndarray
_F32 = np.dtype(np.float32)


def erf(x: np.ndarray) -> np.ndarray:
    """The error function, element-wise, computed in float64 (within 2 ulp of ``math.erf``).

    Args:
        x: any real array.

    Returns:
        ``erf(x)`` with the dtype and shape of ``x``.
    """
    a = np.asarray(x)
    return erf_float64(a.astype(np.float64)).astype(a.dtype, copy=False)


# 0-d constants per builtin dtype: a Python scalar operand costs a ufunc call more than the
# arithmetic on a small array (numpy's weak-scalar promotion), a 0-d array of the same dtype
# does not, and gives the same result
_FLOATS = (np.float16, np.float32, np.float64)
_INTS = (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)
_ZERO = {np.dtype(t): np.zeros((), t) for t in _FLOATS + _INTS}
_ONE = {np.dtype(t): np.ones((), t) for t in _FLOATS}


#: elements per row when Relu views a large array as rows against a zero row
_RELU_ROW = 4096


def relu(x: np.ndarray) -> np.ndarray:
    """ONNX Relu: ``max(x, 0)``.

    numpy's ``maximum`` against a broadcast scalar runs a scalar loop, against an array
    a SIMD one (3x faster here), with the same answers: large arrays are taken as rows of
    ``_RELU_ROW`` against one zero row.
    """
    zero = _ZERO.get(x.dtype)
    if zero is not None and x.size >= _RELU_ROW and x.size % _RELU_ROW == 0 and x.__class__ is _ndarray:
        if zero.dtype is x.dtype and x.flags.c_contiguous:
            rows = x.reshape(-1, _RELU_ROW)
            return np.maximum(rows, np.zeros(_RELU_ROW, x.dtype)).reshape(x.shape)
    y = np.maximum(x, 0 if zero is None else zero)
    if y.__class__ is _ndarray and y.dtype is x.dtype:
        return y
    return _as_dtype(y, x.dtype)


def relu_inplace(x: np.ndarray) -> np.ndarray:
    """:func:`relu` written into ``x`` when it is a writable ndarray of a builtin dtype.

    Only for a fresh array that dies here (the plan compiler's ``inplace`` variant).
    """
    zero = _ZERO.get(x.dtype)
    if zero is None or zero.dtype is not x.dtype or x.__class__ is not _ndarray or not x.ndim:
        return relu(x)
    if not x.flags.writeable or not x.flags.c_contiguous:
        return relu(x)
    if x.size >= _RELU_ROW and x.size % _RELU_ROW == 0:
        rows = x.reshape(-1, _RELU_ROW)
        np.maximum(rows, np.zeros(_RELU_ROW, x.dtype), out=rows)
    else:
        np.maximum(x, zero, out=x)
    return x


def sigmoid(x: np.ndarray) -> np.ndarray:
    """ONNX Sigmoid: ``1 / (1 + exp(-x))`` (float32: one native pass, ``src/elementwise.cpp``)."""
    if x.__class__ is _ndarray and x.dtype == _F32 and x.ndim:
        if x.flags.c_contiguous:
            return sigmoid_f32(x, np.empty_like(x))
        y = np.ascontiguousarray(x)  # a view (a Transpose's): one copy, then in place
        return sigmoid_f32(y, y)
    one = _ONE.get(x.dtype)
    if one is not None and one.dtype is x.dtype and x.__class__ is _ndarray and x.ndim:
        t = np.negative(x)  # a fresh array of x's dtype: finish in place
        np.exp(t, t)
        np.add(t, one, t)
        return np.divide(one, t, t)
    return _as_dtype(1 / (1 + np.exp(-x)), x.dtype)


def sigmoid_inplace(x: np.ndarray) -> np.ndarray:
    """:func:`sigmoid` written into ``x`` (a fresh float32 array that dies here), else :func:`sigmoid`."""
    if x.__class__ is _ndarray and x.dtype == _F32 and x.ndim and x.flags.c_contiguous and x.flags.writeable:
        return sigmoid_f32(x, x)
    return sigmoid(x)


# the activations a convolution's native epilogue applies (KernelOptions.epilogue): (act, a, b)
def _act(code: int) -> Callable[..., tuple[int, float, float]]:
    return lambda: (code, 0.0, 0.0)


kernel(
    "",
    "Relu",
    since=(6, 13, 14),
    returns_one=True,
    fresh_output=True,
    float_ufunc="relu",
    inplace=relu_inplace,
    epilogue=_act(ACT_RELU),
)(relu)
kernel(
    "",
    "Sigmoid",
    since=(6, 13),
    returns_one=True,
    fresh_output=True,
    float_ufunc="sigmoid",
    inplace=sigmoid_inplace,
    epilogue=_act(ACT_SIGMOID),
)(sigmoid)


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0, x)


# op_type -> (function of one array, since versions from opset 7 on)
_UNARY: dict[str, tuple[Callable, tuple[int, ...]]] = {
    "Abs": (np.abs, (6, 13)),
    "Acos": (np.arccos, (7, 22)),
    "Acosh": (np.arccosh, (9, 22)),
    "Asin": (np.arcsin, (7, 22)),
    "Asinh": (np.arcsinh, (9, 22)),
    "Atan": (np.arctan, (7, 22)),
    "Atanh": (np.arctanh, (9, 22)),
    "Ceil": (np.ceil, (6, 13)),
    "Cos": (np.cos, (7, 22)),
    "Cosh": (np.cosh, (9, 22)),
    "Erf": (erf, (9, 13)),
    "Exp": (np.exp, (6, 13)),
    "Floor": (np.floor, (6, 13)),
    "HardSwish": (lambda x: x * np.clip(x / 6 + 0.5, 0, 1), (14, 22)),
    "Log": (np.log, (6, 13)),
    "Mish": (lambda x: x * np.tanh(_softplus(x)), (18, 22)),
    "Neg": (np.negative, (6, 13)),
    "Reciprocal": (np.reciprocal, (6, 13)),
    "Round": (np.round, (11, 22)),  # numpy rounds half to even, as the spec does
    "Sign": (np.sign, (9, 13)),
    "Sin": (np.sin, (7, 22)),
    "Sinh": (np.sinh, (9, 22)),
    "Softplus": (_softplus, (1, 22)),
    "Softsign": (lambda x: x / (1 + np.abs(x)), (1, 22)),
    "Sqrt": (np.sqrt, (6, 13)),
    "Tan": (np.tan, (7, 22)),
    "Tanh": (np.tanh, (6, 13)),
}

for _op, (_fn, _versions) in _UNARY.items():
    _ufunc_kernel(_op, _versions, _same_dtype(_fn, _op), _fn, _act(ACT_HARDSWISH) if _op == "HardSwish" else None)


# --- activations with attributes -----------------------------------------------------------------


@kernel("", "Celu", since=(12, 28))
def celu(x: np.ndarray, *, alpha: float = 1.0) -> np.ndarray:
    """ONNX Celu: ``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``."""
    y = np.maximum(x, 0) + np.minimum(0, alpha * np.expm1(x / alpha))
    return y.astype(x.dtype, copy=False)  # ufuncs on ml_dtypes' bfloat16 answer in float32


@kernel("", "Elu", since=(6, 22))
def elu(x: np.ndarray, *, alpha: float = 1.0) -> np.ndarray:
    """ONNX Elu: ``x`` where ``x >= 0``, else ``alpha * (exp(x) - 1)``."""
    return np.where(x < 0, alpha * np.expm1(x), x).astype(x.dtype, copy=False)


@kernel("", "Gelu", since=20)
def gelu(x: np.ndarray, *, approximate: str = "none") -> np.ndarray:
    """ONNX Gelu, exact (``erf``) or with the ``tanh`` approximation."""
    if approximate == "tanh":
        inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)
        return (0.5 * x * (1 + np.tanh(inner))).astype(x.dtype, copy=False)
    return (0.5 * x * (1 + erf(x / math.sqrt(2)))).astype(x.dtype, copy=False)


@kernel("", "HardSigmoid", since=(6, 22), epilogue=lambda alpha=0.2, beta=0.5: (ACT_HARDSIGMOID, alpha, beta))
def hard_sigmoid(x: np.ndarray, *, alpha: float = 0.2, beta: float = 0.5) -> np.ndarray:
    """ONNX HardSigmoid: ``max(0, min(1, alpha * x + beta))``."""
    return np.clip(alpha * x + beta, 0, 1).astype(x.dtype, copy=False)


@kernel("", "LeakyRelu", since=(6, 16))
def leaky_relu(x: np.ndarray, *, alpha: float = 0.01) -> np.ndarray:
    """ONNX LeakyRelu: ``x`` where ``x >= 0``, else ``alpha * x``."""
    return np.where(x < 0, alpha * x, x).astype(x.dtype, copy=False)


@kernel("", "PRelu", since=(7, 9, 16))
def prelu(x: np.ndarray, slope: np.ndarray) -> np.ndarray:
    """ONNX PRelu: ``x`` where ``x >= 0``, else ``slope * x`` (slope broadcast to ``x``)."""
    return np.where(x < 0, slope * x, x).astype(x.dtype, copy=False)


@kernel("", "Selu", since=(6, 22))
def selu(
    x: np.ndarray,
    *,
    alpha: float = 1.67326319217681884765625,
    gamma: float = 1.05070102214813232421875,
) -> np.ndarray:
    """ONNX Selu: ``gamma * x`` where ``x > 0``, else ``gamma * alpha * (exp(x) - 1)``."""
    return (gamma * np.where(x > 0, x, alpha * np.expm1(x))).astype(x.dtype, copy=False)


@kernel("", "Shrink", since=9)
def shrink(x: np.ndarray, *, bias: float = 0.0, lambd: float = 0.5) -> np.ndarray:
    """ONNX Shrink: ``x - bias`` above ``lambd``, ``x + bias`` below ``-lambd``, else 0."""
    y = np.where(x > lambd, x - bias, np.where(x < -lambd, x + bias, 0))
    return y.astype(x.dtype, copy=False)


@kernel("", "ThresholdedRelu", since=(10, 22))
def thresholded_relu(x: np.ndarray, *, alpha: float = 1.0) -> np.ndarray:
    """ONNX ThresholdedRelu: ``x`` where ``x > alpha``, else 0."""
    return np.where(x > alpha, x, 0).astype(x.dtype, copy=False)


def _clip_epilogue(
    lo: np.ndarray | None = None, hi: np.ndarray | None = None, *, min: float | None = None, max: float | None = None
) -> tuple[int, float, float] | None:
    """Clip's bounds as the native epilogue's (float32 bounds: the convolution computes in float32)."""
    bounds = [lo if lo is not None else min, hi if hi is not None else max]
    inf = float(np.finfo(np.float32).max)
    vals = [(-inf, inf)[i] if v is None else float(np.asarray(v).reshape(())) for i, v in enumerate(bounds)]
    if any(np.float32(v) != v for v in vals if abs(v) != inf) or vals[0] > vals[1]:
        return None  # bounds not exact in float32, or min > max (Clip gives max): the kernel runs
    return ACT_CLIP, vals[0], vals[1]


@kernel("", "Clip", since=6, epilogue=_clip_epilogue)
def clip_6(x: np.ndarray, *, min: float = -3.4028234663852886e38, max: float = 3.4028234663852886e38) -> np.ndarray:
    """ONNX Clip before opset 11, bounds as attributes."""
    with np.errstate(over="ignore"):  # the float32 default bounds overflow float16 to +-inf
        lo, hi = np.asarray(min, x.dtype), np.asarray(max, x.dtype)
    return np.minimum(np.maximum(x, lo), hi)


@kernel("", "Clip", since=(11, 12, 13), epilogue=_clip_epilogue)
def clip(x: np.ndarray, min: np.ndarray | None = None, max: np.ndarray | None = None) -> np.ndarray:
    """ONNX Clip, bounds as optional scalar inputs; ``min > max`` gives ``max``."""
    if min is not None:
        x = np.maximum(x, np.asarray(min, x.dtype).reshape(()))
    if max is not None:
        x = np.minimum(x, np.asarray(max, x.dtype).reshape(()))
    return np.asarray(x)


# --- binary arithmetic (multidirectional broadcasting) -------------------------------------------


def _int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer quotient truncated toward zero, as C does (numpy floors)."""
    q = np.floor_divide(a, b)
    inexact = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
    return q + inexact.astype(q.dtype)


def _binary(fn: Callable, name: str) -> Callable:
    def run(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        y = fn(a, b)
        if y.__class__ is _ndarray and y.dtype is a.dtype:
            return y
        return _as_dtype(y, a.dtype)

    return _name_kernel(run, name, f"ONNX {name}, element-wise with multidirectional broadcasting.")


_BINARY: dict[str, Callable] = {
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "Div": lambda a, b: _int_div(a, b) if a.dtype.kind in "iu" else np.divide(a, b),
}
for _op, _fn in _BINARY.items():
    _ufunc_kernel(_op, (7, 13, 14), _binary(_fn, _op), _fn)


@kernel("", "Mod", since=(10, 13, 28))
def mod(a: np.ndarray, b: np.ndarray, *, fmod: int = 0) -> np.ndarray:
    """ONNX Mod: remainder with the divisor's sign, or the dividend's (C ``fmod``) if ``fmod``."""
    with np.errstate(all="ignore"):
        return np.asarray((np.fmod if fmod else np.mod)(a, b)).astype(a.dtype, copy=False)


@kernel("", "Pow", since=(7, 12, 13, 15))
def pow_(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """ONNX Pow: ``x ** y`` with the base's dtype, whatever the exponent's."""
    with np.errstate(all="ignore"):
        if x.dtype.kind in "iu" and (y.dtype.kind not in "iu" or np.any(y < 0)):
            # a fractional or negative power of an integer: compute in float, truncate as C does
            return np.power(x.astype(np.float64), y.astype(np.float64)).astype(x.dtype)
        return np.asarray(np.power(x, y)).astype(x.dtype, copy=False)


# --- variadic ------------------------------------------------------------------------------------


@kernel("", "Max", since=(6, 8, 12, 13))
def max_(*data: np.ndarray) -> np.ndarray:
    """ONNX Max of any number of broadcast inputs."""
    return np.asarray(functools.reduce(np.maximum, data))


@kernel("", "Min", since=(6, 8, 12, 13))
def min_(*data: np.ndarray) -> np.ndarray:
    """ONNX Min of any number of broadcast inputs."""
    return np.asarray(functools.reduce(np.minimum, data))


@kernel("", "Sum", since=(6, 8, 13), sums_inputs=True)
def sum_(*data: np.ndarray) -> np.ndarray:
    """ONNX Sum of any number of broadcast inputs."""
    return np.asarray(functools.reduce(np.add, data))


@kernel("", "Mean", since=(6, 8, 13))
def mean(*data: np.ndarray) -> np.ndarray:
    """ONNX Mean of any number of broadcast inputs."""
    return np.asarray(functools.reduce(np.add, data) / len(data)).astype(data[0].dtype, copy=False)
