"""The gradient pass itself: the contract of DESIGN §3, independent of specific rules."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import Case, backward_feeds, check_gradient, gradient
from onnx import helper as oh

import onnx_light as ol
from onnx_light import GradientError, helper

RNG = np.random.default_rng(0)


def _chain_model(opset: int = 21) -> ol.ModelProto:
    nodes = [
        helper.make_node("Mul", ["x", "w"], ["t"]),
        helper.make_node("Add", ["t", "b"], ["u"]),
        helper.make_node("Tanh", ["u"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", ol.TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("y", ol.TensorProto.FLOAT, ["N", 3])],
        [
            ol.numpy_helper.from_array(np.ones(3, np.float32), "w"),
            ol.numpy_helper.from_array(np.zeros(3, np.float32), "b"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_contract_inputs_outputs_and_opset() -> None:
    bwd = ol.GradientOfFunction(_chain_model(), xs=["w", "b"], y="y")
    assert isinstance(bwd, ol.FunctionProto)
    assert list(bwd.input) == ["w", "b", "x", "dy"]
    assert list(bwd.output) == ["grad_w", "grad_b"]
    assert {(o.domain, o.version) for o in bwd.opset_import} == {("", 21)}
    # the last node naming each gradient is an Identity
    finals = {n.output[0]: n.op_type for n in bwd.node if n.output and n.output[0].startswith("grad_")}
    assert finals == {"grad_w": "Identity", "grad_b": "Identity"}
    assert all(n.domain in ("", "ai.onnx") for n in bwd.node)


def test_self_contained_and_runs() -> None:
    """The backward function runs with nothing but its inputs (forward values re-emitted)."""
    model = _chain_model()
    bwd = ol.GradientOfFunction(model, xs=["w", "b"], y="y")
    x = RNG.standard_normal((4, 3)).astype(np.float32)
    w = RNG.standard_normal(3).astype(np.float32)
    b = RNG.standard_normal(3).astype(np.float32)
    dy = RNG.standard_normal((4, 3)).astype(np.float32)
    gw, gb = ol.runtime.InferenceSession(bwd).run(None, {"w": w, "b": b, "x": x, "dy": dy})
    t = 1 - np.tanh(x * w + b) ** 2
    np.testing.assert_allclose(gb, (dy * t).sum(0), rtol=1e-5)
    np.testing.assert_allclose(gw, (dy * t * x).sum(0), rtol=1e-5)
    # forward nodes are emitted once
    assert sum(1 for n in bwd.node if n.op_type == "Tanh") == 1


def test_pruning_keeps_only_paths_from_xs() -> None:
    nodes = [
        oh.make_node("Exp", ["z"], ["ez"]),  # depends on no x: needed only as a value
        oh.make_node("Mul", ["x", "ez"], ["t"]),
        oh.make_node("Sin", ["x"], ["unused"]),  # not an ancestor of y
        oh.make_node("Identity", ["t"], ["y"]),
    ]
    case = Case("prune", nodes, {"x": RNG.standard_normal(3), "z": RNG.standard_normal(3)}, ["x"])
    _, bwd = gradient(case)
    ops = [n.op_type for n in bwd.node]
    assert "Sin" not in ops
    check_gradient(case)


def test_repeated_input_accumulates_once() -> None:
    nodes = [oh.make_node("Mul", ["x", "x"], ["s"]), oh.make_node("Mul", ["s", "x"], ["y"])]
    case = Case("cube", nodes, {"x": RNG.standard_normal((2, 3))}, ["x"])
    grads = check_gradient(case)
    np.testing.assert_allclose(grads["x"].shape, (2, 3))
    _, bwd = gradient(case)
    ops = [n.op_type for n in bwd.node]
    # three contributions to x: one Sum, no chain of Adds
    assert ops.count("Sum") == 1 and ops.count("Add") == 0


def test_two_contributions_use_one_add() -> None:
    nodes = [oh.make_node("Mul", ["x", "a"], ["t"]), oh.make_node("Add", ["t", "x"], ["y"])]
    case = Case("add2", nodes, {"x": RNG.standard_normal(3), "a": RNG.standard_normal(3)}, ["x"])
    _, bwd = gradient(case)
    # the forward Add is not read by any rule, so only the accumulation remains
    assert [n.op_type for n in bwd.node] == ["Mul", "Add", "Identity"]
    check_gradient(case)


def test_unreachable_x_is_an_error_naming_it() -> None:
    with pytest.raises(GradientError, match="x='b2'"):
        model = _chain_model()
        model.graph.input.append(helper.make_tensor_value_info("b2", ol.TensorProto.FLOAT, [3]))
        ol.GradientOfFunction(model, xs=["w", "b2"], y="y")


def test_allow_unused_gives_zeros() -> None:
    model = _chain_model()
    model.graph.input.append(helper.make_tensor_value_info("b2", ol.TensorProto.FLOAT, [3]))
    bwd = ol.GradientOfFunction(model, xs=["w", "b2"], y="y", allow_unused=True)
    feeds = {
        "w": np.ones(3, np.float32),
        "b2": np.ones(3, np.float32),
        "b": np.zeros(3, np.float32),
        "x": np.ones((2, 3), np.float32),
        "dy": np.ones((2, 3), np.float32),
    }
    out = ol.runtime.InferenceSession(bwd).run(None, {n: feeds[n] for n in bwd.input})
    np.testing.assert_array_equal(out[1], np.zeros(3, np.float32))


def test_missing_y_is_an_error() -> None:
    with pytest.raises(GradientError, match="y='nope'"):
        ol.GradientOfFunction(_chain_model(), xs=["w"], y="nope")


@pytest.mark.parametrize(
    ("xs", "y", "match"),
    [
        (["x"], ["y"], r"y must be one value name, got \['y'\]"),
        ([["x"]], "y", r"xs must be value names, got \[\['x'\]\]"),
    ],
)
def test_names_of_the_wrong_kind_are_an_error(xs: object, y: object, match: str) -> None:
    """A list for y (as TangentOfFunction's ys) or a nested xs: a GradientError, not a TypeError."""
    with pytest.raises(GradientError, match=match):
        ol.GradientOfFunction(_chain_model(), xs=xs, y=y)


def test_integer_x_is_an_error() -> None:
    nodes = [helper.make_node("Cast", ["i"], ["f"], to=1), helper.make_node("Neg", ["f"], ["y"])]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("i", ol.TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("y", ol.TensorProto.FLOAT, [3])],
    )
    with pytest.raises(GradientError, match="INT64"):
        ol.GradientOfFunction(graph, xs=["i"], y="y")


def test_op_without_rule_names_node_op_opset_and_fix() -> None:
    node = helper.make_node("Frobnicate", ["x"], ["y"], domain="my.ops", name="frob0")
    with pytest.raises(GradientError) as err:
        ol.GradientOfNodes([node], xs=["x"], y="y")
    text = str(err.value)
    for part in ("frob0", "my.ops::Frobnicate", "opset", "RegisterGradientFunction"):
        assert part in text


def test_custom_rule_short_form() -> None:
    reg = ol.DefaultGradRegistry()

    @ol.RegisterGradientFunction("my.ops", "Twice", registry=reg)
    def twice_grad(ctx, dy):  # type: ignore[no-untyped-def]
        return ctx.op.Add(dy, dy)

    nodes = [helper.make_node("Twice", ["x"], ["y"], domain="my.ops")]
    bwd = ol.GradientOfNodes(nodes, xs=["x"], y="y", registry=reg)
    assert {o.domain for o in bwd.opset_import} == {""}  # the rule emits only standard ops
    (g,) = ol.runtime.InferenceSession(bwd).run(None, {"x": np.ones(3), "dy": np.arange(3.0)})
    np.testing.assert_array_equal(g, 2 * np.arange(3.0))
    # the default registry is untouched
    assert ("my.ops", "Twice") not in ol.DefaultGradRegistry()


def test_custom_rule_seed_form() -> None:
    reg = ol.DefaultGradRegistry()

    def square_grad(node, output_grad, grad_accum, counter, func):  # type: ignore[no-untyped-def]
        x = node.input[0]
        two_x = ol.NewGradName("two_x", counter)
        func.node.append(helper.make_node("Add", [x, x], [two_x]))
        dx = ol.NewGradName("dx", counter)
        func.node.append(helper.make_node("Mul", [output_grad, two_x], [dx]))
        ol.AccumulateGrad(grad_accum, x, dx, counter, func)
        return True

    ol.RegisterGradientFunction("my.ops", "Square", square_grad, registry=reg)
    nodes = [helper.make_node("Square", ["x"], ["s"], domain="my.ops"), helper.make_node("Neg", ["s"], ["y"])]
    bwd = ol.GradientOfNodes(nodes, xs=["x"], y="y", registry=reg)
    # the forward custom op is re-emitted only if read; here the rule reads x only, so
    # neither the op nor its domain appear in the result
    assert all(n.op_type != "Square" for n in bwd.node)
    assert {o.domain for o in bwd.opset_import} == {""}
    (g,) = ol.runtime.InferenceSession(bwd).run(None, {"x": np.arange(3.0), "dy": np.ones(3)})
    np.testing.assert_array_equal(g, -2 * np.arange(3.0))


def test_names_never_collide_with_source() -> None:
    # forward values named like the pass's own names, "dy" included
    nodes = [
        oh.make_node("Mul", ["x", "x"], ["dy"]),
        oh.make_node("Mul", ["dy", "x"], ["Mul_grad1"]),
        oh.make_node("Tanh", ["Mul_grad1"], ["y"]),
    ]
    case = Case("collide", nodes, {"x": RNG.uniform(0.2, 0.8, 3)}, ["x"])
    check_gradient(case)


def test_x_equal_to_y() -> None:
    nodes = [oh.make_node("Identity", ["x"], ["y"])]
    bwd = ol.GradientOfNodes(nodes, xs=["y"], y="y", allow_unused=False)
    (g,) = ol.runtime.InferenceSession(bwd).run(None, {"y": np.ones(2), "dy": np.array([3.0, 4.0])})
    np.testing.assert_array_equal(g, [3.0, 4.0])


def test_explicit_zs_order_and_missing() -> None:
    model = _chain_model()
    bwd = ol.GradientOfFunction(model, xs=["w"], y="y", zs=["b", "x"])
    assert list(bwd.input) == ["w", "b", "x", "dy"]
    with pytest.raises(GradientError, match="zs"):
        ol.GradientOfFunction(model, xs=["w"], y="y", zs=["x"])


def test_old_opset_model_is_upgraded() -> None:
    nodes = [
        oh.make_node("Mul", ["x", "x"], ["s"]),
        oh.make_node("ReduceSum", ["s"], ["y"], axes=[1], keepdims=0),
    ]
    case = Case("opset11", nodes, {"x": RNG.standard_normal((2, 3))}, ["x"], opset=11)
    _, bwd = gradient(case)
    assert {(o.domain, o.version) for o in bwd.opset_import} == {("", 21)}
    check_gradient(case)


def test_backward_feeds_helper_covers_inputs() -> None:
    case = Case("feeds", [oh.make_node("Exp", ["x"], ["y"])], {"x": RNG.standard_normal(3)}, ["x"])
    _, bwd = gradient(case)
    feeds = backward_feeds(bwd, {"x": np.ones(3)}, np.ones(3))
    assert list(feeds) == list(bwd.input)


def test_custom_domain_kept_when_forward_op_is_reemitted() -> None:
    reg = ol.DefaultGradRegistry()

    @ol.RegisterGradientFunction("my.ops", "Exp2", registry=reg)
    def exp2_grad(ctx, dy):  # type: ignore[no-untyped-def]
        """d/dx 2^x = ln(2) 2^x: reads the forward output."""
        return ctx.op.Mul(dy, ctx.op.Mul(ctx.output(0), ctx.const(np.log(2.0), like=ctx.input(0))))

    nodes = [helper.make_node("Exp2", ["x"], ["y"], domain="my.ops")]
    bwd = ol.GradientOfNodes(nodes, xs=["x"], y="y", registry=reg)
    assert [n.op_type for n in bwd.node][0] == "Exp2"
    assert ("my.ops", 1) in {(o.domain, o.version) for o in bwd.opset_import}


def test_random_ops_are_inputs_not_recomputed() -> None:
    """A seedless training-mode Dropout is not run again: its mask is fed from the forward run."""
    nodes = [
        helper.make_node("Mul", ["x", "w"], ["t"]),
        helper.make_node("Dropout", ["t", "ratio", "training"], ["d", "mask"]),
        helper.make_node("Tanh", ["d"], ["y"]),
    ]
    bwd = ol.GradientOfNodes(nodes, xs=["w"], y="y")
    assert "Dropout" not in [n.op_type for n in bwd.node]
    assert "mask" in bwd.input and "d" in bwd.input
    x = RNG.standard_normal(5)
    w = RNG.standard_normal(5)
    fwd = ol.runtime.InferenceSession(
        helper.make_function(
            "t", "f", ["x", "w", "ratio", "training"], ["y", "d", "mask"], nodes, [helper.make_opsetid("", 21)]
        )
    )
    feeds = {"x": x, "w": w, "ratio": np.asarray(0.5), "training": np.asarray(True)}
    y, d, mask = fwd.run(None, feeds)
    grads = dict(
        zip(
            bwd.output,
            ol.runtime.InferenceSession(bwd).run(
                None, {**{k: v for k, v in feeds.items() if k in bwd.input}, "d": d, "mask": mask, "dy": np.ones(5)}
            ),
        )
    )
    np.testing.assert_allclose(grads["grad_w"], (1 - y**2) * mask * 2.0 * x)


def test_seeded_random_op_is_recomputed() -> None:
    nodes = [
        helper.make_node("Dropout", ["x", "ratio", "training"], ["d", "mask"], seed=3),
        helper.make_node("Tanh", ["d"], ["y"]),
    ]
    bwd = ol.GradientOfNodes(nodes, xs=["x"], y="y")
    assert "Dropout" in [n.op_type for n in bwd.node]


def test_rule_can_ask_for_an_omitted_forward_output() -> None:
    """ctx.forward_output(k) makes the re-emitted forward node compute optional output k."""
    reg = ol.DefaultGradRegistry()

    @ol.RegisterGradientFunction("", "LayerNormalization", registry=reg)
    def ln_grad(ctx, dy):  # type: ignore[no-untyped-def]
        """Test rule: only checks that Mean/InvStdDev come from the forward node."""
        mean, inv = ctx.forward_output(1), ctx.forward_output(2)
        return ctx.op.Mul(ctx.op.Mul(dy, inv), ctx.op.Add(mean, ctx.const(1.0, like=mean)))

    nodes = [helper.make_node("LayerNormalization", ["x", "s"], ["y"], axis=-1)]
    vi = [helper.make_tensor_value_info("x", ol.TensorProto.FLOAT, [2, 3])]
    bwd = ol.GradientOfNodes(nodes, xs=["x"], y="y", registry=reg, value_info=vi)
    ln = [n for n in bwd.node if n.op_type == "LayerNormalization"]
    assert len(ln) == 1 and len(ln[0].output) == 3 and all(ln[0].output)
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    feeds = {"x": x, "s": np.ones(3, np.float32), "dy": np.ones((2, 3), np.float32)}
    (g,) = ol.runtime.InferenceSession(bwd).run(None, feeds)
    mean = x.mean(-1, keepdims=True)
    inv = 1 / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(g, inv * (mean + 1) * np.ones((2, 3)), rtol=1e-5)
