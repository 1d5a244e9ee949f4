"""MaxPool in the buffer pool: the native loops and their twins write Y and Indices into lent
arrays, and count only the input's cells (issue 13 §3); the conv net step's gradient pattern
(MaxPool's two outputs, the ReLU mask's bool Cast, the mask Mul in place) comes from the pool."""

from __future__ import annotations

import tracemalloc
from typing import Any

import numpy as np
import pytest

from onnx_light import TensorProto, helper
from onnx_light.runtime import InferenceSession, _native
from onnx_light.runtime.kernels.pool import max_pool

# (kh, kw, sh, sw, dh, dw, pad_top, pad_left, pad_bottom, pad_right)
_GEOMETRIES = [
    (2, 2, 2, 2, 1, 1, 0, 0, 0, 0),  # the conv net's pool: every window inside (the unrolled loop)
    (3, 3, 2, 2, 1, 1, 1, 1, 1, 1),
    (3, 2, 1, 2, 2, 1, 2, 1, 1, 0),
    (2, 2, 1, 1, 2, 11, 1, 1, 1, 1),  # windows with no input cell
]
_DTYPES = [np.float32, np.float64, np.int8, np.uint8]


def _low(dtype: Any) -> Any:
    return -np.inf if np.dtype(dtype).kind == "f" else np.iinfo(dtype).min


def _padded(dtype: Any, geometry: tuple[int, ...], seed: int = 0) -> tuple[np.ndarray, list[int]]:
    """A 2 x 3 x 9 x 10 input padded with the lowest value, many cells equal to it; the arguments
    of max_pool2d after xp."""
    kh, kw, sh, sw, dh, dw, pt, pl, pb, pr = geometry
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 3, 9, 10)) * 40
    x[x < 10] = -np.inf
    x = x.astype(np.float32) if np.dtype(dtype).kind == "f" else np.clip(np.nan_to_num(x, neginf=-999), -128, 127)
    x = x.astype(dtype)
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=_low(dtype))
    oh = (9 + pt + pb - (kh - 1) * dh - 1) // sh + 1
    ow = (10 + pl + pr - (kw - 1) * dw - 1) // sw + 1
    return np.ascontiguousarray(xp), [kh, kw, sh, sw, dh, dw, oh, ow, pt, pl, 9, 10]


def _impls() -> list[Any]:
    impls = [pytest.param(_native.max_pool2d_twin, id="twin")]
    if _native.EXTENSION is not None:
        impls.append(pytest.param(_native.EXTENSION.max_pool2d, id="native"))
    return impls


@pytest.mark.parametrize("order", [0, 1])
@pytest.mark.parametrize("geometry", _GEOMETRIES, ids=["2x2s2", "3x3p1", "3x2-dilated", "empty"])
@pytest.mark.parametrize("dtype", _DTYPES, ids=lambda d: np.dtype(d).name)
def test_native_max_pool2d_counts_only_input_cells(dtype: Any, geometry: tuple[int, ...], order: int) -> None:
    # the reference: per output, the first maximum among the window's INPUT cells (a window whose
    # cells all equal the pad value reports its first cell); no input cell: lowest value, -(w + 1)
    xp, args = _padded(dtype, geometry)
    kh, kw, sh, sw, dh, dw, oh, ow, pt, pl, h, w = args
    want_y = np.empty((2, 3, oh, ow), dtype)
    want_i = np.empty((2, 3, oh, ow), np.int64)
    lowest = np.finfo(dtype).min if np.dtype(dtype).kind == "f" else np.iinfo(dtype).min
    for i in range(oh):
        for j in range(ow):
            cells = [
                (r, q)
                for r in (i * sh + a * dh - pt for a in range(kh))
                for q in (j * sw + b * dw - pl for b in range(kw))
                if 0 <= r < h and 0 <= q < w
            ]
            for p in range(6):
                plane = xp[p // 3, p % 3, pt:, pl:]
                if not cells:
                    want_y[p // 3, p % 3, i, j] = lowest
                    want_i[p // 3, p % 3, i, j] = p * h * w - ((h if order else w) + 1)
                    continue
                values = [plane[r, q] for r, q in cells]
                r, q = cells[int(np.argmax(values))]
                want_y[p // 3, p % 3, i, j] = plane[r, q]
                want_i[p // 3, p % 3, i, j] = p * h * w + (q * h + r if order else r * w + q)
    for impl in [_native.max_pool2d_twin] + ([_native.EXTENSION.max_pool2d] if _native.EXTENSION else []):
        y, idx = impl(xp, *args, order, True)
        np.testing.assert_array_equal(y, want_y, err_msg=str(impl))
        np.testing.assert_array_equal(idx, want_i, err_msg=str(impl))
        y_only, none = impl(xp, *args, order, False)
        assert none is None
        np.testing.assert_array_equal(y_only, want_y, err_msg=str(impl))


@pytest.mark.parametrize("impl", _impls())
@pytest.mark.parametrize("geometry", _GEOMETRIES[:2], ids=["2x2s2", "3x3p1"])
def test_max_pool2d_writes_into_lent_arrays_of_its_exact_type_only(impl: Any, geometry: tuple[int, ...]) -> None:
    xp, args = _padded(np.float32, geometry)
    want_y, want_i = impl(xp, *args, 0, True)
    y_out, i_out = np.full_like(want_y, 7), np.full_like(want_i, 7)
    y, idx = impl(xp, *args, 0, True, out=y_out, indices_out=i_out)
    assert y is y_out and idx is i_out
    np.testing.assert_array_equal(y, want_y)
    np.testing.assert_array_equal(idx, want_i)
    y, none = impl(xp, *args, 0, False, out=y_out, indices_out=i_out)  # no indices wanted
    assert y is y_out and none is None
    shape = want_y.shape
    read_only, read_only_i = np.zeros(shape, np.float32), np.zeros(shape, np.int64)
    read_only.flags.writeable = read_only_i.flags.writeable = False
    wrong = [
        (np.zeros((1, *shape), np.float32), np.zeros((1, *shape), np.int64)),  # shape
        (np.zeros(shape, np.float64), np.zeros(shape, np.int32)),  # dtype
        (np.zeros(shape[::-1], np.float32).T, np.zeros(shape[::-1], np.int64).T),  # not C-contiguous
        (read_only, read_only_i),
        (xp.reshape(-1)[: want_y.size].reshape(shape), None),  # overlaps the input
    ]
    for bad_y, bad_i in wrong:
        before = (bad_y.copy(), None if bad_i is None else bad_i.copy())
        y, idx = impl(xp, *args, 0, True, out=bad_y, indices_out=bad_i)
        assert y is not bad_y and idx is not bad_i
        np.testing.assert_array_equal(y, want_y)
        np.testing.assert_array_equal(idx, want_i)
        np.testing.assert_array_equal(bad_y, before[0])  # untouched
        if bad_i is not None:
            np.testing.assert_array_equal(bad_i, before[1])


def test_max_pool2d_f32_writes_into_a_lent_array() -> None:
    x = np.random.default_rng(1).standard_normal((2, 3, 9, 10)).astype(np.float32)
    args = (3, 3, 2, 2, 1, 1, 5, 5, 1, 1)
    impls = [_native.max_pool2d_f32_twin] + ([_native.EXTENSION.max_pool2d_f32] if _native.EXTENSION else [])
    for impl in impls:
        want = impl(x, *args)
        out = np.full_like(want, 7)
        assert impl(x, *args, out=out) is out
        np.testing.assert_array_equal(out, want)
        wrong = np.zeros((2, 3, 5, 4), np.float32)
        assert impl(x, *args, out=wrong) is not wrong
        assert not wrong.any()


@pytest.mark.parametrize("two", [True, False], ids=["Y+Indices", "Y"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8])
def test_max_pool_kernel_takes_a_tuple_of_lent_arrays(dtype: Any, two: bool) -> None:
    x = (np.random.default_rng(2).standard_normal((2, 3, 8, 8)) * 30).astype(dtype)
    attrs: dict[str, Any] = {"kernel_shape": [2, 2], "strides": [2, 2], "_num_outputs": 2 if two else 1}
    want = max_pool(x, **attrs)
    want = want if two else (want,)
    outs = tuple(np.full_like(w, 3) for w in want)
    got = max_pool(x, **attrs, out=outs if two else outs[0])
    got = got if two else (got,)
    for g, w, o in zip(got, want, outs):
        assert g is o
        np.testing.assert_array_equal(g, w)
    if two:  # Y alone lent
        y, idx = max_pool(x, **attrs, out=(outs[0], None))
        assert y is outs[0] and idx is not outs[1]
        np.testing.assert_array_equal(idx, want[1])


def _step_model(y_out: bool) -> Any:
    """The conv net step's MaxPool gradient pattern, 8 x 16 x 32 x 32 (256 KiB per float32 value):
    r = Abs(x); (p, i) = MaxPool(r); u = MaxUnpool(p * 2, i); m = Cast(Cast(r, bool), float);
    g = u * m; out = ReduceSum(g) (and p, with ``y_out``)."""
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    nodes = [
        helper.make_node("Abs", ["x"], ["r"]),
        helper.make_node("Shape", ["r"], ["shape"]),
        helper.make_node("MaxPool", ["r"], ["p", "i"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Mul", ["p", "two"], ["p2"]),
        helper.make_node("MaxUnpool", ["p2", "i", "shape"], ["u"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Cast", ["r"], ["b"], to=TensorProto.BOOL),
        helper.make_node("Cast", ["b"], ["m"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["u", "m"], ["g"]),
        helper.make_node("ReduceSum", ["g"], ["out"], keepdims=0),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 16, 32, 32])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ["out"] + (["p"] if y_out else [])]
    graph = helper.make_graph(nodes, "g", [x], outs, [two])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


@pytest.mark.parametrize("y_out", [False, True], ids=["step", "Y-returned"])
def test_the_step_pattern_comes_from_the_pool_bitwise_and_results_stay(y_out: bool) -> None:
    model = _step_model(y_out)
    pooled, plain = InferenceSession(model), InferenceSession(model, buffer_pool=False)
    kept: list[tuple[np.ndarray, np.ndarray]] = []
    for seed, n in [(0, 8), (1, 8), (2, 4), (3, 8), (4, 8)]:
        x = np.random.default_rng(seed).standard_normal((n, 16, 32, 32)).astype(np.float32)
        got, want = pooled.run(None, {"x": x}), plain.run(None, {"x": x})
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
        kept += [(g, g.copy()) for g in got]
        for result, copy in kept:
            np.testing.assert_array_equal(result, copy)  # never overwritten by a later run
    arenas = pooled._plan.arenas
    assert arenas is not None, "nothing was pooled: the test would not test the pool"
    names = {n for n, s in pooled._plan.slot_of.items() if s in arenas.index}
    # MaxPool's outputs (Y only when the caller does not get it: then p2 needs a buffer), the bool
    # mask; p2 and g are written in place into p and u (dying pooled values)
    assert names == {"r", "i", "u", "b", "m"} | ({"p2"} if y_out else {"p"})


@pytest.mark.skipif(_native.NATIVE is None, reason="the numpy twins allocate their temporaries")
def test_a_pooled_step_allocates_no_large_array() -> None:
    sess = InferenceSession(_step_model(False))
    x = np.random.default_rng(0).standard_normal((8, 16, 32, 32)).astype(np.float32)
    for _ in range(3):
        sess.run(None, {"x": x})
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        sess.run(None, {"x": x})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak - before < 64 * 1024, f"a run allocated {peak - before} bytes (values are 128-512 KiB)"
