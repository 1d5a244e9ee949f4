"""ai.onnx.ml and ai.onnx.preview.training kernels against onnxruntime (or the spec's formulas)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from kernel_harness import call_kernel
from ort_reference import compare_with_ort, make_node_model, rng

ML = "ai.onnx.ml"
TRAINING = "ai.onnx.preview.training"


def test_binarizer_and_array_feature_extractor() -> None:
    x = rng().standard_normal((3, 5)).astype(np.float32)
    compare_with_ort("Binarizer", [x], {"threshold": 0.25}, opset=1, domain=ML)
    np.testing.assert_array_equal(call_kernel(_ml_node("Binarizer"), 1, [x.astype(np.float64)])[0], x > 0)
    for data in (x, x.astype(np.int64), x[0], x.reshape(3, 1, 5)):
        compare_with_ort("ArrayFeatureExtractor", [data, np.array([4, 0, 4], np.int64)], opset=1, domain=ML)


def _ml_node(op: str, **attrs: Any) -> Any:
    from onnx import helper

    return helper.make_node(op, ["x"], ["y"], domain=ML, **attrs)


S = object  # string arrays: numpy object dtype, as the runtime holds them
LABEL_ROWS: list[tuple[str, Any, dict[str, Any]]] = [
    ("str->int", np.array(["a", "c", "z", "b", "a"], S), {"keys_strings": ["a", "b", "c"], "values_int64s": [3, 1, 2]}),
    ("str->int-default", np.array([["a", "q"]], S), {"keys_strings": ["a"], "values_int64s": [7], "default_int64": 4}),
    ("int->str", np.array([1, 5, 2, 9], np.int64), {"keys_int64s": [1, 2, 5], "values_strings": ["x", "y", "z"]}),
    ("int->str-default", np.array([1, 0]), {"keys_int64s": [1], "values_strings": ["x"], "default_string": "?"}),
    ("float->float", np.array([0.5, np.nan, 2.0, 7.0], np.float32),
     {"keys_floats": [0.5, 2.0, np.nan], "values_floats": [1.0, 2.0, 9.0]}),
    ("float->int", np.array([0.5, 1.5, 3.0], np.float32), {"keys_floats": [0.5, 1.5], "values_int64s": [1, 2]}),
]  # fmt: skip


@pytest.mark.parametrize("row", LABEL_ROWS, ids=[r[0] for r in LABEL_ROWS])
def test_label_encoder_matches_onnxruntime(row: tuple[str, Any, dict[str, Any]]) -> None:
    _, x, attrs = row
    compare_with_ort("LabelEncoder", [x], attrs, opset=4, domain=ML)
    if not any(isinstance(v, float) and np.isnan(v) for v in attrs.get("keys_floats", [])):
        compare_with_ort("LabelEncoder", [x], attrs, opset=2, domain=ML)


def test_label_encoder_repeated_key_last_one_wins() -> None:
    """The spec: "If a key is repeated, the last key takes precedence" (onnxruntime keeps the first)."""
    node = _ml_node("LabelEncoder", keys_floats=[0.5, 1.5, 0.5], values_int64s=[1, 2, 3])
    got = call_kernel(node, 4, [np.array([0.5, 1.5, 2.0], np.float32)])[0]
    np.testing.assert_array_equal(got, [3, 2, -1])


def test_label_encoder_tensor_attributes_keep_their_dtype() -> None:
    from onnx import numpy_helper

    attrs = {
        "keys_tensor": numpy_helper.from_array(np.array([3, 1, 4], np.int64)),
        "values_tensor": numpy_helper.from_array(np.array([0.5, 1.5, 2.5], np.float64)),
        "default_tensor": numpy_helper.from_array(np.array([-7.0], np.float64)),
    }
    compare_with_ort("LabelEncoder", [np.array([[1, 2], [4, 3]], np.int64)], attrs, opset=4, domain=ML)


def _tree_attrs(modes: list[int], members: list[float] | None = None, **extra: Any) -> dict[str, Any]:
    """Two trees over 3 features: tree 0 has two interior nodes, tree 1 one; 3 targets."""
    from onnx import numpy_helper

    attrs: dict[str, Any] = {
        "n_targets": 3,
        "tree_roots": [0, 2],
        "nodes_featureids": [0, 2, 1],
        "nodes_splits": numpy_helper.from_array(np.array([0.1, -0.3, 0.5], np.float32)),
        "nodes_modes": numpy_helper.from_array(np.array(modes, np.uint8)),
        "nodes_truenodeids": [1, 0, 3],
        "nodes_trueleafs": [0, 1, 1],
        "nodes_falsenodeids": [2, 1, 4],
        "nodes_falseleafs": [1, 1, 1],
        "nodes_missing_value_tracks_true": [1, 0, 1],
        "leaf_targetids": [0, 1, 2, 0, 2],
        "leaf_weights": numpy_helper.from_array(np.array([1.0, -2.0, 0.5, 3.0, -1.5], np.float32)),
    }
    if members is not None:
        attrs["membership_values"] = numpy_helper.from_array(np.array(members, np.float32))
    return attrs | extra


TREE_ROWS = [
    ("leq-sum", _tree_attrs([0, 0, 0])),
    ("lt-gte-average", _tree_attrs([1, 2, 3], aggregate_function=0)),
    ("eq-neq-min", _tree_attrs([4, 5, 0], aggregate_function=2)),
    ("member-max", _tree_attrs([6, 0, 6], [0.0, 1.0, np.nan, 0.5, 2.0, np.nan], aggregate_function=3)),
    ("softmax-zero", _tree_attrs([0, 1, 2], post_transform=3)),
]


def _tree_input() -> np.ndarray:
    return rng().choice(np.array([0.0, 1.0, 0.5, -0.3, 0.1, 2.0, np.nan], np.float32), (12, 3))


@pytest.mark.parametrize("row", TREE_ROWS, ids=[r[0] for r in TREE_ROWS])
def test_tree_ensemble_matches_onnxruntime(row: tuple[str, dict[str, Any]]) -> None:
    compare_with_ort("TreeEnsemble", [_tree_input()], row[1], opset=5, domain=ML)


@pytest.mark.parametrize("code", [1, 2])
def test_tree_ensemble_softmax_and_logistic_follow_the_spec(code: int) -> None:
    """The spec numbers SOFTMAX 1 and LOGISTIC 2; onnxruntime 1.32 reads them the other way round
    (its own enum), so we compare with onnxruntime at the other number and with the formula."""
    import onnxruntime

    x = _tree_input()
    model, _ = make_node_model("TreeEnsemble", [x], _tree_attrs([0, 1, 2], post_transform=3 - code), 1, 5, ML)
    ort = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    node = _ml_node("TreeEnsemble", **_tree_attrs([0, 1, 2]))
    raw = call_kernel(node, 5, [x])[0].astype(np.float64)
    node = _ml_node("TreeEnsemble", **_tree_attrs([0, 1, 2], post_transform=code))
    got = call_kernel(node, 5, [x])[0]
    want = np.exp(raw) / np.exp(raw).sum(axis=1, keepdims=True) if code == 1 else 1 / (1 + np.exp(-raw))
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(got, ort.run(None, {"in0": x})[0], rtol=2e-5)


def test_tree_ensemble_probit_is_the_normal_quantile() -> None:
    from onnx_light.runtime.kernels.tree_ensemble import _probit

    p = np.array([0.025, 0.5, 0.841344746, 0.999])
    np.testing.assert_allclose(_probit(p), [-1.959963985, 0.0, 1.0, 3.090232306], atol=1e-7)


def _spec_adam(r: float, t: int, x: Any, g: Any, v: Any, h: Any, a: dict[str, float]) -> tuple[Any, ...]:
    """The spec's pseudo code, written out once more in float64 for the comparison."""
    g = a["norm_coefficient"] * x + g
    v = a["alpha"] * v + (1 - a["alpha"]) * g
    h = a["beta"] * h + (1 - a["beta"]) * g * g
    rate = r * np.sqrt(1 - a["beta"] ** t) / (1 - a["alpha"] ** t) if t > 0 else r
    x = (1 - a["norm_coefficient_post"]) * (x - rate * v / (np.sqrt(h) + a["epsilon"]))
    return x, v, h


@pytest.mark.parametrize("step", [0, 3])
def test_adam_two_tensors_follow_the_spec(step: int) -> None:
    from onnx import helper

    g = rng()
    a = {"alpha": 0.8, "beta": 0.95, "epsilon": 1e-4, "norm_coefficient": 0.01, "norm_coefficient_post": 0.02}
    xs, gs, vs, hs = ([g.standard_normal(s) for s in ((3,), (2, 2))] for _ in range(4))
    hs = [np.abs(h) for h in hs]
    node = helper.make_node("Adam", ["r", "t", "x1", "x2", "g1", "g2", "v1", "v2", "h1", "h2"],
                            ["x1n", "x2n", "v1n", "v2n", "h1n", "h2n"], domain=TRAINING, **a)  # fmt: skip
    got = call_kernel(node, 1, [np.array(0.1), np.array(step, np.int64), *xs, *gs, *vs, *hs])
    want = [_spec_adam(0.1, step, *args, a) for args in zip(xs, gs, vs, hs)]
    for k, value in enumerate(got):
        np.testing.assert_allclose(value, want[k % 2][k // 2], rtol=1e-6)


def _spec_adagrad(r: float, t: int, x: Any, g: Any, h: Any, a: dict[str, Any]) -> tuple[Any, ...]:
    rate = r / (1 + t * a["decay_factor"])
    g = a["norm_coefficient"] * x + g
    h = h + g * g
    return x - rate * g / (np.sqrt(h) + a["epsilon"]), h


def _spec_momentum(r: float, t: int, x: Any, g: Any, v: Any, a: dict[str, Any]) -> tuple[Any, ...]:
    g = a["norm_coefficient"] * x + g
    v = a["alpha"] * v + (a["beta"] if t > 0 else 1.0) * g
    return (x - r * v if a["mode"] == "standard" else x - r * (g + a["alpha"] * v)), v


@pytest.mark.parametrize(
    ("op", "attrs", "spec"),
    [
        ("Adagrad", {"decay_factor": 0.1, "epsilon": 1e-5, "norm_coefficient": 0.01}, _spec_adagrad),
        ("Momentum", {"alpha": 0.9, "beta": 0.5, "mode": "standard", "norm_coefficient": 0.01}, _spec_momentum),
        ("Momentum", {"alpha": 0.9, "beta": 0.5, "mode": "nesterov", "norm_coefficient": 0.0}, _spec_momentum),
    ],
    ids=["adagrad", "momentum", "nesterov"],
)
@pytest.mark.parametrize("step", [0, 2])
def test_adagrad_and_momentum_follow_the_spec(op: str, attrs: dict[str, Any], spec: Any, step: int) -> None:
    """onnxruntime's CPU build has no ai.onnx.preview.training ops: the spec's pseudo code is the oracle."""
    from onnx import helper

    g = rng()
    xs, gs, ss = ([g.standard_normal(s) for s in ((3,), (2, 2))] for _ in range(3))
    ss = [np.abs(s) for s in ss]
    ins = ["r", "t", "x1", "x2", "g1", "g2", "s1", "s2"]
    node = helper.make_node(op, ins, ["x1n", "x2n", "s1n", "s2n"], domain=TRAINING, **attrs)
    got = call_kernel(node, 1, [np.array(0.1), np.array(step, np.int64), *xs, *gs, *ss])
    want = [spec(0.1, step, *args, attrs) for args in zip(xs, gs, ss)]
    for k, value in enumerate(got):
        np.testing.assert_allclose(value, want[k % 2][k // 2], rtol=1e-6)


def test_momentum_without_its_required_attributes_is_a_clear_error() -> None:
    from onnx_light.runtime.kernels.optimizers import momentum

    one = np.ones(2)
    with pytest.raises(ValueError, match=r"Momentum: required attribute\(s\) \['alpha', 'mode'\] missing"):
        momentum(np.array(0.1), np.array(0), one, one, one, beta=1.0, norm_coefficient=0.0)


def test_other_ml_ops_are_refused_by_name() -> None:
    import onnx_light as ol
    from onnx_light.onnx_core._errors import NotImplementedOp

    node = ol.helper.make_node("SVMRegressor", ["x"], ["y"], domain=ML)
    x = ol.helper.make_tensor_value_info("x", ol.TensorProto.FLOAT, [1, 2])
    y = ol.helper.make_tensor_value_info("y", ol.TensorProto.FLOAT, [1, 1])
    graph = ol.helper.make_graph([node], "g", [x], [y])
    model = ol.helper.make_model(graph, opset_imports=[ol.helper.make_opsetid("", 21), ol.helper.make_opsetid(ML, 5)])
    with pytest.raises(NotImplementedOp, match="ai.onnx.ml::SVMRegressor"):
        ol.runtime.InferenceSession(model)
