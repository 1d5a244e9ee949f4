"""Train a small classifier on two spirals with gradients from onnx-light.

    python examples/train_spirals.py [--epochs 600] [--out DIR]

The same as ``onnx-light demo``: the forward model is built with ``onnx_light.helper``,
``GradientOfFunction`` is called once, and every epoch runs the backward function in
onnx-light's runtime followed by an Adam step (see ``onnx_light/demo.py``).
"""

from __future__ import annotations

import sys

from onnx_light.demo import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
