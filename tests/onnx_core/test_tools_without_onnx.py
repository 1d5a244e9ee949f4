"""checker, shape_inference and version_converter work with ``onnx`` unimportable.

A subprocess blocks ``onnx``, ``onnxruntime`` and ``torch`` (a meta-path finder that
refuses them, so even a lazy import inside onnx-light fails) and runs the three tools
on a model built with our helper and on a light model file read with our codec.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import textwrap

import pytest

import onnx_light

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(onnx_light.__file__)))

SCRIPT = textwrap.dedent(
    """
    import importlib.abc, sys

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("onnx", "onnxruntime", "torch"):
                raise ImportError(f"{name} is blocked in this test")
            return None

    sys.meta_path.insert(0, Block())
    import onnx_light as ol
    import onnx_light.checker
    from onnx_light import checker, helper as h, shape_inference, version_converter, TensorProto as T

    g = h.make_graph(
        [h.make_node("ReduceSum", ["x"], ["s"], axes=[1], keepdims=0), h.make_node("Relu", ["s"], ["y"])],
        "g", [h.make_tensor_value_info("x", T.FLOAT, ["N", 3])], [h.make_tensor_value_info("y", T.FLOAT, ["N"])],
    )
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 11)])
    checker.check_model(m, full_check=True)
    inferred = shape_inference.infer_shapes(m)
    assert [d.dim_param for d in inferred.graph.value_info[0].type.tensor_type.shape.dim] == ["N"]
    c = version_converter.convert_version(m, 21)
    checker.check_model(c, full_check=True)
    assert [n.op_type for n in c.graph.node] == ["Constant", "ReduceSum", "Relu"], [n.op_type for n in c.graph.node]
    try:
        checker.check_model(h.make_model(h.make_graph([h.make_node("Nope", ["x"], ["y"])], "g",
            [h.make_tensor_value_info("x", T.FLOAT, [1])], [h.make_tensor_value_info("y", T.FLOAT, [1])]),
            opset_imports=[h.make_opsetid("", 21)]))
    except checker.ValidationError as e:
        assert "ai.onnx::Nope" in str(e)
    else:
        raise AssertionError("an unknown op was accepted")
    for path in sys.argv[1:]:
        light = ol.load(path)
        checker.check_model(light, full_check=True)
        assert len(shape_inference.infer_shapes(light).graph.value_info) > 10
        checker.check_model(version_converter.convert_version(light, 21))
    assert not [k for k in sys.modules if k.split(".")[0] in ("onnx", "onnxruntime", "torch")]
    print("ok")
    """
)


def test_tools_run_without_onnx() -> None:
    onnx = pytest.importorskip("onnx")  # only to find a light model file in the wheel
    light = sorted(
        glob.glob(os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "*.onnx"))
    )
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, *light[:1]], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
