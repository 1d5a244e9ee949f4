"""A Concat's producers write straight into its output's buffer (``_pool.plan_concats``,
``ConcatAlias``; issue 15 §3): an input only the Concat reads is made in its slice, the others
are copied, and whatever does not fit (other shapes, a pure-Python kernel that allocates) runs
the Concat kernel as before. Every case is checked bitwise against a session without the pool
(no aliasing), on the native kernels and on their numpy twins."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from onnx_light import TensorProto, helper
from onnx_light.runtime import InferenceSession, _native

_RNG = np.random.default_rng(0)
C = 8  # channels of x and of each producer's output


def _f32(*shape: int) -> np.ndarray:
    return _RNG.standard_normal(shape).astype(np.float32)


def _init(name: str, value: np.ndarray) -> Any:
    return helper.make_tensor(name, TensorProto.FLOAT, list(value.shape), value.ravel())


#: the initializers the producers read
_INITS = [
    _init("w", _f32(C, C, 3, 3) * 0.3),
    _init("wt", _f32(C, C, 3, 3) * 0.3),
    _init("b", _f32(C)),
    _init("k", _f32(C, 1, 1)),
]
_PADS = [1, 1, 1, 1]


def _conv(x: str, out: str, t: str) -> list[Any]:
    return [helper.make_node("Conv", [x, "w", "b"], [out], pads=_PADS)]


def _conv_relu(x: str, out: str, t: str) -> list[Any]:
    return [helper.make_node("Conv", [x, "w"], [t + "c"], pads=_PADS), helper.make_node("Relu", [t + "c"], [out])]


def _conv_residual(x: str, out: str, t: str) -> list[Any]:
    return [
        helper.make_node("Conv", [x, "w", "b"], [t + "c"], pads=_PADS),
        helper.make_node("Add", [t + "c", x], [t + "s"]),
        helper.make_node("Relu", [t + "s"], [out]),
    ]


def _conv_transpose(x: str, out: str, t: str) -> list[Any]:
    return [helper.make_node("ConvTranspose", [x, "wt", "b"], [out], pads=_PADS)]


def _max_pool(x: str, out: str, t: str) -> list[Any]:
    return [helper.make_node("MaxPool", [x], [out], kernel_shape=[3, 3], pads=_PADS)]


def _add(x: str, out: str, t: str) -> list[Any]:
    return [helper.make_node("Add", [x, "k"], [out])]


def _mul(x: str, out: str, t: str) -> list[Any]:
    return [helper.make_node("Mul", [x, x], [out])]


def _matmul(x: str, out: str, t: str) -> list[Any]:
    return [helper.make_node("MatMul", [x, x], [out])]  # square maps: (1, C, H, H) @ (1, C, H, H)


def _sigmoid(x: str, out: str, t: str) -> list[Any]:
    return [helper.make_node("Sigmoid", [x], [out])]


#: producer kind -> the nodes that make ``out`` (C channels, x's size) from ``x`` (``t``: a prefix
#: for their intermediates); each runs as one step that writes into a given array (natively:
#: every kind; on the numpy twins the ufuncs and MaxPool, not the convolutions)
PRODUCERS = {
    "conv": _conv,
    "conv_relu": _conv_relu,
    "conv_residual": _conv_residual,
    "conv_transpose": _conv_transpose,
    "max_pool": _max_pool,
    "add": _add,
    "matmul": _matmul,
    "mul": _mul,
    "sigmoid": _sigmoid,
}


def _model(nodes: list[Any], outputs: list[str], x_shape: Any, y_shape: Any = None) -> Any:
    """A model of ``nodes`` over x (``x_shape``; None: no shape declared) and y (``y_shape``)."""
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)]
    if y_shape is not None:
        inputs.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape))
    graph = helper.make_graph(
        nodes, "g", inputs, [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs], _INITS
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _aliased(sess: InferenceSession) -> dict[str, list[str]]:
    """Concat output name -> the names of its inputs written into its buffer (the plan's choice)."""
    plan = sess._plan
    names = {s: n for n, s in plan.slot_of.items()}
    arenas = plan.arenas
    if arenas is None:
        return {}
    return {names[plan.steps[c.step].outputs[0]]: sorted(names[s] for s in c.aliased) for c in arenas.concats}


def _fallbacks(sess: InferenceSession) -> list[int]:
    """Counts (in the list returned) the runs of each aliased Concat's kernel from now on: the
    Concat copying its inputs after all."""
    plan = sess._plan
    assert plan.fast is not None and plan.arenas is not None
    namespace = plan.fast.__globals__
    calls: list[int] = []
    for c in plan.arenas.concats:
        kernel = namespace[f"k{c.step}"]

        def counted(*args: Any, _k: Any = kernel, _i: int = c.step, **kwargs: Any) -> Any:
            calls.append(_i)
            return _k(*args, **kwargs)

        namespace[f"k{c.step}"] = counted
    return calls


def _pair(model: Any, **kwargs: Any) -> tuple[InferenceSession, InferenceSession]:
    """The session under test and the reference: the same plan without the pool (no aliasing)."""
    return InferenceSession(model, **kwargs), InferenceSession(model, buffer_pool=False)


def _check_runs(sess: InferenceSession, ref: InferenceSession, feeds: list[dict[str, np.ndarray]]) -> None:
    """Every run bitwise equal to the reference, and every result kept still equal after the later runs."""
    kept = []
    for f in feeds:
        got, want = sess.run(None, f), ref.run(None, f)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
        kept.append((got, [w.copy() for w in want]))
    for got, want in kept:
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)


def _feeds(n: int, x: tuple[int, ...], y: tuple[int, ...] | None = None) -> list[dict[str, np.ndarray]]:
    return [{"x": _f32(*x), **({"y": _f32(*y)} if y else {})} for _ in range(n)]


# a producer whose kernel writes into a given array natively (numpy twins: not the convolutions)
_WRITES_TWIN = {"max_pool", "add", "matmul", "mul", "sigmoid"}


@pytest.mark.parametrize("size", [16, 32], ids=["new-buffer", "pooled-buffer"])  # 24 KiB / 96+ KiB outputs
@pytest.mark.parametrize("kind", sorted(PRODUCERS))
def test_each_producer_kind_writes_into_its_slice(kind: str, size: int) -> None:
    # cat = Concat(p, y, q): p and q (the same kind on Neg(x)) aliased, y copied in; out reads cat twice
    make = PRODUCERS[kind]
    nodes = [*make("x", "p", "p_"), helper.make_node("Neg", ["x"], ["nx"]), *make("nx", "qp", "q_")]
    nodes.append(helper.make_node("Concat", ["p", "y", "qp"], ["cat"], axis=1))
    nodes += [helper.make_node("Mul", ["cat", "cat"], ["sq"]), helper.make_node("Sub", ["sq", "cat"], ["out"])]
    x, y = (1, C, size, size), (1, 3, size, size)
    sess, ref = _pair(_model(nodes, ["out"], list(x), list(y)))
    feeds = _feeds(3, x, y)
    sess.run(None, feeds[0])
    assert _aliased(sess) == {"cat": ["p", "qp"]}
    calls = _fallbacks(sess)
    _check_runs(sess, ref, feeds)
    if kind in _WRITES_TWIN or _native.CONV2D:
        assert calls == []  # both producers wrote into the buffer; the Concat only copied y


def test_the_untyped_lines_alias_too() -> None:
    # x declared without a shape: the generated lines do not know the types (ufunc and kernel calls)
    nodes = [
        helper.make_node("Mul", ["x", "x"], ["p"]),
        helper.make_node("MaxPool", ["x"], ["m"], kernel_shape=[3, 3], pads=_PADS),
        helper.make_node("Sigmoid", ["x"], ["g"]),
        helper.make_node("Concat", ["m", "p", "g"], ["cat"], axis=1),
        helper.make_node("Neg", ["cat"], ["out"]),
    ]
    sess, ref = _pair(_model(nodes, ["out"], None))
    feeds = _feeds(3, (1, C, 24, 24))
    sess.run(None, feeds[0])
    assert _aliased(sess) == {"cat": ["g", "m", "p"]}
    calls = _fallbacks(sess)
    _check_runs(sess, ref, feeds)
    assert calls == []


def test_a_large_concat_without_aliased_inputs_copies_into_a_pooled_buffer() -> None:
    # batch 2 (slices not contiguous) and inputs read elsewhere: nothing aliased, but the
    # 256 KiB output lives in the arena; runs with other shapes run the kernel
    nodes = [
        *_mul("x", "p", ""),
        helper.make_node("Concat", ["p", "x"], ["cat"], axis=1),
        helper.make_node("Add", ["cat", "cat"], ["d"]),
        helper.make_node("ReduceSum", ["d"], ["out"], keepdims=0),
        helper.make_node("ReduceMax", ["p"], ["pm"], keepdims=0),
    ]
    sess, ref = _pair(_model(nodes, ["out", "pm"], [2, C, "h", 32]))
    feeds = [{"x": _f32(2, C, 32, 32)}, {"x": _f32(2, C, 32, 32)}, {"x": _f32(2, C, 20, 32)}]
    sess.run(None, feeds[0])
    assert _aliased(sess) == {"cat": []}
    plan = sess._plan
    assert plan.arenas is not None and plan.slot_of["cat"] in plan.arenas.index
    calls = _fallbacks(sess)
    _check_runs(sess, ref, feeds)
    assert len(calls) == 1  # the third feed's shape


def test_a_concat_that_is_a_graph_output_is_a_new_array_per_run() -> None:
    nodes = [*_mul("x", "p", ""), helper.make_node("Concat", ["p", "x"], ["cat"], axis=1)]
    x = (1, C, 64, 64)  # 256 KiB: would be pooled were it not returned
    sess, ref = _pair(_model(nodes, ["cat"], list(x)))
    feeds = _feeds(3, x)
    sess.run(None, feeds[0])
    assert _aliased(sess) == {"cat": ["p"]}
    calls = _fallbacks(sess)
    _check_runs(sess, ref, feeds)  # the first result is not overwritten by the later runs
    assert calls == []


def test_a_producer_output_that_is_a_graph_output_is_not_aliased() -> None:
    nodes = [*_mul("x", "p", ""), *_add("x", "a", "")]
    nodes += [helper.make_node("Concat", ["p", "a"], ["cat"], axis=1), helper.make_node("Neg", ["cat"], ["out"])]
    x = (1, C, 32, 32)
    sess, ref = _pair(_model(nodes, ["out", "p"], list(x)))
    feeds = _feeds(3, x)
    sess.run(None, feeds[0])
    assert _aliased(sess) == {"cat": ["a"]}
    _check_runs(sess, ref, feeds)


def test_an_input_read_elsewhere_is_not_aliased() -> None:
    # p is read by the Concat and then by a Relu that may write in place into p's dying buffer:
    # had p been made in cat's buffer, that Relu would overwrite cat's first slice before out reads it
    nodes = [
        *_mul("x", "p", ""),
        helper.make_node("Add", ["x", "k"], ["a"]),
        helper.make_node("Concat", ["p", "a"], ["cat"], axis=1),
        helper.make_node("Neg", ["p"], ["np"]),
        helper.make_node("Relu", ["np"], ["r"]),
        helper.make_node("Concat", ["r", "r"], ["rr"], axis=1),
        helper.make_node("Sub", ["cat", "rr"], ["out"]),
    ]
    x = (1, C, 32, 32)
    sess, ref = _pair(_model(nodes, ["out"], list(x)))
    feeds = _feeds(3, x)
    sess.run(None, feeds[0])
    assert _aliased(sess) == {"cat": ["a"]}  # not p (two readers), not r (read twice by one Concat)
    _check_runs(sess, ref, feeds)


@pytest.mark.parametrize(
    ("x", "axis", "aliased"),
    [
        ((2, C, 16, 16), 1, False),  # batch 2: a channel slice is not contiguous
        ((1, C, 16, 16), -3, True),
        ((1, 1, 64, 64), 2, True),  # every dimension before the axis is 1: contiguous rows
        ((1, 1, 64, 64), -2, True),
        ((1, 2, 64, 64), 2, False),
        ((1, C, 4, 4), 1, False),  # 1 KiB: not worth the views
    ],
)
def test_only_contiguous_slices_of_large_enough_outputs_alias(x: tuple[int, ...], axis: int, aliased: bool) -> None:
    nodes = [*_mul("x", "p", ""), helper.make_node("Add", ["x", "k" if x[1] == C else "x"], ["a"])]
    nodes += [helper.make_node("Concat", ["p", "a"], ["cat"], axis=axis), helper.make_node("Neg", ["cat"], ["out"])]
    sess, ref = _pair(_model(nodes, ["out"], list(x)))
    feeds = _feeds(3, x)
    sess.run(None, feeds[0])
    assert _aliased(sess) == ({"cat": ["a", "p"]} if aliased else {})
    _check_runs(sess, ref, feeds)


def test_other_shapes_at_run_time_run_the_concat_kernel() -> None:
    # planned on 1 x 8 x 16 x 16 and y with 3 channels; later feeds change the map size (the
    # producers then allocate) or only y's channels (y does not fit its slice): the kernel runs
    nodes = [
        *_conv("x", "p", ""),
        helper.make_node("Add", ["x", "k"], ["a"]),
        helper.make_node("Concat", ["p", "y", "a"], ["cat"], axis=1),
        helper.make_node("Neg", ["cat"], ["out"]),
    ]
    sess, ref = _pair(_model(nodes, ["out"], [1, C, "h", "w"], [1, "c", "h", "w"]))
    first = {"x": _f32(1, C, 16, 16), "y": _f32(1, 3, 16, 16)}
    sess.run(None, first)
    assert _aliased(sess) == {"cat": ["a", "p"]}
    calls = _fallbacks(sess)
    later = [
        {"x": _f32(1, C, 20, 12), "y": _f32(1, 3, 20, 12)},
        {"x": _f32(1, C, 16, 16), "y": _f32(1, 5, 16, 16)},
        {"x": _f32(1, C, 16, 16), "y": _f32(1, 1, 16, 16)},  # would broadcast into a 3-channel slice
        first,
    ]
    _check_runs(sess, ref, later)
    assert len(calls) >= 3  # the three misfits (and, on the numpy twins, the conv's allocation)


def test_two_threads_give_the_bits_of_one() -> None:
    # big enough for the threaded convolution (>= 1M multiply-adds)
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c1"], pads=_PADS),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w"], ["c2"], pads=_PADS),
        helper.make_node("Add", ["c2", "x"], ["p"]),
        helper.make_node("MaxPool", ["r1"], ["m"], kernel_shape=[3, 3], pads=_PADS),
        helper.make_node("Concat", ["p", "m", "x"], ["cat"], axis=1),
        helper.make_node("Neg", ["cat"], ["out"]),
    ]
    x = (1, C, 64, 64)
    model = _model(nodes, ["out"], list(x))
    one, two = InferenceSession(model), InferenceSession(model, intra_op_num_threads=2)
    for f in _feeds(3, x):
        a, b = one.run(None, f), two.run(None, f)
        np.testing.assert_array_equal(a[0], b[0])
    assert _aliased(two) == {"cat": ["m", "p"]}
