"""Writes torch's JVP and HVP of the torch-export fixtures' losses w.r.t. their input x (needs torch).

``PYTHONPATH=$PWD python tests/gradient/make_forward_fixtures.py`` writes
``tests/gradient/data/forward_<name>.npz``: directions ``t`` and ``v`` (shaped like x),
``jvp`` = d loss(x)[t] from ``torch.func.jvp`` and ``hvp`` = H v from
``torch.autograd.functional.hvp``, at the fixture's own x (and target). The models are
rebuilt exactly as their fixture generators build them; the loss is checked against the
fixture's stored loss first, so the values belong to the exported model.
"""

from __future__ import annotations

import pathlib
import sys

import numpy as np
import torch

HERE = pathlib.Path(__file__).resolve().parent
MODELS = HERE.parent / "models"
#: fixture -> (its npz, the torch module builder)
NAMES = ("mlp_mse", "cnn_bn_eval", "transformer", "lstm2_bidir_batch_first")


def _module_and_inputs(name: str) -> tuple[object, dict[str, np.ndarray], float]:
    if name.startswith("lstm"):
        sys.path.insert(0, str(HERE))
        import make_recurrent_fixtures as mrf

        ref = np.load(HERE / "data" / f"{name}.npz")
        return mrf._models()[name][0], {"x": ref["x"]}, float(ref["loss"])
    sys.path.insert(0, str(MODELS))
    import torch_models as tm

    ref = np.load(MODELS / "data" / f"{name}.npz")
    return tm.SPECS[name].model(), {"x": ref["feed:x"], "target": ref["feed:target"]}, float(ref["loss"])


def main() -> int:
    for name in NAMES:
        module, feeds, loss = _module_and_inputs(name)
        target = torch.tensor(feeds["target"]) if "target" in feeds else None

        def f(x: torch.Tensor, module: object = module, target: object = target) -> torch.Tensor:
            return module(x, target) if target is not None else module(x)  # type: ignore[operator]

        x = torch.tensor(feeds["x"])
        got = float(f(x).detach())
        assert abs(got - loss) <= 1e-5 * max(1.0, abs(loss)), f"{name}: rebuilt loss {got} != fixture's {loss}"
        gen = torch.Generator().manual_seed(5)
        t = torch.randn(x.shape, generator=gen, dtype=x.dtype)
        v = torch.randn(x.shape, generator=gen, dtype=x.dtype)
        with torch.backends.mkldnn.flags(enabled=False):  # its LSTM kernel has no forward AD
            _, jvp = torch.func.jvp(f, (x,), (t,))
            _, hvp = torch.autograd.functional.hvp(f, x, v)
        np.savez(
            HERE / "data" / f"forward_{name}.npz", t=t.numpy(), v=v.numpy(), jvp=jvp.detach().numpy(), hvp=hvp.numpy()
        )
        print(f"{name}: loss {got:.6f}, jvp {float(jvp):.6f}, |hvp| {float(hvp.norm()):.6f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
