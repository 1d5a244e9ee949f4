"""onnx_light.checker: accepts what onnx's checker accepts, rejects what it rejects, naming the node.

The onnx wheel's backend node tests (read with our codec) are the valid corpus: every
case onnx's checker accepts (``full_check`` True and False) must pass ours, every case it
rejects must fail ours (a subset here, all under ``-m slow``). Hand-made broken models
cover each rule; each is also rejected by onnx's checker, the reference.
"""

from __future__ import annotations

import pathlib
import sys
from collections.abc import Callable
from typing import Any

import pytest

import onnx_light as ol
from onnx_light import TensorProto as T
from onnx_light import checker
from onnx_light import helper as h

onnx = pytest.importorskip("onnx")
#: what onnx's checker raises (full_check reports inference errors as InferenceError)
ONNX_REJECTS = (onnx.checker.ValidationError, onnx.shape_inference.InferenceError)
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "runtime"))

#: backend cases onnx's full check rejects for a reason outside the node (its function
#: body's Constant has two values); ours does not expand function bodies
FULL_CHECK_ONLY_ONNX_REJECTS = {"test_mvn"}


def _vi(name: str, dtype: int = T.FLOAT, shape: Any = (2,)) -> Any:
    return h.make_tensor_value_info(name, dtype, None if shape is None else list(shape))


def _model(nodes: list[Any], inputs: list[Any], outputs: list[Any], opset: int = 21, **kw: Any) -> Any:
    imports = [h.make_opsetid("", opset), *kw.pop("extra_imports", [])]
    graph = h.make_graph(nodes, kw.pop("name", "g"), inputs, outputs, initializer=kw.pop("inits", []))
    return h.make_model(graph, opset_imports=imports, **kw)


def _relu_then(op_node: Any, inputs: list[Any] | None = None) -> Any:
    return _model([op_node], inputs or [_vi("a")], [_vi("c")])


def _if(branch_nodes: list[Any], out: str, inputs: list[Any]) -> Any:
    branch = h.make_graph(branch_nodes, "then", [], [_vi(out)])
    other = h.make_graph([h.make_node("Identity", ["a"], ["e"])], "else", [], [_vi("e")])
    node = h.make_node("If", ["cond"], ["c"], name="if0", then_branch=branch, else_branch=other)
    return _model([node], inputs, [_vi("c")])


def _two_values_attribute() -> Any:
    node = h.make_node("LeakyRelu", ["a"], ["c"], alpha=0.1)
    node.attribute[0].i = 3
    return _relu_then(node)


def _no_ir_version() -> Any:
    m = _relu_then(h.make_node("Relu", ["a"], ["c"]))
    m.ir_version = 0
    return m


def _short_tensor() -> Any:
    t = h.make_tensor("w", T.FLOAT, [2], [1.0, 2.0])
    t.dims[:] = [3]
    return t


#: name -> (model builder, full_check, regex the message must match)
BROKEN: dict[str, tuple[Callable[[], Any], bool, str]] = {
    "undefined input": (
        lambda: _relu_then(h.make_node("Relu", ["zz"], ["c"], name="r")),
        False,
        r"node 0 'r' \(ai.onnx::Relu\): .*input 'zz' is not an output of any previous node",
    ),
    "unknown op": (
        lambda: _relu_then(h.make_node("NoSuchOp", ["a"], ["c"])),
        False,
        r"node 0 \(ai.onnx::NoSuchOp\): no op registered .* domain_version of 21",
    ),
    "wrong attribute type": (
        lambda: _relu_then(h.make_node("Transpose", ["a"], ["c"], perm="x")),
        False,
        r"ai.onnx::Transpose\): mismatched attribute type of 'perm': .* expects INTS, got STRING",
    ),
    "too many inputs": (
        lambda: _relu_then(h.make_node("Relu", ["a", "a"], ["c"])),
        False,
        r"ai.onnx::Relu\): input size 2 not in range \[min=1, max=1\]",
    ),
    "too few inputs": (
        lambda: _relu_then(h.make_node("Add", ["a"], ["c"])),
        False,
        r"ai.onnx::Add\): input size 1 not in range \[min=2, max=2\]",
    ),
    "missing required attribute": (
        lambda: _relu_then(h.make_node("Cast", ["a"], ["c"])),
        False,
        r"ai.onnx::Cast\): required attribute 'to' .* is missing",
    ),
    "unknown attribute": (
        lambda: _relu_then(h.make_node("Relu", ["a"], ["c"], foo=1)),
        False,
        r"unrecognized attribute 'foo'",
    ),
    "cycle": (
        lambda: _model([h.make_node("Relu", ["d"], ["c"]), h.make_node("Relu", ["c"], ["d"])], [_vi("a")], [_vi("c")]),
        False,
        r"node 0 \(ai.onnx::Relu\): nodes must be topologically sorted, but input 'd'",
    ),
    "duplicate output name": (
        lambda: _model(
            [h.make_node("Relu", ["a"], ["c"]), h.make_node("Neg", ["a"], ["c"], name="n2")], [_vi("a")], [_vi("c")]
        ),
        False,
        r"node 1 'n2' \(ai.onnx::Neg\): .*single static assignment.*'c' is assigned twice",
    ),
    "output overwrites an input": (
        lambda: _model([h.make_node("Relu", ["a"], ["a"])], [_vi("a")], [_vi("a")]),
        False,
        r"'a' is assigned twice",
    ),
    "empty name for a single input": (
        lambda: _relu_then(h.make_node("Add", ["a", ""], ["c"])),
        False,
        r"input 1 \(B\) is marked single but has an empty name",
    ),
    "no opset import for the domain": (
        lambda: _relu_then(h.make_node("Foo", ["a"], ["c"], domain="my.domain")),
        False,
        r"\(my.domain::Foo\): no opset import for domain 'my.domain'",
    ),
    "deprecated op": (
        lambda: _model(
            [h.make_node("Upsample", ["a", "s"], ["c"])], [_vi("a"), _vi("s", shape=(1,))], [_vi("c")], opset=10
        ),
        False,
        r"deprecated in domain_version of 10",
    ),
    "graph output not produced": (
        lambda: _model([h.make_node("Relu", ["a"], ["c"])], [_vi("a")], [_vi("d")]),
        False,
        r"graph output 'd' is not an output",
    ),
    "output without shape": (
        lambda: _model([h.make_node("Relu", ["a"], ["c"])], [_vi("a")], [_vi("c", shape=None)]),
        False,
        r"output 'c': field 'shape' of its type is required",
    ),
    "no ir_version": (
        _no_ir_version,
        False,
        r"ir_version",
    ),
    "no opset import": (
        lambda: h.make_model(
            h.make_graph([h.make_node("Relu", ["a"], ["c"])], "g", [_vi("a")], [_vi("c")]), opset_imports=[]
        ),
        False,
        r"must specify opset_import",
    ),
    "two value fields in an attribute": (_two_values_attribute, False, r"attribute 'alpha': type field and data"),
    "initializer too short": (
        lambda: _model([h.make_node("Add", ["a", "w"], ["c"])], [_vi("a")], [_vi("c")], inits=[_short_tensor()]),
        False,
        r"initializer tensor 'w': float_data holds 2 values, the dims \[3\] need 3",
    ),
    "subgraph reads a value defined later": (
        lambda: _model(
            [
                h.make_node(
                    "If",
                    ["cond"],
                    ["c"],
                    then_branch=h.make_graph([h.make_node("Identity", ["late"], ["t"])], "then", [], [_vi("t")]),
                    else_branch=h.make_graph([h.make_node("Identity", ["x"], ["e"])], "else", [], [_vi("e")]),
                ),
                h.make_node("Relu", ["x"], ["late"]),
            ],
            [_vi("x"), _vi("cond", T.BOOL, ())],
            [_vi("c")],
        ),
        False,
        r"attribute 'then_branch': graph 'then': node 0 \(ai.onnx::Identity\): .*input 'late'",
    ),
    "subgraph output from the outer scope": (
        lambda: _if([], "a", [_vi("a"), _vi("cond", T.BOOL, ())]),
        False,
        r"graph 'then': graph output 'a' is not an output",
    ),
    "inconsistent input types (full check)": (
        lambda: _model([h.make_node("Add", ["a", "b"], ["c"])], [_vi("a"), _vi("b", T.DOUBLE)], [_vi("c")]),
        True,
        r"ai.onnx::Add\): input 1 \('b'\) has inconsistent type tensor\(double\)",
    ),
    "type not allowed (full check)": (
        lambda: _model([h.make_node("Relu", ["a"], ["c"])], [_vi("a", T.STRING)], [_vi("c", T.STRING)]),
        True,
        r"has type tensor\(string\), which ai.onnx::Relu-14 does not allow",
    ),
    "declared shape contradicts inference (full check)": (
        lambda: _model([h.make_node("Relu", ["a"], ["c"])], [_vi("a")], [_vi("c", shape=(3,))]),
        True,
        r"node 0 \(ai.onnx::Relu\): shape inference: output 'c' inferred shape and declared shape differ",
    ),
    "Reshape to a wrong declared shape (full check)": (
        lambda: _model(
            [h.make_node("Reshape", ["a", "s"], ["c"])],
            [_vi("a", shape=(2, 3))],
            [_vi("c", shape=(2,))],
            inits=[h.make_tensor("s", T.INT64, [1], [6])],
        ),
        True,
        r"ai.onnx::Reshape\): shape inference: output 'c' inferred shape .* \(6\) vs \(2\)",
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_model_is_rejected(case: str) -> None:
    build, full, pattern = BROKEN[case]
    model = build()
    with pytest.raises(ONNX_REJECTS):  # the reference rejects it too
        onnx.checker.check_model(onnx.load_from_string(model.SerializeToString()), full_check=True)
    with pytest.raises(checker.ValidationError, match=pattern):
        checker.check_model(model, full_check=full)


def test_validation_error_is_an_onnx_light_error_and_a_value_error() -> None:
    assert issubclass(checker.ValidationError, ol.OnnxLightError)
    assert issubclass(checker.ValidationError, ValueError)


def _valid_models() -> dict[str, Any]:
    custom = _model(
        [h.make_node("Foo", ["a"], ["c"], domain="my.domain")],
        [_vi("a")],
        [_vi("c")],
        extra_imports=[h.make_opsetid("my.domain", 1)],
    )
    outer = _if([h.make_node("Neg", ["a"], ["t"])], "t", [_vi("a"), _vi("cond", T.BOOL, ())])
    fn = h.make_function(
        "local", "Twice", ["x"], ["y"], [h.make_node("Add", ["x", "x"], ["y"])], [h.make_opsetid("", 21)]
    )
    local = _model(
        [h.make_node("Twice", ["a"], ["c"], domain="local")],
        [_vi("a")],
        [_vi("c")],
        extra_imports=[h.make_opsetid("local", 1)],
        functions=[fn],
    )
    inits = _model(
        [h.make_node("Add", ["a", "w"], ["c"])],
        [_vi("a")],
        [_vi("c")],
        inits=[h.make_tensor("w", T.FLOAT, [2], [1, 2])],
    )
    return {"custom domain": custom, "outer scope in a branch": outer, "local function": local, "initializer": inits}


@pytest.mark.parametrize("case", sorted(_valid_models()))
def test_valid_model_is_accepted(case: str) -> None:
    model = _valid_models()[case]
    onnx.checker.check_model(onnx.load_from_string(model.SerializeToString()), full_check=True)
    checker.check_model(model, full_check=True)


def test_path_and_bytes(tmp_path: pathlib.Path) -> None:
    model = _valid_models()["initializer"]
    path = tmp_path / "m.onnx"
    ol.save(model, path)
    checker.check_model(str(path))
    checker.check_model(path, full_check=True)
    checker.check_model(model.SerializeToString())
    broken = BROKEN["unknown op"][0]()
    with pytest.raises(checker.ValidationError, match="NoSuchOp"):
        checker.check_model(broken.SerializeToString())


def test_check_node_and_attribute() -> None:
    checker.check_node(h.make_node("Relu", ["a"], ["c"]))
    with pytest.raises(checker.ValidationError, match="required attribute 'to'"):
        checker.check_node(h.make_node("Cast", ["a"], ["c"]))
    checker.check_attribute(h.make_attribute("alpha", 0.5))
    attr = h.make_attribute("alpha", 0.5)
    attr.name = ""
    with pytest.raises(checker.ValidationError, match="'name' of an attribute"):
        checker.check_attribute(attr)
    with pytest.raises(checker.ValidationError, match="'name' of a value_info"):
        checker.check_value_info(_vi(""))


def _node_verdicts(every: int) -> list[tuple[str, bytes, bool, bool]]:
    """(name, model bytes, onnx accepts, onnx accepts with full_check) of every ``every``-th case."""
    from test_conformance import all_cases

    out = []
    for c in sorted(all_cases(), key=lambda c: c.name)[::every]:
        verdicts = []
        for full in (False, True):
            try:
                onnx.checker.check_model(onnx.load_from_string(c.model), full_check=full)
                verdicts.append(True)
            except ONNX_REJECTS:
                verdicts.append(False)
        out.append((c.name, c.model, verdicts[0], verdicts[1]))
    return out


def _disagreements(every: int) -> list[str]:
    wrong = []
    for name, data, accepts, accepts_full in _node_verdicts(every):
        model = ol.ModelProto.FromString(data)
        for full, want in ((False, accepts), (True, accepts_full)):
            if full and name in FULL_CHECK_ONLY_ONNX_REJECTS:
                continue
            try:
                checker.check_model(model, full_check=full)
                got, why = True, ""
            except checker.ValidationError as e:
                got, why = False, str(e)
            if got != want:
                wrong.append(
                    f"{name} full_check={full}: onnx {'accepts' if want else 'rejects'}, ours {why or 'accepts'}"
                )
    return wrong


def test_backend_node_models_subset() -> None:
    """Every 6th backend node case: the same verdict as onnx's checker, both modes."""
    wrong = _disagreements(6)
    assert not wrong, "\n".join(wrong[:20])


@pytest.mark.slow
def test_backend_node_models_all() -> None:
    wrong = _disagreements(1)
    assert not wrong, "\n".join(wrong[:20])


def test_stale_value_info_only_fails_the_full_check() -> None:
    """value_info is advisory: onnx's basic check ignores a wrong one, its full check does not; so do we."""
    graph = h.make_graph(
        [h.make_node("Relu", ["a"], ["b"]), h.make_node("Neg", ["b"], ["c"], name="neg")],
        "g",
        [_vi("a")],
        [_vi("c")],
        value_info=[_vi("b", T.DOUBLE)],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 21)])
    reference = onnx.load_from_string(model.SerializeToString())
    onnx.checker.check_model(reference)
    with pytest.raises(ONNX_REJECTS):
        onnx.checker.check_model(reference, full_check=True)
    checker.check_model(model)
    with pytest.raises(checker.ValidationError, match=r"node 0 \(ai.onnx::Relu\): shape inference: output 'b'"):
        checker.check_model(model, full_check=True)
