"""``save`` to a path that is a symbolic link or no regular file.

The atomic save writes a temporary file and renames it over the path. Renamed over a
symbolic link, that replaced the link itself (the file it points to kept the old model);
renamed over ``/dev/null`` (``onnx-light grad ... -o /dev/null``, run as root) it replaced
the device node with a regular file. A link is now written through, and a path that is
no regular file is written in place.
"""

from __future__ import annotations

import os
import pathlib
import stat
import threading

import numpy as np

import onnx_light as ol
from onnx_light import TensorProto, helper, numpy_helper


def _model(value: float) -> ol.ModelProto:
    w = numpy_helper.from_array(np.full((2,), value, np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _w(path: str | pathlib.Path) -> float:
    return float(numpy_helper.to_array(ol.load(str(path)).graph.initializer[0])[0])


def test_save_through_a_symbolic_link(tmp_path: pathlib.Path) -> None:
    target = tmp_path / "real.onnx"
    ol.save(_model(1.0), str(target))
    link = tmp_path / "link.onnx"
    link.symlink_to(target)
    ol.save(_model(2.0), str(link))
    assert link.is_symlink(), "the link was replaced by a file"
    assert _w(target) == 2.0 and _w(link) == 2.0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.onnx", "real.onnx"]  # no temporary left


def test_save_to_a_fifo_writes_into_it(tmp_path: pathlib.Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    try:
        ol.save(_model(3.0), str(fifo))
    finally:
        reader.join(timeout=30)
        if reader.is_alive() and stat.S_ISFIFO(os.stat(fifo).st_mode):
            try:  # the save went elsewhere: a non-blocking writer ends the reader's wait
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
            reader.join(timeout=30)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode), "the FIFO was replaced by a regular file"
    assert got and ol.load_model_from_string(got[0]).graph.initializer[0].name == "w"
