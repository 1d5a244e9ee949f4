"""ScatterElements with reduction "add" on a flat array (the gradient of a MaxPool whose
windows overlap, ``onnx_extensions/gradient/pool.py``): the native loop (``src/pool.cpp``)
against its twin bit for bit, the kernel against onnxruntime, and bad indices refused."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from onnx_light.runtime import _native
from onnx_light.runtime.kernels.gather_scatter import scatter_elements_16

_RNG = np.random.default_rng(1515)


def _native_or_skip() -> Any:
    if _native.EXTENSION is None or not hasattr(_native.EXTENSION, "scatter_add_flat"):
        pytest.skip("the native extension is not built")
    return _native.EXTENSION


def _case(dtype: Any, n: int = 1000, count: int = 3000) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    data = _RNG.standard_normal(n).astype(dtype)
    index = _RNG.integers(-n, n, count)  # many duplicates, negative ones count from the end
    updates = _RNG.standard_normal(count).astype(dtype)
    updates[::97] = np.nan
    updates[5::101] = np.inf
    return data, index, updates


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scatter_add_flat_native_is_the_twin_bit_for_bit(dtype: Any) -> None:
    ext = _native_or_skip()
    data, index, updates = _case(dtype)
    want = _native.scatter_add_flat_twin(data.copy(), index, updates)
    got = data.copy()
    ext.scatter_add_flat(got, index, updates)
    np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))


def test_scatter_add_flat_refuses_an_index_out_of_range_and_writes_nothing() -> None:
    ext = _native_or_skip()
    data, index, updates = _case(np.float32, n=10, count=20)
    index[-1] = 10
    got = data.copy()
    with pytest.raises(IndexError, match="out of range"):
        ext.scatter_add_flat(got, index, updates)
    np.testing.assert_array_equal(got, data)
    with pytest.raises(IndexError):  # the kernel, natively or not
        scatter_elements_16(data, index, updates, axis=0, reduction="add")


def test_flat_scatter_add_kernel_runs_the_native_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    ext = _native_or_skip()
    if _native.NATIVE is None:
        pytest.skip("the pure-Python twins are selected")
    calls: list[int] = []
    loop = ext.scatter_add_flat

    class Recorder:
        def __getattr__(self, name: str) -> Any:
            return getattr(ext, name)

        def scatter_add_flat(self, y: np.ndarray, index: np.ndarray, u: np.ndarray) -> None:
            calls.append(len(index))
            loop(y, index, u)

    monkeypatch.setattr(_native, "NATIVE", Recorder())
    data, index, updates = _case(np.float32)
    got = scatter_elements_16(data, index, updates, axis=0, reduction="add")
    assert calls == [len(index)]
    np.testing.assert_array_equal(got, _native.scatter_add_flat_twin(data.copy(), index, updates))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_flat_scatter_add_kernel_matches_onnxruntime(dtype: Any) -> None:
    ort = pytest.importorskip("onnxruntime")
    from onnx import helper as H

    data, index, updates = _case(dtype)
    updates = np.abs(updates)  # finite: onnxruntime's and our NaN/inf sums agree, but keep it simple
    updates[~np.isfinite(updates)] = 1.0
    t = H.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = H.make_graph(
        [H.make_node("ScatterElements", ["d", "i", "u"], ["y"], reduction="add")],
        "g",
        [
            H.make_tensor_value_info("d", t, data.shape),
            H.make_tensor_value_info("i", 7, index.shape),
            H.make_tensor_value_info("u", t, updates.shape),
        ],
        [H.make_tensor_value_info("y", t, None)],
    )
    model = H.make_model(graph, opset_imports=[H.make_opsetid("", 18)])
    peer = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = peer.run(None, {"d": data, "i": index, "u": updates})[0]
    np.testing.assert_array_equal(scatter_elements_16(data, index, updates, axis=0, reduction="add"), want)
