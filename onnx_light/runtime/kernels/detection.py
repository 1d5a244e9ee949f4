"""NonMaxSuppression (10, 11): greedy IoU suppression per batch and class.

For each ``(batch, class)`` the candidates are the boxes whose score is above
``score_threshold`` (all boxes when it is omitted), visited by decreasing score (ties:
the lower box index first, as onnxruntime and the reference visit them). A candidate is
kept unless its IoU with a box kept before it exceeds ``iou_threshold``; at most
``max_output_boxes_per_class`` are kept. The output lists ``[batch, class, box]`` in
that order: batches, then classes, then the order of selection.

The greedy loop runs once per *kept* box: each kept box suppresses, in one vector step,
every remaining candidate that overlaps it too much.
"""

from __future__ import annotations

import numpy as np

from onnx_light.runtime._registry import kernel


def _corners(boxes: np.ndarray, center_point_box: int) -> np.ndarray:
    """(n, 4) boxes as ``[y_min, x_min, y_max, x_max]`` in float64.

    ``center_point_box=0``: ``[y1, x1, y2, x2]``, any diagonal pair of corners;
    ``1``: ``[x_center, y_center, width, height]``.
    """
    b = boxes.astype(np.float64)
    if center_point_box == 0:
        y = np.sort(b[:, [0, 2]], axis=1)
        x = np.sort(b[:, [1, 3]], axis=1)
        return np.stack([y[:, 0], x[:, 0], y[:, 1], x[:, 1]], axis=1)
    if center_point_box == 1:
        xc, yc, half_w, half_h = b[:, 0], b[:, 1], b[:, 2] / 2, b[:, 3] / 2
        return np.stack([yc - half_h, xc - half_w, yc + half_h, xc + half_w], axis=1)
    raise ValueError(f"center_point_box must be 0 or 1, got {center_point_box}")


def _iou(box: np.ndarray, others: np.ndarray, area: float, areas: np.ndarray) -> np.ndarray:
    """IoU of one box with each of ``others`` (corner form); 0 where an area is not positive."""
    h = np.minimum(box[2], others[:, 2]) - np.maximum(box[0], others[:, 0])
    w = np.minimum(box[3], others[:, 3]) - np.maximum(box[1], others[:, 1])
    inter = np.where((h > 0) & (w > 0), h * w, 0.0)
    union = area + areas - inter
    valid = (inter > 0) & (area > 0) & (areas > 0) & (union > 0)
    return np.where(valid, inter / np.where(valid, union, 1.0), 0.0)


def _select(
    corners: np.ndarray, scores: np.ndarray, limit: int, iou_threshold: float, score_threshold: float | None
) -> list[int]:
    """Box indices kept for one (batch, class), in the order of selection."""
    candidates = np.arange(len(scores)) if score_threshold is None else np.flatnonzero(scores > score_threshold)
    # descending score, ties by ascending index: a stable sort of the negated scores
    order = candidates[np.argsort(-scores[candidates].astype(np.float64), kind="stable")]
    boxes = corners[order]
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    alive = np.ones(len(order), dtype=bool)
    kept: list[int] = []
    start = 0
    while len(kept) < limit:
        rest = np.flatnonzero(alive[start:])
        if rest.size == 0:
            break
        i = start + int(rest[0])
        kept.append(int(order[i]))
        alive[i] = False
        start = i + 1
        later = start + np.flatnonzero(alive[start:])
        if later.size:
            iou = _iou(boxes[i], boxes[later], areas[i], areas[later])
            alive[later[iou > iou_threshold]] = False
    return kept


def _scalar(x: np.ndarray | None, name: str) -> float | None:
    """The value of an optional scalar (or one-element) input; None when omitted or empty."""
    if x is None or np.size(x) == 0:
        return None
    if np.size(x) != 1:
        raise ValueError(f"NonMaxSuppression: {name} must hold one value, got shape {np.shape(x)}")
    return np.asarray(x).reshape(()).item()


@kernel("", "NonMaxSuppression", since=(10, 11), fresh_output=True)
def non_max_suppression(
    boxes: np.ndarray,
    scores: np.ndarray,
    max_output_boxes_per_class: np.ndarray | None = None,
    iou_threshold: np.ndarray | None = None,
    score_threshold: np.ndarray | None = None,
    *,
    center_point_box: int = 0,
) -> np.ndarray:
    """``selected_indices`` (num_selected, 3) int64: ``[batch_index, class_index, box_index]``."""
    if boxes.ndim != 3 or boxes.shape[2] != 4:
        raise ValueError(f"NonMaxSuppression: boxes must be [num_batches, num_boxes, 4], got shape {boxes.shape}")
    if scores.ndim != 3 or scores.shape[0] != boxes.shape[0] or scores.shape[2] != boxes.shape[1]:
        raise ValueError(
            f"NonMaxSuppression: scores must be [num_batches, num_classes, num_boxes] = "
            f"[{boxes.shape[0]}, C, {boxes.shape[1]}], got shape {scores.shape}"
        )
    limit = max(int(_scalar(max_output_boxes_per_class, "max_output_boxes_per_class") or 0), 0)
    iou = float(_scalar(iou_threshold, "iou_threshold") or 0.0)
    raw_threshold = _scalar(score_threshold, "score_threshold")
    threshold = None if raw_threshold is None else float(raw_threshold)
    rows: list[tuple[int, int, int]] = []
    if limit > 0:
        for b in range(boxes.shape[0]):
            corners = _corners(boxes[b], center_point_box)
            for c in range(scores.shape[1]):
                rows.extend((b, c, k) for k in _select(corners, scores[b, c], limit, iou, threshold))
    return np.array(rows, dtype=np.int64).reshape(len(rows), 3)
