"""MaxPool windows that hold no input cell (a dilation stepping over X, or pads >= kernel).

Such a window reads only padding: Y is the lowest value and its Indices point at no cell
of X, so its dY must reach no cell. Finite differences do not apply (Y's lowest values
overflow <dY, Y>); the reference here is the definition, dX[c] = sum of dY over the
windows whose first maximum among their cells of X is c, in numpy.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from gradcheck import backward_model
from onnx import helper as oh

import onnx_light as ol
from onnx_light.runtime import InferenceSession


def _reference(
    x: np.ndarray, dy: np.ndarray, kernel: list[int], strides: list[int], dil: list[int], pads: list[int]
) -> np.ndarray:
    nd = len(kernel)
    dx = np.zeros_like(x)
    for n, c in itertools.product(range(x.shape[0]), range(x.shape[1])):
        for o in itertools.product(*(range(d) for d in dy.shape[2:])):
            axes = [[o[i] * strides[i] - pads[i] + j * dil[i] for j in range(kernel[i])] for i in range(nd)]
            cells = [p for p in itertools.product(*axes) if all(0 <= p[i] < x.shape[2 + i] for i in range(nd))]
            if cells:  # the first maximum in row-major order
                best = max(cells, key=lambda p: (x[(n, c, *p)], [-q for q in p]))
                dx[(n, c, *best)] += dy[(n, c, *o)]
    return dx


CASES = [
    # (x shape, attributes, onnxruntime accepts it). With pads < kernel (all onnxruntime
    # takes) a window is empty only when every window is (a brute-force search over 1-D
    # geometries up to width 7 found no mix); pads >= kernel mix empty and full windows.
    ((2, 3, 4, 4), {"kernel_shape": [2, 2], "pads": [1, 1, 1, 1], "dilations": [5, 5]}, True),
    ((1, 2, 4, 5), {"kernel_shape": [2, 1], "pads": [1, 0, 1, 0], "dilations": [5, 1]}, True),
    ((1, 2, 6), {"kernel_shape": [2], "pads": [1, 1], "dilations": [7]}, True),
    ((1, 2, 4, 4), {"kernel_shape": [2, 2], "pads": [2, 2, 2, 2]}, False),
    ((1, 2, 4, 4), {"kernel_shape": [3, 3], "pads": [3, 0, 3, 1], "strides": [2, 1]}, False),
]


def _model(shape: tuple[int, ...], attrs: dict[str, Any], symbolic: bool) -> Any:
    dims: list[Any] = list(shape)
    if symbolic:
        dims = ["N", shape[1], *(f"s{i}" for i in range(len(shape) - 2))]
    graph = oh.make_graph(
        [oh.make_node("MaxPool", ["x"], ["y"], **attrs)],
        "pool",
        [oh.make_tensor_value_info("x", 11, dims)],
        [oh.make_tensor_value_info("y", 11, None)],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])
    model.ir_version = 9
    return ol.ModelProto.FromString(model.SerializeToString())


@pytest.mark.parametrize("symbolic", [False, True], ids=["static", "symbolic"])
@pytest.mark.parametrize("shape,attrs,ort", CASES, ids=[str(i) for i in range(len(CASES))])
def test_empty_windows_get_no_gradient(
    shape: tuple[int, ...], attrs: dict[str, Any], ort: bool, symbolic: bool
) -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape)
    model = _model(shape, attrs, symbolic)
    y = InferenceSession(model).run(None, {"x": x})[0]
    nd = len(shape) - 2
    ref = _reference(
        x,
        dy := rng.standard_normal(y.shape),
        attrs["kernel_shape"],
        attrs.get("strides", [1] * nd),
        attrs.get("dilations", [1] * nd),
        attrs["pads"],
    )
    assert ort or np.abs(ref).sum() > 0  # the pads >= kernel cases route some dY
    bwd = ol.GradientOfFunction(model, ["x"], "y")
    feeds = {"x": x, "dy": dy}
    bm = backward_model(bwd, feeds)
    np.testing.assert_allclose(InferenceSession(bm.SerializeToString()).run(None, feeds)[0], ref, rtol=1e-12, atol=0)
    if ort:
        import onnxruntime

        ort_session = onnxruntime.InferenceSession(bm.SerializeToString(), providers=["CPUExecutionProvider"])
        got = ort_session.run(None, feeds)[0]
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=0)


def _call(fn: Any, feeds: dict[str, np.ndarray]) -> bytes:
    """A model (bytes) whose graph calls the FunctionProto ``fn`` on float64 ``feeds``."""
    import onnx

    proto = onnx.FunctionProto.FromString(fn.SerializeToString())
    inputs = [oh.make_tensor_value_info(n, 11, list(feeds[n].shape)) for n in proto.input]
    outputs = [oh.make_tensor_value_info(n, 11, None) for n in proto.output]
    call = oh.make_node(proto.name, list(proto.input), list(proto.output), domain=proto.domain)
    opsets = [oh.make_opsetid("", 21), oh.make_opsetid(proto.domain, 1)]
    model = oh.make_model(oh.make_graph([call], "call", inputs, outputs), opset_imports=opsets, functions=[proto])
    model.ir_version = 10
    return bytes(model.SerializeToString())


@pytest.mark.parametrize("shape,attrs,ort", CASES, ids=[str(i) for i in range(len(CASES))])
def test_empty_windows_get_no_tangent(shape: tuple[int, ...], attrs: dict[str, Any], ort: bool) -> None:
    """Forward mode: an empty window's Y is a constant (the lowest value), its tangent 0;
    elsewhere tY = tX at the window's first maximum (finite differences)."""
    rng = np.random.default_rng(4)
    x, t = rng.standard_normal(shape), rng.standard_normal(shape)
    model = _model(shape, attrs, False)
    fwd = ol.TangentOfFunction(model, ["x"], ["y"])
    got = InferenceSession(_call(fwd, {"x": x, "fwd_x": t})).run(None, {"x": x, "fwd_x": t})[0]
    session = InferenceSession(model)
    y = session.run(None, {"x": x})[0]
    eps = 1e-6
    step = (session.run(None, {"x": x + eps * t})[0] - session.run(None, {"x": x - eps * t})[0]) / (2 * eps)
    empty = y == np.finfo(np.float64).min
    assert empty.any()
    np.testing.assert_array_equal(got[empty], 0.0)
    np.testing.assert_allclose(got[~empty], step[~empty], rtol=1e-6, atol=1e-8)
