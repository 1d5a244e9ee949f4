"""CheckpointState: parameters, optimizer states and properties, saved atomically."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping

import numpy as np

from ._flatbuf import CheckpointError, RawCheckpoint, RawGroup, decode, encode

__all__ = ["CheckpointState", "Parameter", "CheckpointError"]

# onnxruntime names an optimizer's per-parameter tensors momentum0, momentum1; we keep
# torch.optim's names in memory and write onnxruntime's in the file, so either reads the other.
# (onnxruntime has no SGD momentum: momentum_buffer keeps its own name.)
_TO_ORT = {"exp_avg": "momentum0", "exp_avg_sq": "momentum1", "max_exp_avg_sq": "momentum2"}
_FROM_ORT = {v: k for k, v in _TO_ORT.items()}


class Parameter:
    """One named tensor of the model: its value, its gradient and whether it trains."""

    __slots__ = ("name", "data", "grad", "requires_grad")

    def __init__(self, name: str, data: np.ndarray, requires_grad: bool = True, grad: np.ndarray | None = None):
        self.name = name
        self.data = data
        self.requires_grad = requires_grad
        self.grad = grad

    def __repr__(self) -> str:
        return f"Parameter({self.name!r}, shape={self.data.shape}, requires_grad={self.requires_grad})"


class CheckpointState:
    """The training state: ``parameters``, ``optimizer_states``, ``properties``.

    ``optimizer_states`` maps torch.optim's names (``<param>.exp_avg``, ...) to arrays;
    ``optimizer_step`` is the number of optimizer steps taken; ``properties`` holds
    ints, floats and strings of the user's choosing (epoch, best score, ...).
    """

    def __init__(self) -> None:
        self.parameters: dict[str, Parameter] = {}
        self.optimizer_states: dict[str, np.ndarray] = {}
        self.properties: dict[str, int | float | str] = {}
        self.optimizer_step = 0
        self.learning_rate = 0.0

    @staticmethod
    def load_checkpoint(path: str | os.PathLike[str]) -> CheckpointState:
        """Reads a checkpoint written by ``save_checkpoint`` or by onnxruntime-training.

        Raises:
            CheckpointError: the file is not a training checkpoint.
        """
        with open(path, "rb") as f:
            raw = decode(f.read(), os.fspath(path))
        return CheckpointState._from_raw(raw)

    @staticmethod
    def save_checkpoint(state: CheckpointState, path: str | os.PathLike[str]) -> None:
        """Writes ``state`` to ``path`` atomically (a temporary file renamed over it).

        An interrupted save leaves the previous file at ``path`` intact.
        """
        data = encode(state._to_raw())
        path = os.fspath(path)
        folder = os.path.dirname(os.path.abspath(path))
        fd, tmp = tempfile.mkstemp(prefix=".ckpt-", dir=folder)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    def _to_raw(self) -> RawCheckpoint:
        raw = RawCheckpoint()
        for name, p in self.parameters.items():
            (raw.trainable if p.requires_grad else raw.frozen)[name] = np.asarray(p.data)
        group = RawGroup("group0", self.optimizer_step, self.learning_rate)
        for key, value in self.optimizer_states.items():
            param, _, kind = key.rpartition(".")
            group.states.setdefault(param, {})[_TO_ORT.get(kind, kind)] = np.asarray(value)
        raw.groups = [group]
        for k, v in self.properties.items():
            bag, prop = _property(k, v)
            getattr(raw, bag)[k] = prop
        return raw

    @staticmethod
    def _from_raw(raw: RawCheckpoint) -> CheckpointState:
        state = CheckpointState()
        for name, arr in raw.trainable.items():
            state.parameters[name] = Parameter(name, arr, True)
        for name, arr in raw.frozen.items():
            state.parameters[name] = Parameter(name, arr, False)
        for group in raw.groups[:1]:
            state.optimizer_step = group.step
            state.learning_rate = group.initial_learning_rate
            for param, moms in group.states.items():
                for kind, arr in moms.items():
                    state.optimizer_states[f"{param}.{_FROM_ORT.get(kind, kind)}"] = arr
        state.properties.update(raw.ints)
        state.properties.update(raw.floats)
        state.properties.update(raw.strings)
        return state

    def __repr__(self) -> str:
        return (
            f"CheckpointState({len(self.parameters)} parameters, {len(self.optimizer_states)} optimizer states, "
            f"step {self.optimizer_step})"
        )


_INT64 = np.iinfo(np.int64)


def _property(name: object, value: object) -> tuple[str, int | float | str]:
    """The property bag (``ints``, ``floats`` or ``strings``) holding ``value`` and its Python value.

    The format has int64, float32 and string properties under string names; a bool is an
    int and a numpy scalar its Python value.

    Raises:
        CheckpointError: a name that is not a string, or a value of another type or out of int64.
    """
    if not isinstance(name, str):
        raise CheckpointError(f"checkpoint property names are strings; got {name!r} ({type(name).__name__})")
    if isinstance(value, str):
        return "strings", value
    if isinstance(value, (bool, int, np.integer)):
        if not _INT64.min <= int(value) <= _INT64.max:
            raise CheckpointError(f"checkpoint property {name!r} = {value} does not fit the format's int64")
        return "ints", int(value)
    if isinstance(value, (float, np.floating)):
        return "floats", float(value)
    raise CheckpointError(
        f"checkpoint property {name!r} is {type(value).__name__}; the format holds int, float and str properties"
    )


def check_matches(
    state: CheckpointState, expected: Mapping[str, tuple[np.dtype, tuple[int, ...]] | None], what: str
) -> None:
    """Raises CheckpointError naming the first tensor of ``expected`` missing from or unlike ``state``.

    ``expected`` maps a name to its dtype and shape (None: any).
    """
    for name, want in expected.items():
        if name in state.parameters:
            arr = np.asarray(state.parameters[name].data)
        elif name in state.optimizer_states:
            arr = np.asarray(state.optimizer_states[name])
        else:
            raise CheckpointError(
                f"the checkpoint has no tensor {name!r} that {what} needs; "
                "load the checkpoint generate_artifacts wrote for this model"
            )
        if want is None:
            continue
        dtype, shape = want
        if arr.dtype != dtype or tuple(arr.shape) != tuple(shape):
            raise CheckpointError(
                f"checkpoint tensor {name!r} is {arr.dtype.name}{list(arr.shape)} but {what} expects "
                f"{np.dtype(dtype).name}{list(shape)}; the checkpoint belongs to another model"
            )
