"""Writes the torch exports and torch's gradients to ``tests/models/data`` (needs torch).

    pip install '.[torch]' && python tests/models/make_fixtures.py

The files let CI, which does not install torch, check our gradients of real torch
exports against torch.autograd (``test_exported_fixtures.py``). The expected values
come from torch, never from onnx-light.
"""

from __future__ import annotations

import pathlib
import sys

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
DATA = HERE / "data"
OPSETS = (17, 18)


def main() -> int:
    sys.path.insert(0, str(HERE))
    import torch
    import torch_models as tm

    DATA.mkdir(exist_ok=True)
    for name, spec in tm.SPECS.items():
        feeds, loss, grads = tm.reference(spec)
        params = tm.parameter_names(spec)
        for opset in OPSETS:
            (DATA / f"{name}_opset{opset}.onnx").write_bytes(tm.export(spec, opset))
        arrays = {f"feed:{k}": v for k, v in feeds.items()}
        arrays.update({f"grad:{k}": v for k, v in grads.items()})
        arrays["loss"] = np.asarray(loss, np.float32)
        arrays["params"] = np.asarray(params)
        np.savez(DATA / f"{name}.npz", **arrays)
        print(f"{name}: {len(params)} parameters, loss {loss:.6f}")
    print(f"torch {torch.__version__}; wrote {len(tm.SPECS)} models x opsets {OPSETS} to {DATA}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
