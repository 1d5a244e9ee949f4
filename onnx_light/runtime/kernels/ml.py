"""ai.onnx.ml element kernels: LabelEncoder (1, 2, 4), ArrayFeatureExtractor (1), Binarizer (1).

TreeEnsemble lives in ``tree_ensemble.py``. The other ai.onnx.ml ops have no kernel; the
session refuses them by name (``ai.onnx.ml::Op``) when it compiles the model.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnx_light.runtime._registry import kernel

_DOMAIN = "ai.onnx.ml"

#: LabelEncoder's defaults when no ``default_*`` is given, by the kind of the values
_DEFAULTS = {"U": "_Unused", "O": "_Unused", "i": -1, "u": -1, "f": -0.0}


def _text(s: Any) -> str:
    return s.decode("utf-8") if isinstance(s, bytes) else str(s)


def _as_array(values: Any, dtype: Any) -> np.ndarray:
    if dtype is object:
        return np.array([_text(v) for v in np.asarray(values, dtype=object).ravel()], dtype=object)
    return np.asarray(values, dtype=dtype).ravel()


def _map(x: np.ndarray, keys: np.ndarray, values: np.ndarray, default: Any) -> np.ndarray:
    """``values[i]`` where ``x == keys[i]`` (the last such ``i``), ``default`` elsewhere.

    Float keys equal to NaN match every NaN element.
    """
    out_dtype = values.dtype
    if keys.dtype == object:
        table = dict(zip(keys.tolist(), values.tolist()))
        flat = [table.get(_text(v), default) for v in np.asarray(x, dtype=object).ravel()]
        return np.array(flat, dtype=out_dtype).reshape(x.shape)
    out = np.full(x.shape, default, dtype=out_dtype)
    nan_keys = np.isnan(keys) if keys.dtype.kind == "f" else np.zeros(keys.shape, bool)
    plain = np.flatnonzero(~nan_keys)
    if plain.size:
        # the last occurrence of each key wins: unique over the reversed keys
        uniq, first_in_reversed = np.unique(keys[plain][::-1], return_index=True)
        chosen = values[plain][::-1][first_in_reversed]
        pos = np.clip(np.searchsorted(uniq, x), 0, len(uniq) - 1)
        hit = uniq[pos] == x
        out[hit] = chosen[pos[hit]]
    if nan_keys.any():
        out[np.isnan(x)] = values[np.flatnonzero(nan_keys)[-1]]
    return out


def _chosen(kind: str, given: dict[str, Any]) -> tuple[str, Any]:
    """The one ``keys_*`` / ``values_*`` attribute set: (its suffix, its value)."""
    chosen = [(suffix, v) for suffix, v in given.items() if v is not None]
    if len(chosen) != 1:
        names = [f"{kind}_{s}" for s, _ in chosen] or "none"
        raise ValueError(f"{_DOMAIN}::LabelEncoder: exactly one {kind}_* attribute must be set, got {names}")
    return chosen[0]


_LIST_DTYPES = {"floats": np.float32, "int64s": np.int64, "strings": object}


@kernel(_DOMAIN, "LabelEncoder", since=(2, 4), fresh_output=True)
def label_encoder(
    x: np.ndarray,
    *,
    default_float: float | None = None,
    default_int64: int | None = None,
    default_string: str | None = None,
    default_tensor: np.ndarray | None = None,
    keys_floats: list[float] | None = None,
    keys_int64s: list[int] | None = None,
    keys_strings: list[str] | None = None,
    keys_tensor: np.ndarray | None = None,
    values_floats: list[float] | None = None,
    values_int64s: list[int] | None = None,
    values_strings: list[str] | None = None,
    values_tensor: np.ndarray | None = None,
) -> np.ndarray:
    """Maps each element through ``keys_* -> values_*``; an unknown key gives the default."""
    k_suffix, k_val = _chosen(
        "keys", {"floats": keys_floats, "int64s": keys_int64s, "strings": keys_strings, "tensor": keys_tensor}
    )
    v_suffix, v_val = _chosen(
        "values", {"floats": values_floats, "int64s": values_int64s, "strings": values_strings, "tensor": values_tensor}
    )
    keys = _as_array(k_val, _LIST_DTYPES.get(k_suffix) or (object if k_val.dtype.kind in "OUS" else k_val.dtype))
    values = _as_array(v_val, _LIST_DTYPES.get(v_suffix) or (object if v_val.dtype.kind in "OUS" else v_val.dtype))
    if len(keys) != len(values):
        raise ValueError(f"{_DOMAIN}::LabelEncoder: {len(keys)} keys but {len(values)} values")
    if v_suffix == "tensor":
        default: Any = None if default_tensor is None else _as_array(default_tensor, values.dtype)[0]
    else:
        default = {"floats": default_float, "int64s": default_int64, "strings": default_string}[v_suffix]
    if default is None:
        default = _DEFAULTS[values.dtype.kind]
    return _map(x, keys, values, default)


@kernel(_DOMAIN, "LabelEncoder", since=1, fresh_output=True)
def label_encoder_1(
    x: np.ndarray,
    *,
    classes_strings: list[str] | None = None,
    default_int64: int = -1,
    default_string: str = "_Unused",
) -> np.ndarray:
    """Strings to their index in ``classes_strings``, or int64 indices to those strings."""
    classes = np.array([_text(s) for s in classes_strings or ()], dtype=object)
    if x.dtype == object or x.dtype.kind in "US":
        return _map(x, classes, np.arange(len(classes), dtype=np.int64), default_int64)
    return _map(x.astype(np.int64), np.arange(len(classes), dtype=np.int64), classes, default_string)


@kernel(_DOMAIN, "ArrayFeatureExtractor", since=1, fresh_output=True)
def array_feature_extractor(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``X[..., indices]`` over the flattened indices; a 1-D ``X`` gives one row ``[1, k]``."""
    index = np.asarray(y, dtype=np.int64).ravel()
    last = x.shape[-1] if x.ndim else 0
    bad = index[(index < 0) | (index >= last)]
    if bad.size:
        raise ValueError(
            f"{_DOMAIN}::ArrayFeatureExtractor: index {int(bad[0])} is out of range for a last axis of {last}"
        )
    picked = x[..., index]
    return picked.reshape(1, index.size) if x.ndim == 1 else picked


@kernel(_DOMAIN, "Binarizer", since=1, fresh_output=True)
def binarizer(x: np.ndarray, *, threshold: float = 0.0) -> np.ndarray:
    """1 where ``x > threshold``, else 0, in ``x``'s dtype."""
    return (x > threshold).astype(x.dtype)
