"""Small, seeded PyTorch models with their loss inside ``forward``, and their ONNX exports.

Every model's ``forward(x, target)`` returns the scalar float32 loss, so the exported
graph has one output, ``loss``, that ``onnx_light.GradientOfFunction`` differentiates.
Parameters are exported as initializers named after the parameters (``fc1.weight``).

Only imported by ``test_torch_exports.py`` once torch is known to be importable.
"""

from __future__ import annotations

import copy
import io
import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812


class MLPMSE(nn.Module):
    """Linear -> Tanh -> Linear -> ReLU -> Linear, mean squared error."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(6, 16)
        self.fc2 = nn.Linear(16, 12)
        self.fc3 = nn.Linear(12, 3)

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.fc1(x))
        h = torch.relu(self.fc2(h))
        return F.mse_loss(self.fc3(h), target)


class MLPCrossEntropy(nn.Module):
    """Linear -> Sigmoid -> Linear, ``nn.CrossEntropyLoss`` on integer class labels."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(6, 10)
        self.fc2 = nn.Linear(10, 4)
        self.loss = nn.CrossEntropyLoss()

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return self.loss(self.fc2(torch.sigmoid(self.fc1(x))), target)


class MLPLogSoftmaxNLL(nn.Module):
    """Linear -> Tanh -> Linear; class-weighted NLL of log(softmax) plus a gathered LogSoftmax term.

    The exporter fuses ``nll_loss(log_softmax(z))`` into SoftmaxCrossEntropyLoss, so this
    spells the two halves differently to get the unfused ops: Softmax -> Log ->
    NegativeLogLikelihoodLoss (with a class-weight initializer that is a buffer, not a
    parameter) and LogSoftmax -> GatherElements -> ReduceMean.
    """

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(6, 10)
        self.fc2 = nn.Linear(10, 4)
        self.register_buffer("class_weight", torch.tensor([1.0, 2.0, 0.5, 1.5]))

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        logits = self.fc2(torch.tanh(self.fc1(x)))
        nll = F.nll_loss(torch.log(torch.softmax(logits, dim=1)), target, weight=self.class_weight)
        picked = F.log_softmax(logits, dim=1).gather(1, target.unsqueeze(1))
        return nll - 0.5 * picked.mean()


class CNN(nn.Module):
    """Conv -> BatchNorm -> ReLU -> MaxPool -> Conv -> BatchNorm -> ReLU -> AvgPool -> GlobalAvgPool -> Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(4)
        self.pool1 = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(4, 6, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(6)
        self.pool2 = nn.AvgPool2d(2)
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(6, 5)
        self.loss = nn.CrossEntropyLoss()

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        h = self.pool1(torch.relu(self.bn1(self.conv1(x))))
        h = self.pool2(torch.relu(self.bn2(self.conv2(h))))
        h = torch.flatten(self.gap(h), 1)
        return self.loss(self.fc(h), target)


class DepthwiseSeparableCNN(nn.Module):
    """Depthwise 3x3 conv (groups = channels) -> BatchNorm -> ReLU -> pointwise 1x1 -> GlobalAvgPool -> MSE."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(2, 6, 3, padding=1)
        self.depthwise = nn.Conv2d(6, 6, 3, padding=1, groups=6)
        self.bn = nn.BatchNorm2d(6)
        self.pointwise = nn.Conv2d(6, 8, 1)
        self.gap = nn.AdaptiveAvgPool2d(1)

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.stem(x))
        h = torch.relu(self.bn(self.depthwise(h)))
        h = torch.relu(self.pointwise(h))
        return F.mse_loss(torch.flatten(self.gap(h), 1), target)


class PreLNTransformerBlock(nn.Module):
    """x + MHSA(LN(x)); x + MLP(LN(x)) with GELU; attention written out with matmul/softmax."""

    def __init__(self, dim: int = 8, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        dh = d // self.heads
        qkv = self.qkv(x).reshape(b, t, 3, self.heads, dh).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(dh))
        out = torch.matmul(torch.softmax(scores, dim=-1), v)
        return self.proj(out.transpose(1, 2).reshape(b, t, d))

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.ln1(x))
        h = h + self.fc2(F.gelu(self.fc1(self.ln2(h))))
        return F.mse_loss(h, target)


@dataclass
class Spec:
    """One model of the suite: how to build it and its example inputs."""

    name: str
    build: Any
    x_shape: tuple[int, ...]
    target: Any  # callable(generator, batch) -> tensor
    ops: frozenset[str] = frozenset()  # op types the export must contain (what the case is meant to cover)
    train: bool = False  # export and differentiate in training mode (BatchNorm batch statistics)

    def model(self) -> nn.Module:
        torch.manual_seed(0)
        module = self.build()
        # Non-trivial normalisation statistics and affine parameters: eval-mode BatchNorm is then
        # not the identity, and no two parameters are equal (the exporter merges equal initializers,
        # so two LayerNorms left at ones/zeros would share one "ln1.weight").
        gen = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for m in module.modules():
                if isinstance(m, nn.BatchNorm2d):
                    m.running_mean.copy_(0.2 * torch.randn(m.num_features, generator=gen))
                    m.running_var.copy_(0.5 + torch.rand(m.num_features, generator=gen))
                if isinstance(m, (nn.BatchNorm2d, nn.LayerNorm)):
                    m.weight.copy_(1.0 + 0.3 * torch.randn(m.weight.shape, generator=gen))
                    m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=gen))
        return module.train(self.train)

    def inputs(self, batch: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        gen = torch.Generator().manual_seed(2 + (batch or 0))
        shape = self.x_shape if batch is None else (batch, *self.x_shape[1:])
        x = torch.randn(shape, generator=gen, dtype=torch.float32)
        return x, self.target(gen, shape[0])


def _classes(n: int) -> Any:
    return lambda gen, batch: torch.randint(0, n, (batch,), generator=gen)


def _regression(*shape: int) -> Any:
    return lambda gen, batch: torch.randn((batch, *shape), generator=gen, dtype=torch.float32)


_CNN_OPS = frozenset({"Conv", "BatchNormalization", "MaxPool", "AveragePool", "GlobalAveragePool"})

SPECS: dict[str, Spec] = {
    s.name: s
    for s in [
        Spec("mlp_mse", MLPMSE, (5, 6), _regression(3), frozenset({"Gemm", "ReduceMean"})),
        Spec("mlp_ce", MLPCrossEntropy, (5, 6), _classes(4), frozenset({"Gemm", "SoftmaxCrossEntropyLoss"})),
        Spec(
            "mlp_nll",
            MLPLogSoftmaxNLL,
            (5, 6),
            _classes(4),
            frozenset({"Softmax", "Log", "NegativeLogLikelihoodLoss", "LogSoftmax", "GatherElements"}),
        ),
        Spec("cnn_bn_eval", CNN, (2, 3, 8, 8), _classes(5), _CNN_OPS),
        Spec("cnn_bn_train", CNN, (3, 3, 8, 8), _classes(5), _CNN_OPS, train=True),
        Spec(
            "depthwise",
            DepthwiseSeparableCNN,
            (2, 2, 6, 6),
            _regression(8),
            frozenset({"Conv", "BatchNormalization", "GlobalAveragePool"}),
        ),
        Spec(
            "transformer",
            PreLNTransformerBlock,
            (2, 5, 8),
            _regression(5, 8),
            frozenset({"LayerNormalization", "MatMul", "Softmax", "Reshape", "Transpose", "Erf"}),
        ),
    ]
}


def export(spec: Spec, opset: int, dynamic_batch: bool = False) -> bytes:
    """The model's ONNX bytes from the TorchScript exporter (the dynamo one needs onnxscript)."""
    module = spec.model()
    x, target = spec.inputs()
    buf = io.BytesIO()
    kwargs: dict[str, Any] = {}
    if dynamic_batch:
        kwargs["dynamic_axes"] = {"x": {0: "N"}, "target": {0: "N"}}
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
            training=torch.onnx.TrainingMode.TRAINING if spec.train else torch.onnx.TrainingMode.EVAL,
            input_names=["x", "target"],
            output_names=["loss"],
            **kwargs,
        )
    return buf.getvalue()


def reference(spec: Spec, batch: int | None = None) -> tuple[dict[str, np.ndarray], float, dict[str, np.ndarray]]:
    """(feeds, loss, gradients) from torch.autograd; gradients keyed by parameter name and ``x``."""
    module = copy.deepcopy(spec.model())
    x, target = spec.inputs(batch)
    x = x.clone().requires_grad_(True)
    loss = module(x, target)
    loss.backward()
    grads = {name: p.grad.detach().numpy().copy() for name, p in module.named_parameters()}
    grads["x"] = x.grad.detach().numpy().copy()
    feeds = {"x": x.detach().numpy().copy(), "target": target.numpy().copy()}
    return feeds, float(loss.detach()), grads


def parameter_names(spec: Spec) -> list[str]:
    return [name for name, _ in spec.model().named_parameters()]
