"""Writes torch exports of recurrent models and torch.autograd's gradients (run with torch).

``PYTHONPATH=$PWD python tests/gradient/make_recurrent_fixtures.py`` writes
``tests/gradient/data/<name>_opset<k>.onnx`` and ``<name>.npz`` (the input ``x``, the
loss, the parameter names and each gradient), read by ``test_recurrent_fixtures.py``.
"""

from __future__ import annotations

import io
import pathlib
import warnings
from typing import Any

import numpy as np
import torch
from torch import nn

DATA = pathlib.Path(__file__).resolve().parent / "data"
OPSETS = (14, 17)


class Recurrent(nn.Module):
    """A recurrent layer with learned initial states; loss = mean(Y^2) + sum(h_n) (+ sum(c_n))."""

    def __init__(self, layer: nn.Module, states: int, layers: int, dirs: int, hidden: int) -> None:
        super().__init__()
        self.rnn = layer
        self.h0 = nn.Parameter(torch.randn(layers * dirs, 2, hidden) * 0.5)
        self.c0 = nn.Parameter(torch.randn(layers * dirs, 2, hidden) * 0.5) if states == 2 else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.c0 is not None:
            y, (h, c) = self.rnn(x, (self.h0, self.c0))
            return (y * y).mean() + h.sum() + c.sum()
        y, h = self.rnn(x, self.h0)
        return (y * y).mean() + h.sum()


class BranchLoop(nn.Module):
    """A Python branch (exported as If) and a loop over the batch size (exported as Loop)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.fc2 = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        if h.sum() > 0:
            h = torch.tanh(self.fc2(h))
        else:
            h = torch.sigmoid(h) * 2.0
        for _ in range(x.size(0)):
            h = torch.tanh(self.fc2(h)) + h
        return (h * h).mean()


def _scripted() -> dict[str, tuple[nn.Module, torch.Tensor]]:
    """The BranchLoop model scripted, with an input taking each branch."""
    torch.manual_seed(1)
    model = BranchLoop()
    x = torch.randn(3, 3)
    taken = float(model.fc(x).sum()) > 0
    return {
        f"branch_loop_{'then' if taken else 'else'}": (model, x),
        f"branch_loop_{'else' if taken else 'then'}": (model, -x * 3 - model.fc.bias.detach()),
    }


def _models() -> dict[str, tuple[nn.Module, tuple[int, ...]]]:
    torch.manual_seed(0)
    return {
        "lstm2_bidir_batch_first": (
            Recurrent(nn.LSTM(3, 4, num_layers=2, bidirectional=True, batch_first=True), 2, 2, 2, 4),
            (2, 5, 3),
        ),
        "gru2_bidir": (Recurrent(nn.GRU(3, 4, num_layers=2, bidirectional=True), 1, 2, 2, 4), (5, 2, 3)),
        "rnn_tanh": (Recurrent(nn.RNN(3, 4, nonlinearity="tanh"), 1, 1, 1, 4), (5, 2, 3)),
        "rnn_relu": (Recurrent(nn.RNN(3, 4, nonlinearity="relu"), 1, 1, 1, 4), (5, 2, 3)),
    }


def main() -> int:
    DATA.mkdir(exist_ok=True)
    models: dict[str, tuple[nn.Module, Any]] = {**_models(), **_scripted()}
    for name, (model, shape) in models.items():
        x = torch.randn(*shape) if isinstance(shape, tuple) else shape
        model.zero_grad()
        xg = x.clone().requires_grad_(True)
        loss = model(xg)
        loss.backward()
        arrays: dict[str, Any] = {"x": x.numpy(), "loss": np.asarray(loss.item(), np.float32)}
        params = [n for n, _ in model.named_parameters()]
        for n, p in model.named_parameters():
            arrays[f"grad:{n}"] = p.grad.numpy()
        arrays["grad:x"] = xg.grad.numpy()
        arrays["params"] = np.asarray(params)
        np.savez(DATA / f"{name}.npz", **arrays)
        for opset in OPSETS:
            buf = io.BytesIO()
            scripted = name.startswith("branch_loop")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.onnx.export(
                    torch.jit.script(model) if scripted else model,
                    (x,),
                    buf,
                    input_names=["x"],
                    output_names=["loss"],
                    opset_version=opset,
                    dynamo=False,
                    do_constant_folding=False,
                    keep_initializers_as_inputs=False,
                    export_params=True,
                    dynamic_axes={"x": {0: "n"}} if scripted else None,
                )
            (DATA / f"{name}_opset{opset}.onnx").write_bytes(buf.getvalue())
        print(name, loss.item())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
