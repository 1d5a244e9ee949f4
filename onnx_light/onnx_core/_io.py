"""Loading and saving models: memory-mapped reads, atomic writes, external data."""

from __future__ import annotations

import mmap
import os
import tempfile
from collections.abc import Iterator
from typing import Any

from ._errors import DecodeError, OnnxLightError
from ._message import Message
from ._proto import AttributeProto, GraphProto, ModelProto, StringStringEntryProto, TensorProto
from ._wire import decode, encode_pieces

__all__ = [
    "load",
    "load_model",
    "load_from_string",
    "load_model_from_string",
    "load_tensor",
    "load_tensor_from_string",
    "save",
    "save_model",
    "save_tensor",
    "load_external_data_for_model",
]

#: external tensor data is written at offsets that are multiples of this
EXTERNAL_ALIGNMENT = 64


def _map_file(path: str | os.PathLike[str]) -> Any:
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return b""
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def _read_source(f: Any) -> Any:
    if isinstance(f, (str, os.PathLike)):
        return _map_file(f)
    if hasattr(f, "read"):
        return f.read()
    raise TypeError(f"expected a path or a readable file, got {type(f).__name__}")


def load_model(f: Any, format: Any = None, load_external_data: bool = True) -> ModelProto:  # noqa: A002
    """Loads a ModelProto from a path or a binary file object.

    A path is memory-mapped and tensor ``raw_data`` stays a zero-copy view of it.

    Args:
        f: path or readable binary file.
        format: accepted for ``onnx`` compatibility; only the protobuf format exists.
        load_external_data: read tensors stored in external files next to the model.

    Raises:
        DecodeError: the file is not a valid model.
    """
    model: ModelProto = decode(ModelProto, _read_source(f))
    if load_external_data and isinstance(f, (str, os.PathLike)):
        load_external_data_for_model(model, os.path.dirname(os.fspath(f)))
    return model


load = load_model


def load_model_from_string(s: bytes | bytearray | memoryview, format: Any = None) -> ModelProto:  # noqa: A002
    """Decodes a ModelProto from bytes."""
    return decode(ModelProto, s)


load_from_string = load_model_from_string


def load_tensor(f: Any, format: Any = None) -> TensorProto:  # noqa: A002
    """Loads a TensorProto (``.pb``) from a path or a binary file object."""
    return decode(TensorProto, _read_source(f))


def load_tensor_from_string(s: bytes | bytearray | memoryview, format: Any = None) -> TensorProto:  # noqa: A002
    """Decodes a TensorProto from bytes."""
    return decode(TensorProto, s)


# ----------------------------------------------------------------------------
# external data
# ----------------------------------------------------------------------------
_UNDEFINED, _TENSOR, _GRAPH, _TENSORS, _GRAPHS = (
    AttributeProto.UNDEFINED,
    AttributeProto.TENSOR,
    AttributeProto.GRAPH,
    AttributeProto.TENSORS,
    AttributeProto.GRAPHS,
)


def _graph_tensors(graph: GraphProto) -> Iterator[TensorProto]:
    # the private slots are read directly (as _wire does): the public getters of unset
    # repeated fields would raise and catch an AttributeError per node, and create lists
    yield from getattr(graph, "_initializer", ())
    for sparse in getattr(graph, "_sparse_initializer", ()):
        yield sparse.values
        yield sparse.indices
    for node in getattr(graph, "_node", ()):
        for attr in getattr(node, "_attribute", ()):
            kind = getattr(attr, "_type", _UNDEFINED)
            if kind == _TENSOR or kind == _UNDEFINED:
                if attr.HasField("t"):
                    yield attr.t
            if kind == _TENSORS or kind == _UNDEFINED:
                yield from attr.tensors
            if kind == _GRAPH or kind == _UNDEFINED:
                if attr.HasField("g"):
                    yield from _graph_tensors(attr.g)
            if kind == _GRAPHS or kind == _UNDEFINED:
                for g in attr.graphs:
                    yield from _graph_tensors(g)


def _model_tensors(model: ModelProto) -> Iterator[TensorProto]:
    yield from _graph_tensors(model.graph)
    for fn in getattr(model, "_functions", ()):
        for node in getattr(fn, "_node", ()):
            for attr in getattr(node, "_attribute", ()):
                if attr.HasField("t"):
                    yield attr.t
                if attr.HasField("g"):
                    yield from _graph_tensors(attr.g)


def _external_info(tensor: TensorProto) -> dict[str, str]:
    return {e.key: e.value for e in tensor.external_data}


def load_external_data_for_model(model: ModelProto, base_dir: str) -> None:
    """Replaces external references of ``model``'s tensors by zero-copy views of the data.

    Raises:
        OnnxLightError: a location escapes ``base_dir``, is missing, or the offset and
            length point outside the file.
    """
    maps: dict[str, Any] = {}
    base = os.path.realpath(base_dir or ".")
    external = TensorProto.EXTERNAL
    for tensor in _model_tensors(model):
        if getattr(tensor, "_data_location", None) != external:
            continue
        info = _external_info(tensor)
        location = info.get("location", "")
        path = os.path.realpath(os.path.join(base, location))
        if not location or os.path.isabs(location) or os.path.commonpath([base, path]) != base:
            raise OnnxLightError(
                f"tensor {tensor.name!r}: external data location {location!r} is not a file inside "
                f"the model's folder {base!r}; move the data file next to the model"
            )
        if path not in maps:
            if not os.path.isfile(path):
                raise OnnxLightError(f"tensor {tensor.name!r}: external data file {path!r} does not exist")
            maps[path] = _map_file(path)
        data = memoryview(maps[path])
        try:
            offset = int(info.get("offset", "0"))
            length = int(info["length"]) if "length" in info else len(data) - offset
        except ValueError:
            raise OnnxLightError(f"tensor {tensor.name!r}: external data offset/length are not integers") from None
        if offset < 0 or length < 0 or offset + length > len(data):
            raise DecodeError(
                f"tensor {tensor.name!r}: external data [{offset}, {offset + length}) lies outside "
                f"{location!r} ({len(data)} bytes)",
                offset,
            )
        tensor.raw_data = data[offset : offset + length]  # type: ignore[assignment]  # a zero-copy view
        tensor.ClearField("data_location")
        del tensor.external_data[:]


# ----------------------------------------------------------------------------
# saving
# ----------------------------------------------------------------------------
def _tensor_nbytes(tensor: TensorProto) -> int:
    return memoryview(tensor.raw_data).nbytes if tensor.HasField("raw_data") else 0


def _write_atomically(path: str, chunks: Iterator[Any] | list[Any]) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in chunks:
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def save_model(
    proto: Message,
    f: Any,
    format: Any = None,  # noqa: A002
    *,
    save_as_external_data: bool = False,
    all_tensors_to_one_file: bool = True,
    location: str | None = None,
    size_threshold: int = 1024,
    convert_attribute: bool = False,
) -> None:
    """Saves a message (normally a ModelProto) to a path or a binary file object.

    A path is written through a temporary file in the same folder and renamed into
    place, so an interrupted save never leaves a truncated model and the old file
    survives. The caller's message is not modified.

    Args:
        proto: the message to write.
        f: destination path or writable binary file.
        format: accepted for ``onnx`` compatibility.
        save_as_external_data: store large tensors' data in files beside the model.
        all_tensors_to_one_file: one data file (``location``) rather than one per tensor.
        location: data file name, relative to the model's folder (default: model name + ``.data``).
        size_threshold: tensors with fewer raw bytes stay inside the model.
        convert_attribute: also externalise tensors held in attributes.
    """
    if not save_as_external_data:
        pieces, _ = encode_pieces(proto)
        if isinstance(f, (str, os.PathLike)):
            _write_atomically(os.fspath(f), pieces)
        else:
            for piece in pieces:
                f.write(piece)
        return
    if not isinstance(f, (str, os.PathLike)) or not isinstance(proto, ModelProto):
        raise OnnxLightError("save_as_external_data needs a ModelProto and a file path")
    _save_with_external_data(proto, os.fspath(f), all_tensors_to_one_file, location, size_threshold, convert_attribute)


save = save_model


def _save_with_external_data(
    model: ModelProto, path: str, one_file: bool, location: str | None, threshold: int, convert_attribute: bool
) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    tensors = list(_graph_tensors(model.graph)) if convert_attribute else list(model.graph.initializer)
    chosen = [t for t in tensors if _tensor_nbytes(t) >= threshold and t.data_location != TensorProto.EXTERNAL]
    if location is None:
        location = os.path.basename(path) + ".data"
    if os.path.isabs(location) or os.path.normpath(location).startswith(".."):
        raise OnnxLightError(f"external data location {location!r} must be a relative path inside the model folder")
    # each tensor's data goes to (file, offset); the user's tensors are swapped back afterwards
    plan: list[tuple[TensorProto, str, int, Any]] = []
    files: dict[str, list[Any]] = {}
    sizes: dict[str, int] = {}
    for i, tensor in enumerate(chosen):
        loc = location if one_file else (_safe_name(tensor.name) or f"tensor_{i}")
        chunks = files.setdefault(loc, [])
        offset = sizes.get(loc, 0)
        pad = (-offset) % EXTERNAL_ALIGNMENT
        if pad:
            chunks.append(b"\0" * pad)
            offset += pad
        data = tensor.raw_data
        nbytes = memoryview(data).nbytes
        chunks.append(data)
        sizes[loc] = offset + nbytes
        plan.append((tensor, loc, offset, data))
    saved: list[tuple[TensorProto, Any, list[StringStringEntryProto], Any]] = []
    try:
        for tensor, loc, offset, data in plan:
            had_location = tensor.HasField("data_location")
            saved.append((tensor, data, list(tensor.external_data), had_location))
            tensor.ClearField("raw_data")
            tensor.data_location = TensorProto.EXTERNAL
            entries = [("location", loc), ("offset", str(offset)), ("length", str(memoryview(data).nbytes))]
            tensor.external_data[:] = [StringStringEntryProto(key=k, value=v) for k, v in entries]
        pieces, _ = encode_pieces(model)
    finally:
        for tensor, data, old_entries, had_location in saved:
            tensor.raw_data = data
            tensor.external_data[:] = old_entries
            if not had_location:
                tensor.ClearField("data_location")
    for loc, chunks in files.items():
        _write_atomically(os.path.join(folder, loc), chunks)
    _write_atomically(path, pieces)


def _safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name).lstrip(".")


def save_tensor(proto: TensorProto, f: Any) -> None:
    """Saves a TensorProto (``.pb``) to a path or a binary file object."""
    save_model(proto, f)
