"""Writes dynamo-exporter (torch.export) exports of torch.cond and while_loop models, with
torch's gradients (run with torch and onnxscript, e.g. in a venv of one's own).

``/tmp/venv/bin/python tests/gradient/make_dynamo_control_fixtures.py`` writes
``tests/gradient/data/dynamo_cf/<name>_dynamo_opset18.onnx`` and, for each feed of it,
``<name>_<feed>.npz`` (the inputs, the loss, the parameter names and torch's gradients),
read by ``test_dynamo_control_fixtures.py``:

- ``cond``: ``torch.cond`` on the sign of a computed value (an If whose branches read the
  parameters), fed once for each branch;
- ``while``: ``while_loop`` while a counter is below a fed count (a Loop whose trip count
  is data), fed 3 and 0 (zero iterations). Its gradients come from the same model with a
  Python loop: torch 2.13's eager ``while_loop`` gives a wrong ``x.grad`` for zero iterations
  (1.119 where d/dx[mean(x^2) + sum(x)] = 2x/6 + 1 = 0.904 for the first element).
"""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np
import torch
from torch import nn

DATA = pathlib.Path(__file__).resolve().parent / "data" / "dynamo_cf"


class Cond(nn.Module):
    """h = fc(x); h = tanh(fc2(h)) if sum(h) > 0 else 2 sigmoid(h); loss = mean(h^2)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.fc2 = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        h = torch.cond(h.sum() > 0, lambda h: torch.tanh(self.fc2(h)), lambda h: torch.sigmoid(h) * 2.0, (h,))
        return (h * h).mean()


class While(nn.Module):
    """h <- tanh(fc(h)) + h while i < n (n fed); loss = mean(h^2) + sum(h)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.unrolled = False

    def forward(self, x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        from torch._higher_order_ops.while_loop import while_loop

        def cond(i: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
            return i < n

        def body(i: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return i + 1, torch.tanh(self.fc(h)) * 0.5 + h

        if not self.unrolled:
            _, h = while_loop(cond, body, (torch.zeros((), dtype=torch.int64), x))
        else:  # the reference: torch 2.13's eager while_loop backward is wrong for zero iterations
            h = x
            for _ in range(int(n)):
                h = torch.tanh(self.fc(h)) * 0.5 + h
        return (h * h).mean() + h.sum()


def _reference(model: nn.Module, feeds: dict[str, torch.Tensor]) -> dict[str, Any]:
    model.zero_grad()
    x = feeds["x"].clone().requires_grad_(True)
    loss = model(*[x if k == "x" else v for k, v in feeds.items()])
    loss.backward()
    arrays: dict[str, Any] = {f"feed:{k}": v.numpy() for k, v in feeds.items()}
    arrays["loss"] = np.asarray(loss.item(), np.float32)
    for n, p in model.named_parameters():
        arrays[f"grad:{n}"] = p.grad.numpy() if p.grad is not None else np.zeros_like(p.detach().numpy())
    assert x.grad is not None
    arrays["grad:x"] = x.grad.numpy()
    arrays["params"] = np.asarray([n for n, _ in model.named_parameters()])
    return arrays


def main() -> int:
    DATA.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(6)
    cond, loop = Cond(), While()
    x = torch.randn(2, 3)
    flip = -x * 3 - cond.fc.bias.detach()
    models: dict[str, tuple[nn.Module, dict[str, dict[str, torch.Tensor]]]] = {
        "cond": (cond, {"a": {"x": x}, "b": {"x": flip}}),
        "while": (loop, {"n3": {"x": x, "n": torch.tensor(3)}, "n0": {"x": x, "n": torch.tensor(0)}}),
    }
    for name, (model, feeds) in models.items():
        first = next(iter(feeds.values()))
        program = torch.onnx.export(
            model, tuple(first.values()), dynamo=True, opset_version=18, input_names=list(first), output_names=["loss"]
        )
        (DATA / f"{name}_dynamo_opset18.onnx").write_bytes(program.model_proto.SerializeToString())
        model.unrolled = True  # While's reference: a Python loop (Cond has no such flag)
        for key, feed in feeds.items():
            np.savez(DATA / f"{name}_{key}.npz", **_reference(model, feed))
        print(name, sorted(feeds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
