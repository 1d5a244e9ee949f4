"""String kernels: StringConcat, StringSplit, RegexFullMatch, StringNormalizer (``re`` and ``str``)."""

from __future__ import annotations

import re

import numpy as np

from onnx_light.runtime._registry import kernel


def _strings(x: np.ndarray) -> np.ndarray:
    """An array of Python ``str`` (object dtype); bytes are decoded as UTF-8."""
    flat = [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in np.asarray(x, dtype=object).ravel()]
    return np.array(flat, dtype=object).reshape(np.shape(x))


@kernel("", "StringConcat", since=20)
def string_concat(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Elementwise ``x + y`` with numpy broadcasting."""
    return np.asarray(np.add(_strings(x), _strings(y)), dtype=object)


@kernel("", "StringSplit", since=20)
def string_split(
    x: np.ndarray, *, delimiter: str | None = None, maxsplit: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Splits each string; ``Y`` is padded with ``""`` to the longest split, ``Z`` counts the pieces.

    With no (or an empty) delimiter, runs of whitespace separate and leading/trailing
    whitespace is dropped, as Python's ``str.split()``.
    """
    xs = _strings(x)
    limit = -1 if maxsplit is None else int(maxsplit)
    parts = [s.split(delimiter or None, limit) for s in xs.ravel()]
    width = max((len(p) for p in parts), default=0)
    y = np.full((len(parts), width), "", dtype=object)
    for i, p in enumerate(parts):
        y[i, : len(p)] = p
    z = np.array([len(p) for p in parts], np.int64).reshape(xs.shape)
    return y.reshape(*xs.shape, width), z


@kernel("", "RegexFullMatch", since=20)
def regex_full_match(x: np.ndarray, *, pattern: str) -> np.ndarray:
    """True where the whole string matches the regular expression ``pattern``."""
    try:
        compiled = re.compile(pattern)
    except re.error as err:
        raise ValueError(f"RegexFullMatch: pattern {pattern!r} is not a valid regular expression: {err}") from None
    xs = _strings(x)
    return np.array([compiled.fullmatch(s) is not None for s in xs.ravel()], bool).reshape(xs.shape)


@kernel("", "StringNormalizer", since=10)
def string_normalizer(
    x: np.ndarray,
    *,
    case_change_action: str = "NONE",
    is_case_sensitive: int = 0,
    locale: str | None = None,
    stopwords: list[str] | None = None,
) -> np.ndarray:
    """Removes ``stopwords`` then changes case (LOWER / UPPER / NONE); input ``[C]`` or ``[1, C]``."""
    if case_change_action not in ("NONE", "LOWER", "UPPER"):
        raise ValueError(f"case_change_action must be NONE, LOWER or UPPER, got {case_change_action!r}")
    if x.ndim not in (1, 2) or (x.ndim == 2 and x.shape[0] != 1):
        raise ValueError(f"StringNormalizer takes [C] or [1, C] strings, got shape {x.shape}")
    words = list(_strings(x).ravel())
    stop = set(stopwords or [])
    if is_case_sensitive:
        kept = [w for w in words if w not in stop]
    else:
        folded = {s.lower() for s in stop}
        kept = [w for w in words if w.lower() not in folded]
    if case_change_action == "LOWER":
        kept = [w.lower() for w in kept]
    elif case_change_action == "UPPER":
        kept = [w.upper() for w in kept]
    out = np.array(kept or [""], dtype=object)
    return out.reshape(1, -1) if x.ndim == 2 else out
