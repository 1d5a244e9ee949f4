"""Differentiate a saved model from the command line and check it with finite differences.

    python examples/grad_cli.py OUT_DIR

Builds a small regression model with ``onnx_light.helper``, saves it, then runs
``onnx-light grad`` (writes a backward model onnxruntime can run) and
``onnx-light check-grad`` (a finite-difference report per variable).
"""

from __future__ import annotations

import os
import sys

import numpy as np

from onnx_light import TensorProto, helper, numpy_helper, save
from onnx_light.cli import main as cli


def build(path: str) -> None:
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"]),
        helper.make_node("Add", ["h", "b"], ["z"]),
        helper.make_node("Sigmoid", ["z"], ["s"]),
        helper.make_node("Sub", ["s", "target"], ["e"]),
        helper.make_node("Mul", ["e", "e"], ["e2"]),
        helper.make_node("ReduceMean", ["e2"], ["loss"], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "regression",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4]),
            helper.make_tensor_value_info("target", TensorProto.FLOAT, ["N", 3]),
        ],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        [
            numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "W"),
            numpy_helper.from_array(np.zeros(3, np.float32), "b"),
        ],
    )
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), path)


def main(out_dir: str) -> int:
    os.makedirs(out_dir, exist_ok=True)
    model = os.path.join(out_dir, "regression.onnx")
    build(model)
    backward = os.path.join(out_dir, "regression_backward.onnx")
    status = cli(["grad", model, "--wrt", "W,b", "--of", "loss", "-o", backward])
    return status or cli(["check-grad", model, "--wrt", "W,b", "--of", "loss"])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "grad_cli_out"))
