"""Loading and saving models: memory-mapped reads, atomic writes, external data."""

from __future__ import annotations

import errno
import mmap
import os
import stat
import tempfile
from collections.abc import Iterator
from typing import Any

from ._errors import DecodeError, OnnxLightError
from ._interop import from_foreign
from ._message import Message
from ._proto import AttributeProto, FunctionProto, GraphProto, ModelProto, StringStringEntryProto, TensorProto
from ._wire import decode, encode_pieces

__all__ = [
    "load",
    "load_model",
    "load_from_string",
    "load_model_from_string",
    "load_tensor",
    "load_tensor_from_string",
    "load_function",
    "load_function_from_string",
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
    data = _read_source(f)
    try:
        model: ModelProto = decode(ModelProto, data)
    except DecodeError as err:
        if _is_function(data):
            raise DecodeError(
                "this file holds a FunctionProto, not a ModelProto: read it with onnx_light.load_function",
                err.offset,
                err.path,
            ) from None
        raise
    if load_external_data and isinstance(f, (str, os.PathLike)):
        load_external_data_for_model(model, os.path.dirname(os.fspath(f)))
    return model


load = load_model


def _is_function(data: Any) -> bool:
    try:
        fn = decode(FunctionProto, data)
    except DecodeError:
        return False
    return bool(fn.name) and len(fn.node) > 0


def load_model_from_string(s: bytes | bytearray | memoryview, format: Any = None) -> ModelProto:  # noqa: A002
    """Decodes a ModelProto from bytes."""
    return decode(ModelProto, s)


load_from_string = load_model_from_string


def load_function(f: Any, format: Any = None) -> FunctionProto:  # noqa: A002
    """Loads a FunctionProto written by ``save(function, path)``.

    The file format is the FunctionProto's own protobuf encoding (what
    ``FunctionProto.SerializeToString()`` returns; ``onnx.FunctionProto.FromString``
    reads it too). onnxruntime runs models, not bare functions: wrap one with
    ``onnx_light.function_to_model`` to run it there.

    Raises:
        DecodeError: the file is not a valid FunctionProto.
    """
    fn: FunctionProto = decode(FunctionProto, _read_source(f))
    return fn


def load_function_from_string(s: bytes | bytearray | memoryview, format: Any = None) -> FunctionProto:  # noqa: A002
    """Decodes a FunctionProto from bytes."""
    fn: FunctionProto = decode(FunctionProto, s)
    return fn


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


def _umask() -> int:
    """The process's umask, read without changing it where the system allows (Linux)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)  # elsewhere: the classic read (set and restore)
    os.umask(old)
    return old


def _new_file_mode(path: str, like: str | None = None) -> int:
    """The mode ``open()`` would give ``path``: that of the file it replaces (or ``like``), else
    0o666 minus the umask."""
    for candidate in (path, like):
        if candidate:
            try:
                return os.stat(candidate).st_mode & 0o7777
            except OSError:
                pass
    return 0o666 & ~_umask()


def _write_atomically(path: str, chunks: Iterator[Any] | list[Any], like: str | None = None) -> None:
    """Writes ``path`` through a temporary file in its folder renamed into place.

    The file keeps the permissions of the one it replaces (or of ``like``); a new one
    gets those ``open()`` gives. The temporary file never survives an exception. A symbolic
    link is written through (its target is replaced, the link stays); a path that exists
    and is no regular file (``/dev/null``, a FIFO) is written in place, never replaced.
    """
    path = os.path.realpath(path) if os.path.islink(path) else path
    if os.path.isdir(path):  # os.replace would name the temporary file, not this path
        raise IsADirectoryError(errno.EISDIR, "is a folder; give a file name", path)
    if os.path.exists(path) and not os.path.isdir(path) and not stat.S_ISREG(os.stat(path).st_mode):
        with open(path, "wb") as out:
            for chunk in chunks:
                out.write(chunk)
        return
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as out:
            os.fchmod(out.fileno(), _new_file_mode(path, like))
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
    """Saves a ModelProto, FunctionProto or TensorProto to a path or a binary file object.

    Each is written as its own protobuf encoding: ``load_model``, ``load_function``
    and ``load_tensor`` read the file back (a bare function is not a model:
    onnxruntime runs ``onnx_light.function_to_model(fn, types)`` instead).

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
    proto = from_foreign(proto)
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
    """Writes the data files under names no file has, then the model, then removes the old data.

    A crash at any moment leaves the old model with its old data or the new model with
    its new data: the old data files are only removed once the new model is in place.
    """
    folder = os.path.dirname(os.path.abspath(path))
    tensors = list(_graph_tensors(model.graph)) if convert_attribute else list(model.graph.initializer)
    chosen = [t for t in tensors if _tensor_nbytes(t) >= threshold and t.data_location != TensorProto.EXTERNAL]
    if location is None:
        location = os.path.basename(path) + ".data"
    _check_location(location, path)
    old_files = _external_files(path)
    namer = _FreshNames(folder, os.path.basename(path))
    files: dict[str, list[Any]] = {}
    plan: list[tuple[TensorProto, str, int, Any]] = []
    sizes: dict[str, int] = {}
    for i, tensor in enumerate(chosen):
        loc = namer.name(location) if one_file else namer.name(_safe_name(tensor.name) or f"tensor_{i}", key=i)
        chunks = files.setdefault(loc, [])
        offset = sizes.get(loc, 0)
        pad = (-offset) % EXTERNAL_ALIGNMENT
        if pad:
            chunks.append(b"\0" * pad)
            offset += pad
        data = tensor.raw_data
        chunks.append(data)
        sizes[loc] = offset + memoryview(data).nbytes
        plan.append((tensor, loc, offset, data))
    pieces = _encode_with_locations(model, plan)
    written: list[str] = []
    try:
        for loc, chunks in files.items():
            target = os.path.join(folder, loc)
            written.append(target)
            _write_atomically(target, chunks, like=path)
        _write_atomically(path, pieces)
    except BaseException:
        for target in written:  # the old model still reads its old data: drop the new files
            _remove(target)
        raise
    for old in old_files - set(files):
        _remove(os.path.join(folder, old))


def _check_location(location: str, path: str) -> None:
    if os.path.isabs(location) or os.path.normpath(location).startswith(".."):
        raise OnnxLightError(f"external data location {location!r} must be a relative path inside the model folder")
    if os.path.normpath(location) == os.path.basename(path):
        raise OnnxLightError(f"external data location {location!r} is the model file itself; choose another name")


class _FreshNames:
    """Data file names that no file in the folder has (so writing one never replaces data an
    existing model reads): the requested name when free, else ``<name>.<n>``."""

    def __init__(self, folder: str, model_name: str) -> None:
        self.folder = folder
        self.taken = {model_name}
        self.given: dict[Any, str] = {}

    def name(self, requested: str, key: Any = None) -> str:
        key = requested if key is None else key
        if key in self.given:
            return self.given[key]
        candidate, n = requested, 0
        while candidate in self.taken or os.path.lexists(os.path.join(self.folder, candidate)):
            n += 1
            candidate = f"{requested}.{n}"
        self.taken.add(candidate)
        self.given[key] = candidate
        return candidate


def _encode_with_locations(model: ModelProto, plan: list[tuple[TensorProto, str, int, Any]]) -> list[Any]:
    """The model's bytes with each planned tensor pointing at its data; the tensors are restored."""
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
    return pieces


def _external_files(path: str) -> set[str]:
    """The data files (relative, inside the folder) the model now at ``path`` reads; empty if none."""
    try:
        old = load_model(path, load_external_data=False)
    except (OSError, OnnxLightError):
        return set()
    out = set()
    for tensor in _model_tensors(old):
        if tensor.data_location == TensorProto.EXTERNAL:
            loc = _external_info(tensor).get("location", "")
            if loc and not os.path.isabs(loc) and not os.path.normpath(loc).startswith(".."):
                out.add(os.path.normpath(loc))
    return out


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name).lstrip(".")


def save_tensor(proto: TensorProto, f: Any) -> None:
    """Saves a TensorProto (``.pb``) to a path or a binary file object."""
    save_model(proto, f)
