"""Small torch models exported with symbolic batch and spatial sizes (``dynamic_axes``).

Three families of real exports whose shapes are only known at run time: a CNN, an
OCR-style recogniser (conv stages, a reshape of the feature map to a sequence, a linear
head; no LSTM) and an FPN-ish detector (strided convs, ConvTranspose upsampling, a Pad
whose pads come from ``Shape``, Concat). Each ``forward(x, target)`` returns the
scalar loss; the target's shape follows x's, so the loss is defined at every size.

Only imported by ``make_dynamic_fixtures.py`` and ``test_torch_exports.py`` once torch
is known to be importable.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

#: the first opset whose exporter has cross_entropy (SoftmaxCrossEntropyLoss)
_SCE_OPSET = 12


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, fused: bool) -> torch.Tensor:
    """Mean cross-entropy; unfused (LogSoftmax -> GatherElements -> mean) for opset 11."""
    if fused:
        return F.cross_entropy(logits, target)
    return -F.log_softmax(logits, dim=1).gather(1, target.unsqueeze(1)).mean()


class DynCNN(nn.Module):
    """Strided conv -> BN -> ReLU -> MaxPool -> conv -> AvgPool(stride 2) -> GAP -> Linear -> CE."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.bn1 = nn.BatchNorm2d(4)
        self.pool1 = nn.MaxPool2d(3, stride=2, padding=1)
        self.conv2 = nn.Conv2d(4, 6, 3, padding=1)
        self.pool2 = nn.AvgPool2d(2, stride=2, ceil_mode=True)
        self.fc = nn.Linear(6, 5)
        self.fused = True

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        h = self.pool1(torch.relu(self.bn1(self.conv1(x))))
        h = self.pool2(torch.relu(self.conv2(h)))
        h = torch.flatten(F.adaptive_avg_pool2d(h, 1), 1)
        return cross_entropy(self.fc(h), target, self.fused)


class OCR(nn.Module):
    """Conv stages, the feature map reshaped to a width-long sequence, a linear head per step.

    The sequence is ``(N, C*H', W')`` permuted to ``(N, W', C*H')``: the reshape's target
    is built from ``x.shape`` (Shape -> Gather -> Concat -> Reshape in the export). The
    loss is cross-entropy per step against labels of shape ``(N, W')``.
    """

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 6, 3, stride=(2, 1), padding=1)
        self.pool = nn.MaxPool2d((2, 1))
        self.head = nn.Linear(6 * 2, 7)
        self.fused = True

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.conv1(x))
        h = self.pool(torch.relu(self.conv2(h)))
        n, c, hh, w = h.shape
        seq = h.reshape(n, c * hh, w).permute(0, 2, 1)
        logits = self.head(seq)
        return cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), self.fused)


class Detector(nn.Module):
    """FPN-ish: two strided stages, a ConvTranspose upsampling the top (no output padding),
    a Pad computed from the lateral's shape so odd sizes line up, Concat, a conv head, MSE."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.c2 = nn.Conv2d(4, 6, 3, stride=2, padding=1)
        self.up = nn.ConvTranspose2d(6, 4, 2, stride=2)
        self.head = nn.Conv2d(8, 2, 1)

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        f1 = torch.relu(self.c1(x))
        f2 = torch.relu(self.c2(f1))
        u = self.up(f2)
        dh = f1.shape[2] - u.shape[2]
        dw = f1.shape[3] - u.shape[3]
        u = F.pad(u, [0, dw, 0, dh])
        out = self.head(torch.cat([f1, u], dim=1))
        return F.mse_loss(out, target)


@dataclass
class DynSpec:
    """One model: builder, the example input shape, dynamic axes and the target's shape."""

    name: str
    build: Any
    x_shape: tuple[int, ...]
    dynamic: dict[str, dict[int, str]]
    target: Any  # callable(generator, x_shape) -> tensor

    def model(self) -> nn.Module:
        torch.manual_seed(0)
        module = self.build()
        gen = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for m in module.modules():
                if isinstance(m, nn.BatchNorm2d):
                    m.running_mean.copy_(0.2 * torch.randn(m.num_features, generator=gen))
                    m.running_var.copy_(0.5 + torch.rand(m.num_features, generator=gen))
        return module.eval()

    def inputs(self, shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        gen = torch.Generator().manual_seed(sum(shape))
        x = torch.randn(shape, generator=gen, dtype=torch.float32)
        return x, self.target(gen, shape)


def _cnn_target(gen: torch.Generator, shape: tuple[int, ...]) -> torch.Tensor:
    return torch.randint(0, 5, (shape[0],), generator=gen)


def _ocr_target(gen: torch.Generator, shape: tuple[int, ...]) -> torch.Tensor:
    return torch.randint(0, 7, (shape[0], shape[3]), generator=gen)


def _det_target(gen: torch.Generator, shape: tuple[int, ...]) -> torch.Tensor:
    n, _, h, w = shape
    return torch.randn((n, 2, (h + 1) // 2, (w + 1) // 2), generator=gen, dtype=torch.float32)


_IMAGE = {"x": {0: "N", 2: "H", 3: "W"}}

SPECS: dict[str, DynSpec] = {
    s.name: s
    for s in [
        DynSpec("dyn_cnn", DynCNN, (2, 3, 12, 10), {**_IMAGE, "target": {0: "N"}}, _cnn_target),
        DynSpec("ocr", OCR, (2, 1, 8, 12), {"x": {0: "N", 3: "W"}, "target": {0: "N", 1: "T"}}, _ocr_target),
        DynSpec(
            "detector",
            Detector,
            (2, 3, 11, 9),
            {**_IMAGE, "target": {0: "N", 2: "H2", 3: "W2"}},
            _det_target,
        ),
    ]
}

#: the two input sizes every model is checked at (the export traces the first)
SIZES: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "dyn_cnn": ((2, 3, 12, 10), (3, 3, 9, 14)),
    "ocr": ((2, 1, 8, 12), (1, 1, 8, 17)),
    "detector": ((2, 3, 11, 9), (1, 3, 8, 13)),
}


def export(spec: DynSpec, opset: int) -> bytes:
    """The model's ONNX bytes from the TorchScript exporter with symbolic axes."""
    module = spec.model()
    if hasattr(module, "fused"):
        module.fused = opset >= _SCE_OPSET
    x, target = spec.inputs(spec.x_shape)
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            (x, target),
            buf,
            opset_version=opset,
            dynamo=False,
            export_params=True,
            do_constant_folding=False,
            keep_initializers_as_inputs=False,
            training=torch.onnx.TrainingMode.EVAL,
            input_names=["x", "target"],
            output_names=["loss"],
            dynamic_axes=spec.dynamic,
        )
    return buf.getvalue()


def reference(spec: DynSpec, shape: tuple[int, ...]) -> tuple[dict[str, np.ndarray], float, dict[str, np.ndarray]]:
    """(feeds, loss, gradients) from torch.autograd at input ``shape``."""
    module = spec.model()
    x, target = spec.inputs(shape)
    x = x.clone().requires_grad_(True)
    loss = module(x, target)
    loss.backward()
    grads = {name: p.grad.detach().numpy().copy() for name, p in module.named_parameters()}
    grads["x"] = x.grad.detach().numpy().copy()
    feeds = {"x": x.detach().numpy().copy(), "target": target.numpy().copy()}
    return feeds, float(loss.detach()), grads


def parameter_names(spec: DynSpec) -> list[str]:
    """The model's parameter names, as the export names its initializers."""
    return [name for name, _ in spec.model().named_parameters()]
