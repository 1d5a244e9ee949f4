"""Property generators of the tensor family: shape and indexing ops (see propgen.py).

Integer arguments are initializers, or (drawn) graph inputs known only at run time.
Indices are drawn negative and positive; repeated only where the op accumulates them
(Gather*, Scatter* with reduction="add"): a repeated index under reduction="none" is the
last-write-wins case, engineer i8-wrong's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gradcheck import Case
from hypothesis import strategies as st
from propgen import (
    Draw,
    Gen,
    axes,
    axis,
    broadcast_shapes,
    i64,
    make_case,
    normal,
    shape,
    side,
    subset,
    sum_of_squares,
)


def _consts(draw: Draw, *names: str) -> tuple[str, ...]:
    """Integer inputs as initializers (usually) or as run-time graph inputs."""
    return () if draw(st.booleans()) and draw(st.booleans()) else names


def _signed(rng: np.random.Generator, values: np.ndarray, bound: int | np.ndarray) -> np.ndarray:
    """``values`` in [0, bound) written negative (v - bound) at random."""
    return i64(np.where(rng.random(np.shape(values)) < 0.5, values - bound, values))


def _reshape(draw: Draw, rng: np.random.Generator) -> Case:
    dims = shape(draw, 0, 4)
    target = list(draw(st.permutations(dims)))
    if len(target) > 1 and draw(st.booleans()):
        target[:2] = [target[0] * target[1]]
    if draw(st.booleans()):
        target.insert(draw(st.integers(0, len(target))), 1)
    if target and draw(st.booleans()):
        target[draw(st.integers(0, len(target) - 1))] = -1
    target = [0 if k < len(dims) and t == dims[k] and draw(st.booleans()) else t for k, t in enumerate(target)]
    inputs = {"x": normal(rng, dims), "s": i64(target)}
    return make_case("Reshape", inputs, ["x"], consts=_consts(draw, "s"))


def _flatten(draw: Draw, rng: np.random.Generator) -> Case:
    dims = shape(draw, 0, 4)
    a = int(draw(st.integers(-len(dims), len(dims))))
    return make_case("Flatten", {"x": normal(rng, dims)}, ["x"], attrs={"axis": a})


def _squeeze(draw: Draw, rng: np.random.Generator) -> Case:
    dims = shape(draw, 1, 4)
    ones = [k for k, d in enumerate(dims) if d == 1]
    picked = None
    if ones and draw(st.booleans()):
        chosen = draw(st.lists(st.sampled_from(ones), min_size=1, unique=True))
        picked = [k - len(dims) if draw(st.booleans()) else k for k in chosen]
    opset = int(draw(st.sampled_from([11, 13, 21])))
    if opset < 13:
        return make_case("Squeeze", {"x": normal(rng, dims)}, ["x"], attrs={"axes": picked} if picked else {}, opset=11)
    inputs = {"x": normal(rng, dims), "a": i64(picked) if picked else None}
    return make_case("Squeeze", inputs, ["x"], opset=opset, consts=_consts(draw, "a"))


def _unsqueeze(draw: Draw, rng: np.random.Generator) -> Case:
    dims = shape(draw, 0, 3)
    out_rank = len(dims) + draw(st.integers(1, 2))
    picked = axes(draw, out_rank, min_size=1)[: out_rank - len(dims)]
    while len(picked) < out_rank - len(dims):
        picked.append(next(k for k in range(out_rank) if k not in picked and k - out_rank not in picked))
    if draw(st.booleans()):
        return make_case("Unsqueeze", {"x": normal(rng, dims)}, ["x"], attrs={"axes": picked}, opset=11)
    return make_case("Unsqueeze", {"x": normal(rng, dims), "a": i64(picked)}, ["x"], consts=_consts(draw, "a"))


def _transpose(draw: Draw, rng: np.random.Generator) -> Case:
    dims = shape(draw, 0, 4)
    attrs = {"perm": list(draw(st.permutations(range(len(dims)))))} if dims and draw(st.booleans()) else {}
    return make_case("Transpose", {"x": normal(rng, dims)}, ["x"], attrs=attrs)


def _expand(draw: Draw, rng: np.random.Generator) -> Case:
    x, s = broadcast_shapes(draw, 2)
    return make_case("Expand", {"x": normal(rng, x), "s": i64(s)}, ["x"], consts=_consts(draw, "s"))


def _tile(draw: Draw, rng: np.random.Generator) -> Case:
    dims = shape(draw, 1, 3)
    reps = [int(draw(st.integers(1, 3))) for _ in dims]
    return make_case("Tile", {"x": normal(rng, dims), "r": i64(reps)}, ["x"], consts=_consts(draw, "r"))


def _cumsum(draw: Draw, rng: np.random.Generator) -> Case:
    dims = shape(draw, 1, 3)
    attrs = {"exclusive": int(draw(st.integers(0, 1))), "reverse": int(draw(st.integers(0, 1)))}
    inputs = {"x": normal(rng, dims), "a": i64(axis(draw, len(dims)))}
    return make_case("CumSum", inputs, ["x"], attrs=attrs, consts=_consts(draw, "a"))


def _concat(draw: Draw, rng: np.random.Generator) -> Case:
    dims = shape(draw, 1, 3)
    a = axis(draw, len(dims))
    n = int(draw(st.integers(1, 3)))
    inputs = {}
    for k in range(n):
        part = list(dims)
        part[a] = side(draw, 1, 3)
        inputs[f"x{k}"] = normal(rng, part)
    return make_case("Concat", inputs, subset(draw, list(inputs)), attrs={"axis": a})


def _split(draw: Draw, rng: np.random.Generator) -> Case:
    dims = shape(draw, 1, 3)
    a = axis(draw, len(dims))
    sizes = [side(draw, 1, 3) for _ in range(draw(st.integers(1, 3)))]
    dims[a] = sum(sizes)
    outs = ["y"] + [f"y{k}" for k in range(1, len(sizes))]
    kept = subset(draw, outs)
    form = draw(st.sampled_from(["attr11", "input13", "num_outputs18", "equal"]))
    x = normal(rng, dims)
    kw: dict[str, Any] = {"outputs": len(sizes), "extra": sum_of_squares(kept), "attrs": {"axis": a}}
    if form == "attr11":
        return make_case("Split", {"x": x}, ["x"], opset=11, **{**kw, "attrs": {"axis": a, "split": sizes}})
    if form == "input13":
        return make_case("Split", {"x": x, "s": i64(sizes)}, ["x"], opset=13, consts=_consts(draw, "s"), **kw)
    # num_outputs: ceil(d / n) each, the last one smaller; "equal" (opset 13): d divisible by n
    n = len(sizes)
    if form == "equal":
        dims[a] = n * sizes[0]
        return make_case("Split", {"x": normal(rng, dims)}, ["x"], opset=13, **kw)
    per = -(-dims[a] // n)
    if per * (n - 1) >= dims[a]:  # no valid split into n non-empty parts of that form
        kw["outputs"] = n = -(-dims[a] // per)
        kw["extra"] = sum_of_squares(["y"])
    return make_case("Split", {"x": x}, ["x"], opset=18, **{**kw, "attrs": {"axis": a, "num_outputs": n}})


def _slice(draw: Draw, rng: np.random.Generator) -> Case:
    dims = shape(draw, 1, 3)
    picked = axes(draw, len(dims), min_size=1)
    starts, ends, steps = [], [], []
    for a in picked:
        d = dims[a]
        steps.append(int(draw(st.sampled_from([1, 1, 2, 3, -1, -2]))))
        starts.append(int(draw(st.integers(-d - 2, d + 2))))
        # (onnxruntime slices one element for end = INT64_MAX with a negative step: not drawn)
        far = [-(2**63)] if steps[-1] < 0 else [2**63 - 1, -(2**63)]
        ends.append(int(draw(st.one_of(st.integers(-d - 2, d + 2), st.sampled_from(far)))))
    x = normal(rng, dims)
    if draw(st.booleans()) and all(s == 1 for s in steps):  # opset 9: attributes
        attrs = {"starts": starts, "ends": ends, "axes": picked}
        return make_case("Slice", {"x": x}, ["x"], attrs=attrs, opset=9)
    inputs: dict[str, np.ndarray | None] = {"x": x, "s": i64(starts), "e": i64(ends), "a": i64(picked), "t": None}
    if picked == list(range(len(picked))) and draw(st.booleans()):
        inputs["a"] = None  # default axes 0..k-1
    if any(s != 1 for s in steps) or draw(st.booleans()):
        inputs["t"] = i64(steps)
    return make_case("Slice", inputs, ["x"], consts=_consts(draw, "s", "e", "a", "t"))


def _gather(draw: Draw, rng: np.random.Generator, int32: bool = False) -> Case:
    dims = shape(draw, 1, 3)
    a = axis(draw, len(dims))
    idx = shape(draw, 0, 2)
    indices = _signed(rng, rng.integers(0, dims[a], idx), dims[a]).astype(np.int32 if int32 else np.int64)
    inputs = {"x": normal(rng, dims), "i": indices}
    return make_case("Gather", inputs, ["x"], attrs={"axis": a}, consts=_consts(draw, "i"))


def _gather_elements(draw: Draw, rng: np.random.Generator, smaller: bool = False) -> Case:
    """``indices`` has data's sides off the axis, or (``smaller``) sides up to them."""
    dims = shape(draw, 2 if smaller else 1, 3)
    a = axis(draw, len(dims)) % len(dims)
    idx = list(dims)
    if smaller:  # the next axis is at least 2 long in data, 1 shorter in indices
        dims[(a + 1) % len(dims)] = max(dims[(a + 1) % len(dims)], 2)
        idx = [side(draw, 1, d) for d in dims]
        idx[(a + 1) % len(dims)] = dims[(a + 1) % len(dims)] - 1
    idx[a] = side(draw)
    indices = _signed(rng, rng.integers(0, dims[a], idx), dims[a])
    inputs = {"x": normal(rng, dims), "i": indices}
    return make_case("GatherElements", inputs, ["x"], attrs={"axis": a}, consts=_consts(draw, "i"))


def _gather_nd(draw: Draw, rng: np.random.Generator) -> Case:
    dims = shape(draw, 1, 4)
    b = int(draw(st.integers(0, len(dims) - 1)))
    q = int(draw(st.integers(1, len(dims) - b)))
    middle = shape(draw, 0, 1)
    bound = np.asarray(dims[b : b + q])
    idx_shape = [*dims[:b], *middle, q]
    indices = _signed(rng, np.floor(rng.random(idx_shape) * bound).astype(np.int64), bound)
    inputs = {"x": normal(rng, dims), "i": indices}
    return make_case("GatherND", inputs, ["x"], attrs={"batch_dims": b}, consts=_consts(draw, "i"))


def _scatter_elements(draw: Draw, rng: np.random.Generator, smaller: bool = False, repeat: bool = False) -> Case:
    """reduction="none": distinct indices along the axis in every fiber; "add": any.
    ``indices`` has data's sides off the axis, or (``smaller``) sides up to them."""
    dims = shape(draw, 2 if smaller else 1, 3)
    a = axis(draw, len(dims)) % len(dims)
    reduction = "none" if repeat else draw(st.sampled_from(["none", "add"]))
    if smaller:  # the next axis is at least 2 long in data, 1 shorter in indices
        dims[(a + 1) % len(dims)] = max(dims[(a + 1) % len(dims)], 2)
    idx = [side(draw, 1, d) if smaller or k == a else d for k, d in enumerate(dims)]
    if smaller:
        idx[(a + 1) % len(dims)] = dims[(a + 1) % len(dims)] - 1
    if repeat:  # every index twice along the axis
        idx[a] = 2 * idx[a]
    if reduction == "none" and not repeat:
        perms = np.argsort(rng.random([*idx[:a], dims[a], *idx[a + 1 :]]), axis=a)
        picked = np.take(perms, np.arange(idx[a]), axis=a)
    else:
        picked = rng.integers(0, dims[a], idx)
    if repeat:
        picked = np.concatenate([np.take(picked, np.arange(idx[a] // 2), axis=a)] * 2, axis=a)
    inputs = {"d": normal(rng, dims), "i": _signed(rng, picked, dims[a]), "u": normal(rng, idx)}
    attrs = {"axis": a - len(dims) if draw(st.booleans()) else a, "reduction": reduction}
    return make_case("ScatterElements", inputs, subset(draw, ["d", "u"]), attrs=attrs, consts=("i",))


def _scatter_nd(draw: Draw, rng: np.random.Generator, repeat: bool = False) -> Case:
    dims = shape(draw, 1, 3)
    q = int(draw(st.integers(1, len(dims))))
    reduction = "none" if repeat else draw(st.sampled_from(["none", "add"]))
    cells = int(np.prod(dims[:q]))
    n = int(draw(st.integers(1, cells if reduction == "none" else 4)))
    flat = rng.permutation(cells)[:n] if reduction == "none" else rng.integers(0, cells, n)
    if repeat:  # every index tuple twice
        flat, n = np.concatenate([flat, flat]), 2 * n
    tuples = np.stack(np.unravel_index(flat, dims[:q]), axis=-1)
    inputs = {"d": normal(rng, dims), "i": _signed(rng, tuples, np.asarray(dims[:q])), "u": normal(rng, [n, *dims[q:]])}
    attrs = {"reduction": reduction}
    return make_case("ScatterND", inputs, subset(draw, ["d", "u"]), attrs=attrs, consts=("i",))


def _topk(draw: Draw, rng: np.random.Generator) -> Case:
    dims = shape(draw, 1, 3)
    a = axis(draw, len(dims))
    k = int(draw(st.integers(1, dims[a])))
    attrs = {"axis": a, "largest": int(draw(st.integers(0, 1))), "sorted": int(draw(st.integers(0, 1)))}
    inputs = {"x": normal(rng, dims), "k": i64([k])}
    unsorted = "sorted=0 leaves the order of the k outputs to the runtime" if k > 1 and not attrs["sorted"] else None
    return make_case("TopK", inputs, ["x"], attrs=attrs, outputs=2, consts=_consts(draw, "k"), skip_ort=unsorted)


def _pads(draw: Draw, dims: list[int], mode: str) -> list[int]:
    """Begins then ends; constant pads may crop (negative), never below one element."""
    begins, ends = [], []
    for d in dims:
        if mode == "constant":
            lo = -(d - 1)
            b = int(draw(st.integers(max(lo, -2), 2)))
            e = int(draw(st.integers(max(lo - min(b, 0), -2), 2)))
        else:
            top = {"reflect": d - 1, "edge": 3, "wrap": d}[mode]
            b, e = int(draw(st.integers(0, min(top, 3)))), int(draw(st.integers(0, min(top, 3))))
        begins.append(b)
        ends.append(e)
    return begins + ends


def _pad(draw: Draw, rng: np.random.Generator, runtime_folding: bool = False) -> Case:
    """Run-time pads and axes in constant mode; in the folding modes (edge, reflect, wrap)
    only with ``runtime_folding``."""
    dims = shape(draw, 1, 3)
    modes = ["reflect", "edge", "wrap"] if runtime_folding else ["constant", "constant", "reflect", "edge", "wrap"]
    mode = draw(st.sampled_from(modes))
    picked = axes(draw, len(dims), min_size=1) if draw(st.booleans()) else None
    padded = [dims[a] for a in picked] if picked else dims
    pads = _pads(draw, padded, mode)
    x = normal(rng, dims)
    if picked is None and mode != "wrap" and draw(st.booleans()) and draw(st.booleans()):  # opset 2: attribute
        return make_case("Pad", {"x": x}, ["x"], attrs={"pads": pads, "mode": mode}, opset=2)
    value = normal(rng, []) if mode == "constant" and draw(st.booleans()) else None
    inputs = {"x": x, "p": i64(pads), "v": value, "a": i64(picked) if picked else None}
    xs = ["x", "v"] if value is not None and draw(st.booleans()) else ["x"]
    consts = () if runtime_folding else _consts(draw, "p", "a") if mode == "constant" else ("p", "a")
    dynamic = ["x"] if runtime_folding and draw(st.booleans()) else []
    return make_case("Pad", inputs, xs, attrs={"mode": mode}, consts=consts, dynamic=dynamic)


TENSOR: dict[str, Gen] = {
    "Reshape": _reshape,
    "Flatten": _flatten,
    "Squeeze": _squeeze,
    "Unsqueeze": _unsqueeze,
    "Transpose": _transpose,
    "Expand": _expand,
    "Tile": _tile,
    "CumSum": _cumsum,
    "Concat": _concat,
    "Split": _split,
    "Slice": _slice,
    "Gather": _gather,
    "GatherElements": _gather_elements,
    "GatherND": _gather_nd,
    "ScatterElements": _scatter_elements,
    "ScatterND": _scatter_nd,
    "TopK": _topk,
    "Pad": _pad,
}
# variants that hit known bugs of rules other engineers own (xfail in test_properties.py)
SMALLER_INDICES = "(indices smaller than data off the axis)"
RUNTIME_PADS = "(run-time pads or sizes, edge/reflect/wrap)"
REPEATED = "(repeated indices, reduction none)"
INT32 = "(int32 indices)"
TENSOR.update(
    {
        f"GatherElements {SMALLER_INDICES}": lambda draw, rng: _gather_elements(draw, rng, smaller=True),
        f"ScatterElements {SMALLER_INDICES}": lambda draw, rng: _scatter_elements(draw, rng, smaller=True),
        f"Pad {RUNTIME_PADS}": lambda draw, rng: _pad(draw, rng, runtime_folding=True),
        f"ScatterElements {REPEATED}": lambda draw, rng: _scatter_elements(draw, rng, repeat=True),
        f"ScatterND {REPEATED}": lambda draw, rng: _scatter_nd(draw, rng, repeat=True),
        f"Gather {INT32}": lambda draw, rng: _gather(draw, rng, int32=True),
    }
)
