"""Writes torch exports of packed-sequence LSTM/GRU models and torch's gradients (run with torch).

``PYTHONPATH=$PWD python tests/gradient/make_packed_fixtures.py`` writes
``tests/gradient/data/packed/<name>_opset<k>.onnx`` (classic exporter, opsets 14 and 17: the
``pack_padded_sequence`` / ``pad_packed_sequence`` pair becomes a sort of the lengths (TopK),
a Gather of the batch, and the recurrent op's ``sequence_lens``) and ``<name>.npz`` (the
padded input ``x``, the ``lengths``, the loss, the parameter names and torch's gradients),
read by ``test_packed_fixtures.py``. The steps beyond a sequence's length get torch's
gradient: zero.
"""

from __future__ import annotations

import io
import pathlib
import warnings
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

DATA = pathlib.Path(__file__).resolve().parent / "data" / "packed"
OPSETS = (14, 17)


class Packed(nn.Module):
    """A recurrent layer over a padded batch packed by its lengths; loss = sum(Y^2) + sum(h_n) (+ sum(c_n))."""

    def __init__(self, layer: nn.Module, batch_first: bool) -> None:
        super().__init__()
        self.rnn = layer
        self.batch_first = batch_first

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        packed = pack_padded_sequence(x, lengths, batch_first=self.batch_first, enforce_sorted=False)
        y, state = self.rnn(packed)
        total = x.shape[1] if self.batch_first else x.shape[0]
        y, _ = pad_packed_sequence(y, batch_first=self.batch_first, total_length=total)
        loss = (y * y).sum()
        for s in state if isinstance(state, tuple) else (state,):
            loss = loss + s.sum()
        return loss


def _models() -> dict[str, tuple[nn.Module, tuple[int, ...], list[int]]]:
    torch.manual_seed(4)
    return {
        "packed_lstm_bidir": (Packed(nn.LSTM(3, 4, bidirectional=True), False), (5, 3, 3), [2, 5, 3]),
        "packed_lstm2_batch_first": (
            Packed(nn.LSTM(3, 4, num_layers=2, batch_first=True), True),
            (3, 5, 3),
            [4, 1, 5],
        ),
        "packed_gru_bidir": (Packed(nn.GRU(3, 4, bidirectional=True), False), (5, 3, 3), [5, 3, 1]),
    }


def main() -> int:
    DATA.mkdir(parents=True, exist_ok=True)
    for name, (model, shape, lens) in _models().items():
        x = torch.randn(*shape)
        lengths = torch.tensor(lens, dtype=torch.int64)
        model.zero_grad()
        xg = x.clone().requires_grad_(True)
        loss = model(xg, lengths)
        loss.backward()
        arrays: dict[str, Any] = {
            "x": x.numpy(),
            "lengths": lengths.numpy(),
            "loss": np.asarray(loss.item(), np.float32),
        }
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
                    model,
                    (x, lengths),
                    buf,
                    input_names=["x", "lengths"],
                    output_names=["loss"],
                    opset_version=opset,
                    dynamo=False,
                    do_constant_folding=False,
                    export_params=True,
                )
            (DATA / f"{name}_opset{opset}.onnx").write_bytes(buf.getvalue())
        print(name, loss.item())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
