"""The generated plan functions (runtime/_codegen.py): typed lines, buffers reused in place,
the untyped twin, error reports. Results must be bitwise those of the kernels themselves."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as H

import onnx_light
from onnx_light.onnx_core import RuntimeFailure
from onnx_light.runtime import InferenceSession
from onnx_light.runtime._plan import _run_steps

_ELEM: dict[Any, int] = {np.float16: TensorProto.FLOAT16, np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE}
_OPS = ["Add", "Mul", "Tanh", "Sub", "Relu", "Neg", "Sigmoid", "Abs", "Div", "Exp", "Sqrt", "Relu", "Sigmoid"]


def _session(nodes: list[Any], inputs: list[Any], outputs: list[Any], inits: list[Any]) -> InferenceSession:
    graph = H.make_graph(nodes, "g", inputs, outputs, inits)
    model = H.make_model(graph, opset_imports=[H.make_opsetid("", 18)])
    return InferenceSession(onnx_light.load_from_string(model.SerializeToString()))


def _bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).tobytes()


def _chain(dtype: type, declared: list[Any], c_shape: tuple[int, ...], n: int = 40) -> InferenceSession:
    nodes = []
    for i in range(n):
        op = _OPS[i % len(_OPS)]
        ins = [f"v{i}", "c"] if op in ("Add", "Mul", "Sub", "Div") else [f"v{i}"]
        if op == "Sub" and i % 2:
            ins = ins[::-1]  # the constant first: the buffer is the second input
        nodes.append(H.make_node(op, ins, [f"v{i + 1}"]))
    c = numpy_helper.from_array(np.full(c_shape, 0.75, dtype), "c")
    elem = _ELEM[dtype]
    outs = [H.make_tensor_value_info(f"v{n}", elem, None), H.make_tensor_value_info("v7", elem, None)]
    return _session(nodes, [H.make_tensor_value_info("v0", elem, declared)], outs, [c])


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize(
    ("declared", "shape", "c_shape"),
    [
        ([64], (64,), (64,)),
        ([3, 5], (3, 5), (5,)),
        (["N", 7], (4, 7), (1, 7)),
        ([2, 4096], (2, 4096), (4096,)),  # Relu's large-array path
        ([1], (1,), (6,)),  # broadcasting grows the result: no buffer fits
        (None, (3, 2), (2,)),  # rank unknown: untyped lines
        ([], (), ()),  # 0-d: ufuncs answer numpy scalars, the kernels arrays
    ],
)
def test_typed_plan_matches_the_kernels_bitwise(
    dtype: type, declared: Any, shape: tuple[int, ...], c_shape: tuple[int, ...]
) -> None:
    sess = _chain(dtype, declared, c_shape)
    rng = np.random.default_rng(7)
    x: np.ndarray = (rng.standard_normal(shape) * 3).astype(dtype)
    if x.size > 4:
        x.reshape(-1)[:4] = [np.nan, -0.0, np.inf, -np.inf]
    before = x.copy()
    with np.errstate(all="ignore"):
        want = _run_steps(sess._plan, [x], None, None)
        got = sess.run(None, {"v0": x})
    assert _bits(x) == _bits(before)
    for g, w in zip(got, want):
        assert type(g) is np.ndarray and g.dtype == w.dtype and g.shape == np.shape(w)
        assert _bits(g) == _bits(np.asarray(w))


def test_typed_lines_are_generated_for_declared_float_inputs() -> None:
    import onnx_light.runtime._codegen as codegen

    sess = _chain(np.float32, [64], (64,), n=8)
    plan = sess._plan
    assert plan.input_types == {plan.slot_of["v0"]: (np.dtype(np.float32), (64,))}
    codes = plan.codes
    assert len(codes) == 1  # the untyped twin is only made when a feed breaks the promise
    assert codegen.FIRST_LINE == 4


class _Tagged(np.ndarray):
    pass


def test_feeds_that_break_the_promise_run_the_untyped_twin() -> None:
    from onnx_light.runtime._plan import run_plan

    sess = _chain(np.float32, [64], (64,), n=16)
    x = np.random.default_rng(1).standard_normal(64).astype(np.float32)
    want = sess.run(None, {"v0": x})
    with np.errstate(all="ignore"):
        for feed in (x.view(_Tagged), x.astype(np.float64), x[None, :], np.asfortranarray(x)):
            got = run_plan(sess._plan, [feed])
            ref = _run_steps(sess._plan, [feed], None, None)
            for g, r in zip(got, ref):
                assert _bits(np.asarray(g)) == _bits(np.asarray(r))
    assert len(sess._plan.codes) == 2
    got = sess.run(None, {"v0": x})
    assert all(_bits(g) == _bits(w) for g, w in zip(got, want))


def test_no_buffer_is_reused_while_a_view_of_it_lives() -> None:
    """A dying fresh value that an earlier step may have returned a view of stays intact."""
    shape = numpy_helper.from_array(np.array([8, 8], np.int64), "shape")
    c = numpy_helper.from_array(np.full(64, -0.25, np.float32), "c")
    nodes = [
        H.make_node("Add", ["x", "c"], ["a"]),
        H.make_node("Reshape", ["a", "shape"], ["r"]),  # a view of a
        H.make_node("Identity", ["a"], ["i"]),  # a itself
        H.make_node("Relu", ["a"], ["b"]),  # a dies here
        H.make_node("Tanh", ["b"], ["t"]),
    ]
    f = TensorProto.FLOAT
    sess = _session(
        nodes,
        [H.make_tensor_value_info("x", f, [64])],
        [H.make_tensor_value_info(n, f, None) for n in ("r", "i", "t")],
        [shape, c],
    )
    x = np.random.default_rng(2).standard_normal(64).astype(np.float32)
    r, i, t = sess.run(None, {"x": x})
    assert np.array_equal(r, (x + np.float32(-0.25)).reshape(8, 8))
    assert np.array_equal(i, x + np.float32(-0.25))
    assert np.array_equal(t, np.tanh(np.maximum(x + np.float32(-0.25), 0)))


def test_errors_name_the_node_in_typed_and_untyped_plans() -> None:
    from onnx_light.runtime._plan import run_plan

    f = TensorProto.FLOAT
    nodes = [
        H.make_node("Tanh", ["x"], ["a"]),
        H.make_node("Add", ["a", "y"], ["b"], name="bad_add"),
    ]
    sess = _session(
        nodes,
        [H.make_tensor_value_info("x", f, [4]), H.make_tensor_value_info("y", f, [3])],
        [H.make_tensor_value_info("b", f, None)],
        [],
    )
    x, y = np.ones(4, np.float32), np.ones(3, np.float32)
    with pytest.raises(RuntimeFailure, match="bad_add.*\\[\\[4\\], \\[3\\]\\]"):
        sess.run(None, {"x": x, "y": y})
    with pytest.raises(RuntimeFailure, match="bad_add.*\\[\\[4\\], \\[3\\]\\]"):
        run_plan(sess._plan, [x.view(_Tagged), y])


def _conv_relu_model(extra: str | None, verbose: int = 0) -> InferenceSession:
    """X -> Conv -> c -> Relu -> Y, with ``extra``: c is also a graph output ("output"), also
    read by a second node ("reader"), or nothing else (None)."""
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((6, 3, 3, 3)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(6).astype(np.float32), "B")
    nodes = [H.make_node("Conv", ["X", "W", "B"], ["c"], pads=[1, 1, 1, 1]), H.make_node("Relu", ["c"], ["Y"])]
    outputs = [H.make_tensor_value_info("Y", TensorProto.FLOAT, None)]
    if extra == "output":
        outputs.append(H.make_tensor_value_info("c", TensorProto.FLOAT, None))
    if extra == "reader":
        nodes.append(H.make_node("Neg", ["c"], ["N"]))
        outputs.append(H.make_tensor_value_info("N", TensorProto.FLOAT, None))
    graph = H.make_graph(nodes, "g", [H.make_tensor_value_info("X", TensorProto.FLOAT, [2, 3, 8, 40])], outputs, [w, b])
    model = H.make_model(graph, opset_imports=[H.make_opsetid("", 18)])
    return InferenceSession(onnx_light.load_from_string(model.SerializeToString()), verbose=verbose)


@pytest.mark.parametrize("extra", [None, "output", "reader"])
def test_conv_relu_is_fused_only_when_relu_is_the_only_reader(extra: str | None) -> None:
    from onnx_light.runtime.kernels.conv import _conv_im2col

    sess = _conv_relu_model(extra)
    ops = [step.node.op_type for step in sess._plan.steps]
    assert ops.count("Relu") == (0 if extra is None else 1)
    x = np.random.default_rng(4).standard_normal((2, 3, 8, 40)).astype(np.float32)
    got = sess.run(None, {"X": x})
    rng = np.random.default_rng(3)
    w, b = rng.standard_normal((6, 3, 3, 3)).astype(np.float32), rng.standard_normal(6).astype(np.float32)
    c = _conv_im2col(x, w, b, [1, 1], [1, 1], [1, 1], [1, 1], 1)
    np.testing.assert_allclose(got[0], np.maximum(c, 0), rtol=1e-5, atol=1e-5)
    if extra == "output":
        np.testing.assert_allclose(got[1], c, rtol=1e-5, atol=1e-5)
    if extra == "reader":
        np.testing.assert_allclose(got[1], -c, rtol=1e-5, atol=1e-5)


def test_traced_sessions_see_every_node(capsys: pytest.CaptureFixture[str]) -> None:
    sess = _conv_relu_model(None, verbose=1)
    assert [step.node.op_type for step in sess._plan.steps] == ["Conv", "Relu"]
    sess.run(None, {"X": np.ones((2, 3, 8, 40), np.float32)})
    out = capsys.readouterr().out
    assert "Conv" in out and "Relu" in out


def _training_update(declared: bool, dtype: type) -> bytes:
    """h = X @ W + b, out = W2 - (h^T @ h) * lr, a Sub with the constant first and an Add whose
    constant is larger than the MatMul's result: the dying MatMul results may take the answers."""
    elem = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE, np.int64: TensorProto.INT64}[dtype]
    nodes = [
        H.make_node("MatMul", ["X", "W"], ["mm"]),
        H.make_node("Add", ["mm", "b"], ["h"]),
        H.make_node("Transpose", ["h"], ["hT"]),
        H.make_node("MatMul", ["hT", "h"], ["g"]),
        H.make_node("Mul", ["g", "lr"], ["step"]),
        H.make_node("Sub", ["W2", "step"], ["new"]),
        H.make_node("MatMul", ["X", "W"], ["mm2"]),
        H.make_node("Add", ["mm2", "big"], ["grown"]),  # broadcast grows the result: a new array
        H.make_node("Sub", ["c", "mm2"], ["flipped"]),
        H.make_node("MatMul", ["X", "W"], ["mm3"]),
        H.make_node("Mul", ["col", "mm3"], ["scaled"]),  # a (4, 1) feed into the (4, 5) buffer
        H.make_node("Add", ["scaled", "row"], ["shifted"]),  # a (1, 4, 5) feed grows the rank
    ]
    inits = [
        numpy_helper.from_array(np.array(3, dtype), "lr"),
        numpy_helper.from_array(np.arange(5, dtype=dtype), "c"),
        numpy_helper.from_array(np.ones((2, 4, 5), dtype), "big"),
    ]
    shapes = {"X": [4, 3], "W": [3, 5], "b": [5], "W2": [5, 5], "col": [4, 1], "row": [1, 4, 5]}
    inputs = [H.make_tensor_value_info(n, elem, s if declared else None) for n, s in shapes.items()]
    outs = [H.make_tensor_value_info(n, elem, None) for n in ("new", "h", "grown", "flipped", "shifted")]
    model = H.make_model(H.make_graph(nodes, "g", inputs, outs, inits), opset_imports=[H.make_opsetid("", 18)])
    return model.SerializeToString()


@pytest.mark.parametrize("declared", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_dying_matmul_results_take_binary_answers(declared: bool, dtype: type) -> None:
    import onnxruntime as ort

    data = _training_update(declared, dtype)
    sess = InferenceSession(onnx_light.load_from_string(data))
    code = sess._plan.codes[0]
    # the in-place lines ran: their dtype tuples (s<i>) or typed ufunc calls with a buffer
    assert any(n[0] == "s" and n[1:].isdigit() for n in code.co_names) or declared
    rng = np.random.default_rng(3)
    shapes = {"X": (4, 3), "W": (3, 5), "b": (5,), "W2": (5, 5), "col": (4, 1), "row": (1, 4, 5)}
    feeds = {n: (rng.standard_normal(s) * 4).astype(dtype) for n, s in shapes.items()}
    before = {n: v.copy() for n, v in feeds.items()}
    want = _run_steps(sess._plan, list(feeds.values()), None, None)
    got = sess.run(None, feeds)
    for n, v in feeds.items():
        assert _bits(v) == _bits(before[n]), f"feed {n} was written"
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape and _bits(g) == _bits(w)
    unoptimised = InferenceSession(onnx_light.load_from_string(data), optimize=False)
    for g, w in zip(got, unoptimised.run(None, feeds)):
        assert _bits(g) == _bits(w)
    if dtype is not np.int64:
        theirs = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
        for g, w in zip(got, theirs.run(None, feeds)):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("split", "axis", "num_outputs", "sizes"),
    [
        ([4, 8], 1, None, [4, 8]),
        ([4, 8], -1, None, [4, 8]),
        (None, 1, 2, [6, 6]),
        (None, 1, 5, [3, 3, 3, 3, 0]),  # equal parts of ceil(12 / 5), the last one smaller
        ([12, 0], 1, None, [12, 0]),
    ],
)
def test_split_and_concat_results_are_typed_and_match_the_kernels(
    split: Any, axis: int, num_outputs: Any, sizes: list[int]
) -> None:
    """Split (sizes from a constant or equal parts) and Concat record their results' types, so
    the element-wise steps after them run typed (in place where a buffer dies); bitwise equal."""
    from onnx_light.runtime._codegen import _record_float_shape

    n = num_outputs or 2
    outs = [f"s{k}" for k in range(n)]
    split_in = ["x", "sizes"] if split is not None else ["x"]
    attrs = {"axis": axis} | ({"num_outputs": num_outputs} if num_outputs else {})
    nodes = [H.make_node("Split", split_in, outs, **attrs)]
    nodes += [H.make_node("Mul", [o, o], [f"m{k}"]) for k, o in enumerate(outs)]
    nodes += [H.make_node("Concat", [f"m{k}" for k in range(n)], ["c"], axis=axis), H.make_node("Tanh", ["c"], ["t"])]
    inits = [numpy_helper.from_array(np.array(split, np.int64), "sizes")] if split is not None else []
    f = TensorProto.FLOAT
    sess = _session(nodes, [H.make_tensor_value_info("x", f, [4, 12])], [H.make_tensor_value_info("t", f, None)], inits)
    x = np.random.default_rng(3).standard_normal((4, 12)).astype(np.float32)
    (got,) = sess.run(None, {"x": x})
    (ref,) = _run_steps(sess._plan, [x], None, None)
    assert _bits(got) == _bits(ref) and _bits(got) == _bits(np.tanh(x * x))
    types = dict(sess._plan.input_types)
    split_step = sess._plan.steps[0]
    _record_float_shape(split_step, types, sess._plan.constants)
    assert [types[s][1] for s in split_step.outputs] == [(4, k) for k in sizes]


def test_split_sizes_that_do_not_add_up_still_raise_the_kernels_error() -> None:
    from onnx_light.runtime.kernels.tensor import _concat_shape, _split_shapes

    assert _split_shapes((4, 12), np.array([4, 4], np.int64), axis=1, _num_outputs=2) is None
    assert _split_shapes((4, None), np.array([4, 4], np.int64), axis=1, _num_outputs=2) == [(4, 4), (4, 4)]
    assert _split_shapes((4, 12), None, axis=2, _num_outputs=2) is None
    assert _concat_shape((2, 3), (2, None), axis=1) == (2, None)
    assert _concat_shape((2, 3), (5, 3), axis=1) is None
    assert _concat_shape((2, 3), (2, 3, 1), axis=0) is None
    nodes = [H.make_node("Split", ["x", "sizes"], ["a", "b"], axis=1), H.make_node("Mul", ["a", "b"], ["m"])]
    inits = [numpy_helper.from_array(np.array([4, 4], np.int64), "sizes")]
    f = TensorProto.FLOAT
    sess = _session(nodes, [H.make_tensor_value_info("x", f, [4, 12])], [H.make_tensor_value_info("m", f, None)], inits)
    with pytest.raises(RuntimeFailure, match="Split"):
        sess.run(None, {"x": np.zeros((4, 12), np.float32)})


def test_an_integer_constant_input_leaves_matmul_untyped() -> None:
    """Only the inputs a kernel declares (``shape_values``) are read by value: a MatMul with an
    integer constant (numpy promotes to float64) keeps the kernel's own result type."""
    nodes = [H.make_node("MatMul", ["x", "w"], ["m"]), H.make_node("Add", ["m", "m"], ["a"])]
    inits = [numpy_helper.from_array(np.arange(16, dtype=np.int64).reshape(4, 4), "w")]
    f = TensorProto.FLOAT
    sess = _session(nodes, [H.make_tensor_value_info("x", f, [4, 4])], [H.make_tensor_value_info("a", f, None)], inits)
    x = np.random.default_rng(4).standard_normal((4, 4)).astype(np.float32)
    (got,) = sess.run(None, {"x": x})
    (ref,) = _run_steps(sess._plan, [x], None, None)
    assert got.dtype == ref.dtype and _bits(got) == _bits(ref)
