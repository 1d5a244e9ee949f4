"""onnx_light.optimize: each pass on a small function, checked by node lists and by running
the result against the original in our runtime."""

from __future__ import annotations

import numpy as np
import pytest

import onnx_light as ol
from onnx_light import helper, numpy_helper
from onnx_light.onnx_core import FunctionProto, TensorProto

FLOAT = TensorProto.FLOAT


def _fn(nodes, inputs, outputs, shapes=None, opset=21):  # type: ignore[no-untyped-def]
    fn = helper.make_function("test", "f", inputs, outputs, nodes, [helper.make_opsetid("", opset)])
    for name, shape in (shapes or {}).items():
        fn.value_info.append(helper.make_tensor_value_info(name, FLOAT, shape))
    return fn


def _run(fn: FunctionProto, feeds):  # type: ignore[no-untyped-def]
    return ol.runtime.InferenceSession(fn).run(None, feeds)


def _ops(fn: FunctionProto) -> list[str]:
    return [n.op_type for n in fn.node]


def _same_values(fn: FunctionProto, opt: FunctionProto, feeds) -> None:  # type: ignore[no-untyped-def]
    assert list(opt.output) == list(fn.output)
    assert list(opt.input) == list(fn.input)
    for a, b in zip(_run(fn, feeds), _run(opt, feeds)):
        np.testing.assert_array_equal(a, b)


X = {"x": np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5}


def test_identity_chain_removed_and_output_keeps_its_name() -> None:
    fn = _fn(
        [
            helper.make_node("Identity", ["x"], ["a"]),
            helper.make_node("Neg", ["a"], ["b"]),
            helper.make_node("Identity", ["b"], ["out"]),
        ],
        ["x"],
        ["out"],
    )
    opt = ol.optimize(fn)
    assert _ops(opt) == ["Neg"]
    assert list(opt.node[0].input) == ["x"] and list(opt.node[0].output) == ["out"]
    assert len(fn.node) == 3  # the argument is not modified
    _same_values(fn, opt, X)


def test_output_identity_of_an_input_is_kept() -> None:
    fn = _fn([helper.make_node("Identity", ["x"], ["out"])], ["x"], ["out"])
    assert _ops(ol.optimize(fn)) == ["Identity"]


def test_two_outputs_of_one_value_keep_one_identity() -> None:
    fn = _fn(
        [
            helper.make_node("Neg", ["x"], ["b"]),
            helper.make_node("Identity", ["b"], ["o1"]),
            helper.make_node("Identity", ["b"], ["o2"]),
        ],
        ["x"],
        ["o1", "o2"],
    )
    opt = ol.optimize(fn)
    assert _ops(opt) == ["Neg", "Identity"]
    _same_values(fn, opt, X)


def test_common_subexpressions_merged() -> None:
    fn = _fn(
        [
            helper.make_node("Mul", ["x", "x"], ["a"]),
            helper.make_node("Mul", ["x", "x"], ["b"]),
            helper.make_node("Transpose", ["a"], ["ta"], perm=[1, 0]),
            helper.make_node("Transpose", ["b"], ["tb"], perm=[1, 0]),
            helper.make_node("Transpose", ["b"], ["tc"]),  # other attributes: kept
            helper.make_node("Add", ["ta", "tb"], ["s"]),
            helper.make_node("Add", ["s", "tc"], ["out"]),
        ],
        ["x"],
        ["out"],
    )
    opt = ol.optimize(fn)
    assert _ops(opt) == ["Mul", "Transpose", "Transpose", "Add", "Add"]
    assert list(opt.node[3].input) == ["ta", "ta"]
    _same_values(fn, opt, {"x": np.arange(4, dtype=np.float32).reshape(2, 2)})


@pytest.mark.parametrize(
    "node",
    [
        helper.make_node("RandomUniformLike", ["x"], ["{}"]),
        helper.make_node("Dropout", ["x", "r", "t"], ["{}"]),
        helper.make_node("MyOp", ["x"], ["{}"], domain="my.domain"),
    ],
    ids=["random", "dropout", "custom-domain"],
)
def test_nondeterministic_and_unknown_ops_not_merged(node) -> None:  # type: ignore[no-untyped-def]
    copies = []
    for name in ("a", "b"):
        n = helper.make_node(node.op_type, list(node.input), [name], domain=node.domain)
        copies.append(n)
    fn = _fn([*copies, helper.make_node("Add", ["a", "b"], ["out"])], ["x", "r", "t"], ["out"])
    fn.opset_import.append(helper.make_opsetid("my.domain", 1))
    assert _ops(ol.optimize(fn)).count(node.op_type) == 2


def test_dead_nodes_removed() -> None:
    fn = _fn(
        [
            helper.make_node("Neg", ["x"], ["dead"]),
            helper.make_node("Exp", ["dead"], ["dead2"]),
            helper.make_node("Abs", ["x"], ["out"]),
        ],
        ["x"],
        ["out"],
    )
    opt = ol.optimize(fn)
    assert _ops(opt) == ["Abs"]
    _same_values(fn, opt, X)


def _const(name: str, values, dtype=np.int64):  # type: ignore[no-untyped-def]
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(values, dtype=dtype)))


def test_shape_arithmetic_folded() -> None:
    fn = _fn(
        [
            helper.make_node("Shape", ["x"], ["s"]),
            _const("two", [2]),
            helper.make_node("Mul", ["s", "two"], ["s2"]),
            _const("zero", [0]),
            helper.make_node("Gather", ["s2", "zero"], ["g"]),
            helper.make_node("Concat", ["g", "two", "zero"], ["c"], axis=0),
            helper.make_node("Cast", ["c"], ["cf"], to=FLOAT),
            helper.make_node("Add", ["cf", "x"], ["out"]),
        ],
        ["x"],
        ["out"],
        shapes={"x": [2, 3]},
    )
    opt = ol.optimize(fn)
    assert _ops(opt) == ["Constant", "Add"]
    np.testing.assert_array_equal(numpy_helper.to_array(opt.node[0].attribute[0].t), [4.0, 2.0, 0.0])
    _same_values(fn, opt, {"x": np.ones((2, 3), np.float32)})


def test_shape_of_symbolic_input_not_folded() -> None:
    fn = _fn([helper.make_node("Shape", ["x"], ["out"])], ["x"], ["out"])
    assert _ops(ol.optimize(fn)) == ["Shape"]


@pytest.mark.parametrize(
    ("op", "a", "b", "folded"),
    [
        ("Div", [7, -7], [2, 2], False),  # ONNX truncates, numpy floors: left to run
        ("Div", [7, 8], [2, 2], True),
        ("Sub", [7, 8], [2, 2], True),
    ],
)
def test_integer_arithmetic_folded_only_where_numpy_agrees(op: str, a, b, folded: bool) -> None:  # type: ignore[no-untyped-def]
    fn = _fn([_const("a", a), _const("b", b), helper.make_node(op, ["a", "b"], ["out"])], [], ["out"])
    opt = ol.optimize(fn)
    assert (op not in _ops(opt)) == folded
    assert _ops(ol.optimize(fn, fold=None)).count(op) == 1
    np.testing.assert_array_equal(_run(opt, {})[0], _run(fn, {})[0])


@pytest.mark.parametrize(
    ("start", "limit", "delta", "dtype"),
    [
        (0.1, 3.0, 0.3, np.float32),  # start + i * delta rounded once (float64), not per step in float32
        (0.5, 4.0, 0.7, np.float16),
        (0, 3 * 2**55 + 1, 2**55, np.int64),  # 4 elements: (limit - start) / delta in float64 rounds to 3.0
        (5, -7, -3, np.int64),
    ],
)
def test_range_folds_to_what_the_node_computes(start, limit, delta, dtype) -> None:  # type: ignore[no-untyped-def]
    nodes = [_const("s", start, dtype), _const("l", limit, dtype), _const("d", delta, dtype)]
    fn = _fn([*nodes, helper.make_node("Range", ["s", "l", "d"], ["out"])], [], ["out"])
    unfolded = _run(ol.optimize(fn, fold=None), {})[0]
    assert unfolded.dtype == dtype
    np.testing.assert_array_equal(_run(ol.optimize(fn), {})[0], unfolded)


def test_string_constants_merged_only_when_equal() -> None:
    # many distinct string tensors: an object array's bytes are pointers, which a freed array's
    # successor may reuse, so the key must hold the strings themselves
    words = [f"word{i}" * 3 for i in range(40)]
    consts = [_const(f"c{i}", [w], object) for i, w in enumerate(words)]
    consts.append(_const("again", [words[0]], object))
    concat = helper.make_node("Concat", [f"c{i}" for i in range(40)] + ["again"], ["out"], axis=0)
    fn = _fn([*consts, concat], [], ["out"])
    opt = ol.optimize(fn)
    assert _ops(opt).count("Constant") == 40  # only the repeated one merged
    assert _run(opt, {})[0].tolist() == [*words, words[0]]


def _ref(name: str, kind: int, ref: str) -> ol.AttributeProto:
    attr = ol.AttributeProto()
    attr.name, attr.type, attr.ref_attr_name = name, kind, ref
    return attr


def test_attribute_references_neither_merged_nor_folded() -> None:
    # a function body's LeakyRelu(alpha=@p) and LeakyRelu(alpha=@q) differ when p != q; a Cast to
    # @t of a constant has no value to fold to until the function is called
    first, second = helper.make_node("LeakyRelu", ["x"], ["a"]), helper.make_node("LeakyRelu", ["x"], ["b"])
    first.attribute.append(_ref("alpha", ol.AttributeProto.FLOAT, "p"))
    second.attribute.append(_ref("alpha", ol.AttributeProto.FLOAT, "q"))
    cast = helper.make_node("Cast", ["k"], ["kc"])
    cast.attribute.append(_ref("to", ol.AttributeProto.INT, "t"))
    nodes = [first, second, _const("k", [2]), cast, helper.make_node("Sub", ["a", "b"], ["out"])]
    fn = helper.make_function("test", "f", ["x"], ["out", "kc"], nodes, [helper.make_opsetid("", 21)], ["p", "q", "t"])
    assert _ops(ol.optimize(fn)) == ["LeakyRelu", "LeakyRelu", "Constant", "Cast", "Sub"]


@pytest.mark.parametrize("attrs", [{"alpha": 0.0}, {"alpha": -0.0}])
def test_float_attributes_of_opposite_zeros_not_merged(attrs) -> None:  # type: ignore[no-untyped-def]
    # LeakyRelu(-1) is -0.0 with alpha 0.0 and +0.0 with alpha -0.0: their reciprocals are -inf and +inf
    other = {"alpha": -attrs["alpha"]}
    nodes = [
        helper.make_node("LeakyRelu", ["x"], ["a"], **attrs),
        helper.make_node("LeakyRelu", ["x"], ["b"], **other),
        helper.make_node("Reciprocal", ["a"], ["ra"]),
        helper.make_node("Reciprocal", ["b"], ["rb"]),
        helper.make_node("Sub", ["ra", "rb"], ["out"]),
    ]
    fn = _fn(nodes, ["x"], ["out"])
    assert _ops(ol.optimize(fn)).count("LeakyRelu") == 2
    _same_values(fn, ol.optimize(fn), {"x": np.array([-1.0, 2.0], np.float32)})


def test_names_read_by_a_subgraph_stay() -> None:
    then = helper.make_graph(
        [helper.make_node("Neg", ["a"], ["t"])], "then", [], [helper.make_tensor_value_info("t", FLOAT, None)]
    )
    other = helper.make_graph(
        [helper.make_node("Abs", ["a"], ["e"])], "else", [], [helper.make_tensor_value_info("e", FLOAT, None)]
    )
    fn = _fn(
        [
            helper.make_node("Identity", ["x"], ["a"]),
            helper.make_node("If", ["c"], ["out"], then_branch=then, else_branch=other),
        ],
        ["x", "c"],
        ["out"],
    )
    opt = ol.optimize(fn)
    assert _ops(opt) == ["Identity", "If"]
    for c in (True, False):
        _same_values(fn, opt, {**X, "c": np.array(c)})


def test_repeated_node_read_by_a_later_subgraph_stays() -> None:
    # the sweep merges b into a before it sees the If reading b: it sweeps again with b pinned
    then = helper.make_graph(
        [helper.make_node("Neg", ["b"], ["t"])], "then", [], [helper.make_tensor_value_info("t", FLOAT, None)]
    )
    other = helper.make_graph(
        [helper.make_node("Abs", ["a"], ["e"])], "else", [], [helper.make_tensor_value_info("e", FLOAT, None)]
    )
    fn = _fn(
        [
            helper.make_node("Exp", ["x"], ["a"]),
            helper.make_node("Exp", ["x"], ["b"]),
            helper.make_node("Exp", ["x"], ["d"]),  # merged: nothing reads it from a subgraph
            helper.make_node("Add", ["a", "d"], ["s"]),
            helper.make_node("If", ["c"], ["i"], then_branch=then, else_branch=other),
            helper.make_node("Add", ["s", "i"], ["out"]),
        ],
        ["x", "c"],
        ["out"],
    )
    opt = ol.optimize(fn)
    assert _ops(opt) == ["Exp", "Exp", "Add", "If", "Add"]
    assert list(opt.node[2].input) == ["a", "a"]
    for c in (True, False):
        _same_values(fn, opt, {**X, "c": np.array(c)})


def _cnn() -> ol.ModelProto:
    w = numpy_helper.from_array(np.full((2, 1, 3, 3), 0.1, np.float32), "W")
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["r"]),
            helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
            helper.make_node("ReduceSum", ["p"], ["loss"], keepdims=0),
        ],
        "cnn",
        [helper.make_tensor_value_info("x", FLOAT, [1, 1, 4, 4])],
        [helper.make_tensor_value_info("loss", FLOAT, [])],
        [w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _final_identities(fn: FunctionProto) -> dict[str, str]:
    """{output: what its Identity reads} for the outputs an Identity produces."""
    return {n.output[0]: n.input[0] for n in fn.node if n.op_type == "Identity" and n.output[0] in fn.output}


def test_gradient_optimized_by_default_keeping_the_final_identity() -> None:
    # DESIGN §3: a final Identity names each grad_<x>; everything else is optimized
    model = _cnn()
    raw = ol.GradientOfFunction(model, ["W"], "loss", optimize=False)
    opt = ol.GradientOfFunction(model, ["W"], "loss")
    assert list(opt.output) == ["grad_W"] and list(opt.input) == list(raw.input)
    assert _ops(raw).count("Identity") >= 1 and _ops(opt).count("Identity") == 1
    final = _final_identities(opt)
    assert list(final) == ["grad_W"] and final["grad_W"] in {o for n in opt.node for o in n.output}
    assert len(opt.node) <= len(raw.node)
    rng = np.random.default_rng(0)
    feeds = {"W": rng.standard_normal((2, 1, 3, 3)).astype(np.float32)}
    feeds["x"] = rng.standard_normal((1, 1, 4, 4)).astype(np.float32)
    feeds["dy"] = np.ones((), np.float32)
    np.testing.assert_allclose(_run(raw, feeds)[0], _run(opt, feeds)[0], rtol=1e-6)


def test_output_identity_keeps_one_identity_per_output_reading_the_value() -> None:
    # b = Identity(a) where a is an output: b reads what a reads (the value), not a
    fn = _fn(
        [
            helper.make_node("Neg", ["x"], ["n"]),
            helper.make_node("Identity", ["n"], ["t"]),
            helper.make_node("Identity", ["t"], ["a"]),
            helper.make_node("Identity", ["a"], ["b"]),
            helper.make_node("Identity", ["x"], ["c"]),
        ],
        ["x"],
        ["a", "b", "c"],
    )
    opt = ol.optimize(fn, output_identity=True)
    assert _ops(opt) == ["Neg", "Identity", "Identity", "Identity"]
    assert _final_identities(opt) == {"a": "n", "b": "n", "c": "x"}
    _same_values(fn, opt, X)
    assert _ops(ol.optimize(fn)) == ["Neg", "Identity", "Identity"]  # a takes n's name


def test_tangent_optimized_by_default_keeping_the_final_identity() -> None:
    model = _cnn()
    raw = ol.TangentOfFunction(model, ["W"], ["loss"], optimize=False)
    opt = ol.TangentOfFunction(model, ["W"], ["loss"])
    assert list(opt.output) == ["fwd_loss"] and len(opt.node) <= len(raw.node)
    assert list(_final_identities(opt)) == ["fwd_loss"] and _ops(opt).count("Identity") == 1


def test_constant_of_empty_shape_folds_to_a_scalar() -> None:
    value = numpy_helper.from_array(np.array([0.0], np.float32))
    fn = _fn([_const("s", np.zeros(0)), helper.make_node("ConstantOfShape", ["s"], ["out"], value=value)], [], ["out"])
    opt = ol.optimize(fn)
    assert _ops(opt) == ["Constant"]
    assert _run(opt, {})[0].shape == ()


def test_optimizer_never_changes_the_source_nodes() -> None:
    # the optimizer renames the pass's own nodes in place; the forward nodes the result
    # shares with the source (here: Mul reads b, merged into a by CSE) must be copied
    nodes = [
        helper.make_node("Exp", ["x"], ["a"]),
        helper.make_node("Exp", ["x"], ["b"]),
        helper.make_node("Mul", ["a", "b"], ["c"]),
        helper.make_node("Tanh", ["c"], ["t"]),  # its rule reads t: Mul is re-emitted
        helper.make_node("ReduceSum", ["t"], ["y"], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", FLOAT, [2, 3])], [helper.make_tensor_value_info("y", FLOAT, [])]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    before = ol.save_to_string(model) if hasattr(ol, "save_to_string") else model.SerializeToString()
    grads, x = [], 0.2 * X["x"]
    for _ in range(2):  # a second call sees the same source
        bwd = ol.GradientOfFunction(model, ["x"], "y", optimize=True)
        assert _ops(bwd).count("Exp") == 1
        grads.append(_run(bwd, {"x": x, "dy": np.ones((), np.float32)})[0])
    after = ol.save_to_string(model) if hasattr(ol, "save_to_string") else model.SerializeToString()
    assert after == before
    assert [list(n.input) for n in model.graph.node] == [["x"], ["x"], ["a", "b"], ["c"], ["t"]]
    np.testing.assert_allclose(grads[0], (1 - np.tanh(np.exp(2 * x)) ** 2) * 2 * np.exp(2 * x), rtol=1e-5)
    np.testing.assert_array_equal(grads[0], grads[1])
    fwd = ol.TangentOfFunction(model, ["x"], ["y"])
    assert [list(n.input) for n in model.graph.node][2] == ["a", "b"] and "Mul" in _ops(fwd)


@pytest.mark.parametrize("declared", [True, False])
def test_custom_domain_nodes_neither_folded_nor_merged(declared: bool) -> None:
    # with only the default domain imported the sweep skips most domain reads; folds and
    # merges still read the real domain
    one = numpy_helper.from_array(np.array([1], np.int64))
    nodes = [
        helper.make_node("Constant", [], ["a"], value=one),
        helper.make_node("Add", ["a", "a"], ["b"], domain="my"),
        helper.make_node("Add", ["a", "a"], ["c"], domain="my"),
        helper.make_node("Concat", ["b", "c"], ["out"], axis=0),
    ]
    imports = [helper.make_opsetid("", 21)] + ([helper.make_opsetid("my", 1)] if declared else [])
    fn = helper.make_function("test", "f", [], ["out"], nodes, imports)
    assert [(n.op_type, n.domain) for n in ol.optimize(fn).node] == [
        ("Constant", ""),
        ("Add", "my"),
        ("Add", "my"),
        ("Concat", ""),
    ]


def test_optimize_refuses_a_model_with_a_clear_error() -> None:
    """A ModelProto raised AttributeError ('ModelProto' object has no attribute 'output')."""
    import pytest

    from onnx_light import OnnxLightError, TensorProto, helper, optimize

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    with pytest.raises(OnnxLightError, match="takes a FunctionProto.*not ModelProto"):
        optimize(helper.make_model(graph))


def test_value_a_branch_returns_directly_is_kept() -> None:
    """A branch whose output names an outer value (no node between) reads it: the second
    Neg(x), read only so, is not merged into the first (the optimized function failed with
    "graph output 'n2' is not computed by any node or input")."""
    double = TensorProto.DOUBLE
    then = helper.make_graph([], "t", [], [helper.make_tensor_value_info("n2", double, [2])])
    other = helper.make_graph(
        [helper.make_node("Neg", ["n1"], ["e"])], "e", [], [helper.make_tensor_value_info("e", double, [2])]
    )
    fn = _fn(
        [
            helper.make_node("Neg", ["x"], ["n1"]),
            helper.make_node("Neg", ["x"], ["n2"]),
            helper.make_node("If", ["c"], ["o"], then_branch=then, else_branch=other),
            helper.make_node("Add", ["o", "n1"], ["y"]),
        ],
        ["x", "c"],
        ["y"],
        opset=18,
    )
    x = np.array([1.0, 2.0])
    (y,) = _run(ol.optimize(fn), {"x": x, "c": np.array(True)})
    np.testing.assert_array_equal(y, -2 * x)


def _typed_const(name: str, values: list[int]) -> ol.NodeProto:
    """A Constant holding int64 ``values`` in ``int64_data``, not ``raw_data``."""
    tensor = TensorProto()
    tensor.data_type, tensor.dims[:] = TensorProto.INT64, [len(values)]
    tensor.int64_data[:] = values
    return helper.make_node("Constant", [], [name], value=tensor)


def test_constants_merged_exactly_when_dtype_shape_and_bytes_agree() -> None:
    # raw_data constants are keyed without numpy (the optimizer's fast path); the key must be the
    # one a tensor in typed fields gets: equal values merge whichever field holds them, and equal
    # bytes of another dtype or shape, or the opposite zero, stay apart
    pairs = [
        (_const("a0", [3, 4]), _typed_const("a1", [3, 4]), True),  # raw vs int64_data, same value
        (_const("b0", [1]), _const("b1", [1, 0], np.int32), False),  # same 8 bytes, int64 vs int32
        (_const("c0", [[5], [6]]), _const("c1", [5, 6]), False),  # same bytes, shape (2, 1) vs (2,)
        (_const("d0", [0.0], np.float32), _const("d1", [-0.0], np.float32), False),  # 0.0 vs -0.0
        (_const("e0", 7.5, np.float64), _const("e1", 7.5, np.float64), True),  # scalars, raw both
    ]
    nodes, outputs = [], []
    for first, second, _ in pairs:  # (read by Neg, which does not fold: outputs are never merged)
        a, b = first.output[0], second.output[0]
        nodes += [first, second, helper.make_node("Neg", [a], [f"n{a}"]), helper.make_node("Neg", [b], [f"n{b}"])]
        outputs += [f"n{a}", f"n{b}"]
    fn = _fn(nodes, [], outputs)
    opt = ol.optimize(fn)
    merged = sum(1 for *_, same in pairs if same)
    assert _ops(opt).count("Constant") == 2 * len(pairs) - merged
    for (first, second, _), (a, b) in zip(pairs, zip(*[iter(_run(opt, {}))] * 2)):
        for got, node in ((a, first), (b, second)):
            want = -numpy_helper.to_array(node.attribute[0].t)
            assert (got.dtype, got.shape, got.tobytes()) == (want.dtype, want.shape, want.tobytes())
