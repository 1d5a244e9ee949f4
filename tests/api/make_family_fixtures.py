"""Writes tests/api/data/family_fixtures.npz: weights, a point and torch's Jacobian and Hessian.

Two functions, float64 (run: ``python tests/api/make_family_fixtures.py``; needs torch):

* ``mlp``: X (2, 3) -> Y = tanh(X W1 + b1) W2 (2, 2);
* ``conv``: X (1, 2, 5, 5) -> Y = Flatten(Softplus(Conv(X, K) + c)) W (1, 3).

Stored per function: the weights, ``x``, ``jac`` = dY/dX (shape Y.shape + X.shape) and
``hess`` = d^2 sum(Y^2) / dX^2 (shape X.shape * 2), from torch.autograd.functional.
"""

from __future__ import annotations

import pathlib

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812

OUT = pathlib.Path(__file__).parent / "data" / "family_fixtures.npz"


def main() -> None:
    rng = np.random.default_rng(12)
    arrays: dict[str, np.ndarray] = {}
    mlp = {
        "W1": rng.standard_normal((3, 5)) * 0.7,
        "b1": rng.standard_normal(5) * 0.1,
        "W2": rng.standard_normal((5, 2)),
    }
    conv = {"K": rng.standard_normal((3, 2, 3, 3)) * 0.4, "c": rng.standard_normal(3) * 0.1}
    conv["W"] = rng.standard_normal((27, 3)) * 0.3
    x_mlp, x_conv = rng.standard_normal((2, 3)), rng.standard_normal((1, 2, 5, 5))

    def f_mlp(x: torch.Tensor) -> torch.Tensor:
        t = {k: torch.tensor(v) for k, v in mlp.items()}
        return torch.tanh(x @ t["W1"] + t["b1"]) @ t["W2"]

    def f_conv(x: torch.Tensor) -> torch.Tensor:
        t = {k: torch.tensor(v) for k, v in conv.items()}
        return torch.flatten(F.softplus(F.conv2d(x, t["K"], t["c"])), 1) @ t["W"]

    for name, f, x, weights in (("mlp", f_mlp, x_mlp, mlp), ("conv", f_conv, x_conv, conv)):
        xt = torch.tensor(x)
        jac = torch.autograd.functional.jacobian(f, xt)
        hess = torch.autograd.functional.hessian(lambda v, f=f: (f(v) ** 2).sum(), xt)
        arrays[f"{name}:x"] = x
        arrays[f"{name}:jac"] = jac.numpy()
        arrays[f"{name}:hess"] = hess.numpy()
        for k, v in weights.items():
            arrays[f"{name}:{k}"] = v
    OUT.parent.mkdir(exist_ok=True)
    np.savez(OUT, **arrays)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
