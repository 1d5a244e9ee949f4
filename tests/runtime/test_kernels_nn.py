"""Neural-network kernels: linalg, conv, pool, normalization, activation, loss.

Three layers of checks:

* every ONNX backend node case of these ops, through the kernels directly;
* every opset version 7..24 resolves to a kernel registered for exactly the
  schema version the spec has at that opset;
* each kernel against onnxruntime (one-node model at opset 21, single thread) on
  random inputs, with grids over strides / pads / dilations / groups / auto_pad /
  ceil_mode for conv and pooling.
"""

from __future__ import annotations

import itertools
import os
import sys
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import kernel_harness  # noqa: E402

# The ONE exclusion dict: test id (backend case name, or the id of an onnxruntime
# comparison below) -> the true reason it is expected to fail. Every entry is xfail.
XFAIL: dict[str, str] = {}

OPS = {
    "MatMul", "Gemm", "Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool",
    "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "BatchNormalization",
    "GroupNormalization", "InstanceNormalization", "LayerNormalization", "LpNormalization",
    "MeanVarianceNormalization", "RMSNormalization", "LRN", "Softmax", "LogSoftmax",
    "Hardmax", "Dropout", "SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss",
}  # fmt: skip


def _params(items: list[tuple[str, Any]]) -> list[Any]:
    """pytest params with ids, xfail-marked when their id is in ``XFAIL``."""
    out = []
    for name, value in items:
        marks = [pytest.mark.xfail(reason=XFAIL[name], strict=True)] if name in XFAIL else []
        out.append(pytest.param(value, id=name, marks=marks))
    return out


# --------------------------------------------------------------------------- backend


@pytest.mark.parametrize("case", _params([(c.name, c) for c in kernel_harness.cases_for(OPS)]))
def test_backend_case(case: Any) -> None:
    kernel_harness.check_case(case)


# --------------------------------------------------------------------------- versions


# --------------------------------------------------------------------------- onnxruntime


def _run_both(
    op: str,
    inputs: list[np.ndarray | None],
    attrs: dict[str, Any] | None = None,
    n_out: int = 1,
    opset: int = 21,
    ort_dtype: Any = None,
) -> tuple[tuple[np.ndarray, ...], list[np.ndarray]]:
    """Runs one node through our kernel and through onnxruntime (one thread).

    ``ort_dtype`` feeds onnxruntime float inputs cast to that type, for kernels it
    lacks in the input's own type (no float64 Conv, for one).
    """
    import onnxruntime as ort
    from onnx import ValueInfoProto, helper

    while inputs and inputs[-1] is None:
        inputs = inputs[:-1]
    names = [f"i{k}" if a is not None else "" for k, a in enumerate(inputs)]
    outs = [f"o{k}" for k in range(n_out)]
    node = helper.make_node(op, names, outs, **(attrs or {}))
    present = [(n, a) for n, a in zip(names, inputs) if a is not None]
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in present],
        [ValueInfoProto(name=o) for o in outs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    ours = kernel_harness.call_kernel(node, opset, [a for _, a in present])
    if ort_dtype is not None:
        present = [(n, a.astype(ort_dtype) if a.dtype.kind == "f" else a) for n, a in present]
        for vi, (_, a) in zip(model.graph.input, present):
            vi.type.tensor_type.elem_type = helper.np_dtype_to_tensor_dtype(a.dtype)
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    theirs = sess.run(None, dict(present))
    return ours, theirs


def _compare(
    op: str,
    inputs: list[np.ndarray | None],
    attrs: dict[str, Any] | None = None,
    n_out: int = 1,
    opset: int = 21,
    tol: float = 1.0,
    ort_dtype: Any = None,
    dtypes: list[Any] | None = None,
) -> None:
    """Our outputs must equal onnxruntime's in dtype, shape and (within tolerance) value.

    With ``ort_dtype`` onnxruntime computes in that type; our outputs must then have
    ``dtypes`` (default: the first input's dtype) and are compared after a cast.
    """
    ours, theirs = _run_both(op, inputs, attrs, n_out, opset, ort_dtype)
    assert len(ours) == len(theirs)
    if ort_dtype is not None and dtypes is None:
        dtypes = [inputs[0].dtype] * n_out
    for k, (g, e) in enumerate(zip(ours, theirs)):
        g = np.asarray(g)
        if dtypes is not None:
            assert g.dtype == dtypes[k], f"output {k}: dtype {g.dtype} != {dtypes[k]}"
            g = g.astype(e.dtype)
        assert g.dtype == e.dtype, f"output {k}: dtype {g.dtype} != {e.dtype}"
        assert g.shape == e.shape, f"output {k}: shape {g.shape} != {e.shape}"
        if e.dtype.kind == "f":
            rtol, atol = (1e-4, 1e-5) if e.dtype == np.float32 else (1e-9, 1e-12)
            np.testing.assert_allclose(g, e, rtol=rtol * tol, atol=atol * tol, err_msg=f"out {k}")
        else:
            np.testing.assert_array_equal(g, e, err_msg=f"output {k}")


def _rand(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any = np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


FLOATS = [np.float32, np.float64]


# ---- linalg


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(
    "sa,sb",
    [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((2, 1, 3, 4), (3, 4, 2)), ((4,), (4, 3)), ((2, 4), (4,))],
)
def test_matmul_vs_ort(sa: tuple, sb: tuple, dtype: Any) -> None:
    rng = np.random.default_rng(0)
    _compare("MatMul", [_rand(rng, sa, dtype), _rand(rng, sb, dtype)])


@pytest.mark.parametrize("perm", [(1, 0, 2), (2, 0, 1), (0, 2, 1, 3)])
def test_matmul_strided_stack_times_matrix(perm: tuple[int, ...]) -> None:
    """A Transpose's view times one matrix (copied, then one 2-D product) equals the float64 product."""
    from onnx_light.runtime.kernels.linalg import matmul

    rng = np.random.default_rng(1)
    x = _rand(rng, (3, 5, 6, 7)[: len(perm)])
    a = x.transpose(perm)
    b = _rand(rng, (a.shape[-1], 4))
    assert not a.flags.c_contiguous
    got = matmul(a, b)
    assert got.shape == (*a.shape[:-1], 4) and got.dtype == np.float32
    np.testing.assert_allclose(got, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-5)


_GEMM = [
    (f"tA{ta}-tB{tb}-C{c}-a{a}-b{b}", (ta, tb, c, a, b))
    for ta, tb in itertools.product((0, 1), (0, 1))
    for c, a, b in [("none", 1.0, 1.0), ("row", 0.5, 2.0), ("col", 1.0, 1.0), ("full", 2.0, 0.0),
                    ("scalar", 1.0, -1.0)]
]  # fmt: skip


@pytest.mark.parametrize("k", [5, 1])  # 1: the outer product, run as a broadcast multiply
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("spec", _params(_GEMM))
def test_gemm_vs_ort(spec: tuple, dtype: Any, k: int) -> None:
    ta, tb, c, alpha, beta = spec
    rng = np.random.default_rng(1)
    m, n = 3, 4
    a = _rand(rng, (k, m) if ta else (m, k), dtype)
    b = _rand(rng, (n, k) if tb else (k, n), dtype)
    shapes = {"none": None, "row": (n,), "col": (m, 1), "full": (m, n), "scalar": ()}
    cc = None if shapes[c] is None else _rand(rng, shapes[c], dtype)
    attrs = {"transA": ta, "transB": tb, "alpha": alpha, "beta": beta}
    _compare("Gemm", [a, b, cc], attrs)


def test_gemm_outer_product_is_the_matmul_with_nan_inf_and_into_out() -> None:
    from onnx_light.runtime.kernels.linalg import gemm

    rng = np.random.default_rng(2)
    a, b = _rand(rng, (1, 7), np.float32), _rand(rng, (9, 1), np.float32)
    a[0, 2], a[0, 5], b[3, 0] = np.inf, np.nan, 0.0
    out = np.empty((7, 9), np.float32)
    with np.errstate(invalid="ignore"):  # inf * 0
        want = a.T.astype(np.float64) @ b.T.astype(np.float64)
        got = gemm(a, b, transA=1, transB=1, alpha=2.0, out=out)
    assert got is out
    np.testing.assert_array_equal(got, (2.0 * want).astype(np.float32))  # inf * 0 = NaN where the product has it


# ---- conv


def _conv_grid() -> list[tuple[str, dict]]:
    items = []
    for s, d, p, g, bias in itertools.product(
        (1, 2), (1, 2), ((0, 0, 0, 0), (1, 1, 1, 1), (0, 1, 2, 1)), (1, 2, 4), (False, True)
    ):
        if bias == (s == d):  # half the bias combinations are plenty
            continue
        name = f"2d-s{s}-d{d}-p{''.join(map(str, p))}-g{g}-b{int(bias)}"
        items.append((name, dict(nd=2, strides=[s, s], dilations=[d, d], pads=list(p), g=g, b=bias)))
    for ap, s, k in itertools.product(("SAME_UPPER", "SAME_LOWER", "VALID"), (1, 2), (2, 3)):
        items.append((f"2d-{ap}-s{s}-k{k}", dict(nd=2, auto_pad=ap, strides=[s, s], k=k, g=1, b=True)))
    for nd, s, g in itertools.product((1, 3), (1, 2), (1, 2)):
        items.append((f"{nd}d-s{s}-g{g}", dict(nd=nd, strides=[s] * nd, pads=[1] * 2 * nd, g=g, b=True)))
    items.append(("2d-rect-kernel", dict(nd=2, strides=[2, 1], pads=[1, 0, 0, 2], k=(3, 2), g=1)))
    return items


def _conv_inputs(spec: dict, dtype: Any, transpose: bool) -> tuple[list, dict]:
    spec = dict(spec)
    rng = np.random.default_rng(2)
    nd, g = spec.pop("nd"), spec.pop("g")
    k = spec.pop("k", 3)
    ks = tuple(k) if isinstance(k, tuple) else (k,) * nd
    bias = spec.pop("b", False)
    spatial = {1: (11,), 2: (9, 8), 3: (5, 6, 4)}[nd]
    c, m = 4, spec.pop("m", 8)
    x = _rand(rng, (2, c, *spatial), dtype)
    w = _rand(rng, (c, m // g, *ks) if transpose else (m, c // g, *ks), dtype)
    b = _rand(rng, (m,), dtype) if bias else None
    attrs = {key: v for key, v in spec.items() if v is not None}
    attrs["group"] = g
    return [x, w, b], attrs


@pytest.mark.parametrize("spec", _params([("conv-" + n, s) for n, s in _conv_grid()]))
def test_conv_vs_ort(spec: dict) -> None:
    inputs, attrs = _conv_inputs(spec, np.float32, transpose=False)
    _compare("Conv", inputs, attrs, tol=10)


@pytest.mark.parametrize("spec", _params([("conv64-" + n, s) for n, s in _conv_grid()[::7]]))
def test_conv_float64_vs_ort(spec: dict) -> None:
    inputs, attrs = _conv_inputs(spec, np.float64, transpose=False)
    _compare("Conv", inputs, attrs, tol=10, ort_dtype=np.float32)  # no float64 Conv in ort


def _conv_transpose_grid() -> list[tuple[str, dict]]:
    items = []
    for s, d, p, op, g in itertools.product((1, 2, 3), (1, 2), ((0, 0, 0, 0), (1, 0, 0, 1)), (0, 1), (1, 2)):
        if op >= s:  # onnxruntime wants output_padding below the stride
            continue
        name = f"2d-s{s}-d{d}-p{''.join(map(str, p))}-op{op}-g{g}"
        spec = dict(nd=2, strides=[s, s], dilations=[d, d], pads=list(p), g=g, b=s == 2)
        if op:
            spec["output_padding"] = [op, 0]
        items.append((name, spec))
    for ap, s, k in itertools.product(("SAME_UPPER", "SAME_LOWER", "VALID"), (1, 2), (2, 3)):
        items.append((f"2d-{ap}-s{s}-k{k}", dict(nd=2, auto_pad=ap, strides=[s, s], k=k, g=1)))
    for shape in ((18, 16), (19, 17), (20, 18)):
        items.append((f"2d-output_shape{shape[0]}", dict(nd=2, strides=[2, 2], output_shape=list(shape), g=1)))
    for nd, s, g in itertools.product((1, 3), (1, 2), (1, 2)):
        items.append((f"{nd}d-s{s}-g{g}", dict(nd=nd, strides=[s] * nd, g=g, b=True)))
    # stride 1 runs as a convolution of the flipped kernel: pads above (k - 1) * d drop input
    # cells, output_shape crops, output_padding (needs dilation here) adds cells past the input
    items += [
        ("2d-s1-wide-pads", dict(nd=2, strides=[1, 1], pads=[3, 2, 1, 4], g=2, b=True)),
        ("2d-s1-k2x3-pads", dict(nd=2, strides=[1, 1], k=(2, 3), dilations=[2, 1], pads=[0, 3, 2, 1], g=1)),
        ("2d-s1-output_shape", dict(nd=2, strides=[1, 1], output_shape=[9, 7], g=1, b=True)),
        ("1d-s1-d3-pads", dict(nd=1, strides=[1], dilations=[3], pads=[5, 1], g=4, b=True)),
    ]
    return items


@pytest.mark.parametrize("spec", _params([("convT-" + n, s) for n, s in _conv_transpose_grid()]))
def test_conv_transpose_vs_ort(spec: dict) -> None:
    inputs, attrs = _conv_inputs(spec, np.float32, transpose=True)
    _compare("ConvTranspose", inputs, attrs, tol=10)


@pytest.mark.parametrize("spec", _params([("convT64-" + n, s) for n, s in _conv_transpose_grid()[::9]]))
def test_conv_transpose_float64_vs_ort(spec: dict) -> None:
    inputs, attrs = _conv_inputs(spec, np.float64, transpose=True)
    _compare("ConvTranspose", inputs, attrs, tol=10, ort_dtype=np.float32)  # none in ort


# depthwise (group = C, one input channel per group): the data gradient of MobileNet's
# depthwise convs; float32 strided ones run as the native conv over the zero-dilated input,
# the others (and the twins) as one multiply-add per kernel tap
def _depthwise_transpose_grid() -> list[tuple[str, dict]]:
    items = []
    for k, s, d, p, op in itertools.product((3, 5), (1, 2), (1, 2), ((0, 0, 0, 0), (2, 2, 1, 1)), (0, 1)):
        if op >= s:  # onnxruntime wants output_padding below the stride
            continue
        spec = dict(nd=2, strides=[s, s], dilations=[d, d], pads=list(p), k=k, g=4, m=4, b=k == 3)
        if op:
            spec["output_padding"] = [op, op]
        items.append((f"k{k}-s{s}-d{d}-p{''.join(map(str, p))}-op{op}", spec))
    items.append(("k3-s2-multiplier2", dict(nd=2, strides=[2, 2], pads=[1, 1, 1, 1], k=3, g=4, m=8, b=True)))
    items.append(("1d-k5-s2", dict(nd=1, strides=[2], pads=[2, 1], k=5, g=4, m=4, b=True)))
    items.append(("3d-k3-s2", dict(nd=3, strides=[2, 2, 1], pads=[1] * 6, k=3, g=4, m=4)))
    return items


@pytest.mark.parametrize("spec", _params([("dw-" + n, s) for n, s in _depthwise_transpose_grid()]))
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_depthwise_conv_transpose_vs_ort(spec: dict, dtype: Any) -> None:
    inputs, attrs = _conv_inputs(spec, dtype, transpose=True)
    _compare("ConvTranspose", inputs, attrs, tol=10, ort_dtype=np.float32)


@pytest.mark.parametrize("spec", _params([("dw-" + n, s) for n, s in _depthwise_transpose_grid()]))
def test_depthwise_conv_transpose_vs_numpy_path(spec: dict) -> None:
    """The kernel (native where it applies) against the numpy scatter path on the same input."""
    from onnx_light.onnx_core.ops import transpose_window
    from onnx_light.runtime.kernels.conv import _conv_transpose_scatter, conv_transpose

    (x, w, b), attrs = _conv_inputs(spec, np.float32, transpose=True)
    tw = transpose_window(
        list(x.shape[2:]), list(w.shape[2:]), attrs.get("strides"), attrs.get("dilations"),
        attrs.get("pads"), "NOTSET", attrs.get("output_padding"), None, legacy=False,
    )  # fmt: skip
    want = _conv_transpose_scatter(x, w, tw.strides, tw.dilations, 4, tw.begin, tw.out)
    if b is not None:
        want += b.reshape((-1,) + (1,) * (x.ndim - 2))
    np.testing.assert_allclose(conv_transpose(x, w, b, **attrs), want, rtol=1e-5, atol=1e-5)


def test_strided_depthwise_conv_transpose_runs_natively(monkeypatch: pytest.MonkeyPatch) -> None:
    """A float32 stride-2 depthwise ConvTranspose (MobileNet's data gradient) is the native
    direct kernel (src/conv_backward.cpp), not a Conv over the dilated input."""
    from onnx_light.runtime.kernels import conv as conv_module

    if not conv_module.USING_NATIVE:
        pytest.skip("no native conv (pure-Python twins)")
    calls: list[tuple[int, ...]] = []
    direct, native = conv_module.depthwise_conv_transpose, conv_module.conv2d_native

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[1].shape)
        return direct(*args, **kwargs)

    def conv_spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(("conv2d",))
        return native(*args, **kwargs)

    monkeypatch.setattr(conv_module, "depthwise_conv_transpose", spy)
    monkeypatch.setattr(conv_module, "conv2d_native", conv_spy)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 96, 14, 14)).astype(np.float32)
    w = rng.standard_normal((96, 1, 5, 5)).astype(np.float32)
    y = conv_module.conv_transpose(x, w, group=96, strides=[2, 2], pads=[2, 2, 1, 1])
    assert y.shape == (1, 96, 28, 28)
    assert calls == [(96, 1, 5, 5)]


# odd SAME_* padding at the opsets where ConvTranspose's split changed (ConvTranspose-1
# put SAME_UPPER's extra cell at the start; onnxruntime applies the opset-11 split at
# every opset, so below 11 our ConvTranspose must differ from it and equal our opset-11
# result: every row has an odd total on one axis, k - s >= 0 with strides [k - 1, k])
_ODD_PAD = [
    (f"{op}-{ap}-k{k}-opset{opset}", op, ap, k, opset)
    for op in ("Conv", "ConvTranspose")
    for ap in ("SAME_UPPER", "SAME_LOWER")
    for k in (2, 3)
    for opset in (10, 11)
]


@pytest.mark.parametrize(("op", "auto_pad", "k", "opset"), [r[1:] for r in _ODD_PAD], ids=[r[0] for r in _ODD_PAD])
def test_odd_same_padding_vs_ort(op: str, auto_pad: str, k: int, opset: int) -> None:
    inputs, attrs = _conv_inputs(
        dict(nd=2, auto_pad=auto_pad, strides=[k - 1, k], k=k, g=1, b=True), np.float32, op == "ConvTranspose"
    )
    if op == "ConvTranspose" and opset < 11:
        from onnx import helper

        (ours,), (theirs,) = _run_both(op, inputs, attrs, opset=opset)
        (new,) = kernel_harness.call_kernel(helper.make_node(op, ["x", "w", "b"], ["y"], **attrs), 11, inputs)
        np.testing.assert_allclose(new, theirs, rtol=1e-4, atol=1e-5)
        assert not np.allclose(ours, theirs), "the opset-1 split must differ from the opset-11 one"
        return
    _compare(op, inputs, attrs, opset=opset, tol=10)


# ---- pool


def _pool_grid(with_pad_count: bool) -> list[tuple[str, dict]]:
    items = []
    for k, s, p, d, ceil in itertools.product(((2, 2), (3, 2)), (1, 2), ((0, 0, 0, 0), (1, 1, 1, 0)), (1, 2), (0, 1)):
        name = f"2d-k{k[0]}{k[1]}-s{s}-p{''.join(map(str, p))}-d{d}-c{ceil}"
        spec = dict(kernel_shape=list(k), strides=[s, s], pads=list(p), dilations=[d, d])
        spec["ceil_mode"] = ceil
        if with_pad_count:
            spec["count_include_pad"] = int(p[0] == 1 and ceil == 0)
        items.append((name, spec))
    for ap, s in itertools.product(("SAME_UPPER", "SAME_LOWER", "VALID"), (1, 2)):
        items.append((f"2d-{ap}-s{s}", dict(kernel_shape=[3, 3], strides=[s, s], auto_pad=ap)))
    items.append(("1d", dict(kernel_shape=[3], strides=[2], pads=[1, 1])))
    items.append(("3d", dict(kernel_shape=[2, 3, 2], strides=[1, 2, 2], pads=[0, 1, 0, 0, 1, 1])))
    return items


def _pool_input(attrs: dict, dtype: Any = np.float32) -> np.ndarray:
    nd = len(attrs["kernel_shape"])
    spatial = {1: (13,), 2: (9, 10), 3: (5, 7, 6)}[nd]
    return _rand(np.random.default_rng(3), (2, 3, *spatial), dtype)


@pytest.mark.parametrize("spec", _params([("maxpool-" + n, s) for n, s in _pool_grid(False)]))
def test_max_pool_vs_ort(spec: dict) -> None:
    _compare("MaxPool", [_pool_input(spec)], spec)


@pytest.mark.parametrize("order", [0, 1])
@pytest.mark.parametrize("spec", _params([("maxpool-idx-" + n, s) for n, s in _pool_grid(False)[::3]]))
def test_max_pool_indices_vs_ort(spec: dict, order: int) -> None:
    _compare("MaxPool", [_pool_input(spec)], {**spec, "storage_order": order}, n_out=2)


@pytest.mark.parametrize("order", [0, 1])
@pytest.mark.parametrize(
    "spec",
    [
        {"kernel_shape": [2, 2], "strides": [2, 2]},  # the conv net's pool (an unrolled native loop)
        {"kernel_shape": [2, 3], "strides": [1, 2], "pads": [1, 0, 0, 1]},
        {"kernel_shape": [3, 2], "strides": [2, 1], "dilations": [1, 2]},
    ],
    ids=["2x2s2", "2x3", "3x2-dilated"],
)
def test_max_pool_indices_of_ties_vs_ort(spec: dict, order: int) -> None:
    # a ReLU's output: most windows tie at 0, whose index onnxruntime reports is the first
    x = np.maximum(np.random.default_rng(5).standard_normal((2, 3, 12, 14)), 0).astype(np.float32)
    x[0, 1, 4:8, 2:9] = 1.5  # ties at a positive value
    _compare("MaxPool", [x], {**spec, "storage_order": order}, n_out=2)


@pytest.mark.parametrize("order", [0, 1])
@pytest.mark.parametrize(
    "spec",
    [
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1},
        {"kernel_shape": [3], "strides": [2], "pads": [2, 1]},
        {"kernel_shape": [2, 2, 3], "strides": [2, 1, 2], "pads": [1, 0, 1, 0, 1, 1]},
        {"kernel_shape": [3, 2], "strides": [1, 2], "pads": [2, 1, 1, 0], "dilations": [2, 1]},
        # windows with no input cell (the dilated taps straddle the input): onnxruntime gives the
        # dtype's lowest value and the index of position -1 on every axis
        {"kernel_shape": [2], "dilations": [14], "pads": [1, 1]},
        {"kernel_shape": [2, 2], "dilations": [2, 11], "pads": [1, 1, 1, 1]},
        {"kernel_shape": [2, 2], "strides": [2, 1], "dilations": [10, 2], "pads": [1, 0, 1, 1]},
        {"kernel_shape": [2, 2, 2], "dilations": [1, 8, 1], "pads": [1, 1, 0, 0, 1, 1]},
    ],
    ids=["2d-ceil", "1d", "3d", "2d-dilated", "1d-empty", "2d-empty", "2d-empty-rows", "3d-empty"],
)
def test_max_pool_indices_of_lowest_windows_with_pads_vs_ort(spec: dict, order: int) -> None:
    # a window whose cells are all the pad value (-inf) reports its first cell INSIDE the input,
    # never a padding cell (a negative or aliased flat index the MaxPool gradient scatters to);
    # in 2-D the native loops (float32, float64, int8) answer, elsewhere the numpy loop
    x = _pool_input(spec)
    x[x < 0.3] = -np.inf
    low = (x * 40).clip(-128, 127).astype(np.int8)  # the int8 pad value is -128
    for v in (x, x.astype(np.float64), low):
        _compare("MaxPool", [v], {**spec, "storage_order": order}, n_out=2)
    # Y alone (other native loops); finite floats: onnxruntime's float path (MLAS) starts windows
    # with pads at the lowest finite float, so a window of -inf cells and pads gives that there
    finite = np.where(np.isinf(x), np.float32(-3), x)
    for v in (finite, finite.astype(np.float64), low):
        _compare("MaxPool", [v], {**spec, "storage_order": order})


@pytest.mark.parametrize("dtype", [np.float64, np.int8, np.uint8])
def test_max_pool_dtypes_vs_ort(dtype: Any) -> None:
    x = (_pool_input({"kernel_shape": [2, 2]}) * 40).astype(dtype)
    _compare("MaxPool", [x], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]})


@pytest.mark.parametrize("spec", _params([("avgpool-" + n, s) for n, s in _pool_grid(True)]))
def test_average_pool_vs_ort(spec: dict) -> None:
    _compare("AveragePool", [_pool_input(spec)], spec)


@pytest.mark.parametrize("spec", _params([("lppool-" + n, s) for n, s in _pool_grid(False)[::4]]))
def test_lp_pool_vs_ort(spec: dict) -> None:
    _compare("LpPool", [_pool_input(spec)], {**spec, "p": 3 if spec.get("ceil_mode") else 2})


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pool_vs_ort(op: str, dtype: Any) -> None:
    x = _rand(np.random.default_rng(4), (2, 3, 5, 4), dtype)
    _compare(op, [x], ort_dtype=np.float32)  # ort has these in float32 only


@pytest.mark.parametrize("p", [1, 2, 3])
def test_global_lp_pool_vs_ort_lp_pool(p: int) -> None:
    from onnx import helper

    x = _rand(np.random.default_rng(4), (2, 3, 5, 4))
    node = helper.make_node("GlobalLpPool", ["x"], ["y"], p=p)
    (ours,) = kernel_harness.call_kernel(node, 21, [x])
    (theirs,) = _run_both("LpPool", [x], {"kernel_shape": [5, 4], "p": p})[1]
    assert ours.dtype == theirs.dtype
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


# ---- normalization


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 5), (2, 3, 4, 5)])
def test_batch_norm_vs_ort(shape: tuple, dtype: Any) -> None:
    rng = np.random.default_rng(5)
    c = shape[1]
    params = [_rand(rng, (c,), dtype) for _ in range(3)] + [rng.random(c).astype(dtype) + 0.5]
    _compare("BatchNormalization", [_rand(rng, shape, dtype), *params], {"epsilon": 1e-3})


@pytest.mark.parametrize("opset", [7, 9])
def test_batch_norm_training_old_opsets_match_14(opset: int) -> None:
    """Opset 7/9 training outputs (five) agree with opset 14's training_mode outputs."""
    from onnx import helper

    rng = np.random.default_rng(6)
    x = _rand(rng, (4, 3, 5, 2))
    params = [_rand(rng, (3,)), _rand(rng, (3,)), _rand(rng, (3,)), rng.random(3).astype(np.float32)]
    old = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], list("ymvMV"))
    new = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], list("ymv"), training_mode=1)
    got = kernel_harness.call_kernel(old, opset, [x, *params])
    want = kernel_harness.call_kernel(new, 15, [x, *params])
    assert len(got) == 5
    for g, w in zip(got, want):
        assert g.dtype == w.dtype == np.float32
        np.testing.assert_allclose(g, w, rtol=1e-6)
    np.testing.assert_allclose(got[3], x.mean(axis=(0, 2, 3)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[4], x.var(axis=(0, 2, 3)), rtol=1e-5)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(2, 4, 6), (2, 4, 3, 5)])
def test_instance_norm_vs_ort(shape: tuple, dtype: Any) -> None:
    rng = np.random.default_rng(7)
    x, s, b = _rand(rng, shape, dtype), _rand(rng, (4,), dtype), _rand(rng, (4,), dtype)
    _compare("InstanceNormalization", [x, s, b], {"epsilon": 1e-4}, tol=10, ort_dtype=np.float32)


@pytest.mark.parametrize("num_groups", [1, 2, 4])
def test_group_norm_vs_ort(num_groups: int) -> None:
    rng = np.random.default_rng(8)
    x, s, b = _rand(rng, (2, 4, 3, 5)), _rand(rng, (4,)), _rand(rng, (4,))
    _compare("GroupNormalization", [x, s, b], {"num_groups": num_groups}, tol=10)


def test_group_norm_18_scales_per_group() -> None:
    from onnx import helper

    rng = np.random.default_rng(8)
    x, s, b = _rand(rng, (2, 4, 3)), _rand(rng, (2,)), _rand(rng, (2,))
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2)
    (y18,) = kernel_harness.call_kernel(node, 18, [x, s, b])
    (y21,) = kernel_harness.call_kernel(node, 21, [x, s.repeat(2), b.repeat(2)])
    assert y18.dtype == np.float32
    np.testing.assert_allclose(y18, y21, rtol=1e-6)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("axis,n_out,bias", [(-1, 1, True), (1, 3, True), (2, 2, False), (0, 3, True)])
def test_layer_norm_vs_ort(axis: int, n_out: int, bias: bool, dtype: Any) -> None:
    rng = np.random.default_rng(9)
    shape = (2, 3, 4)
    x = _rand(rng, shape, dtype)
    s = _rand(rng, shape[axis:], dtype)
    b = _rand(rng, shape[axis:], dtype) if bias else None
    # ort has float64 LayerNormalization only through the function body (Y alone): for
    # float64 it computes in float32, and our Mean / InvStdDev stay float32 (stash_type 1).
    ort_dtype = np.float32 if dtype == np.float64 else None
    dtypes = [dtype, np.float32, np.float32] if ort_dtype else None
    _compare("LayerNormalization", [x, s, b], {"axis": axis}, n_out, tol=10, ort_dtype=ort_dtype, dtypes=dtypes)


@pytest.mark.parametrize("axis", [-1, 1])
def test_rms_norm_vs_ort(axis: int) -> None:
    rng = np.random.default_rng(10)
    x = _rand(rng, (2, 3, 4))
    _compare("RMSNormalization", [x, _rand(rng, x.shape[axis:])], {"axis": axis}, opset=23)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("axis,p", [(-1, 2), (1, 1), (0, 2)])
def test_lp_norm_vs_ort(axis: int, p: int, dtype: Any) -> None:
    x = _rand(np.random.default_rng(11), (3, 4, 5), dtype)
    _compare("LpNormalization", [x], {"axis": axis, "p": p})


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("axes", [None, [1], [0, 1, 2, 3]])
def test_mvn_vs_ort(axes: list | None, dtype: Any) -> None:
    x = _rand(np.random.default_rng(12), (2, 3, 4, 5), dtype)
    attrs = {} if axes is None else {"axes": axes}
    _compare("MeanVarianceNormalization", [x], attrs, tol=10, ort_dtype=np.float32)


@pytest.mark.parametrize("size", [1, 3, 5])
def test_lrn_vs_ort(size: int) -> None:
    x = _rand(np.random.default_rng(13), (2, 6, 3, 4))
    _compare("LRN", [x], {"size": size, "alpha": 0.01, "beta": 0.6, "bias": 2.0})


@pytest.mark.parametrize("size", [2, 4])
def test_lrn_even_size(size: int) -> None:
    """onnxruntime refuses even sizes; the spec's window is [c - (size-1)//2, c + ceil]."""
    from onnx import helper

    x = _rand(np.random.default_rng(13), (2, 6, 3))
    node = helper.make_node("LRN", ["x"], ["y"], size=size, alpha=0.01, beta=0.6, bias=2.0)
    (y,) = kernel_harness.call_kernel(node, 13, [x])
    want = np.empty_like(x)
    for c in range(6):
        lo, hi = max(0, c - (size - 1) // 2), min(5, c + size // 2)
        sq = (x[:, lo : hi + 1] ** 2).sum(axis=1)
        want[:, c] = x[:, c] / (2.0 + 0.01 / size * sq) ** 0.6
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, want, rtol=1e-5)


# ---- activation


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("opset,axis", [(21, None), (21, 0), (21, 1), (11, None), (11, 0), (11, 2)])
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
def test_softmax_family_vs_ort(op: str, opset: int, axis: int | None, dtype: Any) -> None:
    x = _rand(np.random.default_rng(14), (2, 3, 4), dtype) * 5
    x[0, 0, :2] = 7  # a tie, for Hardmax
    ort_dtype = np.float32 if op == "Hardmax" and dtype == np.float64 else None  # none in ort
    _compare(op, [x], {} if axis is None else {"axis": axis}, opset=opset, ort_dtype=ort_dtype)


@pytest.mark.parametrize("n_out", [1, 2])
def test_dropout_inference_vs_ort(n_out: int) -> None:
    x = _rand(np.random.default_rng(15), (3, 4))
    _compare("Dropout", [x, np.array(0.3, np.float32)], n_out=n_out)


def _dropout(x: np.ndarray, ratio: float, seed: int | None, opset: int = 21) -> tuple:
    from onnx import helper

    attrs = {} if seed is None else {"seed": seed}
    node = helper.make_node("Dropout", ["x", "r", "t"], ["y", "m"], **attrs)
    return kernel_harness.call_kernel(node, opset, [x, np.array(ratio, x.dtype), np.array(True)])


@pytest.mark.parametrize("dtype", FLOATS)
def test_dropout_training_is_reproducible(dtype: Any) -> None:
    x = _rand(np.random.default_rng(16), (50, 40), dtype)
    y1, m1 = _dropout(x, 0.3, seed=7)
    y2, m2 = _dropout(x, 0.3, seed=7)
    _, m3 = _dropout(x, 0.3, seed=8)
    assert y1.dtype == dtype and m1.dtype == np.bool_
    np.testing.assert_array_equal(m1, m2)
    np.testing.assert_array_equal(y1, y2)
    assert (m1 != m3).any()
    assert 0.6 < m1.mean() < 0.8
    np.testing.assert_allclose(y1, np.where(m1, x / dtype(0.7), 0), rtol=1e-6)
    _, a = _dropout(x, 0.3, seed=None)
    _, b = _dropout(x, 0.3, seed=None)
    assert (a != b).any(), "without a seed every run draws a fresh mask"


def test_dropout_old_opsets_are_identity() -> None:
    from onnx import helper

    x = _rand(np.random.default_rng(17), (3, 4))
    node = helper.make_node("Dropout", ["x"], ["y", "m"], ratio=0.5)
    y7, m7 = kernel_harness.call_kernel(node, 7, [x])
    y10, m10 = kernel_harness.call_kernel(node, 10, [x])
    np.testing.assert_array_equal(y7, x)
    np.testing.assert_array_equal(y10, x)
    assert m7.dtype == np.float32 and (m7 == 1).all()
    assert m10.dtype == np.bool_ and m10.all()


# ---- loss


_LOSS = [
    (f"{shape}-{red}-w{int(w)}-ign{ign}", (shape, red, w, ign))
    for shape in ("2d", "4d")
    for red in ("none", "sum", "mean")
    for w, ign in ((False, None), (True, None), (True, 1), (False, -1))
]


def _loss_inputs(shape: str, w: bool, ign: int | None, dtype: Any) -> list:
    rng = np.random.default_rng(18)
    dims = (6, 4) if shape == "2d" else (3, 4, 2, 5)
    scores = _rand(rng, dims, dtype)
    labels = rng.integers(0, 4, (dims[0], *dims[2:])).astype(np.int64)
    if ign is not None:
        labels.flat[::3] = ign
    return [scores, labels, rng.random(4).astype(dtype) if w else None]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("spec", _params([("sce-" + n, s) for n, s in _LOSS]))
def test_softmax_cross_entropy_vs_ort(spec: tuple, dtype: Any) -> None:
    shape, red, w, ign = spec
    attrs = {"reduction": red} | ({} if ign is None else {"ignore_index": ign})
    n_out = 2 if red != "sum" else 1
    _compare("SoftmaxCrossEntropyLoss", _loss_inputs(shape, w, ign, dtype), attrs, n_out, tol=10)


@pytest.mark.parametrize("op", ["SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"])
@pytest.mark.parametrize("label,ignore", [(-1, None), (4, None), (-2, -1)])
def test_loss_target_outside_the_classes_is_an_error(op: str, label: int, ignore: int | None) -> None:
    """A target that is no class nor ignore_index (numpy wrapped -1 to the last class: a
    silently wrong loss, what `onnx-light train` gave for labels of -1)."""
    from onnx import helper as oh

    import onnx_light as ol
    from onnx_light.runtime import InferenceSession

    attrs = {} if ignore is None else {"ignore_index": ignore}
    graph = oh.make_graph(
        [oh.make_node(op, ["x", "t"], ["loss"], **attrs)],
        "loss",
        [oh.make_tensor_value_info("x", 1, [3, 4]), oh.make_tensor_value_info("t", 7, [3])],
        [oh.make_tensor_value_info("loss", 1, [])],
    )
    model = ol.ModelProto.FromString(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)]).SerializeToString())
    feeds = {"x": np.zeros((3, 4), np.float32), "t": np.array([0, label, 1], np.int64)}
    with pytest.raises(ol.OnnxLightError, match="not a class index"):
        InferenceSession(model).run(None, feeds)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("spec", _params([("nll-" + n, s) for n, s in _LOSS]))
def test_nll_loss_vs_ort(spec: tuple, dtype: Any) -> None:
    shape, red, w, ign = spec
    attrs = {"reduction": red} | ({} if ign is None else {"ignore_index": ign})
    inputs = _loss_inputs(shape, w, ign, dtype)
    _compare("NegativeLogLikelihoodLoss", inputs, attrs, tol=10)


# ---- dtypes and old opsets


def _f16_cases() -> list[tuple[str, tuple]]:
    r = np.random.default_rng(19)
    x4 = r.standard_normal((2, 4, 6, 5))
    c4 = r.random(4) + 0.5
    lab = r.integers(0, 4, (2, 6, 5))
    cases = {
        "MatMul": ([x4, x4.swapaxes(2, 3)], {}),
        "Gemm": ([x4[0, 0], x4[0, 1].T, x4[0, 2, :, :1]], {"alpha": 0.5, "beta": 2.0}),
        "Conv": ([x4, r.standard_normal((6, 2, 3, 3)), c4[:2].repeat(3)], {"group": 2, "pads": [1] * 4}),
        "ConvTranspose": ([x4, r.standard_normal((4, 3, 3, 3))], {"strides": [2, 2]}),
        "MaxPool": ([x4], {"kernel_shape": [3, 3], "pads": [1] * 4}),
        "AveragePool": ([x4], {"kernel_shape": [3, 3], "pads": [1] * 4}),
        "LpPool": ([x4], {"kernel_shape": [2, 2]}),
        "GlobalAveragePool": ([x4], {}),
        "GlobalMaxPool": ([x4], {}),
        "GlobalLpPool": ([x4], {}),
        "BatchNormalization": ([x4, c4, c4, c4, c4], {}),
        "InstanceNormalization": ([x4, c4, c4], {}),
        "GroupNormalization": ([x4, c4, c4], {"num_groups": 2}),
        "LayerNormalization": ([x4, x4[0, 0, 0], x4[0, 0, 1]], {}),
        "RMSNormalization": ([x4, x4[0, 0, 0]], {}),
        "LpNormalization": ([x4], {}),
        "MeanVarianceNormalization": ([x4], {}),
        "LRN": ([x4], {"size": 3}),
        "Softmax": ([x4], {}),
        "LogSoftmax": ([x4], {}),
        "Hardmax": ([x4], {}),
        "Dropout": ([x4], {}),
        "SoftmaxCrossEntropyLoss": ([x4, lab, c4], {}),
        "NegativeLogLikelihoodLoss": ([x4, lab], {"reduction": "none"}),
    }
    return [(op, value) for op, value in cases.items()]


@pytest.mark.parametrize("spec", _params([("f16-" + n, (n, v)) for n, v in _f16_cases()]))
def test_float16_stays_float16(spec: tuple) -> None:
    """No silent float32/float64 promotion: float16 in, float16 out, close to float32."""
    from onnx import helper

    op, (inputs, attrs) = spec
    node = helper.make_node(op, [f"i{k}" for k in range(len(inputs))], ["y"], **attrs)
    cast = [a.astype(np.float16) if a.dtype.kind == "f" else a for a in inputs]
    (y16,) = kernel_harness.call_kernel(node, 23, cast)
    (y32,) = kernel_harness.call_kernel(node, 23, [a.astype(np.float32) for a in cast])
    assert y16.dtype == np.float16 and y32.dtype == np.float32
    np.testing.assert_allclose(y16.astype(np.float32), y32, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
def test_conv_transpose_opset1_puts_odd_padding_on_the_other_side(auto_pad: str) -> None:
    """ConvTranspose-1 documented SAME_UPPER with the extra pad cell at the start."""
    from onnx import helper

    rng = np.random.default_rng(20)
    x, w = _rand(rng, (1, 2, 4, 5)), _rand(rng, (2, 3, 3, 3))
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], auto_pad=auto_pad)
    (old,) = kernel_harness.call_kernel(node, 10, [x, w])
    (new,) = kernel_harness.call_kernel(node, 11, [x, w])
    assert old.shape == new.shape == (1, 3, 8, 10)
    a, b = (old, new) if auto_pad == "SAME_UPPER" else (new, old)
    np.testing.assert_allclose(a[..., :-1, :-1], b[..., 1:, 1:], rtol=1e-6)
