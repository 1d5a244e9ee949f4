"""onnxruntime's on-device training checkpoint (FlatBuffers), read and written by hand.

The schema (``ort_training_checkpoint.fbs``, file identifier ``ODTC``, with ``Tensor``
from ``ort.fbs``), as field slots::

    Tensor         { name:string=0; doc_string=1; dims:[int64]=2; data_type:int32=3;
                     raw_data:[uint8]=4; string_data:[string]=5; external_data_offset:int64=6 }
    ModuleState    { requires_grad_params:[Tensor]=0; frozen_params:[Tensor]=1;
                     is_nominal_state:bool=2; has_external_data:bool=3 }
    ParameterOptimizerState { param_name:string=0; momentums:[Tensor]=1 }
    OptimizerGroup { group_name:string=0; step:int64=1; initial_learning_rate:float=2;
                     optimizer_states:[ParameterOptimizerState]=3 }
    IntProperty / FloatProperty / StringProperty { name:string=0; value=1 }
    PropertyBag    { ints=0; floats=1; strings=2 }
    Checkpoint     { version:int32=0; module_state=1; optimizer_groups=2; property_bag=3 }
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from typing import Any

import flatbuffers
import numpy as np
from flatbuffers import number_types as nt
from flatbuffers.table import Table

from ..onnx_core import OnnxLightError, helper

__all__ = ["CheckpointError", "RawCheckpoint", "RawGroup", "decode", "encode", "FILE_IDENTIFIER", "VERSION"]

FILE_IDENTIFIER = b"ODTC"
VERSION = 2  # what onnxruntime-training 1.19 writes and reads (it refuses 1 and 3)
_READABLE_VERSIONS = (1, 2, 3)


class CheckpointError(OnnxLightError, ValueError):
    """A checkpoint file is malformed or does not match the model."""


@dataclass
class RawGroup:
    """One OptimizerGroup: its step, learning rate and per-parameter state tensors."""

    name: str = "group0"
    step: int = 0
    initial_learning_rate: float = 0.0
    states: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)


@dataclass
class RawCheckpoint:
    """The checkpoint file's content, as numpy arrays and Python values."""

    trainable: dict[str, np.ndarray] = field(default_factory=dict)
    frozen: dict[str, np.ndarray] = field(default_factory=dict)
    groups: list[RawGroup] = field(default_factory=list)
    ints: dict[str, int] = field(default_factory=dict)
    floats: dict[str, float] = field(default_factory=dict)
    strings: dict[str, str] = field(default_factory=dict)


# ---------------------------------------------------------------- writing


def _tensor(b: flatbuffers.Builder, name: str, array: np.ndarray) -> int:
    arr = np.asarray(array, order="C")  # keeps a 0-d array 0-d (ascontiguousarray makes it (1,))
    dtype = helper.np_dtype_to_tensor_dtype(arr.dtype)
    name_off = b.CreateString(name)
    raw_off = b.CreateByteVector(arr.tobytes())
    b.StartVector(8, arr.ndim, 8)
    for d in reversed(arr.shape):
        b.PrependInt64(int(d))
    dims_off = b.EndVector()
    b.StartObject(7)
    b.PrependUOffsetTRelativeSlot(0, name_off, 0)
    b.PrependUOffsetTRelativeSlot(2, dims_off, 0)
    b.PrependInt32Slot(3, dtype, 0)
    b.PrependUOffsetTRelativeSlot(4, raw_off, 0)
    return int(b.EndObject())


def _vector(b: flatbuffers.Builder, offsets: list[int]) -> int:
    b.StartVector(4, len(offsets), 4)
    for off in reversed(offsets):
        b.PrependUOffsetTRelative(off)
    return int(b.EndVector())


def _tensors(b: flatbuffers.Builder, arrays: dict[str, np.ndarray]) -> int:
    return _vector(b, [_tensor(b, name, arrays[name]) for name in sorted(arrays)])


def _property(b: flatbuffers.Builder, name: str, value: int | float | str) -> int:
    name_off = b.CreateString(name)
    value_off = b.CreateString(value) if isinstance(value, str) else 0
    b.StartObject(2)
    b.PrependUOffsetTRelativeSlot(0, name_off, 0)
    if isinstance(value, str):
        b.PrependUOffsetTRelativeSlot(1, value_off, 0)
    elif isinstance(value, float):
        b.PrependFloat32Slot(1, value, 0.0)
    else:
        b.PrependInt64Slot(1, value, 0)
    return int(b.EndObject())


def _group(b: flatbuffers.Builder, group: RawGroup) -> int:
    per_param = []
    for param in sorted(group.states):
        name_off = b.CreateString(param)
        moms = _tensors(b, group.states[param])
        b.StartObject(2)
        b.PrependUOffsetTRelativeSlot(0, name_off, 0)
        b.PrependUOffsetTRelativeSlot(1, moms, 0)
        per_param.append(int(b.EndObject()))
    states_off = _vector(b, per_param)
    name_off = b.CreateString(group.name)
    b.StartObject(4)
    b.PrependUOffsetTRelativeSlot(0, name_off, 0)
    b.PrependInt64Slot(1, int(group.step), 0)
    b.PrependFloat32Slot(2, float(group.initial_learning_rate), 0.0)
    b.PrependUOffsetTRelativeSlot(3, states_off, 0)
    return int(b.EndObject())


def encode(ck: RawCheckpoint) -> bytes:
    """Serialises a checkpoint to onnxruntime's on-device training format."""
    b = flatbuffers.Builder(1024)
    trainable, frozen = _tensors(b, ck.trainable), _tensors(b, ck.frozen)
    b.StartObject(4)
    b.PrependUOffsetTRelativeSlot(0, trainable, 0)
    b.PrependUOffsetTRelativeSlot(1, frozen, 0)
    module = b.EndObject()
    groups = _vector(b, [_group(b, g) for g in ck.groups])
    bag_parts = []
    bags: tuple[dict[str, Any], ...] = (ck.ints, ck.floats, ck.strings)
    for values in bags:
        bag_parts.append(_vector(b, [_property(b, k, v) for k, v in sorted(values.items())]))
    b.StartObject(3)
    for slot, off in enumerate(bag_parts):
        b.PrependUOffsetTRelativeSlot(slot, off, 0)
    bag = b.EndObject()
    b.StartObject(4)
    b.PrependInt32Slot(0, VERSION, 0)
    b.PrependUOffsetTRelativeSlot(1, module, 0)
    b.PrependUOffsetTRelativeSlot(2, groups, 0)
    b.PrependUOffsetTRelativeSlot(3, bag, 0)
    b.Finish(b.EndObject(), file_identifier=FILE_IDENTIFIER)
    return bytes(b.Output())


# ---------------------------------------------------------------- reading


class _Reader:
    """Bounds-checked access to one FlatBuffers table."""

    def __init__(self, buf: bytes, pos: int, what: str) -> None:
        if not 0 <= pos <= len(buf) - 4:
            raise CheckpointError(f"checkpoint is malformed: {what} points outside the file")
        self.tab = Table(buf, pos)
        self.buf = buf
        self.what = what

    def _field(self, slot: int) -> int:
        return int(self.tab.Offset(4 + 2 * slot))

    def scalar(self, slot: int, flags: type, default: int | float) -> int | float:
        o = self._field(slot)
        return self.tab.Get(flags, o + self.tab.Pos) if o else default

    def string(self, slot: int) -> str:
        o = self._field(slot)
        return self.tab.String(o + self.tab.Pos).decode("utf-8") if o else ""

    def vector_span(self, slot: int, item: int) -> tuple[int, int]:
        o = self._field(slot)
        if not o:
            return 0, 0
        start, n = int(self.tab.Vector(o)), int(self.tab.VectorLen(o))
        if start + n * item > len(self.buf):
            raise CheckpointError(f"checkpoint is malformed: a vector of {self.what} runs past the end of the file")
        return start, n

    def tables(self, slot: int, what: str) -> list[_Reader]:
        start, n = self.vector_span(slot, 4)
        out = []
        for j in range(n):
            at = start + 4 * j
            out.append(_Reader(self.buf, at + int(self.tab.Get(nt.UOffsetTFlags, at)), f"{what}[{j}]"))
        return out

    def table(self, slot: int, what: str) -> _Reader | None:
        o = self._field(slot)
        return _Reader(self.buf, int(self.tab.Indirect(o + self.tab.Pos)), what) if o else None


def _read_tensor(t: _Reader) -> tuple[str, np.ndarray]:
    name = t.string(0)
    d0, nd = t.vector_span(2, 8)
    dims = [int(v) for v in np.frombuffer(t.buf, "<i8", nd, d0)] if nd else []
    dtype = int(t.scalar(3, nt.Int32Flags, 0))
    try:
        np_dtype = helper.tensor_dtype_to_np_dtype(dtype)
    except Exception as e:
        raise CheckpointError(f"checkpoint tensor {name!r} has an unsupported data type {dtype}") from e
    r0, nr = t.vector_span(4, 1)
    if any(d < 0 for d in dims):
        raise CheckpointError(f"checkpoint tensor {name!r} has a negative dimension {dims}")
    count = math.prod(dims)
    if nr != count * np.dtype(np_dtype).itemsize:
        raise CheckpointError(
            f"checkpoint tensor {name!r}: {nr} bytes of data for shape {dims} of {np.dtype(np_dtype).name}"
        )
    data = np.frombuffer(t.buf, np_dtype, count, r0).reshape(dims).copy()
    return name, data


def _read_group(g: _Reader) -> RawGroup:
    group = RawGroup(g.string(0), int(g.scalar(1, nt.Int64Flags, 0)), float(g.scalar(2, nt.Float32Flags, 0.0)))
    for p in g.tables(3, "optimizer_states"):
        group.states[p.string(0)] = dict(_read_tensor(m) for m in p.tables(1, "momentums"))
    return group


def decode(buf: bytes, path: str = "checkpoint") -> RawCheckpoint:
    """Parses a checkpoint file's bytes.

    Raises:
        CheckpointError: the bytes are not an onnxruntime training checkpoint.
    """
    try:
        return _decode(buf, path)
    except (struct.error, IndexError, UnicodeDecodeError, ValueError, TypeError, OverflowError) as e:
        if isinstance(e, CheckpointError):
            raise
        raise CheckpointError(f"{path} is truncated or malformed ({type(e).__name__}: {e}); it is not loadable") from e


def _decode(buf: bytes, path: str) -> RawCheckpoint:
    if len(buf) < 8 or buf[4:8] != FILE_IDENTIFIER:
        raise CheckpointError(f"{path} is not an onnxruntime training checkpoint (no 'ODTC' identifier)")
    root = _Reader(buf, int(np.frombuffer(buf, "<u4", 1, 0)[0]), "Checkpoint")
    version = int(root.scalar(0, nt.Int32Flags, 0))
    if version not in _READABLE_VERSIONS:
        raise CheckpointError(f"{path}: checkpoint version {version} is not supported (known: {_READABLE_VERSIONS})")
    ck = RawCheckpoint()
    module = root.table(1, "module_state")
    if module is not None:
        ck.trainable = dict(_read_tensor(t) for t in module.tables(0, "requires_grad_params"))
        ck.frozen = dict(_read_tensor(t) for t in module.tables(1, "frozen_params"))
    ck.groups = [_read_group(g) for g in root.tables(2, "optimizer_groups")]
    bag = root.table(3, "property_bag")
    if bag is not None:
        ck.ints = {p.string(0): int(p.scalar(1, nt.Int64Flags, 0)) for p in bag.tables(0, "ints")}
        ck.floats = {p.string(0): float(p.scalar(1, nt.Float32Flags, 0.0)) for p in bag.tables(1, "floats")}
        ck.strings = {p.string(0): p.string(1) for p in bag.tables(2, "strings")}
    return ck
