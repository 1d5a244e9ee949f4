"""NonMaxSuppression and TfIdfVectorizer against onnxruntime on random inputs (every mode)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from ort_reference import compare_with_ort, rng


def _boxes(r: np.random.Generator, batches: int, n: int, center: int) -> np.ndarray:
    """Random boxes, overlapping often; corners in any diagonal order for center_point_box=0."""
    if center:
        xy = r.uniform(0, 4, (batches, n, 2))
        wh = r.uniform(0.2, 2.5, (batches, n, 2))
        return np.concatenate([xy, wh], axis=2).astype(np.float32)
    a, b = r.uniform(0, 4, (batches, n, 2)), r.uniform(0, 4, (batches, n, 2))
    return np.concatenate([a, b], axis=2).astype(np.float32)


NMS_ROWS = [
    # (center_point_box, max_output_boxes_per_class, iou_threshold, score_threshold, classes)
    (0, 3, 0.5, None, 1),
    (0, 10, 0.3, 0.4, 3),
    (1, 5, 0.5, 0.0, 2),
    (1, 100, 0.0, None, 2),
    (0, 0, 0.5, None, 2),
    (0, 100, 1.0, 0.9, 1),
    (1, 2, 0.7, 0.2, 4),
]


@pytest.mark.parametrize("row", NMS_ROWS, ids=[f"cpb{r[0]}-max{r[1]}-iou{r[2]}-score{r[3]}" for r in NMS_ROWS])
def test_non_max_suppression_matches_onnxruntime(row: tuple[Any, ...]) -> None:
    center, limit, iou, score, classes = row
    r = rng()
    boxes = _boxes(r, 2, 24, center)
    scores = r.uniform(0, 1, (2, classes, 24)).astype(np.float32)
    inputs: list[np.ndarray | None] = [boxes, scores, np.array([limit], np.int64), np.array([iou], np.float32)]
    inputs.append(None if score is None else np.array([score], np.float32))
    compare_with_ort("NonMaxSuppression", inputs, {"center_point_box": center}, opset=11)


def test_non_max_suppression_ties_and_omitted_inputs() -> None:
    r = rng()
    boxes = _boxes(r, 1, 16, 0)
    scores = r.integers(0, 3, (1, 2, 16)).astype(np.float32) / 2  # many equal scores
    compare_with_ort("NonMaxSuppression", [boxes, scores, np.array([6], np.int64), np.array([0.4], np.float32)])
    # max_output_boxes_per_class omitted: 0, nothing selected
    compare_with_ort("NonMaxSuppression", [boxes, scores], opset=10)


def test_non_max_suppression_bad_boxes_is_a_clear_error() -> None:
    from onnx_light.runtime.kernels.detection import non_max_suppression

    with pytest.raises(ValueError, match=r"boxes must be \[num_batches, num_boxes, 4\]"):
        non_max_suppression(np.zeros((1, 3, 5), np.float32), np.zeros((1, 1, 3), np.float32))


_TFIDF_INT = {
    "ngram_counts": [0, 4],
    "ngram_indexes": [0, 1, 2, 3, 4, 5, 6],
    "pool_int64s": [2, 3, 5, 4, 5, 6, 7, 8, 6, 7],  # 4 unigrams, 3 bigrams
}
TFIDF_ROWS = [
    ("TF", 1, 1, 0, None),
    ("TF", 2, 2, 0, None),
    ("TF", 1, 2, 2, None),
    ("IDF", 1, 2, 1, None),
    ("IDF", 1, 2, 3, [0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5]),
    ("TFIDF", 1, 2, 2, [0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5]),
    ("TFIDF", 1, 2, 0, None),
]


@pytest.mark.parametrize("row", TFIDF_ROWS, ids=[f"{r[0]}-n{r[1]}{r[2]}-skip{r[3]}-w{bool(r[4])}" for r in TFIDF_ROWS])
@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_tf_idf_vectorizer_ints_match_onnxruntime(row: tuple[Any, ...], dtype: str) -> None:
    mode, lo, hi, skip, weights = row
    attrs: dict[str, Any] = dict(_TFIDF_INT, mode=mode, min_gram_length=lo, max_gram_length=hi, max_skip_count=skip)
    if weights:
        attrs["weights"] = weights
    x = rng().integers(2, 9, (3, 14)).astype(dtype)
    compare_with_ort("TfIdfVectorizer", [x], attrs, opset=9)
    compare_with_ort("TfIdfVectorizer", [x[0]], attrs, opset=9)


def test_tf_idf_vectorizer_strings_and_permuted_indexes() -> None:
    attrs: dict[str, Any] = {
        "mode": "TFIDF",
        "min_gram_length": 1,
        "max_gram_length": 3,
        "max_skip_count": 1,
        "ngram_counts": [0, 3, 5],
        "ngram_indexes": [5, 0, 3, 1, 4, 2],
        "pool_strings": ["a", "bb", "c", "a", "bb", "bb", "c", "a", "a", "bb", "c"],
        "weights": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
    }
    x = rng().choice(np.array(["a", "bb", "c", "d"], object), (2, 12))
    compare_with_ort("TfIdfVectorizer", [x], attrs, opset=9)
