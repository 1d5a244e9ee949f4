"""Torch layers ``torch_models`` does not cover, exported live and differentiated against torch.

Each row wraps one layer (or functional op) as ``loss = sum(f(*inputs) * r)`` with a fixed
random ``r`` broadcast over the batch axis, exports it with the TorchScript exporter at
opsets 13 and 17 with a symbolic batch axis, and checks with ``export_check`` (the fixture
tests' harness): our gradients of ``loss`` with respect to every parameter and float input
match ``torch.autograd`` to float32 precision in our runtime and in onnxruntime, and forward
mode along a random direction gives <torch's gradient, direction>.

The hunt of session 7 (branch h-hunt) probed these layers at opsets 11-18, both exporters,
static and dynamic axes, in float64 against torch and found no wrong gradient; this keeps
them covered. A representative subset runs in CI; the rest is marked slow.
"""

from __future__ import annotations

import io
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import onnx_light as ol

try:
    import torch
    from torch import nn
    from torch.nn import functional as F  # noqa: N812
except ImportError:  # pragma: no cover - depends on the environment
    torch = None

pytestmark = [
    pytest.mark.torch,
    pytest.mark.xfail(torch is None, reason="torch extra not installed (pip install '.[torch]')", run=False),
]


def _export_check() -> Any:
    folder = str(Path(__file__).resolve().parents[1] / "gradient")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    import export_check

    return export_check


def _cases() -> dict[str, tuple[Any, list[Any]]]:
    """name -> (module factory, input factories); built lazily so that collection needs no torch."""
    if torch is None:  # pragma: no cover
        return {}

    class Fn(nn.Module):
        def __init__(self, f: Any, *mods: nn.Module) -> None:
            super().__init__()
            self.f = f
            self.m = nn.ModuleList(mods)

        def forward(self, *xs: Any) -> Any:
            return self.f(self.m, *xs)

    def rand(*shape: int) -> Any:
        return lambda g: torch.randn(*shape, generator=g)

    idx = torch.tensor([[0, 2], [1, 3], [2, 0]])
    return {
        "mha": (lambda: nn.MultiheadAttention(8, 2, batch_first=True), [rand(2, 5, 8), rand(2, 4, 8), rand(2, 4, 8)]),
        "groupnorm": (lambda: nn.GroupNorm(2, 4), [rand(2, 4, 3, 3)]),
        "instnorm_affine": (lambda: nn.InstanceNorm2d(3, affine=True), [rand(2, 3, 4, 4)]),
        "layernorm_no_affine": (lambda: nn.LayerNorm(6, elementwise_affine=False), [rand(3, 4, 6)]),
        "conv_transpose": (
            lambda: nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2, dilation=2),
            [rand(2, 4, 5, 4)],
        ),
        "adaptive_avg_pool": (lambda: nn.AdaptiveAvgPool2d((2, 3)), [rand(2, 3, 6, 9)]),
        "pixel_shuffle": (lambda: nn.PixelShuffle(2), [rand(2, 8, 3, 3)]),
        "upsample_bicubic": (lambda: nn.Upsample(size=(5, 7), mode="bicubic", align_corners=True), [rand(2, 2, 3, 4)]),
        "cumsum_topk_sort": (
            lambda: Fn(lambda m, x: torch.sort(torch.topk(torch.cumsum(x, 1), 4, dim=1)[0] ** 2, dim=1)[0]),
            [rand(3, 6)],
        ),
        "scatter_gather_where": (
            lambda: Fn(lambda m, x, v: torch.where(x > 0, x.scatter(1, idx, v), x.gather(1, idx.repeat(1, 2)))),
            [rand(3, 4), rand(3, 2)],
        ),
        "index_put_unfold": (
            lambda: Fn(lambda m, x, v: x.index_put((torch.tensor([0, 2]),), v).unfold(1, 2, 1)),
            [rand(3, 4), rand(2, 4)],
        ),
        "clamp_tensor_pow": (
            lambda: Fn(lambda m, x, lo, e: torch.clamp(x, lo, lo + 1.0) + (x.abs() + 0.5) ** e),
            [rand(3, 4), rand(1, 4), rand(4)],
        ),
        "einsum_logsumexp": (
            lambda: Fn(lambda m, a, b: torch.logsumexp(torch.einsum("bij,bjk->bik", a, b), dim=-1)),
            [rand(2, 3, 4), rand(2, 4, 5)],
        ),
        "activations": (
            lambda: Fn(lambda m, x: F.softplus(x, 2.0) + F.gelu(x, approximate="tanh") + F.mish(x) + F.hardswish(x)),
            [rand(3, 4)],
        ),
    }


NAMES = [
    "mha",
    "groupnorm",
    "instnorm_affine",
    "layernorm_no_affine",
    "conv_transpose",
    "adaptive_avg_pool",
    "pixel_shuffle",
    "upsample_bicubic",
    "cumsum_topk_sort",
    "scatter_gather_where",
    "index_put_unfold",
    "clamp_tensor_pow",
    "einsum_logsumexp",
    "activations",
]
IN_CI = {"mha", "conv_transpose", "cumsum_topk_sort", "scatter_gather_where", "activations"}


def _params(name: str) -> list[Any]:
    return [
        pytest.param(name, opset, marks=() if name in IN_CI and opset == 17 else pytest.mark.slow) for opset in (13, 17)
    ]


def _wrapped(name: str) -> tuple[Any, list[Any]]:
    build, makers = _cases()[name]
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    inputs = [make(gen) for make in makers]
    inner = build()
    with torch.no_grad():
        out = inner(*inputs)
    out = out[0] if isinstance(out, tuple) else out
    r = torch.randn((1, *out.shape[1:]), generator=gen)

    class Loss(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner
            self.register_buffer("r", r)

        def forward(self, *xs: Any) -> Any:
            y = self.inner(*xs)
            return ((y[0] if isinstance(y, tuple) else y) * self.r).sum()

    return Loss().eval(), inputs


@pytest.mark.parametrize(("name", "opset"), [p for n in NAMES for p in _params(n)])
def test_layer_gradients_match_torch(name: str, opset: int) -> None:
    module, inputs = _wrapped(name)
    names = [f"x{i}" for i in range(len(inputs))]
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            tuple(inputs),
            buf,
            opset_version=opset,
            dynamo=False,
            export_params=True,
            do_constant_folding=False,
            input_names=names,
            output_names=["loss"],
            dynamic_axes={n: {0: "N"} for n in names[:1]},
        )
    model = ol.load_from_string(buf.getvalue())
    leaves = [x.clone().requires_grad_(True) for x in inputs]
    loss = module(*leaves)
    params = dict(module.named_parameters())
    grads = torch.autograd.grad(loss, leaves + list(params.values()))
    ref = {"loss": np.float32(loss.detach())}
    ref.update({f"grad:{n}": g.numpy() for n, g in zip(names + list(params), grads)})
    inits = {t.name for t in model.graph.initializer}
    missing = [p for p in params if p not in inits]
    assert not missing, f"{name}: parameters not exported under their names: {missing}"
    feeds = {n: x.numpy() for n, x in zip(names, inputs)}
    xs = names + list(params)
    check = _export_check()
    check.check_export_gradients(f"{name}@{opset}", model, feeds, xs, ref)
    check.check_export_tangent(f"{name}@{opset}", model, feeds, xs, ref)
