"""Gradient rules for shape and indexing ops, checked by ``gradcheck.check_gradient``.

One row per rule and per attribute combination that changes the backward graph:
static and run-time shapes (``dynamic`` batch dims, integer arguments fed as graph
inputs instead of initializers), negative steps and indices, repeated indices that
must accumulate, unused outputs. Tensors are tiny so that finite differences stay fast.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx  # noqa: F401  (a test extra)
import onnxruntime  # noqa: F401  (a test extra)
import pytest
from gradcheck import Case, build_model, check_gradient, gradient  # noqa: E402
from onnx import helper as oh  # noqa: E402

import onnx_light as ol  # noqa: E402

F32 = np.float32
_rng = np.random.default_rng(11)


def rnd(*shape: int) -> np.ndarray:
    return _rng.standard_normal(shape)


def i64(*v: Any) -> np.ndarray:
    return np.array(v, np.int64)


def i32(*v: Any) -> np.ndarray:
    return np.array(v, np.int32)


def node(op: str, inputs: list[str], outputs: list[str] | None = None, **attrs: Any) -> Any:
    return oh.make_node(op, inputs, outputs or ["y"], **attrs)


def one(
    name: str,
    op: str,
    x: np.ndarray,
    args: dict[str, np.ndarray] | None = None,
    *,
    const: bool = True,
    dynamic: bool = False,
    opset: int = 21,
    **attrs: Any,
) -> Case:
    """A single-node row differentiated w.r.t. ``x``; integer ``args`` are initializers when ``const``."""
    args = args or {}
    inputs = {"x": x, **args}
    names = ["x"] + [k if v is not None else "" for k, v in args.items()]
    inputs = {k: v for k, v in inputs.items() if v is not None}
    return Case(
        name,
        [node(op, names, **attrs)],
        inputs,
        ["x"],
        initializers=list(k for k in args if args[k] is not None) if const else [],
        dynamic=["x"] if dynamic else [],
        opset=opset,
    )


SHAPE = [
    one("reshape", "Reshape", rnd(2, 3, 2), {"s": i64(3, -1)}),
    one("reshape-dynamic", "Reshape", rnd(2, 3, 2), {"s": i64(0, -1)}, dynamic=True),
    one("reshape-shape-input", "Reshape", rnd(2, 3, 2), {"s": i64(4, 3)}, const=False),
    one("flatten", "Flatten", rnd(2, 3, 4), axis=2),
    one("flatten-dynamic", "Flatten", rnd(2, 3, 4), dynamic=True, axis=1),
    one("squeeze", "Squeeze", rnd(2, 1, 3), {"a": i64(1)}),
    one("squeeze-all-dynamic", "Squeeze", rnd(3, 1, 2, 1), dynamic=True),
    one("squeeze-opset11-attr", "Squeeze", rnd(2, 1, 3), opset=11, axes=[-2]),
    one("unsqueeze", "Unsqueeze", rnd(2, 3), {"a": i64(0, -1)}),
    one("unsqueeze-dynamic", "Unsqueeze", rnd(2, 3), {"a": i64(1)}, dynamic=True),
    one("unsqueeze-opset11-attr", "Unsqueeze", rnd(2, 3), opset=11, axes=[1]),
    one("transpose", "Transpose", rnd(2, 3, 4), perm=[2, 0, 1]),
    one("transpose-default", "Transpose", rnd(2, 3, 4)),
    one("transpose-dynamic", "Transpose", rnd(2, 3, 4), dynamic=True, perm=[1, 2, 0]),
    one("expand", "Expand", rnd(3, 1), {"s": i64(2, 3, 4)}),
    one("expand-same-rank", "Expand", rnd(1, 3, 1), {"s": i64(2, 1, 4)}),
    one("expand-shape-input", "Expand", rnd(3, 1), {"s": i64(2, 1, 4)}, const=False),
    one("expand-dynamic", "Expand", rnd(2, 1), {"s": i64(2, 1, 3)}, dynamic=True),
    one("tile", "Tile", rnd(2, 3, 2), {"r": i64(2, 1, 3)}),
    one("tile-ones", "Tile", rnd(2, 3), {"r": i64(1, 1)}),
    one("tile-dynamic-batch", "Tile", rnd(2, 3), {"r": i64(3, 2)}, dynamic=True),
    one("tile-repeats-input", "Tile", rnd(2, 3), {"r": i64(2, 3)}, const=False, dynamic=True),
    Case(  # y_i = start + i * delta, through a nonlinearity so that dY varies along y
        "range",
        [node("Range", ["s", "l", "d"], ["r"]), node("Sin", ["r"], ["y"])],
        {"s": np.array(0.3), "l": np.array(2.0), "d": np.array(0.35)},
        ["s", "d"],
        initializers=["l"],
    ),
    Case(
        "range-start-only",
        [node("Range", ["s", "l", "d"], ["r"]), node("Mul", ["r", "r"], ["y"])],
        {"s": np.array(-1.2), "l": np.array(1.0), "d": np.array(0.5)},
        ["s"],
    ),
    one("cumsum", "CumSum", rnd(3, 4), {"a": i64(1)}),
    one("cumsum-exclusive", "CumSum", rnd(3, 4), {"a": i64(0)}, exclusive=1),
    one("cumsum-int32-axis", "CumSum", rnd(3, 4), {"a": np.array(-1, np.int32)}, reverse=1),
    one("cumsum-reverse", "CumSum", rnd(3, 4), {"a": i64(-1)}, reverse=1),
    one("cumsum-exclusive-reverse", "CumSum", rnd(5), {"a": i64(0)}, exclusive=1, reverse=1),
    Case(
        "concat",
        [node("Concat", ["a", "b", "c"], axis=1)],
        {"a": rnd(2, 1), "b": rnd(2, 3), "c": rnd(2, 2)},
        ["a", "b", "c"],
    ),
    Case("concat-neg-axis-one-var", [node("Concat", ["a", "b"], axis=-1)], {"a": rnd(2, 2), "b": rnd(2, 3)}, ["b"]),
    Case(
        "concat-dynamic-axis",
        [node("Concat", ["a", "b"], axis=0)],
        {"a": rnd(2, 3), "b": rnd(3, 3)},
        ["a", "b"],
        dynamic=["a", "b"],
    ),
    Case(
        "concat-dynamic-batch",
        [node("Concat", ["a", "b"], axis=1)],
        {"a": rnd(2, 3), "b": rnd(2, 1)},
        ["a", "b"],
        dynamic=["a", "b"],
    ),
    Case(
        "split-unused",
        [node("Split", ["x", "s"], ["p", "q"], axis=1)],
        {"x": rnd(2, 5), "s": i64(2, 3)},
        ["x"],
        y="q",
        initializers=["s"],
    ),
    Case(
        "split-num-outputs",
        [node("Split", ["x"], ["p", "q", "r"], axis=0, num_outputs=3), node("Mul", ["p", "r"], ["y"])],
        {"x": rnd(6, 2)},
        ["x"],
    ),
    Case(
        "split-dynamic",
        [node("Split", ["x", "s"], ["p", "q"], axis=1), node("Mul", ["p", "q"], ["y"])],
        {"x": rnd(3, 4), "s": i64(2, 2)},
        ["x"],
        initializers=["s"],
        dynamic=["x"],
    ),
    Case(
        "split-opset11-attr",
        [node("Split", ["x"], ["p", "q"], axis=0, split=[1, 3])],
        {"x": rnd(4, 2)},
        ["x"],
        y="q",
        opset=11,
    ),
]


def slc(name: str, x: np.ndarray, starts: Any, ends: Any, axes: Any = None, steps: Any = None, **kw: Any) -> Case:
    args = {"s": i64(*starts), "e": i64(*ends)}
    args["a"] = i64(*axes) if axes is not None else None
    args["t"] = i64(*steps) if steps is not None else None
    if axes is None and steps is not None:
        args["a"] = None
    return one(name, "Slice", x, args, **kw)


SLICE = [
    slc("slice", rnd(4, 5), [1, 0], [3, 4]),
    slc("slice-axes", rnd(3, 6), [-4], [-1], axes=[1]),
    slc("slice-clamp", rnd(3, 4), [-10, 1], [10, 100], axes=[0, 1]),
    slc("slice-neg-step", rnd(3, 6), [4], [0], axes=[1], steps=[-1]),
    slc("slice-neg-step-to-start", rnd(5, 2), [-1], [-(2**63)], axes=[0], steps=[-1]),
    slc("slice-step2", rnd(3, 7), [1], [7], axes=[1], steps=[2]),
    slc("slice-step3-exact", rnd(6, 2), [0], [6], axes=[0], steps=[3]),
    slc("slice-step-neg2", rnd(7, 3), [6, 0], [0, 3], axes=[0, 1], steps=[-2, 1]),
    slc("slice-two-strided", rnd(5, 6), [0, 5], [5, 0], axes=[0, 1], steps=[2, -3]),
    slc("slice-no-axes-steps", rnd(4, 4), [1, 0], [4, 4], steps=[2, 1]),
    slc("slice-dynamic-batch", rnd(3, 5), [1], [-1], axes=[1], dynamic=True),
    slc("slice-dynamic-axis", rnd(5, 2), [1], [4], axes=[0], dynamic=True),
    slc("slice-dynamic-strided", rnd(6, 3), [5], [0], axes=[0], steps=[-2], dynamic=True),
    slc("slice-dynamic-batch-strided", rnd(2, 7), [6], [0], axes=[1], steps=[-3], dynamic=True),
    slc("slice-runtime-args", rnd(4, 5), [3, -1], [0, 1], axes=[0, 1], steps=[-1, -2], const=False),
    slc("slice-runtime-no-axes", rnd(4, 5), [1], [3], const=False, dynamic=True),
    one(
        "slice-int32",
        "Slice",
        rnd(4, 5),
        {"s": i32(3, -1), "e": i32(0, 1), "a": i32(0, 1), "t": i32(-1, -2)},
    ),
    one("slice-int32-runtime", "Slice", rnd(4, 5), {"s": i32(1), "e": i32(-1), "a": i32(1)}, const=False),
    slc("slice-empty", rnd(3, 4), [2], [2], axes=[1]),
    # found by the property tests: with a negative step a start before the first element is
    # clamped to 0 by the spec (as onnxruntime does), not an empty slice (as Python's slices)
    slc("slice-neg-step-start-before-begin", rnd(3, 2), [-5, 0], [-(2**63), 2], axes=[0, 1], steps=[-1, 1]),
    slc("slice-neg-step-start-before-begin-runtime", rnd(3, 2), [-4], [-(2**63)], axes=[0], steps=[-2], const=False),
    one("slice-opset9-attrs", "Slice", rnd(4, 3), opset=9, starts=[1], ends=[3], axes=[0]),
]


GATHER = [
    one("gather-dup", "Gather", rnd(4, 3), {"i": i64(1, 3, 1, 1)}),
    one("gather-axis1-neg", "Gather", rnd(2, 5, 3), {"i": i64(-1, 0, -1)}, axis=1),
    one("gather-2d-indices-axis1", "Gather", rnd(2, 4, 3), {"i": i64([0, 3], [3, 3])}, axis=1),
    one("gather-scalar-index-axis1", "Gather", rnd(2, 4, 3), {"i": np.array(-2, np.int64)}, axis=1),
    one("gather-scalar-index-axis0", "Gather", rnd(3, 2), {"i": np.array(2, np.int64)}),
    # one constant index: a Pad of dY instead of a scatter
    one("gather-one-index-axis2", "Gather", rnd(2, 3, 4), {"i": i64(-3)}, axis=2),
    one("gather-scalar-index-dynamic-batch", "Gather", rnd(3, 4), {"i": np.array(3, np.int64)}, dynamic=True, axis=1),
    one("gather-scalar-index-runtime", "Gather", rnd(3, 2), {"i": np.array(-1, np.int64)}, const=False),
    one("gather-runtime-neg", "Gather", rnd(5, 2), {"i": i64(-1, 4, -5, 0)}, const=False),
    one("gather-runtime-axis-last", "Gather", rnd(2, 3, 4), {"i": i64(-4, 3, 3)}, const=False, axis=-1),
    one("gather-dynamic", "Gather", rnd(3, 4), {"i": i64(1, -1, 1)}, dynamic=True, axis=1),
    one("gather-dynamic-axis0", "Gather", rnd(4, 2), {"i": i64(3, -1)}, const=False, dynamic=True),
    one("gather-opset11", "Gather", rnd(3, 4), {"i": i64(0, -1, 0)}, opset=11, axis=1),
    one("gather-opset13", "Gather", rnd(4, 2), {"i": i64(2, 2, -4)}, opset=13),
    # int32 indices (the other index dtype Gather and GatherElements allow)
    one("gather-int32", "Gather", rnd(4, 3), {"i": i32(1, 3, 1, -1)}),
    one("gather-int32-axis1-runtime", "Gather", rnd(2, 5, 3), {"i": i32(-1, 0, -1)}, const=False, axis=1),
    one("gather-int32-scalar", "Gather", rnd(2, 4, 3), {"i": np.array(-2, np.int32)}, axis=1),
    one("gather-int32-dynamic", "Gather", rnd(3, 4), {"i": i32(1, -1, 1)}, dynamic=True, axis=1),
    one("gather-elements-int32", "GatherElements", rnd(3, 4), {"i": i32([0, -1, 3], [1, 1, 1], [-1, 2, 0])}, axis=1),
    one("gather-elements-int32-runtime", "GatherElements", rnd(3, 2), {"i": i32([0, -2], [0, 0])}, const=False),
    one("gather-elements-smaller-indices", "GatherElements", rnd(4, 3), {"i": i64([2, 0])}, axis=1),
    one("gather-elements", "GatherElements", rnd(3, 4), {"i": i64([0, 0, 3], [1, 1, 1], [-1, 2, 0])}, axis=1),
    one("gather-elements-axis0", "GatherElements", rnd(3, 2), {"i": i64([0, 2], [0, 0])}, const=False),
    one("gather-nd", "GatherND", rnd(3, 4, 2), {"i": i64([0, 1], [2, 3], [0, 1])}),
    one("gather-nd-neg-runtime", "GatherND", rnd(3, 4), {"i": i64([[-1], [0]], [[-1], [1]])}, const=False),
    one("gather-nd-batch1", "GatherND", rnd(2, 3, 4), {"i": i64([[1], [1]], [[2], [0]])}, batch_dims=1),
    one(
        "gather-nd-batch2",
        "GatherND",
        rnd(2, 2, 3, 2),
        {"i": i64([[[2, 1], [0, 0]], [[1, 1], [1, 1]]], [[[0, 0], [-1, 1]], [[2, 0], [2, 0]]])},
        batch_dims=2,
    ),
    one(
        "gather-nd-batch1-dynamic",
        "GatherND",
        rnd(2, 3),
        {"i": i64([[2], [2]], [[0], [1]])},
        dynamic=True,
        batch_dims=1,
    ),
    Case(
        "gather-nd-batch1-dynamic-indices",
        [node("GatherND", ["x", "i"], batch_dims=1)],
        {"x": rnd(3, 4, 2), "i": i64([[1, 0], [3, 1]], [[0, 0], [0, 0]], [[2, 1], [-1, -2]])},
        ["x"],
        dynamic=["x", "i"],
    ),
    Case(
        "topk", [node("TopK", ["x", "k"], ["y", "i"], axis=1)], {"x": rnd(3, 5), "k": i64(2)}, ["x"], initializers=["k"]
    ),
    Case(
        "topk-smallest-dynamic",
        [node("TopK", ["x", "k"], ["y", "i"], largest=0)],
        {"x": rnd(2, 4), "k": i64(3)},
        ["x"],
        dynamic=["x"],
    ),
]


def scatter(
    name: str, op: str, data: tuple[int, ...], idx: np.ndarray, upd: tuple[int, ...], const: bool = True, **attrs: Any
) -> Case:
    """A Scatter* row; ``const=False`` feeds the indices at run time (the mask is then computed)."""
    return Case(
        name,
        [node(op, ["d", "i", "u"], **attrs)],
        {"d": rnd(*data), "i": idx, "u": rnd(*upd)},
        ["d", "u"],
        initializers=["i"] if const else [],
    )


SCATTER = [
    scatter("scatter-elements", "ScatterElements", (3, 4), i64([1, 0], [3, 2], [0, -1]), (3, 2), axis=1),
    scatter("scatter-elements-add", "ScatterElements", (3, 2), i64([0, 1], [0, 1]), (2, 2), reduction="add"),
    scatter("scatter-nd", "ScatterND", (4, 3), i64([1], [3]), (2, 3)),
    scatter("scatter-nd-elems", "ScatterND", (3, 3), i64([0, 1], [2, 2]), (2,)),
    scatter("scatter-nd-add-dup", "ScatterND", (4, 2), i64([1], [1], [0]), (3, 2), reduction="add"),
    # reduction "none" with colliding indices: only the last update written to a target gets dY
    scatter("scatter-elements-dup", "ScatterElements", (3,), i64(0, 0), (2,)),
    scatter("scatter-elements-dup-neg-axis1", "ScatterElements", (2, 4), i64([1, -3, 0], [2, 2, 2]), (2, 3), axis=1),
    scatter(
        "scatter-elements-dup-runtime", "ScatterElements", (2, 4), i64([1, -3, 0], [2, 2, 2]), (2, 3), False, axis=1
    ),
    scatter("scatter-elements-dup-int32", "ScatterElements", (3, 2), i32([2, 0], [2, 1], [-1, 0]), (3, 2)),
    scatter("scatter-elements-add-int32", "ScatterElements", (3, 2), i32([0, 1], [0, 1]), (2, 2), reduction="add"),
    Case(  # the deprecated Scatter (upgraded to ScatterElements)
        "scatter-opset10-dup",
        [node("Scatter", ["d", "i", "u"], axis=1)],
        {"d": rnd(2, 3), "i": i64([0, 0], [2, 1]), "u": rnd(2, 2)},
        ["d", "u"],
        initializers=["i"],
        opset=10,
    ),
    scatter(
        "scatter-elements-max-dup",
        "ScatterElements",
        (3, 4),
        i64([1, 1], [3, 0], [0, 0]),
        (3, 2),
        reduction="max",
        axis=1,
    ),
    scatter(
        "scatter-elements-min-runtime",
        "ScatterElements",
        (4, 2),
        i32([0, 1], [0, 3], [0, 1]),
        (3, 2),
        False,
        reduction="min",
    ),
    scatter("scatter-nd-max-dup", "ScatterND", (4, 2), i64([1], [3], [1]), (3, 2), reduction="max"),
    scatter("scatter-nd-min-elems", "ScatterND", (3, 3), i64([0, 1], [2, 2], [0, 1]), (3,), False, reduction="min"),
    scatter("scatter-nd-dup", "ScatterND", (4, 2), i64([1], [3], [-3]), (3, 2)),
    scatter("scatter-nd-dup-elems", "ScatterND", (3, 3), i64([0, 1], [2, 2], [0, 1]), (3,)),
    scatter("scatter-nd-dup-runtime", "ScatterND", (4, 2), i64([1], [3], [-3]), (3, 2), False),
    scatter(
        "scatter-nd-dup-elems-runtime", "ScatterND", (3, 3), i64([[0, 1], [2, 2]], [[0, 1], [1, 0]]), (2, 2), False
    ),
]


def pad(name: str, x: np.ndarray, pads: Any, value: Any = None, axes: Any = None, **kw: Any) -> Case:
    args: dict[str, Any] = {"p": i64(*pads), "v": value, "a": i64(*axes) if axes is not None else None}
    return one(name, "Pad", x, args, **kw)


PAD = [
    pad("pad", rnd(2, 3), [1, 0, 2, 3]),
    pad("pad-negative", rnd(3, 4), [-1, 2, 1, -2]),
    pad("pad-axes", rnd(2, 3, 2), [1, 2], axes=[-1]),
    pad("pad-runtime", rnd(2, 3), [0, 1, 1, -1], const=False, dynamic=True),
    pad("pad-dynamic-batch", rnd(2, 3), [0, 1, 0, 2], dynamic=True),
    Case(
        "pad-value-grad",
        [node("Pad", ["x", "p", "v"])],
        {"x": rnd(2, 2), "p": i64(1, 0, 0, 2), "v": rnd()},
        ["x", "v"],
        initializers=["p"],
    ),
    Case(
        "pad-value-grad-negative",
        [node("Pad", ["x", "p", "v"])],
        {"x": rnd(3, 2), "p": i64(-1, 1, 0, 0), "v": rnd()},
        ["v"],
        initializers=["p"],
    ),
    pad("pad-edge", rnd(3, 4), [1, 2, 2, 1], mode="edge"),
    # found by the property tests: edge pads wider than the input were refused
    pad("pad-edge-wider-than-input", rnd(1, 2), [3, 0, 2, 5], mode="edge"),
    pad("pad-reflect", rnd(4, 3), [2, 1, 3, 2], mode="reflect"),
    pad("pad-wrap", rnd(3, 4), [1, 3, 2, 0], mode="wrap"),
    pad("pad-reflect-axes-dynamic", rnd(2, 5), [2, 4], axes=[1], dynamic=True, mode="reflect"),
    one("pad-opset2-attr", "Pad", rnd(2, 3), opset=2, pads=[1, 0, 0, 1]),
]

ROWS = SHAPE + SLICE + GATHER + SCATTER + PAD


@pytest.mark.parametrize("case", ROWS, ids=[c.name for c in ROWS])
def test_rule(case: Case) -> None:
    check_gradient(case)


@pytest.mark.parametrize("const", [True, False], ids=["static-mask", "runtime-mask"])
def test_scatter_none_duplicates_only_the_winner_gets_dy(const: bool) -> None:
    """ScatterElements(x[3], idx=[0, 0], u[2]): y[0] = u[1], so grad_u = [0, dy0], grad_x = [0, dy1, dy2]."""
    case = scatter("dup", "ScatterElements", (3,), i64(0, 0), (2,), const)
    model, bwd = gradient(case)
    ref = onnxruntime.InferenceSession(
        onnx.shape_inference.infer_shapes(build_model(case, np.float64)).SerializeToString(),
        providers=["CPUExecutionProvider"],
    )
    y = ref.run(None, {k: v for k, v in case.inputs.items() if const is False or k != "i"})[0]
    assert y[0] == case.inputs["u"][1]  # the reference writes the last update
    dy = np.array([1.0, 2.0, 3.0])
    feeds = {**case.inputs, bwd.input[-1]: dy}
    gd, gu = ol.runtime.InferenceSession(bwd).run(None, {n: feeds[n] for n in bwd.input})
    assert gu.tolist() == [0.0, 1.0] and gd.tolist() == [0.0, 2.0, 3.0]


def test_slice_start_before_begin_with_negative_step_keeps_the_first_element() -> None:
    case = next(c for c in SLICE if c.name == "slice-neg-step-start-before-begin")
    grads = check_gradient(case)
    assert np.all(grads["x"][0] != 0) and np.all(grads["x"][1:] == 0)


def test_gather_duplicates_accumulate() -> None:
    x = np.arange(8.0).reshape(4, 2)
    grads = check_gradient(one("dup", "Gather", x, {"i": i64(2, 2, 2, 0)}))
    assert grads["x"][3].tolist() == [0.0, 0.0] and grads["x"][1].tolist() == [0.0, 0.0]
    assert np.all(grads["x"][2] != 0)


def _ops(case: Case) -> list[str]:
    return [n.op_type for n in gradient(case)[1].node if n.op_type not in ("Constant", "Identity")]


def test_static_rows_are_small() -> None:
    assert _ops(slc("s", rnd(4, 5), [1, 0], [3, 4])) == ["Pad"]
    assert _ops(slc("s", rnd(3, 6), [4], [0], axes=[1], steps=[-1])) == ["Slice", "Pad"]
    assert _ops(one("t", "Tile", rnd(2, 3), {"r": i64(2, 1)})) == ["Reshape", "ReduceSum"]
    assert _ops(pad("p", rnd(2, 3), [1, 0, 2, 3])) == ["Pad"]
    concat = Case("c", [node("Concat", ["a", "b"], axis=1)], {"a": rnd(2, 1), "b": rnd(2, 3)}, ["a", "b"])
    assert _ops(concat) == ["Split"]


# rows whose pads and axes are known when the pass runs
STATIC_PAD_ROWS = [
    c for c in SLICE + GATHER + PAD if not c.name.endswith(("runtime-args", "runtime-no-axes", "-runtime"))
]


@pytest.mark.parametrize("case", STATIC_PAD_ROWS, ids=[c.name for c in STATIC_PAD_ROWS])
def test_static_pads_have_no_axes_input(case: Case) -> None:
    # onnxruntime's transpose optimizer moves a Transpose across a Pad that has ``axes``
    # without permuting them, so the rules write full-rank pads when they know them
    pads = [n for n in gradient(case)[1].node if n.op_type == "Pad"]
    assert all(len(n.input) < 4 or not n.input[3] for n in pads), [list(n.input) for n in pads]


def test_scatter_max_ties_share_the_gradient() -> None:
    """Data and both colliding updates equal at a target: each gets a third of dY there."""
    case = Case(
        "tie",
        [node("ScatterElements", ["d", "i", "u"], reduction="max")],
        {"d": np.array([2.0, 1.0]), "i": i64(0, 0), "u": np.array([2.0, 2.0])},
        ["d", "u"],
        initializers=["i"],
    )
    _, bwd = gradient(case)
    feeds = {**case.inputs, bwd.input[-1]: np.array([3.0, 5.0])}
    gd, gu = ol.runtime.InferenceSession(bwd).run(None, feeds)
    assert gd.tolist() == [1.0, 5.0] and gu.tolist() == [1.0, 1.0]


def test_refused_with_reason() -> None:
    bad = scatter("s", "ScatterElements", (3, 2), i64([0, 1]), (1, 2), reduction="mul")
    with pytest.raises(ol.GradientError, match="reduction='mul'"):
        gradient(bad)


def test_pad_beyond_the_border_folds_goes_through_the_source_index() -> None:
    # wrap pads longer than the axis (refused before): dY reaches X through Pad of X's
    # flat positions, as for pads known only at run time
    check_gradient(pad("p", rnd(2, 3), [0, 4, 0, 0], mode="wrap"))


def backward_case(case: Case, wrt_inputs: bool = False) -> Case:
    """The backward function of ``case`` as a forward graph, differentiated w.r.t. ``dy``
    (and the original ``xs`` when ``wrt_inputs``): the closure of the emitted ops."""

    _, bwd = gradient(case)
    feeds = dict(case.inputs)
    y0 = case.y or case.nodes[-1].output[0]
    model, _ = gradient(case)
    from gradcheck import run_forward

    feeds["dy"] = rnd(*np.shape(run_forward(model, dict(case.inputs), y0)))
    nodes = [onnx.NodeProto.FromString(n.SerializeToString()) for n in bwd.node]
    for n in nodes:  # "dy" is reserved for the new output gradient
        n.input[:] = ["g_out" if i == "dy" else i for i in n.input]
    feeds["g_out"] = feeds.pop("dy")
    names = ["g_out" if k == "dy" else k for k in bwd.input]
    return Case(
        f"{case.name}-double",
        nodes,
        {k: feeds[k] for k in names},
        ["g_out", *(case.xs if wrt_inputs else [])],
        y=f"grad_{case.xs[0]}",
        initializers=[k for k in case.initializers if k in bwd.input],
        atol=1e-6,
    )


LINEAR_ROWS = [c for c in ROWS if c.name != "slice-empty"]  # an empty slice's gradient is zeros, not linear in dy


@pytest.mark.parametrize("case", LINEAR_ROWS, ids=[c.name for c in LINEAR_ROWS])
def test_backward_is_differentiable(case: Case) -> None:
    check_gradient(backward_case(case))
