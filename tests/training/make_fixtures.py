"""Writes torch exports and torch.optim's trajectories to ``tests/training/data`` (needs torch).

    python tests/training/make_fixtures.py

CI, which does not install torch, then checks onnx_light.training against torch.optim
(``test_vs_torch.py``). Every expected value comes from torch, never from onnx-light.
The batches are drawn with numpy from a fixed seed (``batches`` below, shared with the
test), so only the models, the losses and the final parameters are stored.
"""

from __future__ import annotations

import pathlib

import numpy as np

DATA = pathlib.Path(__file__).resolve().parent / "data"

# name -> (model, loss, optimizer, options, steps)
CASES = {
    "mlp_adamw": ("mlp", "CrossEntropyLoss", "AdamW", {"lr": 1e-3}, 30),
    "mlp_sgd": ("mlp", "CrossEntropyLoss", "SGD", {"lr": 1e-2, "momentum": 0.9}, 30),
    "cnn_adamw": ("cnn", "CrossEntropyLoss", "AdamW", {"lr": 1e-3}, 30),
    "cnn_sgd": ("cnn", "CrossEntropyLoss", "SGD", {"lr": 1e-2, "momentum": 0.9}, 30),
    "mlp_adam_amsgrad": ("mlp", "CrossEntropyLoss", "Adam", {"lr": 1e-2, "weight_decay": 0.1, "amsgrad": True}, 8),
    "mlp_sgd_nesterov": (
        "mlp",
        "CrossEntropyLoss",
        "SGD",
        {"lr": 1e-2, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01},
        8,
    ),
    "mlp_sgd_dampening": ("mlp", "CrossEntropyLoss", "SGD", {"lr": 1e-2, "momentum": 0.9, "dampening": 0.5}, 8),
    "mlp_sgd_plain": ("mlp", "CrossEntropyLoss", "SGD", {"lr": 5e-2}, 8),
    "mlp_adamw_clip": ("mlp", "CrossEntropyLoss", "AdamW", {"lr": 1e-2, "max_grad_norm": 0.5}, 8),
    "reg_mse": ("reg", "MSELoss", "Adam", {"lr": 1e-2}, 6),
    "reg_l1": ("reg", "L1Loss", "Adam", {"lr": 1e-2}, 6),
    "reg_huber": ("reg", "HuberLoss", "Adam", {"lr": 1e-2}, 6),
    "reg_bce": ("reg", "BCEWithLogitsLoss", "Adam", {"lr": 1e-2}, 6),
}
SHAPES = {"mlp": ((8, 20), 5), "cnn": ((4, 3, 10, 10), 5), "reg": ((8, 20), 3)}


def batches(kind: str, loss: str, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """The inputs and labels of every step (numpy, seeded: the test draws the same)."""
    rng = np.random.default_rng(7)
    shape, classes = SHAPES[kind]
    x = rng.standard_normal((steps, *shape)).astype(np.float32)
    if loss == "CrossEntropyLoss":
        return x, rng.integers(0, classes, (steps, shape[0])).astype(np.int64)
    if loss == "BCEWithLogitsLoss":
        return x, (rng.random((steps, shape[0], classes)) > 0.5).astype(np.float32)
    return x, rng.standard_normal((steps, shape[0], classes)).astype(np.float32)


def _model(kind: str):  # type: ignore[no-untyped-def]
    import torch

    torch.manual_seed(0)
    nn = torch.nn
    if kind == "cnn":  # the usual form: no conv bias before a BatchNorm
        return nn.Sequential(
            nn.Conv2d(3, 6, 3, padding=1, bias=False),
            nn.BatchNorm2d(6),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(6, 8, 3, padding=1, bias=False),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(8, 5),
        )
    out = SHAPES[kind][1]
    return nn.Sequential(nn.Linear(20, 16), nn.ReLU(), nn.Linear(16, 12), nn.Tanh(), nn.Linear(12, out))


def _torch_loss(loss: str):  # type: ignore[no-untyped-def]
    import torch

    return {
        "CrossEntropyLoss": torch.nn.CrossEntropyLoss(),
        "MSELoss": torch.nn.MSELoss(),
        "L1Loss": torch.nn.L1Loss(),
        "HuberLoss": torch.nn.HuberLoss(),
        "BCEWithLogitsLoss": torch.nn.BCEWithLogitsLoss(),
    }[loss]


def main() -> int:
    import torch

    torch.set_num_threads(1)
    DATA.mkdir(exist_ok=True)
    out: dict[str, np.ndarray] = {}
    for case, (kind, loss, opt_name, options, steps) in CASES.items():
        m = _model(kind)
        m.train()
        # exporting in training mode runs the model once, which moves BatchNorm's running
        # statistics: torch then trains on from the state it exported
        torch.onnx.export(
            m,
            (torch.zeros(SHAPES[kind][0]),),
            str(DATA / f"{kind}.onnx"),
            input_names=["input"],
            output_names=["logits"],
            opset_version=17,
            training=torch.onnx.TrainingMode.TRAINING,
            do_constant_folding=False,
            dynamo=False,
        )
        opts = dict(options)
        clip = opts.pop("max_grad_norm", None)
        opt = getattr(torch.optim, opt_name)(m.parameters(), **opts)
        fn = _torch_loss(loss)
        x, y = batches(kind, loss, steps)
        losses = []
        for i in range(steps):
            opt.zero_grad()
            value = fn(m(torch.from_numpy(x[i])), torch.from_numpy(y[i]))
            value.backward()
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(m.parameters(), clip)
            opt.step()
            losses.append(float(value))
        out[f"{case}/losses"] = np.array(losses, np.float64)
        for k, v in m.state_dict().items():
            if "num_batches" not in k:
                out[f"{case}/param/{k}"] = v.detach().numpy().copy()
        if kind == "cnn":
            m.eval()
            with torch.no_grad():
                out[f"{case}/eval_logits"] = m(torch.from_numpy(x[0])).numpy()
    np.savez_compressed(DATA / "reference.npz", **out)
    print(f"wrote {DATA}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
