"""Test-only helper: runs one ONNX node through onnxruntime and through our kernel, and compares.

The node is built with ``onnx.helper``; output types come from onnx shape inference so that
onnxruntime accepts the model. Our side goes through ``kernel_harness.call_kernel``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from kernel_harness import call_kernel

_RNG_SEED = 20240521


def rng() -> np.random.Generator:
    """A fresh generator with a fixed seed, so every test sees the same inputs."""
    return np.random.default_rng(_RNG_SEED)


def make_node_model(
    op_type: str, inputs: list[np.ndarray | None], attrs: dict[str, Any], n_out: int, opset: int, domain: str = ""
) -> tuple[Any, Any]:
    """A one-node model of ``domain::op_type`` over ``inputs`` (None: an omitted optional input).

    ``opset`` is the version of ``domain``; a model of another domain also imports ai.onnx 21.
    """
    import onnx
    from onnx import helper

    names = ["" if a is None else f"in{i}" for i, a in enumerate(inputs)]
    outs = [f"out{i}" for i in range(n_out)]
    node = helper.make_node(op_type, names, outs, domain=domain or None, **attrs)
    graph_inputs = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for n, a in zip(names, inputs)
        if a is not None
    ]
    graph = helper.make_graph([node], "g", graph_inputs, [helper.make_empty_tensor_value_info(o) for o in outs])
    imports = [helper.make_opsetid(domain, opset)] + ([helper.make_opsetid("", 21)] if domain else [])
    model = helper.make_model(graph, opset_imports=imports)
    model.ir_version = 10
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    known = {v.name: v for v in inferred.graph.value_info}
    del model.graph.output[:]
    model.graph.output.extend(known[o] for o in outs)
    return model, node


def compare_with_ort(
    op_type: str,
    inputs: list[np.ndarray | None],
    attrs: dict[str, Any] | None = None,
    n_out: int = 1,
    opset: int = 21,
    domain: str = "",
) -> None:
    """Asserts our kernel matches onnxruntime on one node: same dtypes, shapes and values."""
    import onnxruntime

    model, node = make_node_model(op_type, inputs, attrs or {}, n_out, opset, domain)
    sess = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {f"in{i}": a for i, a in enumerate(inputs) if a is not None}
    expected = sess.run(None, feeds)
    got = call_kernel(node, opset, [a for a in inputs if a is not None])
    assert len(got) == len(expected)
    what = f"{op_type} {[None if a is None else a.dtype.name for a in inputs]} {attrs}"
    for g, e in zip(got, expected):
        g = np.asarray(g)
        assert g.dtype == e.dtype, f"{what}: dtype {g.dtype} != onnxruntime's {e.dtype}"
        assert g.shape == e.shape, f"{what}: shape {g.shape} != onnxruntime's {e.shape}"
        if e.dtype.kind == "f":
            rtol = 1e-3 if e.dtype.itemsize <= 2 else 2e-5 if e.dtype.itemsize == 4 else 1e-9
            np.testing.assert_allclose(g, e, rtol=rtol, atol=rtol, err_msg=what)
        elif e.dtype.kind in "OU":  # strings: onnxruntime gives str objects, so do we
            assert g.tolist() == e.tolist(), what
        else:
            np.testing.assert_array_equal(g, e, err_msg=what)


class Row(NamedTuple):
    """One onnxruntime comparison: an op over each of ``dtypes``.

    ``inputs`` holds one ``(domain, shape)`` per node input, or ``(domain, shape, dtype)`` to
    pin that input's dtype, an array to feed as is, or None for an omitted optional input. Domains are the keys of
    ``DOMAINS``.
    """

    op: str
    dtypes: tuple[str, ...]
    inputs: tuple[tuple[Any, ...] | np.ndarray | None, ...]
    attrs: dict[str, Any] = {}
    opset: int = 21
    n_out: int = 1
    label: str = ""


def _uniform(lo: float, hi: float) -> Any:
    return lambda r, dt, shape: r.uniform(lo, hi, shape).astype(dt)


def _ints(lo: int, hi: int, nonzero: bool = False) -> Any:
    def draw(r: np.random.Generator, dt: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        if dt.kind == "u":
            lo_ = max(lo, 0) + (1 if nonzero and lo <= 0 else 0)
            return r.integers(lo_, hi, shape).astype(dt)
        v = r.integers(lo, hi, shape).astype(dt)
        return np.where(v == 0, 1, v).astype(dt) if nonzero else v

    return draw


def _nonzero_floats(r: np.random.Generator, dt: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    return (r.uniform(0.5, 4, shape) * r.choice([-1, 1], shape)).astype(dt)


# domain -> (float sampler, integer sampler)
DOMAINS: dict[str, tuple[Any, Any]] = {
    "any": (lambda r, dt, shape: (3 * r.standard_normal(shape)).astype(dt), _ints(-9, 10)),
    "pos": (_uniform(0.1, 5.0), _ints(1, 10)),
    "unit": (_uniform(-0.95, 0.95), _ints(0, 1)),
    "ge1": (_uniform(1.05, 5.0), _ints(1, 10)),
    "nonzero": (_nonzero_floats, _ints(-9, 10, nonzero=True)),
    "exp": (_uniform(-2.0, 2.0), _ints(0, 4)),  # Pow exponents
    "halves": (lambda r, dt, shape: (r.integers(-8, 9, shape) / 2).astype(dt), _ints(-9, 10)),
    "ties": (lambda r, dt, shape: r.integers(0, 3, shape).astype(dt), _ints(0, 3)),
    "bool": (None, lambda r, dt, shape: r.integers(0, 2, shape).astype(bool)),
    "str": (None, lambda r, dt, shape: r.choice(np.array(["a", "bb", ""], object), shape)),
    "special": (
        lambda r, dt, shape: r.choice(np.array([0, 1.5, -2, np.inf, -np.inf, np.nan], dt), shape),
        None,
    ),
}


def sample(domain: str, dtype: str, shape: tuple[int, ...], r: np.random.Generator) -> np.ndarray:
    """Random input of ``dtype`` drawn from ``DOMAINS[domain]``."""
    dt = np.dtype(dtype)
    floats, ints = DOMAINS[domain]
    return np.asarray((floats if dt.kind == "f" else ints)(r, dt, shape))


def params(rows: list[Row], xfail: dict[str, str]) -> list[Any]:
    """pytest params ``ort-<label or op>-<dtype>`` for every row and dtype, xfails applied."""
    import pytest

    out = []
    for row in rows:
        for dt in row.dtypes:
            name = f"ort-{row.label or row.op}-{dt}"
            marks = [pytest.mark.xfail(reason=xfail[name], strict=True)] if name in xfail else []
            out.append(pytest.param(row, dt, id=name, marks=marks))
    return out


def check_row(row: Row, dtype: str) -> None:
    """Draws the row's inputs for ``dtype`` and compares our kernel with onnxruntime."""
    r = rng()
    inputs = [
        spec
        if spec is None or isinstance(spec, np.ndarray)
        else sample(spec[0], spec[2] if len(spec) > 2 else dtype, spec[1], r)
        for spec in row.inputs
    ]
    compare_with_ort(row.op, inputs, row.attrs, row.n_out, row.opset)


def unknown_keys(xfail: dict[str, str], ids: list[str]) -> list[str]:
    """Exclusion keys that match no test id (stale entries)."""
    return sorted(set(xfail) - set(ids))
