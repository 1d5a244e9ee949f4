"""Writes torch exports of a CRNN text recogniser and a voice-activity model, with torch's
gradients, to ``tests/models/data/crnn_vad`` (needs torch).

    PYTHONPATH=$PWD python tests/models/make_crnn_vad_fixtures.py

- ``crnn``: two conv stages (Conv, BatchNorm in eval mode, ReLU, MaxPool), the feature map's
  height folded into channels, a bidirectional LSTM over the width, a Linear to the classes,
  LogSoftmax and a CTC-style loss: the NLL of a per-frame alignment plus a blank penalty.
- ``vad``: Linear + ReLU, an LSTM whose state (h0, c0) is an input and whose final state
  (hn, cn) is an output, a per-frame speech logit and binary cross-entropy with logits.
- ``split_hstack``: ``torch.tensor_split`` of a dynamic axis, a Linear on each chunk and
  ``torch.hstack`` (the exporter emits SplitToSequence, SequenceAt, SequenceConstruct and
  an If computing the chunk sizes).

Classic exporter at opsets 14, 16, 17 and 18, and the dynamo exporter at opset 18 when
onnxscript is installed (``<name>_dynamo_opset18.onnx``; it needs a venv of its own, see
the working agreement); the expected values come from torch. ``test_crnn_vad_fixtures.py``
reads them without torch.
"""

from __future__ import annotations

import io
import pathlib
import sys
import warnings
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

DATA = pathlib.Path(__file__).resolve().parent / "data" / "crnn_vad"
OPSETS = (14, 16, 17, 18)


class CRNN(nn.Module):
    """Conv stages -> BiLSTM over the width -> per-frame class log-probabilities -> CTC-style loss."""

    def __init__(self, classes: int = 6) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 3, padding=1)
        self.pool1 = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(6, 8, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(8)
        self.pool2 = nn.MaxPool2d((2, 1))
        self.rnn = nn.LSTM(8 * 3, 8, bidirectional=True)
        self.fc = nn.Linear(16, classes)

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        h = self.pool1(torch.relu(self.conv1(x)))  # (N, 6, 6, W/2)
        h = self.pool2(torch.relu(self.bn2(self.conv2(h))))  # (N, 8, 3, W/2)
        n, c, hh, w = h.shape
        seq = h.reshape(n, c * hh, w).permute(2, 0, 1)  # (T = W/2, N, C*H)
        y, _ = self.rnn(seq)
        logp = F.log_softmax(self.fc(y), dim=-1)  # (T, N, classes)
        nll = F.nll_loss(logp.reshape(-1, logp.shape[-1]), target.reshape(-1))
        blank = logp[..., 0].exp().mean()  # discourages all-blank alignments
        return nll + 0.1 * blank


class VAD(nn.Module):
    """Per-frame speech/non-speech with an LSTM whose state is passed in and out."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(10, 12)
        self.rnn = nn.LSTM(12, 8)
        self.out = nn.Linear(8, 1)

    def forward(
        self, x: torch.Tensor, target: torch.Tensor, h0: torch.Tensor, c0: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        y, (hn, cn) = self.rnn(torch.relu(self.inp(x)), (h0, c0))
        logits = self.out(y).squeeze(-1)  # (T, N)
        return F.binary_cross_entropy_with_logits(logits, target), hn, cn


def _crnn() -> tuple[nn.Module, dict[str, torch.Tensor], list[str]]:
    torch.manual_seed(0)
    model = CRNN()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        model.bn2.running_mean.copy_(0.2 * torch.randn(8, generator=gen))
        model.bn2.running_var.copy_(0.5 + torch.rand(8, generator=gen))
    x = torch.randn(2, 1, 12, 16, generator=gen)
    target = torch.randint(0, 6, (8, 2), generator=gen)
    return model.eval(), {"x": x, "target": target}, ["loss"]


def _vad() -> tuple[nn.Module, dict[str, torch.Tensor], list[str]]:
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(3)
    feeds = {
        "x": torch.randn(7, 2, 10, generator=gen),
        "target": (torch.rand(7, 2, generator=gen) > 0.5).float(),
        "h0": 0.5 * torch.randn(1, 2, 8, generator=gen),
        "c0": 0.5 * torch.randn(1, 2, 8, generator=gen),
    }
    return VAD(), feeds, ["loss", "hn", "cn"]


class SplitHstack(nn.Module):
    """tensor_split into 3 chunks along a dynamic axis, tanh(Linear) of each, hstack, mean square."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = torch.tensor_split(x, 3, dim=1)
        return (torch.hstack([torch.tanh(self.fc(p)) for p in parts]) ** 2).mean()


def _split_hstack() -> tuple[nn.Module, dict[str, torch.Tensor], list[str]]:
    torch.manual_seed(0)
    return SplitHstack(), {"x": torch.randn(5, 7, 4, generator=torch.Generator().manual_seed(4))}, ["loss"]


MODELS = {"crnn": _crnn, "vad": _vad, "split_hstack": _split_hstack}
#: axes exported as symbolic (so the exporter keeps the sequence ops)
DYNAMIC = {"split_hstack": {"x": {0: "n", 1: "t"}}}


def _export(
    model: nn.Module, feeds: dict[str, torch.Tensor], outputs: list[str], opset: int, dynamic: Any = None
) -> bytes:
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            tuple(feeds.values()),
            buf,
            input_names=list(feeds),
            output_names=outputs,
            opset_version=opset,
            dynamo=False,
            do_constant_folding=False,
            export_params=True,
            dynamic_axes=dynamic,
        )
    return buf.getvalue()


def _export_dynamo(model: nn.Module, feeds: dict[str, torch.Tensor], outputs: list[str]) -> bytes | None:
    """The dynamo exporter's graph at opset 18 (None without onnxscript)."""
    try:
        import onnxscript  # noqa: F401
    except ImportError:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            model,
            tuple(feeds.values()),
            input_names=list(feeds),
            output_names=outputs,
            opset_version=18,
            dynamo=True,
            optimize=False,
        )
    assert program is not None
    return bytes(program.model_proto.SerializeToString())


def main() -> int:
    DATA.mkdir(parents=True, exist_ok=True)
    for name, make in MODELS.items():
        model, feeds, outputs = make()
        wrt = [k for k, v in feeds.items() if v.is_floating_point() and k != "target"]
        leaves = {k: v.clone().requires_grad_(k in wrt) for k, v in feeds.items()}
        model.zero_grad()
        result = model(*leaves.values())
        loss = result[0] if isinstance(result, tuple) else result
        loss.backward()
        arrays: dict[str, Any] = {f"feed:{k}": v.numpy() for k, v in feeds.items()}
        arrays["loss"] = np.asarray(loss.item(), np.float32)
        params = [n for n, p in model.named_parameters()]
        arrays.update({f"grad:{n}": p.grad.numpy() for n, p in model.named_parameters()})
        arrays.update({f"grad:{k}": leaves[k].grad.numpy() for k in wrt})
        arrays["params"] = np.asarray(params)
        arrays["wrt"] = np.asarray(wrt)
        np.savez(DATA / f"{name}.npz", **arrays)
        for opset in OPSETS:
            (DATA / f"{name}_opset{opset}.onnx").write_bytes(_export(model, feeds, outputs, opset, DYNAMIC.get(name)))
        dynamo = _export_dynamo(model, feeds, outputs)
        if dynamo is not None:
            (DATA / f"{name}_dynamo_opset18.onnx").write_bytes(dynamo)
        print(f"{name}: loss {loss.item():.6f}, {len(params)} parameters, dynamo: {dynamo is not None}")
    print(f"torch {torch.__version__}: wrote {len(MODELS)} models x opsets {OPSETS} to {DATA}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
