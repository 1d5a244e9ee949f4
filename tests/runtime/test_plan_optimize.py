"""Plan-time optimisations (issue 15 §1): each checked against the unoptimised plan.

``InferenceSession(model, optimize=False)`` compiles the plan node for node, as the model says;
the default plan folds constants, folds inference BatchNormalization into the Conv/Gemm before
it, fuses activation epilogues into convolutions and aligns constants. Results must agree to
float rounding.
"""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto
from onnx import helper as H
from onnx import numpy_helper as NH

import onnx_light
from onnx_light.onnx_core.numpy_helper import to_array
from onnx_light.runtime import InferenceSession

F = TensorProto.FLOAT


def _session(nodes: list[Any], inputs: list[Any], outputs: list[str], inits: list[Any], **kw: Any) -> InferenceSession:
    graph = H.make_graph(nodes, "g", inputs, [H.make_tensor_value_info(o, F, None) for o in outputs], inits)
    model = H.make_model(graph, opset_imports=[H.make_opsetid("", 17)])
    return InferenceSession(onnx_light.load_from_string(model.SerializeToString()), **kw)


def _both(*args: Any) -> tuple[InferenceSession, InferenceSession]:
    return _session(*args), _session(*args, optimize=False)


def _ops(sess: InferenceSession) -> list[str]:
    return [step.label for step in sess._plan.steps]


# ---------------------------------------------------------------- constants
def test_unaligned_initializers_are_copied_aligned_once() -> None:
    # (a 64 x 64 float tensor named "W" sits at an unaligned offset of its serialized model)
    w = np.arange(4096, dtype=np.float32).reshape(64, 64) / 4096
    x = H.make_tensor_value_info("X", F, [2, 64])
    y = H.make_tensor_value_info("Y", F, None)
    graph = H.make_graph([H.make_node("MatMul", ["X", "W"], ["Y"])], "g", [x], [y], [NH.from_array(w, "W")])
    model = onnx_light.load_from_string(H.make_model(graph, opset_imports=[H.make_opsetid("", 17)]).SerializeToString())
    assert not to_array(model.graph.initializer[0]).flags.aligned  # the case under test
    sess = InferenceSession(model)
    consts = [v for v in sess._plan.constants.values() if isinstance(v, np.ndarray)]
    assert consts and all(v.flags.aligned and not v.flags.writeable for v in consts)
    feed = np.random.default_rng(0).standard_normal((2, 64)).astype(np.float32)
    np.testing.assert_allclose(sess.run(None, {"X": feed})[0], feed @ w, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- profiler
def test_verbose_2_prints_a_profile_table_per_run() -> None:
    x = H.make_tensor_value_info("X", F, [2, 2])
    nodes = [H.make_node("Neg", ["X"], ["N"]), H.make_node("Neg", ["N"], ["M"]), H.make_node("Exp", ["M"], ["Y"])]
    sess = _session(nodes, [x], ["Y"], [], verbose=2)
    out = io.StringIO()
    with redirect_stdout(out):
        got = sess.run(None, {"X": np.ones((2, 2), np.float32)})
    np.testing.assert_allclose(got[0], np.e * np.ones((2, 2)), rtol=1e-6)
    text = out.getvalue()
    assert "profile" in text and "op type" in text
    rows = {line.split()[0]: line.split() for line in text.splitlines()[2:]}
    assert rows["Neg"][1] == "2" and rows["Exp"][1] == "1"
    assert sess.last_profile["Neg"][0] == 2 and sess.last_profile["Exp"][1] >= 0.0


@pytest.mark.parametrize("optimize", [True, False])
def test_optimize_flag_keeps_results(optimize: bool) -> None:
    x = H.make_tensor_value_info("X", F, [2, 2])
    sess = _session([H.make_node("Relu", ["X"], ["Y"])], [x], ["Y"], [], optimize=optimize)
    np.testing.assert_array_equal(sess.run(None, {"X": -np.ones((2, 2), np.float32)})[0], np.zeros((2, 2)))
