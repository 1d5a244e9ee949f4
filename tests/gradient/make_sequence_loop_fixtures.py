"""Writes torch exports of scripted loops that build a Python list, and torch's gradients (run with torch).

``PYTHONPATH=$PWD python tests/gradient/make_sequence_loop_fixtures.py`` writes
``tests/gradient/data/seqloop/seqloop_<name>_opset<k>.onnx`` (the classic TorchScript exporter at
opsets 14 to 18: the loop becomes a Loop carrying a sequence, ``list.append`` a
SequenceInsert in its body, ``torch.stack``/``torch.cat`` a ConcatFromSequence after it)
and ``seqloop_<name>.npz`` (the input ``x``, the loss, the parameter names and torch's
gradients), read by ``test_sequence_loop_fixtures.py``.
"""

from __future__ import annotations

import io
import pathlib
import warnings
from typing import Any

import numpy as np
import torch
from torch import nn

DATA = pathlib.Path(__file__).resolve().parent / "data" / "seqloop"
OPSETS = (14, 15, 16, 17, 18)


class AppendStack(nn.Module):
    """h <- tanh(fc(h)) once per row of x, each h appended to a list; loss from torch.stack."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outs: list[torch.Tensor] = []
        h = x
        for _ in range(x.size(0)):
            h = torch.tanh(self.fc(h))
            outs.append(h * 2.0)
        y = torch.stack(outs)
        return (torch.sin(y) * y).mean() + h.sum()


class ReadLast(nn.Module):
    """The list starts with x and is read inside the loop: outs.append(tanh(fc(outs[-1]))); torch.cat."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.scale = nn.Parameter(torch.tensor([0.5, -1.0, 2.0]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outs: list[torch.Tensor] = [x]
        for _ in range(x.size(0)):
            outs.append(torch.tanh(self.fc(outs[-1])) * self.scale)
        y = torch.cat(outs, 0)
        return (y * y).sum()


def _models() -> dict[str, nn.Module]:
    torch.manual_seed(3)
    return {"seqloop_append_stack": AppendStack(), "seqloop_read_last": ReadLast()}


def main() -> int:
    DATA.mkdir(parents=True, exist_ok=True)
    for name, model in _models().items():
        x = torch.randn(4, 3)
        model.zero_grad()
        xg = x.clone().requires_grad_(True)
        loss = model(xg)
        loss.backward()
        arrays: dict[str, Any] = {"x": x.numpy(), "loss": np.asarray(loss.item(), np.float32)}
        for n, p in model.named_parameters():
            assert p.grad is not None
            arrays[f"grad:{n}"] = p.grad.numpy()
        assert xg.grad is not None
        arrays["grad:x"] = xg.grad.numpy()
        arrays["params"] = np.asarray([n for n, _ in model.named_parameters()])
        np.savez(DATA / f"{name}.npz", **arrays)
        for opset in OPSETS:
            buf = io.BytesIO()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.onnx.export(
                    torch.jit.script(model),
                    (x,),
                    buf,
                    input_names=["x"],
                    output_names=["loss"],
                    opset_version=opset,
                    dynamo=False,
                    do_constant_folding=False,
                    export_params=True,
                    dynamic_axes={"x": {0: "n"}},
                )
            (DATA / f"{name}_opset{opset}.onnx").write_bytes(buf.getvalue())
        print(name, loss.item())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
