"""Writes the image-op architectures' torch exports and torch's gradients (needs torch).

    python tests/models/make_image_fixtures.py

``tests/models/data/image/<name>_opset<N>.onnx`` are TorchScript exports with symbolic
axes (see ``image_models.py``); ``<name>.npz`` holds the feeds and torch.autograd's loss
and gradients at the two sizes of each spec. ``test_image_fixtures.py`` checks them
without torch. The expected values come from torch, never from onnx-light.
"""

from __future__ import annotations

import pathlib
import sys

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
DATA = HERE / "data" / "image"


def main() -> int:
    sys.path.insert(0, str(HERE))
    import image_models as im
    import torch

    DATA.mkdir(parents=True, exist_ok=True)
    for name, spec in im.SPECS.items():
        arrays: dict[str, np.ndarray] = {"params": np.asarray(im.parameter_names(spec))}
        for k, shape in enumerate(spec.sizes):
            feeds, loss, grads = im.reference(spec, shape)
            arrays.update({f"{k}:feed:{n}": v for n, v in feeds.items()})
            arrays.update({f"{k}:grad:{n}": v for n, v in grads.items()})
            arrays[f"{k}:loss"] = np.asarray(loss, np.float32)
        for opset in spec.opsets:
            (DATA / f"{name}_opset{opset}.onnx").write_bytes(im.export(spec, opset))
        np.savez_compressed(DATA / f"{name}.npz", **arrays)
        print(f"{name}: sizes {spec.sizes}, opsets {spec.opsets}")
    print(f"torch {torch.__version__}; wrote {len(im.SPECS)} models to {DATA}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
