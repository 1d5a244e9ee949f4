"""Writes the symbolic-size torch exports and torch's gradients at two sizes (needs torch).

    python tests/models/make_dynamic_fixtures.py

``tests/models/data/dynamic/<name>_opset<N>.onnx`` are exported with ``dynamic_axes`` on
the batch and spatial dims (opsets 11, 13, 17, 18, the TorchScript exporter);
``<name>.npz`` holds the feeds and torch.autograd's loss and gradients at the two
sizes of ``dynamic_models.SIZES``. ``test_dynamic_fixtures.py`` checks them without
torch. The expected values come from torch, never from onnx-light.
"""

from __future__ import annotations

import pathlib
import sys

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
DATA = HERE / "data" / "dynamic"
OPSETS = (11, 13, 17, 18)


def main() -> int:
    sys.path.insert(0, str(HERE))
    import dynamic_models as dm
    import torch

    DATA.mkdir(parents=True, exist_ok=True)
    for name, spec in dm.SPECS.items():
        arrays: dict[str, np.ndarray] = {"params": np.asarray(dm.parameter_names(spec))}
        for k, shape in enumerate(dm.SIZES[name]):
            feeds, loss, grads = dm.reference(spec, shape)
            arrays.update({f"{k}:feed:{n}": v for n, v in feeds.items()})
            arrays.update({f"{k}:grad:{n}": v for n, v in grads.items()})
            arrays[f"{k}:loss"] = np.asarray(loss, np.float32)
        for opset in OPSETS:
            (DATA / f"{name}_opset{opset}.onnx").write_bytes(dm.export(spec, opset))
        np.savez_compressed(DATA / f"{name}.npz", **arrays)
        print(f"{name}: sizes {dm.SIZES[name]}")
    print(f"torch {torch.__version__}; wrote {len(dm.SPECS)} models x opsets {OPSETS} to {DATA}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
