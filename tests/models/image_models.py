"""Small torch architectures built on the image ops, exported with symbolic sizes.

* ``unet``: a two-level U-Net whose decoder upsamples by ``interpolate(scale_factor=2,
  bilinear)`` and an FPN-style lateral by ``interpolate(size=lateral.shape, nearest)``
  (Resize by scales and by sizes read from Shape), skip connections by Concat.
* ``yolo``: a YOLO-style two-scale head: the top map upsampled (nearest, scale 2) and
  concatenated with the middle one, each head's (N, A, 5 + K, H, W) predictions sigmoid-ed.
* ``stn``: a spatial transformer: a localisation net regresses theta, ``affine_grid``
  (AffineGrid, opset 20) and ``grid_sample`` (GridSample, bilinear) warp the image.
* ``stn_matmul``: the same with the grid built as base @ theta^T (torch exports no
  AffineGrid before opset 20), GridSample bicubic with border padding.
* ``roi_head``: a Mask-RCNN-style box head: conv features, RoiAlign (average, half_pixel)
  over given boxes, a conv and a linear classifier. torchvision is not needed: RoiAlign
  is a ``torch.autograd.Function`` whose forward is a pure-torch RoiAlign (the spec's
  sampling) and whose ``symbolic`` emits the ONNX op.

Each ``forward(x, target)`` returns a scalar loss. Only imported by
``make_image_fixtures.py`` (needs torch).
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


class UNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.e1 = nn.Conv2d(3, 4, 3, padding=1)
        self.e2 = nn.Conv2d(4, 6, 3, padding=1)
        self.lat = nn.Conv2d(6, 4, 1)
        self.d1 = nn.Conv2d(4 + 4 + 6, 4, 3, padding=1)
        self.out = nn.Conv2d(4, 2, 1)

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        f1 = torch.relu(self.e1(x))
        f2 = torch.relu(self.e2(F.max_pool2d(f1, 2)))
        up = F.interpolate(f2, scale_factor=2.0, mode="bilinear", align_corners=False)
        lateral = F.interpolate(self.lat(f2), size=(f1.shape[2], f1.shape[3]), mode="nearest")
        h = torch.relu(self.d1(torch.cat([f1, up, lateral], dim=1)))
        return F.mse_loss(self.out(h), target)


class YoloHead(nn.Module):
    anchors, classes = 2, 3

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.c2 = nn.Conv2d(4, 6, 3, stride=2, padding=1)
        self.top = nn.Conv2d(6, self.anchors * (5 + self.classes), 1)
        self.mid = nn.Conv2d(4 + 6, self.anchors * (5 + self.classes), 3, padding=1)

    def _predictions(self, p: torch.Tensor) -> torch.Tensor:
        n, _, h, w = p.shape
        return torch.sigmoid(p.view(n, self.anchors, 5 + self.classes, h, w))

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        f1 = F.leaky_relu(self.c1(x), 0.1)
        f2 = F.leaky_relu(self.c2(f1), 0.1)
        top = self._predictions(self.top(f2))
        mid = self._predictions(self.mid(torch.cat([f1, F.interpolate(f2, scale_factor=2.0, mode="nearest")], 1)))
        return (top.mean() - 0.5) ** 2 + F.mse_loss(mid, target)


class STN(nn.Module):
    def __init__(self, via_matmul: bool = False) -> None:
        super().__init__()
        self.loc = nn.Conv2d(1, 4, 3, padding=1)
        self.theta = nn.Linear(4, 6)
        self.cls = nn.Conv2d(1, 3, 3, padding=1)
        self.via_matmul = via_matmul
        with torch.no_grad():
            self.theta.weight.mul_(0.1)
            self.theta.bias.copy_(torch.tensor([0.9, 0.1, 0.05, -0.1, 0.8, 0.1]))

    def _grid(self, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        if not self.via_matmul:
            return F.affine_grid(theta, list(x.shape), align_corners=False)
        h, w = x.shape[2], x.shape[3]
        ys = (torch.arange(h, dtype=torch.float32) * 2 + 1) / h - 1
        xs = (torch.arange(w, dtype=torch.float32) * 2 + 1) / w - 1
        base = torch.stack([xs.expand(h, w), ys[:, None].expand(h, w), torch.ones(h, w)], dim=-1)
        return torch.matmul(base.reshape(1, h * w, 3), theta.transpose(1, 2)).reshape(-1, h, w, 2)

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        feat = F.adaptive_avg_pool2d(torch.relu(self.loc(x)), 1).flatten(1)
        theta = self.theta(feat).view(-1, 2, 3)
        grid = self._grid(theta, x)
        if self.via_matmul:
            warped = F.grid_sample(x, grid, mode="bicubic", padding_mode="border", align_corners=False)
        else:
            warped = F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
        logits = F.adaptive_avg_pool2d(self.cls(warped), 1).flatten(1)
        return F.cross_entropy(logits, target)


def _bilinear(img: torch.Tensor, y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """RoiAlign's bilinear sample of img (C, H, W) at points y, x (any shape): zero beyond
    one pixel outside, edge-clamped inside (onnx's reference and onnxruntime)."""
    h, w = img.shape[1], img.shape[2]
    outside = (y < -1.0) | (y > h) | (x < -1.0) | (x > w)
    y, x = y.clamp(min=0.0), x.clamp(min=0.0)
    y0, x0 = y.floor().long(), x.floor().long()
    y_edge, x_edge = y0 >= h - 1, x0 >= w - 1
    y0, x0 = torch.where(y_edge, h - 1, y0), torch.where(x_edge, w - 1, x0)
    y1, x1 = torch.where(y_edge, h - 1, y0 + 1), torch.where(x_edge, w - 1, x0 + 1)
    y, x = torch.where(y_edge, y0.to(y.dtype), y), torch.where(x_edge, x0.to(x.dtype), x)
    ly, lx = y - y0, x - x0
    hy, hx = 1 - ly, 1 - lx
    v = hy * hx * img[:, y0, x0] + hy * lx * img[:, y0, x1] + ly * hx * img[:, y1, x0] + ly * lx * img[:, y1, x1]
    return torch.where(outside, torch.zeros_like(v), v)


class RoiAlignFn(torch.autograd.Function):
    """RoiAlign (avg, half_pixel, fixed sampling_ratio) in torch, exported as the ONNX op."""

    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, rois: torch.Tensor, batch: torch.Tensor, size: int, ratio: int, scale: float
    ) -> torch.Tensor:
        return roi_align(x, rois, batch, size, ratio, scale)

    @staticmethod
    def symbolic(g: Any, x: Any, rois: Any, batch: Any, size: int, ratio: int, scale: float) -> Any:
        return g.op(
            "RoiAlign",
            x,
            rois,
            batch,
            output_height_i=size,
            output_width_i=size,
            sampling_ratio_i=ratio,
            spatial_scale_f=scale,
            mode_s="avg",
            coordinate_transformation_mode_s="half_pixel",
        )


def roi_align(
    x: torch.Tensor, rois: torch.Tensor, batch: torch.Tensor, size: int, ratio: int, scale: float
) -> torch.Tensor:
    """The spec's RoiAlign in average mode with half_pixel offsets, differentiable by torch."""
    out = []
    grid = (torch.arange(size * ratio, dtype=x.dtype) + 0.5) / ratio  # sample offsets in bins
    for r in range(rois.shape[0]):
        x1, y1, x2, y2 = (rois[r] * scale - 0.5).unbind()
        bin_h, bin_w = (y2 - y1) / size, (x2 - x1) / size
        ys = y1 + grid * bin_h
        xs = x1 + grid * bin_w
        samples = _bilinear(x[int(batch[r])], ys[:, None].expand(-1, xs.shape[0]), xs[None, :].expand(ys.shape[0], -1))
        c = samples.shape[0]
        out.append(samples.view(c, size, ratio, size, ratio).mean(dim=(2, 4)))
    return torch.stack(out)


class RoiHead(nn.Module):
    size, ratio, scale = 3, 2, 0.5

    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.box = nn.Conv2d(4, 6, 2)
        self.cls = nn.Linear(6 * 2 * 2, 3)

    def forward(self, x: torch.Tensor, rois: torch.Tensor, batch: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        feat = torch.relu(self.backbone(x))
        args = (feat, rois, batch, self.size, self.ratio, self.scale)
        # the export traces the Function (its symbolic); torch differentiates the plain code
        pooled = RoiAlignFn.apply(*args) if torch.onnx.is_in_onnx_export() else roi_align(*args)
        logits = self.cls(torch.relu(self.box(pooled)).flatten(1))
        return F.cross_entropy(logits, target)


@dataclass
class Spec:
    """One model: builder, example input shapes, the opsets exported, dynamic axes."""

    name: str
    build: Any
    sizes: tuple[tuple[int, ...], tuple[int, ...]]
    opsets: tuple[int, ...]
    dynamic: dict[str, dict[int, str]]

    def model(self) -> nn.Module:
        torch.manual_seed(0)
        return self.build().eval()

    def inputs(self, shape: tuple[int, ...]) -> dict[str, torch.Tensor]:
        gen = torch.Generator().manual_seed(sum(shape))
        n, _, h, w = shape
        x = torch.randn(shape, generator=gen)
        if self.name == "unet":
            return {"x": x, "target": torch.randn((n, 2, h, w), generator=gen)}
        if self.name == "yolo":
            k = 5 + YoloHead.classes
            return {"x": x, "target": torch.rand((n, YoloHead.anchors, k, (h + 1) // 2, (w + 1) // 2), generator=gen)}
        if self.name.startswith("stn"):
            return {"x": x, "target": torch.randint(0, 3, (n,), generator=gen)}
        boxes = torch.tensor([[1.2, 0.7, 7.5, 6.1], [3.1, 2.2, 9.4, 7.9], [0.3, 1.4, 5.2, 4.6]]) * torch.tensor(
            [w / 10, h / 8, w / 10, h / 8]
        )
        batch = torch.tensor([0, n - 1, 0])
        return {"x": x, "rois": boxes, "batch": batch, "target": torch.randint(0, 3, (3,), generator=gen)}


_IMAGE = {"x": {0: "N", 2: "H", 3: "W"}}
SPECS = {
    s.name: s
    for s in [
        Spec(
            "unet",
            UNet,
            ((2, 3, 8, 10), (1, 3, 12, 6)),
            (11, 13, 17, 18),
            {**_IMAGE, "target": {0: "N", 2: "H", 3: "W"}},
        ),
        Spec(
            "yolo",
            YoloHead,
            ((2, 3, 8, 12), (1, 3, 12, 8)),
            (11, 13, 17, 18),
            {**_IMAGE, "target": {0: "N", 3: "H2", 4: "W2"}},
        ),
        Spec("stn", STN, ((2, 1, 6, 5), (3, 1, 5, 7)), (20,), {"x": {0: "N", 2: "H", 3: "W"}, "target": {0: "N"}}),
        Spec(
            "stn_matmul",
            lambda: STN(via_matmul=True),
            ((2, 1, 5, 6), (1, 1, 5, 6)),
            (16, 17, 18),
            {"x": {0: "N"}, "target": {0: "N"}},
        ),
        Spec("roi_head", RoiHead, ((2, 3, 8, 10), (1, 3, 10, 8)), (16, 18), {"x": {0: "N", 2: "H", 3: "W"}}),
    ]
}


def export(spec: Spec, opset: int) -> bytes:
    """The model's ONNX bytes from the TorchScript exporter with symbolic axes."""
    module = spec.model()
    feeds = spec.inputs(spec.sizes[0])
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            tuple(feeds.values()),
            buf,
            opset_version=opset,
            dynamo=False,
            do_constant_folding=False,
            training=torch.onnx.TrainingMode.EVAL,
            input_names=list(feeds),
            output_names=["loss"],
            dynamic_axes=spec.dynamic,
        )
    return buf.getvalue()


def reference(spec: Spec, shape: tuple[int, ...]) -> tuple[dict[str, np.ndarray], float, dict[str, np.ndarray]]:
    """(feeds, loss, gradients) from torch.autograd at input ``shape``."""
    module = spec.model()
    feeds = spec.inputs(shape)
    x = feeds["x"].clone().requires_grad_(True)
    loss = module(x, *list(feeds.values())[1:])
    loss.backward()
    grads = {name: p.grad.detach().numpy().copy() for name, p in module.named_parameters()}
    grads["x"] = x.grad.detach().numpy().copy()
    arrays = {k: v.detach().numpy().copy() for k, v in feeds.items()}
    return arrays, float(loss.detach()), grads


def parameter_names(spec: Spec) -> list[str]:
    return [name for name, _ in spec.model().named_parameters()]
