"""Constant folding: nodes whose inputs are all small constants become ``Constant`` nodes.

onnx_core may not import the runtime (the dependency direction), so the folds are a few
numpy functions for the shape and integer ops the gradient pass emits; ``optimize(fold=...)``
takes another function (the facade could hand it the runtime's kernels).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .._dtypes import tensor_dtype_to_np_dtype
from .._proto import NodeProto, TensorProto
from ..gradient._fastpath import attribute_values, tensor_array, tensor_attribute
from ..numpy_helper import from_array

__all__ = ["FoldFn", "FOLD_MAX_ELEMENTS", "fold_numpy", "fold_node", "has_reference"]

#: ``fold(op_type, domain, inputs, attributes)`` -> the node's outputs, or None: not folded
FoldFn = Callable[[str, str, list[np.ndarray], dict[str, Any]], list[np.ndarray] | None]

#: the largest constant read or written by a fold (shapes, axes, small index tensors)
FOLD_MAX_ELEMENTS = 1024

_NUMERIC = "biuf"


def _arith(op: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[..., np.ndarray]:
    def run(a: np.ndarray, b: np.ndarray, **_: Any) -> np.ndarray:
        if a.dtype != b.dtype:
            raise TypeError("mixed types")
        return np.asarray(op(a, b)).astype(a.dtype)

    return run


def _div(a: np.ndarray, b: np.ndarray, **_: Any) -> np.ndarray:
    """Integer Div truncates toward zero; numpy's floor division agrees for a >= 0, b > 0."""
    if a.dtype != b.dtype:
        raise TypeError("mixed types")
    if a.dtype.kind == "f":
        return np.asarray(a / b).astype(a.dtype)
    if (a < 0).any() or (b <= 0).any():
        raise ValueError("not folded: sign")
    return np.asarray(a // b).astype(a.dtype)


def _axes(inputs: list[np.ndarray], attrs: dict[str, Any]) -> tuple[int, ...] | None:
    if len(inputs) > 1:
        return tuple(int(v) for v in inputs[1].reshape(-1))
    axes = attrs.get("axes")
    return None if axes is None else tuple(int(v) for v in axes)


def _unsqueeze(*inputs: np.ndarray, **attrs: Any) -> np.ndarray:
    x, axes = inputs[0], _axes(list(inputs), attrs)
    if axes is None:
        raise ValueError("no axes")
    rank = x.ndim + len(axes)
    return np.expand_dims(x, tuple(sorted(a % rank for a in axes)))


def _squeeze(*inputs: np.ndarray, **attrs: Any) -> np.ndarray:
    x, axes = inputs[0], _axes(list(inputs), attrs)
    return np.squeeze(x) if axes is None else np.squeeze(x, axis=tuple(a % x.ndim for a in axes))


def _reshape(x: np.ndarray, shape: np.ndarray, *, allowzero: int = 0, **_: Any) -> np.ndarray:
    dims = [int(d) for d in shape.reshape(-1)]
    if not allowzero:
        dims = [x.shape[k] if d == 0 else d for k, d in enumerate(dims)]
    return x.reshape(dims)


def _cast(x: np.ndarray, *, to: int, **_: Any) -> np.ndarray:
    dtype = tensor_dtype_to_np_dtype(to)
    if dtype.kind not in _NUMERIC or (x.dtype.kind == "f" and dtype.kind in "iu"):
        raise ValueError("not folded: a cast numpy and ONNX may round differently")
    return x.astype(dtype)


def _range(start: np.ndarray, limit: np.ndarray, delta: np.ndarray, **_: Any) -> np.ndarray:
    """Integer Range only, its count in exact integer arithmetic (a float Range rounds as the
    runtime's kernel does, once per element from float64, or per step in float16: left to run)."""
    if start.dtype.kind not in "iu":
        raise ValueError("not folded: a float Range")
    i0, i1, di = int(start.item()), int(limit.item()), int(delta.item())
    if di == 0:
        raise ValueError("not folded: zero delta")
    count = max(-((i0 - i1) // di), 0)  # ceil((i1 - i0) / di)
    if count > FOLD_MAX_ELEMENTS:
        raise ValueError("too large")
    return (start + np.arange(count, dtype=start.dtype) * delta).astype(start.dtype)


def _constant_of_shape(shape: np.ndarray, *, value: TensorProto | None = None, **_: Any) -> np.ndarray:
    fill = np.zeros(1, np.float32) if value is None else tensor_array(value).reshape(-1)
    dims = [int(d) for d in shape.reshape(-1)]
    if int(np.prod(dims)) > FOLD_MAX_ELEMENTS:
        raise ValueError("too large")
    return np.full(dims, fill[0], dtype=fill.dtype)


_FOLDS: dict[str, Callable[..., np.ndarray]] = {
    "Add": _arith(np.add),
    "Sub": _arith(np.subtract),
    "Mul": _arith(np.multiply),
    "Div": _div,
    "Concat": lambda *xs, axis, **_: np.concatenate(xs, axis=axis),
    "Gather": lambda x, i, *, axis=0, **_: np.take(x, i, axis=axis),
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Reshape": _reshape,
    "Cast": _cast,
    "Range": _range,
    "ConstantOfShape": _constant_of_shape,
}


def fold_numpy(
    op_type: str, domain: str, inputs: list[np.ndarray], attributes: dict[str, Any]
) -> list[np.ndarray] | None:
    """The outputs of a default-domain shape or arithmetic node from its constant inputs.

    Folds Add, Sub, Mul, Div, Concat, Gather, Unsqueeze, Squeeze, Reshape, Cast, Range and
    ConstantOfShape on numeric tensors; anything else, or anything numpy might compute
    differently from ONNX (integer Div of negatives, float-to-int Cast, a bad axis), gives
    None and the node is left to run.

    Args:
        op_type: the node's op.
        domain: the node's domain (only the default domain is folded).
        inputs: the values of its inputs, in order.
        attributes: its attributes, by name.

    Returns:
        The output values, or None.
    """
    run = _FOLDS.get(op_type)
    if run is None or domain not in ("", "ai.onnx") or any(x.dtype.kind not in _NUMERIC for x in inputs):
        return None
    try:
        with np.errstate(all="ignore"):
            return [np.array(run(*inputs, **attributes))]  # a copy; not ascontiguousarray, which makes 0-d 1-d
    except (ValueError, TypeError, IndexError, ZeroDivisionError):
        return None


def _constant_value(attributes: list[Any]) -> np.ndarray | None:
    """The value of a ``Constant`` node given as a tensor (``value``), if small and numeric."""
    values = attribute_values(attributes)
    tensor = values.get("value")
    if len(values) != 1 or not isinstance(tensor, TensorProto):
        return None
    arr = tensor_array(tensor)
    return arr if arr.size <= FOLD_MAX_ELEMENTS and arr.dtype.kind in _NUMERIC else None


def _shape_of(shape: tuple[int, ...], attributes: list[Any]) -> np.ndarray:
    values = attribute_values(attributes)
    rank = len(shape)
    start, end = int(values.get("start", 0)), int(values.get("end", rank))
    start, end = (max(0, min(rank, v + rank if v < 0 else v)) for v in (start, end))
    return np.asarray(shape[start:end], dtype=np.int64)


def has_reference(attributes: list[Any]) -> bool:
    """Whether an attribute refers to one of the enclosing function's (``ref_attr_name``): its
    value is known only when the function is called."""
    return any(getattr(a, "_ref_attr_name", "") for a in attributes)


def fold_node(
    node: NodeProto,
    op_type: str,
    domain: str,
    inputs: list[str],
    known: dict[str, np.ndarray | NodeProto],
    shapes: dict[str, tuple[int, ...]] | None,
    fold: FoldFn,
) -> NodeProto | None:
    """The ``Constant`` node replacing ``node`` when ``fold`` computes it from constant
    inputs, else None.

    ``known`` maps the names of constants to their values, or to the ``Constant`` node
    whose value is read only when a fold needs it (most constants feed no fold); a fold's
    result is recorded. ``Shape`` of a value whose static shape ``shapes`` holds folds too.
    ``inputs`` are ``node``'s inputs as the caller renamed them.
    """
    outputs: list[str] = getattr(node, "_output", [])
    if len(outputs) != 1 or not outputs[0]:
        return None
    if op_type == "Constant" and not domain:
        known[outputs[0]] = node  # read when a fold needs it
        return None
    result: list[np.ndarray] | None = None
    if op_type == "Shape" and not domain and len(inputs) == 1 and shapes and inputs[0] in shapes:
        result = [_shape_of(shapes[inputs[0]], getattr(node, "_attribute", []))]
    elif inputs and all(i in known for i in inputs):
        if has_reference(getattr(node, "_attribute", [])):
            return None  # an attribute of the enclosing function's: no value until it is called
        values: list[np.ndarray] = []
        for name in inputs:
            value = _value(known, name)
            if value is None:
                return None
            values.append(value)
        result = fold(op_type, domain, values, attribute_values(getattr(node, "_attribute", [])))
    if result is None or len(result) != 1 or result[0].size > FOLD_MAX_ELEMENTS:
        return None
    known[outputs[0]] = result[0]
    return _constant_node(outputs[0], result[0])


def _value(known: dict[str, np.ndarray | NodeProto], name: str) -> np.ndarray | None:
    """The value of constant ``name``, read from its ``Constant`` node on first use (None:
    not a small numeric tensor, and ``name`` is forgotten)."""
    value = known[name]
    if isinstance(value, NodeProto):
        array = _constant_value(getattr(value, "_attribute", []))
        if array is None:
            del known[name]
            return None
        known[name] = value = array
    return value


def _constant_node(name: str, value: np.ndarray) -> NodeProto:
    node = NodeProto(op_type="Constant", output=[name])
    node.attribute.append(tensor_attribute("value", from_array(value)))
    return node
