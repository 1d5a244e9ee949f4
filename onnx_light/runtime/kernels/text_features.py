"""TfIdfVectorizer (9): counts of pooled n-grams, skip-grams included, per row.

An n-gram of length ``n`` with skip ``s`` takes the tokens at ``i, i + d, ..., i + (n-1)d``
with ``d = s + 1``; every ``s`` in ``0..max_skip_count`` and every ``n`` in
``min_gram_length..max_gram_length`` is counted, unigrams once (a skip does not change
them). The pool holds the n-grams of each length in turn: ``ngram_counts[k]`` is where the
(k+1)-grams start in ``pool_int64s`` / ``pool_strings``, and the j-th pooled n-gram (over
all lengths) is counted into output column ``ngram_indexes[j]``. Modes: ``TF`` the counts,
``IDF`` the weight where the count is positive (1 without weights), ``TFIDF`` the weight
times the count (the count without weights). ``weights[j]`` belongs to the j-th pooled
n-gram (so to column ``ngram_indexes[j]``), as the spec and onnxruntime have it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from onnx_light.runtime._registry import kernel

_MODES = ("TF", "IDF", "TFIDF")


def _pool(pool: Sequence[Any], ngram_counts: Sequence[int], ngram_indexes: Sequence[int]) -> dict[tuple[Any, ...], int]:
    """Maps each pooled n-gram (a tuple of tokens) to its output column."""
    table: dict[tuple[Any, ...], int] = {}
    starts = [*ngram_counts, len(pool)]
    j = 0
    for k in range(len(ngram_counts)):
        n = k + 1
        lo, hi = starts[k], starts[k + 1]
        if (hi - lo) % n:
            raise ValueError(f"TfIdfVectorizer: the {n}-grams of the pool ({hi - lo} tokens) are not a multiple of {n}")
        for start in range(lo, hi, n):
            if j >= len(ngram_indexes):
                raise ValueError(
                    f"TfIdfVectorizer: the pool holds more n-grams than ngram_indexes ({len(ngram_indexes)}) maps"
                )
            table[tuple(pool[start : start + n])] = int(ngram_indexes[j])
            j += 1
    return table


def _count_row(
    row: list[Any], table: dict[tuple[Any, ...], int], out: np.ndarray, lengths: range, max_skip: int
) -> None:
    """Adds the counts of one row's pooled n-grams into ``out`` (its output row)."""
    size = len(row)
    for n in lengths:
        for d in range(1, (max_skip + 2) if n > 1 else 2):
            for i in range(size - (n - 1) * d):
                col = table.get(tuple(row[i : i + (n - 1) * d + 1 : d]))
                if col is not None:
                    out[col] += 1


@kernel("", "TfIdfVectorizer", since=9, fresh_output=True)
def tf_idf_vectorizer(
    x: np.ndarray,
    *,
    max_gram_length: int | None = None,
    max_skip_count: int | None = None,
    min_gram_length: int | None = None,
    mode: str | None = None,
    ngram_counts: list[int] | None = None,
    ngram_indexes: list[int] | None = None,
    pool_int64s: list[int] | None = None,
    pool_strings: list[str] | None = None,
    weights: list[float] | None = None,
) -> np.ndarray:
    """``[max(ngram_indexes) + 1]`` (1-D ``x``) or ``[N, max(ngram_indexes) + 1]`` float32."""
    required: dict[str, Any] = {
        "max_gram_length": max_gram_length,
        "max_skip_count": max_skip_count,
        "min_gram_length": min_gram_length,
    }
    required |= {"mode": mode, "ngram_counts": ngram_counts, "ngram_indexes": ngram_indexes}
    missing = sorted(k for k, v in required.items() if v is None)
    if missing:
        raise ValueError(f"TfIdfVectorizer: required attribute(s) {missing} missing")
    assert max_gram_length is not None and max_skip_count is not None and min_gram_length is not None
    assert ngram_counts is not None and ngram_indexes is not None
    if mode not in _MODES:
        raise ValueError(f"TfIdfVectorizer: mode must be one of {_MODES}, got {mode!r}")
    if (pool_int64s is None) == (pool_strings is None):
        raise ValueError("TfIdfVectorizer: exactly one of pool_int64s and pool_strings must be set")
    if x.ndim not in (1, 2):
        raise ValueError(f"TfIdfVectorizer: the input must be [C] or [N, C], got shape {x.shape}")
    if not 1 <= min_gram_length <= max_gram_length:
        raise ValueError(f"TfIdfVectorizer: need 1 <= min_gram_length ({min_gram_length}) <= max_gram_length")
    pool: Sequence[Any] = pool_int64s if pool_int64s is not None else [_text(s) for s in pool_strings or ()]
    table = _pool(pool, ngram_counts, ngram_indexes)
    width = max(ngram_indexes, default=-1) + 1
    rows = x.reshape(1, -1) if x.ndim == 1 else x
    counts = np.zeros((rows.shape[0], width), dtype=np.int64)
    lengths = range(min_gram_length, max_gram_length + 1)
    for r in range(rows.shape[0]):
        tokens = rows[r].tolist() if pool_int64s is not None else [_text(t) for t in rows[r]]
        _count_row(tokens, table, counts[r], lengths, max(max_skip_count, 0))
    w = np.ones(width)
    if weights:
        if len(weights) != len(ngram_indexes):
            raise ValueError(f"TfIdfVectorizer: {len(weights)} weights for {len(ngram_indexes)} pooled n-grams")
        w[np.asarray(ngram_indexes, np.int64)] = weights  # the j-th pooled n-gram's weight, at its column
    if mode == "TF":
        y = counts.astype(np.float64)
    elif mode == "IDF":
        y = (counts > 0) * w
    else:
        y = counts * w
    return y.astype(np.float32).reshape(width) if x.ndim == 1 else y.astype(np.float32)


def _text(s: Any) -> str:
    return s.decode("utf-8") if isinstance(s, bytes) else str(s)
