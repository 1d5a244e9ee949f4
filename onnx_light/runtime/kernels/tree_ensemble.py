"""ai.onnx.ml TreeEnsemble (5): every tree walked for the whole batch at once.

Each interior node ``j`` compares feature ``nodes_featureids[j]`` with ``nodes_splits[j]``
by ``nodes_modes[j]`` (0 ``<=``, 1 ``<``, 2 ``>=``, 3 ``>``, 4 ``==``, 5 ``!=``, 6 set
membership in the NaN-delimited ``membership_values``); a NaN feature goes the true way
where ``nodes_missing_value_tracks_true[j]``. The true / false branch is an interior node
or, where ``nodes_trueleafs`` / ``nodes_falseleafs``, a leaf with ``leaf_weights`` and
``leaf_targetids``. A root whose branches are the same leaf is that leaf. The leaves
reached are aggregated per target (0 AVERAGE, 1 SUM, 2 MIN, 3 MAX; a target no leaf
reached scores 0, as in onnxruntime) and the scores post-transformed (0 NONE, 1 SOFTMAX,
2 LOGISTIC, 3 SOFTMAX_ZERO, 4 PROBIT: the spec's numbers; onnxruntime 1.32 swaps 1 and 2).

The walk keeps, for every (sample, tree), the node it is at; each step moves all of
them one level down, so there are as many numpy steps as the deepest tree is deep.
"""

from __future__ import annotations

import math

import numpy as np

from onnx_light.runtime._registry import kernel
from onnx_light.runtime.kernels._erf import erf_float64 as erf

_DOMAIN = "ai.onnx.ml"
_MEMBER = 6


def _branch_true(mode: np.ndarray, value: np.ndarray, split: np.ndarray, member: np.ndarray) -> np.ndarray:
    """Whether each (sample, tree) takes the true branch (NaN handling done by the caller)."""
    with np.errstate(invalid="ignore"):
        table = (
            value <= split,
            value < split,
            value >= split,
            value > split,
            value == split,
            value != split,
            member,
        )
    return np.select([mode == m for m in range(7)], table, default=False)


def _member_sets(modes: np.ndarray, membership_values: np.ndarray | None) -> np.ndarray:
    """(nodes, width) padded members of each BRANCH_MEMBER node (NaN padding, NaN elsewhere)."""
    member_nodes = np.flatnonzero(modes == _MEMBER)
    if member_nodes.size == 0:
        return np.full((len(modes), 1), np.nan)
    if membership_values is None:
        raise ValueError(f"{_DOMAIN}::TreeEnsemble: BRANCH_MEMBER nodes need membership_values")
    vals = np.asarray(membership_values, dtype=np.float64).ravel()
    cuts = np.flatnonzero(np.isnan(vals))
    if len(cuts) != member_nodes.size:
        raise ValueError(
            f"{_DOMAIN}::TreeEnsemble: membership_values holds {len(cuts)} NaN-delimited sets "
            f"for {member_nodes.size} BRANCH_MEMBER nodes"
        )
    sets = np.split(vals, cuts + 1)[: member_nodes.size]
    sets = [s[~np.isnan(s)] for s in sets]
    out = np.full((len(modes), max(1, max(len(s) for s in sets))), np.nan)
    for node, s in zip(member_nodes, sets):
        out[node, : len(s)] = s
    return out


def _aggregate(leaves: np.ndarray, weights: np.ndarray, targets: np.ndarray, n_targets: int, how: int) -> np.ndarray:
    """(N, n_targets) scores from the leaf each (sample, tree) reached."""
    n = leaves.shape[0]
    w, t = weights[leaves], targets[leaves]
    rows = np.repeat(np.arange(n), leaves.shape[1])
    if how in (0, 1):
        out = np.zeros((n, n_targets), dtype=np.float64)
        np.add.at(out, (rows, t.ravel()), w.ravel())
        if how == 0:
            out /= max(leaves.shape[1], 1)
    elif how in (2, 3):
        out = np.full((n, n_targets), np.inf if how == 2 else -np.inf)
        (np.minimum if how == 2 else np.maximum).at(out, (rows, t.ravel()), w.ravel())
        out[np.isinf(out) & ~_reached(rows, t, n, n_targets)] = 0.0
    else:
        raise ValueError(f"{_DOMAIN}::TreeEnsemble: aggregate_function must be 0..3, got {how}")
    return out


def _reached(rows: np.ndarray, targets: np.ndarray, n: int, n_targets: int) -> np.ndarray:
    """(N, n_targets): whether some leaf reached by the sample feeds the target."""
    hit = np.zeros((n, n_targets), dtype=bool)
    hit[rows, targets.ravel()] = True
    return hit


def _probit(p: np.ndarray) -> np.ndarray:
    """``√2 · erfinv(2p - 1)``: the normal quantile, by Newton steps on ``erf``."""
    y = 2 * p - 1
    z = np.clip(y, -1 + 1e-15, 1 - 1e-15)
    x = np.sign(z) * np.sqrt(-np.log((1 - z) * (1 + z)))  # a start above |erfinv|
    x *= 0.8
    for _ in range(60):
        x = x - (erf(x) - z) / (2 / math.sqrt(math.pi) * np.exp(-x * x))
    return np.where(np.abs(y) >= 1, np.copysign(np.inf, y), math.sqrt(2) * x)


def _post_transform(scores: np.ndarray, how: int) -> np.ndarray:
    if how == 0:
        return scores
    if how == 1:
        e = np.exp(scores - scores.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    if how == 2:
        return 1 / (1 + np.exp(-scores))
    if how == 3:  # softmax over the non-zero scores, zeros stay zero
        nz = scores != 0
        e = np.where(nz, np.exp(scores - np.where(nz, scores, -np.inf).max(axis=1, keepdims=True)), 0.0)
        total = e.sum(axis=1, keepdims=True)
        return np.where(total > 0, e / np.where(total > 0, total, 1), 0.0)
    if how == 4:
        return _probit(scores)
    raise ValueError(f"{_DOMAIN}::TreeEnsemble: post_transform must be 0..4, got {how}")


@kernel(_DOMAIN, "TreeEnsemble", since=5, fresh_output=True)
def tree_ensemble(
    x: np.ndarray,
    *,
    aggregate_function: int = 1,
    leaf_targetids: list[int] | None = None,
    leaf_weights: np.ndarray | None = None,
    membership_values: np.ndarray | None = None,
    n_targets: int | None = None,
    nodes_falseleafs: list[int] | None = None,
    nodes_falsenodeids: list[int] | None = None,
    nodes_featureids: list[int] | None = None,
    nodes_hitrates: np.ndarray | None = None,
    nodes_missing_value_tracks_true: list[int] | None = None,
    nodes_modes: np.ndarray | None = None,
    nodes_splits: np.ndarray | None = None,
    nodes_trueleafs: list[int] | None = None,
    nodes_truenodeids: list[int] | None = None,
    post_transform: int = 0,
    tree_roots: list[int] | None = None,
) -> np.ndarray:
    """``Y`` (N, n_targets) in ``X``'s dtype."""
    del nodes_hitrates  # popularity only: no effect on the result
    required = dict(
        leaf_targetids=leaf_targetids, leaf_weights=leaf_weights, n_targets=n_targets,
        nodes_falseleafs=nodes_falseleafs, nodes_falsenodeids=nodes_falsenodeids,
        nodes_featureids=nodes_featureids, nodes_modes=nodes_modes, nodes_splits=nodes_splits,
        nodes_trueleafs=nodes_trueleafs, nodes_truenodeids=nodes_truenodeids, tree_roots=tree_roots,
    )  # fmt: skip
    missing = sorted(k for k, v in required.items() if v is None)
    if missing:
        raise ValueError(f"{_DOMAIN}::TreeEnsemble: required attribute(s) {missing} missing")
    if x.ndim != 2:
        raise ValueError(f"{_DOMAIN}::TreeEnsemble: X must be [N, F], got shape {x.shape}")
    modes = np.asarray(nodes_modes).astype(np.int64).ravel()
    feature = np.asarray(nodes_featureids, np.int64)
    split = np.asarray(nodes_splits, np.float64).ravel()
    true_id, false_id = np.asarray(nodes_truenodeids, np.int64), np.asarray(nodes_falsenodeids, np.int64)
    true_leaf, false_leaf = np.asarray(nodes_trueleafs, bool), np.asarray(nodes_falseleafs, bool)
    tracks = np.zeros(len(modes), bool)
    if nodes_missing_value_tracks_true:
        tracks = np.asarray(nodes_missing_value_tracks_true, bool)
    members = _member_sets(modes, membership_values)
    if feature.size and (feature.min() < 0 or feature.max() >= x.shape[1]):
        raise ValueError(f"{_DOMAIN}::TreeEnsemble: a feature id is outside X's {x.shape[1]} features")
    roots = np.asarray(tree_roots, np.int64)
    # state per (sample, tree): the node index, or the leaf index once is_leaf
    node = np.broadcast_to(roots, (x.shape[0], len(roots))).copy()
    is_leaf = np.broadcast_to(true_leaf[roots] & false_leaf[roots] & (true_id[roots] == false_id[roots]),
                              node.shape).copy()  # fmt: skip
    node[is_leaf] = np.broadcast_to(true_id[roots], node.shape)[is_leaf]
    values = x.astype(np.float64)
    rows = np.arange(x.shape[0])[:, None]
    for _ in range(len(modes) + 1):
        if is_leaf.all():
            break
        at = np.where(is_leaf, 0, node)
        v = values[rows, feature[at]]
        member = (v[..., None] == members[at]).any(axis=-1)
        go_true = _branch_true(modes[at], v, split[at], member) | (np.isnan(v) & tracks[at])
        nxt = np.where(go_true, true_id[at], false_id[at])
        nxt_leaf = np.where(go_true, true_leaf[at], false_leaf[at])
        node = np.where(is_leaf, node, nxt)
        is_leaf = is_leaf | nxt_leaf
    else:
        raise ValueError(f"{_DOMAIN}::TreeEnsemble: the nodes form a cycle")
    weights = np.asarray(leaf_weights, np.float64).ravel()
    targets = np.asarray(leaf_targetids, np.int64)
    assert n_targets is not None
    scores = _aggregate(node, weights, targets, int(n_targets), aggregate_function)
    return _post_transform(scores, post_transform).astype(x.dtype)
