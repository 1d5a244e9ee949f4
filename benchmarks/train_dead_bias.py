"""Why train_vs_torch's cnn/AdamW differs in two parameters, and that the rest matches.

The CNN's conv biases (``0.bias``, ``4.bias``) feed a training-mode BatchNorm, which
subtracts the batch mean: their true gradient is exactly 0. torch and onnx-light both
return float32 rounding noise instead (torch ~4e-8, ours ~1e-8), and AdamW divides by
sqrt(v) + 1e-8, turning that noise into steps of about lr in a random direction. So
those two tensors (and the running means that track them) follow the noise; SGD is
unaffected. This script prints torch's gradient of those biases, then repeats the
check's 30 AdamW steps with the two biases frozen in both torch and onnx-light.

    PYTHONPATH=. python benchmarks/train_dead_bias.py
"""

from __future__ import annotations

import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, "/work/shared/checks")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> int:
    import torch
    from train_vs_torch import STEPS, export, make, rel

    from onnx_light import training as olt

    m, x, y = make("cnn")
    m.train()
    torch.nn.functional.cross_entropy(m(x[0]), y[0]).backward()
    print(
        f"torch's grad of 0.bias: {m[0].bias.grad.abs().max().item():.2e}, of 4.bias: "
        f"{m[4].bias.grad.abs().max().item():.2e} (true value 0)"
    )
    m, x, y = make("cnn")
    d = tempfile.mkdtemp()
    export(m, x[0], os.path.join(d, "f.onnx"))
    a = os.path.join(d, "a")
    olt.generate_artifacts(
        os.path.join(d, "f.onnx"),
        frozen_params=["0.bias", "4.bias"],
        loss="CrossEntropyLoss",
        optimizer="AdamW",
        artifact_directory=a,
    )
    m[0].bias.requires_grad_(False)
    m[4].bias.requires_grad_(False)
    opt_t = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-3)
    ref_losses = []
    for i in range(STEPS):
        opt_t.zero_grad()
        loss = torch.nn.functional.cross_entropy(m(x[i]), y[i])
        loss.backward()
        opt_t.step()
        ref_losses.append(float(loss))
    ref = {k: v.detach().numpy() for k, v in m.state_dict().items()}
    state = olt.CheckpointState.load_checkpoint(os.path.join(a, "checkpoint"))
    mod = olt.Module(os.path.join(a, "training_model.onnx"), state)
    opt = olt.Optimizer(os.path.join(a, "optimizer_model.onnx"), mod)
    losses = []
    for i in range(STEPS):
        losses.append(float(mod(x[i].numpy(), y[i].numpy())))
        opt.step()
        mod.lazy_reset_grad()
    r_par = max(rel(np.asarray(state.parameters[k].data), ref[k]) for k in ref if k in state.parameters)
    print(f"with 0.bias and 4.bias frozen in both: losses {rel(losses, ref_losses):.1e}, params {r_par:.1e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
