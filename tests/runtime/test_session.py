"""InferenceSession: onnxruntime's API, what it accepts, and how it fails.

Models are built with ``onnx_light.helper``; where onnxruntime is the reference
(introspection, control flow) the same bytes go to both.
"""

from __future__ import annotations

import copy
import io
import sys
import threading
import tracemalloc
from contextlib import redirect_stdout
from typing import Any

import numpy as np
import pytest

import onnx_light as ol
from onnx_light import InvalidFeed, NotImplementedOp, RuntimeFailure, TensorProto, helper
from onnx_light.runtime import InferenceSession
from onnx_light.runtime._registry import KERNELS, kernel

F = TensorProto.FLOAT
OPSET = [helper.make_opsetid("", 18)]


def vi(name: str, elem_type: int = F, shape: list[Any] | None = None) -> Any:
    return helper.make_tensor_value_info(name, elem_type, shape)


def model(nodes: list[Any], inputs: list[Any], outputs: list[Any], **kw: Any) -> ol.ModelProto:
    init = kw.pop("initializer", None)
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=init)
    kw.setdefault("opset_imports", OPSET)
    return helper.make_model(graph, ir_version=8, **kw)


def ort_session(m: ol.ModelProto) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(m.SerializeToString(), options, providers=["CPUExecutionProvider"])


def add_mul_model() -> ol.ModelProto:
    """Y = (A + B) * C, with named and symbolic dims."""
    return model(
        [helper.make_node("Add", ["A", "B"], ["S"]), helper.make_node("Mul", ["S", "C"], ["Y"])],
        [vi("A", F, ["N", 3]), vi("B", F, [1, 3]), vi("C", F, [])],
        [vi("Y", F, ["N", 3])],
    )


RNG = np.random.default_rng(0)
A = RNG.standard_normal((2, 3)).astype(np.float32)
B = RNG.standard_normal((1, 3)).astype(np.float32)
C = np.float32(1.5) * np.ones((), np.float32)


# ---------------------------------------------------------------- introspection
def test_inputs_and_outputs_as_onnxruntime_reports_them() -> None:
    m = model(
        [helper.make_node("Cast", ["X"], ["Y"], to=TensorProto.INT64), helper.make_node("Shape", ["W"], ["S"])],
        [vi("X", F, ["batch", None, 4]), vi("W", TensorProto.DOUBLE, [2, 3])],
        [vi("Y", TensorProto.INT64, ["batch", None, 4]), vi("S", TensorProto.INT64, [2])],
    )
    ours, ref = InferenceSession(m), ort_session(m)
    for mine, theirs in zip(ours.get_inputs() + ours.get_outputs(), ref.get_inputs() + ref.get_outputs()):
        assert (mine.name, mine.type, mine.shape) == (theirs.name, theirs.type, theirs.shape)


def test_initializers_are_not_inputs_but_can_be_overridden() -> None:
    w = helper.make_tensor("W", F, [3], [1.0, 2.0, 3.0])
    m = model([helper.make_node("Mul", ["X", "W"], ["Y"])], [vi("X", F, [3]), vi("W", F, [3])], [vi("Y")],
              initializer=[w])  # fmt: skip
    s = InferenceSession(m)
    assert [a.name for a in s.get_inputs()] == ["X"]
    x = np.ones(3, np.float32)
    np.testing.assert_array_equal(s.run(None, {"X": x})[0], [1, 2, 3])
    np.testing.assert_array_equal(s.run(None, {"X": x, "W": np.full(3, 2, np.float32)})[0], [2, 2, 2])


@pytest.mark.parametrize("form", ["model", "bytes", "path", "pathlike", "graph", "function"])
def test_accepts_every_form(form: str, tmp_path: Any) -> None:
    m = add_mul_model()
    proto: Any
    if form == "model":
        proto = m
    elif form == "bytes":
        proto = m.SerializeToString()
    elif form in ("path", "pathlike"):
        path = tmp_path / "m.onnx"
        ol.save(m, str(path))
        proto = str(path) if form == "path" else path
    elif form == "graph":
        proto = m.graph
    else:
        proto = helper.make_function("local", "AddMul", ["A", "B", "C"], ["Y"], list(m.graph.node), OPSET)
    (y,) = InferenceSession(proto).run(None, {"A": A, "B": B, "C": C})
    np.testing.assert_allclose(y, (A + B) * C, rtol=1e-6)


def test_output_names_select_and_order() -> None:
    m = model(
        [helper.make_node("Neg", ["X"], ["N"]), helper.make_node("Abs", ["X"], ["P"])],
        [vi("X", F, [2])],
        [vi("N"), vi("P")],
    )
    x = np.array([1.0, -2.0], np.float32)
    p, n = InferenceSession(m).run(["P", "N"], {"X": x})
    np.testing.assert_array_equal(p, [1, 2])
    np.testing.assert_array_equal(n, [-1, 2])
    with pytest.raises(InvalidFeed, match="'Q'"):
        InferenceSession(m).run(["Q"], {"X": x})


# ---------------------------------------------------------------- model-local functions
def _local_functions() -> list[Any]:
    # Scale(x) = x * alpha  (alpha an attribute with a default, referenced by the body)
    alpha = helper.make_attribute("alpha", 2.0)
    scale = helper.make_function(
        "local",
        "Scale",
        ["x"],
        ["y"],
        [
            helper.make_node("Constant", [], ["a"], value_float=0.0),  # replaced just below
            helper.make_node("Mul", ["x", "a"], ["y"]),
        ],
        OPSET,
        attribute_protos=[alpha],
    )
    const = scale.node[0]
    del const.attribute[:]
    const.attribute.append(ol.AttributeProto(name="value_float", type=F_ATTR, ref_attr_name="alpha"))
    # ScaleThenRelu(x; alpha) = Relu(Scale<alpha=alpha>(x)) + x : a nested call forwarding the attribute
    outer_call = helper.make_node("Scale", ["x"], ["s"], domain="local")
    outer_call.attribute.append(helper.make_attribute_ref("alpha", F_ATTR))
    relu = helper.make_function(
        "local",
        "ScaleThenRelu",
        ["x"],
        ["y"],
        [outer_call, helper.make_node("Relu", ["s"], ["r"]), helper.make_node("Add", ["r", "x"], ["y"])],
        OPSET + [helper.make_opsetid("local", 1)],
        attributes=["alpha"],
    )
    return [scale, relu]


F_ATTR = ol.AttributeProto.FLOAT


def test_model_local_functions_nested_with_attribute_references() -> None:
    nodes = [
        helper.make_node("ScaleThenRelu", ["X"], ["Y1"], domain="local", alpha=-3.0),
        helper.make_node("Scale", ["X"], ["Y2"], domain="local"),  # default alpha = 2
        helper.make_node("ScaleThenRelu", ["Y2"], ["Y3"], domain="local", alpha=0.5),  # two calls, no clash
    ]
    m = model(nodes, [vi("X", F, [4])], [vi("Y1"), vi("Y2"), vi("Y3")],
              opset_imports=OPSET + [helper.make_opsetid("local", 1)], functions=_local_functions())  # fmt: skip
    x = np.array([-1.0, 0.0, 0.5, 2.0], np.float32)
    y1, y2, y3 = InferenceSession(m).run(None, {"X": x})
    np.testing.assert_allclose(y1, np.maximum(-3 * x, 0) + x)
    np.testing.assert_allclose(y2, 2 * x)
    np.testing.assert_allclose(y3, np.maximum(0.5 * y2, 0) + y2)
    (r,) = ort_session(m).run(["Y1"], {"X": x})
    np.testing.assert_allclose(y1, r)


def test_function_with_a_subgraph_reading_its_locals() -> None:
    """An If inside a function body reads a value local to that body (renamed when inlined)."""
    then_g = helper.make_graph([helper.make_node("Neg", ["t"], ["o"])], "then", [], [vi("o")])
    else_g = helper.make_graph([helper.make_node("Identity", ["t"], ["o"])], "else", [], [vi("o")])
    body = [
        helper.make_node("Abs", ["x"], ["t"]),
        helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
    ]
    fn = helper.make_function("local", "NegAbsIf", ["x", "c"], ["y"], body, OPSET)
    m = model([helper.make_node("NegAbsIf", ["X", "C"], ["Y"], domain="local")],
              [vi("X", F, [2]), vi("C", TensorProto.BOOL, [])], [vi("Y")],
              opset_imports=OPSET + [helper.make_opsetid("local", 1)], functions=[fn])  # fmt: skip
    x = np.array([-1.0, 2.0], np.float32)
    s = InferenceSession(m)
    np.testing.assert_array_equal(s.run(None, {"X": x, "C": np.array(True)})[0], [-1, -2])
    np.testing.assert_array_equal(s.run(None, {"X": x, "C": np.array(False)})[0], [1, 2])


# ---------------------------------------------------------------- control flow with outer-scope values
def _if_model() -> ol.ModelProto:
    then_g = helper.make_graph([helper.make_node("Add", ["X", "W"], ["o"])], "then", [], [vi("o", F, [3])])
    else_g = helper.make_graph([helper.make_node("Sub", ["X", "W"], ["o"])], "else", [], [vi("o", F, [3])])
    return model(
        [helper.make_node("Mul", ["X0", "K"], ["X"]), helper.make_node("If", ["C"], ["Y"], then_branch=then_g,
                                                                        else_branch=else_g)],
        [vi("X0", F, [3]), vi("K", F, [3]), vi("W", F, [3]), vi("C", TensorProto.BOOL, [])],
        [vi("Y", F, [3])],
    )  # fmt: skip


def _loop_model() -> ol.ModelProto:
    # acc_{i+1} = acc_i * X + i ; scan output: acc_i + W  (X and W from the outer scope)
    body = helper.make_graph(
        [
            helper.make_node("Cast", ["i"], ["fi"], to=F),
            helper.make_node("Mul", ["acc", "X"], ["m"]),
            helper.make_node("Add", ["m", "fi"], ["acc_out"]),
            helper.make_node("Add", ["acc", "W"], ["scan"]),
            helper.make_node("Identity", ["cond"], ["cond_out"]),
        ],
        "body",
        [vi("i", TensorProto.INT64, []), vi("cond", TensorProto.BOOL, []), vi("acc", F, [3])],
        [vi("cond_out", TensorProto.BOOL, []), vi("acc_out", F, [3]), vi("scan", F, [3])],
    )
    return model(
        [helper.make_node("Loop", ["M", "", "A0"], ["Acc", "Scans"], body=body)],
        [vi("M", TensorProto.INT64, []), vi("A0", F, [3]), vi("X", F, [3]), vi("W", F, [3])],
        [vi("Acc", F, [3]), vi("Scans", F, [None, 3])],
    )


def _scan_model() -> ol.ModelProto:
    # running sum of the rows of S, each row scaled by the outer X
    body = helper.make_graph(
        [
            helper.make_node("Mul", ["row", "X"], ["r"]),
            helper.make_node("Add", ["sum", "r"], ["sum_out"]),
            helper.make_node("Identity", ["sum_out"], ["out"]),
        ],
        "body",
        [vi("sum", F, [3]), vi("row", F, [3])],
        [vi("sum_out", F, [3]), vi("out", F, [3])],
    )
    return model(
        [helper.make_node("Scan", ["S0", "S"], ["Sum", "Rows"], body=body, num_scan_inputs=1)],
        [vi("S0", F, [3]), vi("S", F, [4, 3]), vi("X", F, [3])],
        [vi("Sum", F, [3]), vi("Rows", F, [4, 3])],
    )


def _control_flow_feeds(name: str) -> list[dict[str, np.ndarray]]:
    r = np.random.default_rng(1)
    v = lambda *s: r.standard_normal(s).astype(np.float32)  # noqa: E731
    if name == "if":
        return [{"X0": v(3), "K": v(3), "W": v(3), "C": np.array(c)} for c in (True, False)]
    if name == "loop":
        return [{"M": np.array(m, np.int64), "A0": v(3), "X": v(3), "W": v(3)} for m in (0, 1, 4)]
    return [{"S0": v(3), "S": v(4, 3), "X": v(3)}]


@pytest.mark.parametrize("name,build", [("if", _if_model), ("loop", _loop_model), ("scan", _scan_model)])
def test_control_flow_reads_outer_scope(name: str, build: Any) -> None:
    m = build()
    ours, ref = InferenceSession(m), ort_session(m)
    for feeds in _control_flow_feeds(name):
        got, want = ours.run(None, feeds), ref.run(None, feeds)
        for g, w in zip(got, want):
            if w.size == 0:
                assert g.size == 0
                continue
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_nested_subgraphs_capture_through_two_levels() -> None:
    """An If inside a Loop body reads a value of the main graph."""
    inner_then = helper.make_graph([helper.make_node("Add", ["acc", "W"], ["o"])], "t", [], [vi("o", F, [2])])
    inner_else = helper.make_graph([helper.make_node("Sub", ["acc", "W"], ["o"])], "e", [], [vi("o", F, [2])])
    body = helper.make_graph(
        [
            helper.make_node("If", ["cond"], ["acc_out"], then_branch=inner_then, else_branch=inner_else),
            helper.make_node("Identity", ["cond"], ["cond_out"]),
        ],
        "body",
        [vi("i", TensorProto.INT64, []), vi("cond", TensorProto.BOOL, []), vi("acc", F, [2])],
        [vi("cond_out", TensorProto.BOOL, []), vi("acc_out", F, [2])],
    )
    m = model(
        [helper.make_node("Loop", ["M", "C", "A0"], ["Acc"], body=body)],
        [vi("M", TensorProto.INT64, []), vi("C", TensorProto.BOOL, []), vi("A0", F, [2]), vi("W", F, [2])],
        [vi("Acc", F, [2])],
    )
    feeds = {"M": np.array(3, np.int64), "C": np.array(True), "A0": np.zeros(2, np.float32),
             "W": np.array([1, 2], np.float32)}  # fmt: skip
    np.testing.assert_array_equal(InferenceSession(m).run(None, feeds)[0], [3, 6])


# ---------------------------------------------------------------- bad feeds
@pytest.mark.parametrize(
    "feeds,expected",
    [
        ({"A": A, "B": B}, r"missing input\(s\) \['C'\]"),
        ({"A": A, "B": B, "C": C, "D": A}, r"unknown input name\(s\) \['D'\]"),
        ({"A": A.astype(np.float64), "B": B, "C": C}, r"input 'A': expected tensor\(float\).*got float64"),
        ({"A": A[0], "B": B, "C": C}, r"input 'A': expected rank 2 .*got rank 1"),
        ({"A": A, "B": np.ones((2, 3), np.float32), "C": C},
         r"input 'B': dimension 0 must be 1, got 2.*\[1, 3\].*\[2, 3\]"),
    ],
    ids=["missing", "unknown", "dtype", "rank", "fixed-dim"],
)  # fmt: skip
def test_bad_feeds_raise_invalid_feed(feeds: dict[str, Any], expected: str) -> None:
    with pytest.raises(InvalidFeed, match=expected):
        InferenceSession(add_mul_model()).run(None, feeds)


def test_symbolic_dims_accept_any_size() -> None:
    a = np.ones((5, 3), np.float32)
    (y,) = InferenceSession(add_mul_model()).run(None, {"A": a, "B": B, "C": C})
    assert y.shape == (5, 3)


def test_feeds_come_back_unchanged_and_outputs_are_not_aliases() -> None:
    m = model(
        [helper.make_node("Identity", ["X"], ["Y"]), helper.make_node("Relu", ["X"], ["Z"])],
        [vi("X", F, [4])],
        [vi("Y"), vi("Z")],
    )
    x = np.array([-1.0, 0.0, 1.0, np.nan], np.float32)
    before = x.copy()
    y, z = InferenceSession(m).run(None, {"X": x})
    np.testing.assert_array_equal(x, before)
    y[:] = 7
    z[:] = 7
    np.testing.assert_array_equal(x, before)


def test_in_place_friendly_kernels_do_not_touch_feeds() -> None:
    """Every feed of a model touching all input-modifying-prone ops is bitwise unchanged."""
    m = model(
        [
            helper.make_node("Clip", ["X", "lo", "hi"], ["c"]),
            helper.make_node("CumSum", ["c", "axis"], ["s"]),
            helper.make_node("ScatterElements", ["s", "idx", "upd"], ["Y"], axis=0),
            helper.make_node("Softmax", ["X"], ["Z"]),
        ],
        [vi("X", F, [4]), vi("lo", F, []), vi("hi", F, []), vi("axis", TensorProto.INT64, []),
         vi("idx", TensorProto.INT64, [2]), vi("upd", F, [2])],
        [vi("Y"), vi("Z")],
    )  # fmt: skip
    feeds = {"X": np.array([3.0, -2.0, 0.5, 9.0], np.float32), "lo": np.float32(-1) * np.ones((), np.float32),
             "hi": np.ones((), np.float32), "axis": np.zeros((), np.int64), "idx": np.array([0, 3]),
             "upd": np.array([5.0, 6.0], np.float32)}  # fmt: skip
    before = copy.deepcopy(feeds)
    InferenceSession(m).run(None, feeds)
    for k in feeds:
        assert feeds[k].tobytes() == before[k].tobytes() and feeds[k].dtype == before[k].dtype, k


# ---------------------------------------------------------------- failures inside kernels
def test_kernel_error_becomes_runtime_failure_with_context() -> None:
    m = model(
        [helper.make_node("Neg", ["X"], ["N"]), helper.make_node("MatMul", ["N", "W"], ["Y"], name="proj")],
        [vi("X", F, None), vi("W", F, None)],
        [vi("Y")],
    )
    with pytest.raises(RuntimeFailure) as info:
        InferenceSession(m).run(None, {"X": np.ones((2, 3), np.float32), "W": np.ones((4, 5), np.float32)})
    msg = str(info.value)
    for part in ("'proj'", "ai.onnx::MatMul", "opset 18", "[[2, 3], [4, 5]]"):
        assert part in msg, (part, msg)
    assert info.value.__cause__ is not None


def test_missing_kernel_is_not_implemented_op() -> None:
    m = model([helper.make_node("Relu", ["X"], ["Y"], name="r")], [vi("X", F, [2])], [vi("Y")],
              opset_imports=[helper.make_opsetid("", 5)])  # fmt: skip
    versions = sorted(since for since, _ in KERNELS.versions("", "Relu"))
    if versions[0] > 5:  # the usual case: no Relu kernel as old as opset 5
        with pytest.raises(NotImplementedOp) as info:
            InferenceSession(m)
        msg = str(info.value)
        assert "ai.onnx::Relu" in msg and "opset 5" in msg and "'r'" in msg and str(versions) in msg
    m2 = model([helper.make_node("FrobnicateOp", ["X"], ["Y"], domain="com.example")], [vi("X", F, [2])], [vi("Y")],
               opset_imports=OPSET + [helper.make_opsetid("com.example", 1)])  # fmt: skip
    with pytest.raises(NotImplementedOp, match=r"com\.example::FrobnicateOp.*opset 1.*no kernel exists"):
        InferenceSession(m2)


def test_unknown_domain_and_undefined_value_are_reported() -> None:
    m = model([helper.make_node("Add", ["X", "nowhere"], ["Y"])], [vi("X", F, [2])], [vi("Y")])
    with pytest.raises(ol.OnnxLightError, match="'nowhere'"):
        InferenceSession(m)


def test_registered_kernel_is_used_and_older_opsets_pick_older_versions() -> None:
    calls: list[int] = []

    @kernel("test.session", "Twice", since=1)
    def twice_1(x: np.ndarray) -> np.ndarray:
        calls.append(1)
        return 2 * x

    @kernel("test.session", "Twice", since=3)
    def twice_3(x: np.ndarray, *, k: int = 2) -> np.ndarray:
        calls.append(3)
        return k * x

    try:
        for version, want in ((1, 1), (2, 1), (3, 3), (9, 3)):
            m = model([helper.make_node("Twice", ["X"], ["Y"], domain="test.session")], [vi("X", F, [1])], [vi("Y")],
                      opset_imports=OPSET + [helper.make_opsetid("test.session", version)])  # fmt: skip
            np.testing.assert_array_equal(InferenceSession(m).run(None, {"X": np.ones(1, np.float32)})[0], [2])
            assert calls[-1] == want
    finally:
        KERNELS.remove("test.session", "Twice")


# ---------------------------------------------------------------- determinism, threads, scale
def _mlp() -> tuple[ol.ModelProto, dict[str, np.ndarray]]:
    r = np.random.default_rng(3)
    w1, w2 = r.standard_normal((64, 128)).astype(np.float32), r.standard_normal((128, 10)).astype(np.float32)
    m = model(
        [
            helper.make_node("MatMul", ["X", "W1"], ["h"]),
            helper.make_node("Tanh", ["h"], ["t"]),
            helper.make_node("MatMul", ["t", "W2"], ["l"]),
            helper.make_node("Softmax", ["l"], ["Y"], axis=-1),
            helper.make_node("ReduceSum", ["t"], ["S"], keepdims=0),
        ],
        [vi("X", F, ["N", 64])],
        [vi("Y"), vi("S")],
        initializer=[ol.numpy_helper.from_array(w1, "W1"), ol.numpy_helper.from_array(w2, "W2")],
    )
    return m, {"X": r.standard_normal((32, 64)).astype(np.float32)}


def test_outputs_are_bitwise_deterministic() -> None:
    m, feeds = _mlp()
    first = InferenceSession(m).run(None, feeds)
    s = InferenceSession(m)
    for _ in range(3):
        for a, b in zip(first, s.run(None, feeds)):
            assert a.tobytes() == b.tobytes()


def test_one_session_from_four_threads() -> None:
    m, _ = _mlp()
    s = InferenceSession(m)
    r = np.random.default_rng(4)
    inputs = [r.standard_normal((8 + i, 64)).astype(np.float32) for i in range(4)]
    expected = [s.run(None, {"X": x}) for x in inputs]
    errors: list[str] = []
    barrier = threading.Barrier(4)

    def worker(i: int) -> None:
        barrier.wait()
        for _ in range(25):
            got = s.run(None, {"X": inputs[i]})
            if any(g.tobytes() != e.tobytes() for g, e in zip(got, expected[i])):
                errors.append(f"thread {i} got a wrong result")
                return

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_ten_thousand_node_chain_without_recursion() -> None:
    n = 10_000
    nodes = [helper.make_node("Add" if i % 2 else "Neg", [f"v{i}", "one"] if i % 2 else [f"v{i}"], [f"v{i + 1}"])
             for i in range(n)]  # fmt: skip
    m = model(nodes, [vi("v0", F, [2]), vi("one", F, [])], [vi(f"v{n}")])
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(200)  # nothing in compile or run may recurse per node
    try:
        s = InferenceSession(m)
        (y,) = s.run(None, {"v0": np.array([0.0, 1.0], np.float32), "one": np.ones((), np.float32)})
    finally:
        sys.setrecursionlimit(limit)
    # each Neg-then-Add pair maps v to 1 - v; 5,000 pairs are the identity
    np.testing.assert_array_equal(y, [0.0, 1.0])


def test_intermediates_are_freed_after_their_last_use() -> None:
    """Peak memory of a chain of 40 ~4 MB intermediates stays near a few of them, not 40."""
    n, size = 40, 1 << 20
    nodes = [helper.make_node("Neg" if i % 2 else "Abs", [f"v{i}"], [f"v{i + 1}"]) for i in range(n)]
    m = model(nodes, [vi("v0", F, [size])], [vi(f"v{n}")])
    s = InferenceSession(m)
    x = np.ones(size, np.float32)
    s.run(None, {"v0": x})  # warm up
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        s.run(None, {"v0": x})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * x.nbytes, f"peak {peak / x.nbytes:.1f} tensors for a chain of {n}"


# ---------------------------------------------------------------- verbose and check_finite
def test_verbose_prints_every_node_with_shapes_and_norms() -> None:
    m = model(
        [helper.make_node("Neg", ["X"], ["N"], name="negate"), helper.make_node("Shape", ["N"], ["S"])],
        [vi("X", F, [2, 2])],
        [vi("N"), vi("S")],
    )
    out = io.StringIO()
    with redirect_stdout(out):
        InferenceSession(m, verbose=1).run(None, {"X": np.full((2, 2), 3.0, np.float32)})
    lines = out.getvalue().strip().splitlines()
    assert len(lines) == 2
    assert "'negate'" in lines[0] and "ai.onnx::Neg" in lines[0] and "[2, 2]" in lines[0] and "|6|" in lines[0]
    assert "ai.onnx::Shape" in lines[1] and "int64" in lines[1]
    quiet = io.StringIO()
    with redirect_stdout(quiet):
        InferenceSession(m).run(None, {"X": np.ones((2, 2), np.float32)})
    assert quiet.getvalue() == ""


def test_check_finite_names_the_first_bad_node_and_its_bad_input() -> None:
    m = model(
        [
            helper.make_node("Log", ["X"], ["L"], name="log"),  # log(0) = -inf: the first bad node
            helper.make_node("Mul", ["L", "X"], ["M"], name="mul"),
            helper.make_node("Exp", ["M"], ["Y"], name="exp"),
        ],
        [vi("X", F, [2])],
        [vi("Y")],
    )
    x = np.array([0.0, 1.0], np.float32)
    with np.errstate(all="ignore"):
        InferenceSession(m).run(None, {"X": x})  # without the check: no error
        with pytest.raises(RuntimeFailure) as info:
            InferenceSession(m, check_finite=True).run(None, {"X": x})
    msg = str(info.value)
    assert "'log'" in msg and "all its inputs were finite" in msg

    x_bad = np.array([np.inf, 1.0], np.float32)
    m2 = model([helper.make_node("Abs", ["X"], ["Y"], name="abs")], [vi("X", F, [2])], [vi("Y")])
    with pytest.raises(RuntimeFailure, match=r"'abs'.*input\(s\) \['X'\] were already non-finite"):
        InferenceSession(m2, check_finite=True).run(None, {"X": x_bad})


# ---------------------------------------------------------------- low-precision feeds
def test_bfloat16_feed_is_tagged_so_cast_reads_it() -> None:
    m = model([helper.make_node("Cast", ["X"], ["Y"], to=F), helper.make_node("Add", ["X", "X"], ["Z"])],
              [vi("X", TensorProto.BFLOAT16, [3])], [vi("Y"), vi("Z")])  # fmt: skip
    values = np.array([1.5, -2.0, 0.15625], np.float32)
    bits = (values.view(np.uint32) >> 16).astype(np.uint16)  # exact in bfloat16
    y, z = InferenceSession(m).run(None, {"X": bits})
    np.testing.assert_array_equal(y, values)
    assert z.dtype == np.uint16
    np.testing.assert_array_equal((z.astype(np.uint32) << 16).view(np.float32), 2 * values)


def test_input_with_initializer_default_is_checked_when_fed() -> None:
    """An input whose initializer is its default may be fed, with the declared type."""
    nodes = [helper.make_node("Mul", ["x", "w"], ["y"])]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("w", TensorProto.FLOAT, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [ol.numpy_helper.from_array(np.array([2.0, 3.0], np.float32), "w")],
    )
    sess = InferenceSession(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]))
    x = np.ones(2, np.float32)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], [2.0, 3.0])
    np.testing.assert_array_equal(sess.run(None, {"x": x, "w": np.array([5.0, 7.0], np.float32)})[0], [5.0, 7.0])
    with pytest.raises(InvalidFeed, match=r"input 'w': expected tensor\(float\).*got float64"):
        sess.run(None, {"x": x, "w": np.array([5.0, 7.0])})
