"""``onnx-light train`` and ``onnx-light artifacts``: the training toolkit from the shell."""

from __future__ import annotations

import argparse
import os
import tempfile
import zipfile
from typing import Any

import numpy as np

from . import OnnxLightError, load
from .training import CheckpointState, Module, fit, generate_artifacts

__all__ = ["add_training_commands"]

LOSSES = {
    "cross_entropy": "CrossEntropyLoss",
    "mse": "MSELoss",
    "l1": "L1Loss",
    "huber": "HuberLoss",
    "bce_with_logits": "BCEWithLogitsLoss",
}
OPTIMIZERS = {"adamw": "AdamW", "adam": "Adam", "sgd": "SGD"}


def _names(text: str | None) -> list[str] | None:
    return None if text is None else [n.strip() for n in text.split(",") if n.strip()]


def _options(args: argparse.Namespace) -> dict[str, Any]:
    opts: dict[str, Any] = {"lr": args.lr}
    if args.weight_decay is not None:
        opts["weight_decay"] = args.weight_decay
    if args.momentum is not None:
        if args.optimizer != "sgd":
            raise OnnxLightError("--momentum is an option of --optimizer sgd")
        opts["momentum"] = args.momentum
    if args.max_grad_norm is not None:
        opts["max_grad_norm"] = args.max_grad_norm
    return opts


def _generate(args: argparse.Namespace, directory: str) -> None:
    generate_artifacts(
        args.model,
        requires_grad=_names(args.requires_grad),
        frozen_params=_names(args.frozen),
        loss=LOSSES[args.loss],
        optimizer=OPTIMIZERS[args.optimizer],
        artifact_directory=directory,
        **_options(args),
    )


def _artifacts(args: argparse.Namespace) -> int:
    _generate(args, args.output)
    print(
        f"wrote training_model.onnx, eval_model.onnx, optimizer_model.onnx, train_step.onnx, checkpoint: {args.output}"
    )
    return 0


def refuse_overwrite(output: str, model: str, prefixes: tuple[str, ...] = ()) -> None:
    """Raises when writing ``output`` (or its siblings ``<prefix><name>`` beside it) would
    replace the input ``model``: the user would lose it."""
    folder, name = os.path.split(output)
    for path in [output, *(os.path.join(folder, prefix + name) for prefix in prefixes)]:
        if os.path.exists(path) and os.path.exists(model) and os.path.samefile(path, model):
            raise OnnxLightError(
                f"-o {output}: writing {path} would overwrite the input model {model}; give another name"
            )


def _arrays(path: str, names: list[str]) -> list[np.ndarray]:
    """The arrays of an .npz in the model's input order: by name, else in file order."""
    if not os.path.exists(path):
        raise OnnxLightError(f"data file {path} does not exist")
    try:
        with np.load(path) as f:
            files = list(f.files)
            if all(n in files for n in names):
                return [f[n] for n in names]
            if len(files) == len(names):
                return [f[k] for k in files]
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:  # not an .npz, or object arrays
        raise OnnxLightError(
            f"{path} is not an .npz of numeric arrays ({e}); write it with np.savez(path, name=array, ...)"
        ) from e
    raise OnnxLightError(
        f"{path} holds {files}; the model takes {names} (name the arrays so, or store them in that order)"
    )


def _train(args: argparse.Namespace) -> int:
    refuse_overwrite(args.output, args.model)
    ck_dir = args.checkpoint_dir
    with tempfile.TemporaryDirectory(prefix="onnx-light-train-") as tmp:
        directory = os.path.join(ck_dir, "artifacts") if ck_dir else tmp
        if not (args.resume and os.path.exists(os.path.join(directory, "training_model.onnx"))):
            _generate(args, directory)
        probe = Module(
            os.path.join(directory, "training_model.onnx"),
            CheckpointState.load_checkpoint(os.path.join(directory, "checkpoint")),
        )
        inputs = probe.user_inputs()
        data = _arrays(args.data, inputs)
        val = _arrays(args.val, inputs) if args.val else None
        result = fit(
            directory,
            data,
            epochs=args.epochs,
            batch_size=args.batch_size,
            lr=args.lr,
            val=val,
            checkpoint_path=os.path.join(ck_dir, "checkpoint") if ck_dir else None,
            resume=args.resume,
            seed=args.seed,
        )
        outputs = [o.name for o in load(args.model).graph.output]
        result.module.export_model_for_inferencing(args.output, outputs)
    print(f"wrote the trained model to {args.output}")
    return 0


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="the forward ONNX model (its outputs are the logits or predictions)")
    p.add_argument("--loss", choices=sorted(LOSSES), default="cross_entropy", help="the loss added to the model")
    p.add_argument("--optimizer", choices=sorted(OPTIMIZERS), default="adamw", help="torch.optim's algorithm")
    p.add_argument("--lr", type=float, default=1e-3, help="learning rate")
    p.add_argument("--weight-decay", type=float, default=None, help="weight decay (default: the optimizer's)")
    p.add_argument("--momentum", type=float, default=None, help="SGD's momentum")
    p.add_argument("--max-grad-norm", type=float, default=None, help="clip gradients to this global norm")
    p.add_argument("--requires-grad", default=None, help="comma-separated initializers to train (default: all float)")
    p.add_argument("--frozen", default=None, help="comma-separated initializers to keep constant")


def add_training_commands(sub: Any) -> None:
    """Registers ``train`` and ``artifacts`` on the CLI's subparsers."""
    p = sub.add_parser("train", help="train MODEL on DATA.npz (loss, optimizer, epochs) and write the trained model")
    _common(p)
    p.add_argument("--data", required=True, help=".npz with the model's inputs and labels")
    p.add_argument("--val", default=None, help=".npz for per-epoch validation loss and accuracy")
    p.add_argument("--epochs", type=int, default=1, help="passes over --data")
    p.add_argument("--batch-size", type=int, default=32, help="samples per step")
    p.add_argument("--seed", type=int, default=0, help="seed of the shuffling and of Dropout")
    p.add_argument("--checkpoint-dir", default=None, help="keep artifacts and a checkpoint per epoch here")
    p.add_argument("--resume", action="store_true", help="continue from --checkpoint-dir's checkpoint")
    p.add_argument("-o", "--output", required=True, help="the trained model to write (for inference)")
    p.set_defaults(run=_train)
    p = sub.add_parser("artifacts", help="write the training artifacts of MODEL (onnxruntime.training's files)")
    _common(p)
    p.add_argument("-o", "--output", required=True, help="the artifact folder")
    p.set_defaults(run=_artifacts)
