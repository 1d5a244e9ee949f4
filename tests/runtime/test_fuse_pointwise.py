"""Pointwise fusion (``runtime/_fuse_pointwise.py``): chains of float32 Add/Sub/Mul/Div/Sqrt
as one program, natively (``src/elementwise.cpp``) and in its numpy twin, bit for bit the
steps one by one."""

from __future__ import annotations

import numpy as np
import pytest

from onnx_light import helper
from onnx_light.onnx_core import ModelProto, TensorProto
from onnx_light.runtime import InferenceSession, _native
from onnx_light.runtime._fuse_pointwise import PointwiseProgram

_RNG = np.random.default_rng(7)
_UFUNCS = {0: np.add, 1: np.subtract, 2: np.multiply, 3: np.divide, 4: np.sqrt}


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint32)


def _random_program(n_in: int, n_out: int, length: int, rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """A program whose every row reads earlier registers (inputs first) and writes a new one;
    the last ``n_out`` rows write the outputs."""
    rows, written = [], list(range(n_in))
    temps = length - n_out
    for j in range(length):
        dst = n_in + n_out + j if j < temps else n_in + (j - temps)
        op = int(rng.integers(0, 5))
        a, b = (int(rng.choice(written)) for _ in range(2))
        if j == 0 and n_in > 1:
            a = 0  # the first row reads a full input, so every value is full
        rows.append((op, dst, a, b))
        written.append(dst)
    return np.array(rows, np.int32), temps


@np.errstate(all="ignore")
def _numpy_run(inputs: list[np.ndarray], n: int, code: np.ndarray, n_out: int, temps: int) -> list[np.ndarray]:
    regs: dict[int, np.ndarray] = {r: x.reshape(-1) if x.size == n else x.reshape(()) for r, x in enumerate(inputs)}
    for op, dst, a, b in code.tolist():
        u = _UFUNCS[op]
        regs[dst] = np.asarray(u(regs[a]) if u.nin == 1 else u(regs[a], regs[b]), np.float32)
    return [np.broadcast_to(regs[len(inputs) + k], (n,)) for k in range(n_out)]


@pytest.mark.parametrize("n", [1, 7, 8, 1023, 1024, 1025, 5000])
@pytest.mark.parametrize("seed", range(4))
def test_program_native_and_twin_are_numpys_ufuncs_bit_for_bit(n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    full = [(rng.standard_normal(n) * 3).astype(np.float32) for _ in range(3)]
    full[0][: min(n, 3)] = [np.nan, np.inf, -0.0][: min(n, 3)]
    full[1][-1:] = -np.inf
    scalars = [np.array(rng.standard_normal(), np.float32), np.array([0.5], np.float32)]
    inputs = full + scalars
    code, temps = _random_program(len(inputs), 2, 12, rng)
    want = _numpy_run(inputs, n, code, 2, temps)
    for run in (_native.pointwise_f32, _native.pointwise_f32_twin):
        outs = [np.full(n, 9.0, np.float32) for _ in range(2)]
        with np.errstate(all="ignore"):
            run(inputs, outs, code, temps)
        for got, w in zip(outs, want):
            np.testing.assert_array_equal(_bits(got), _bits(w))


def test_program_on_empty_arrays_writes_nothing() -> None:
    code = np.array([(0, 2, 0, 1)], np.int32)
    out = np.empty(0, np.float32)
    for run in (_native.pointwise_f32, _native.pointwise_f32_twin):
        run([np.empty(0, np.float32), np.array(1, np.float32)], [out], code, 0)
    assert out.shape == (0,)


@pytest.mark.skipif(_native.EXTENSION is None, reason="no native extension")
def test_native_program_refuses_bad_registers_and_sizes() -> None:
    ext = _native.EXTENSION
    assert ext is not None
    x = np.ones(4, np.float32)
    with pytest.raises(ValueError, match="register"):
        ext.pointwise_f32([x], [np.empty(4, np.float32)], np.array([(0, 0, 0, 0)], np.int32), 0)  # writes an input
    with pytest.raises(ValueError, match="register"):
        ext.pointwise_f32([x], [np.empty(4, np.float32)], np.array([(0, 1, 0, 7)], np.int32), 0)
    with pytest.raises(ValueError, match="operation"):
        ext.pointwise_f32([x], [np.empty(4, np.float32)], np.array([(9, 1, 0, 0)], np.int32), 0)
    with pytest.raises(ValueError, match="size"):
        ext.pointwise_f32([np.ones(3, np.float32)], [np.empty(4, np.float32)], np.array([(0, 1, 0, 0)], np.int32), 0)


def _adamw_model(shape: list[int | None], dtype: int = TensorProto.FLOAT) -> ModelProto:
    """torch's AdamW update of one parameter as the training toolkit emits it (14 steps), plus a
    value of the chain that a step outside it reads (``p1`` by ``Neg``)."""
    make = helper.make_node
    nodes = [
        make("Mul", ["p", "decay"], ["p1"]),
        make("Sub", ["g", "m"], ["t0"]),
        make("Mul", ["t0", "c1"], ["t1"]),
        make("Add", ["m", "t1"], ["m_next"]),
        make("Mul", ["v", "b2"], ["a0"]),
        make("Mul", ["g", "g"], ["gg"]),
        make("Mul", ["gg", "c2"], ["gg2"]),
        make("Add", ["a0", "gg2"], ["v_next"]),
        make("Sqrt", ["v_next"], ["s0"]),
        make("Div", ["s0", "bc2"], ["s1"]),
        make("Add", ["s1", "eps"], ["den"]),
        make("Div", ["m_next", "den"], ["q0"]),
        make("Mul", ["q0", "lr"], ["q1"]),
        make("Sub", ["p1", "q1"], ["p_next"]),
        make("Neg", ["p1"], ["neg_p1"]),
    ]
    arrays = ["p", "g", "m", "v"]
    scalars = ["decay", "c1", "b2", "c2", "bc2", "eps", "lr"]
    inputs = [helper.make_tensor_value_info(n, dtype, shape) for n in arrays]
    inputs += [helper.make_tensor_value_info(n, dtype, None) for n in scalars]
    outputs = [helper.make_tensor_value_info(n, dtype, None) for n in ("p_next", "m_next", "v_next", "neg_p1")]
    graph = helper.make_graph(nodes, "adamw", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _feeds(shape: tuple[int, ...], dtype: type = np.float32) -> dict[str, np.ndarray]:
    f: dict[str, np.ndarray] = {n: (_RNG.standard_normal(shape) * 0.1).astype(dtype) for n in ("p", "g", "m")}
    f["v"] = np.abs(_RNG.standard_normal(shape)).astype(dtype) * 1e-3
    f["g"].reshape(-1)[:2] = [np.nan, np.inf][: f["g"].size]
    values = {"decay": 0.99999, "c1": 0.1, "b2": 0.999, "c2": 0.001, "bc2": 0.03, "eps": 1e-8, "lr": 1e-3}
    return f | {k: np.array(v, dtype) for k, v in values.items()}


def _merged(sess: InferenceSession) -> list[PointwiseProgram]:
    return [s.fn for s in sess._plan.steps if isinstance(s.fn, PointwiseProgram)]


@pytest.mark.parametrize("shape", [(256, 768), (10,), (3, 1, 5), (1, 1)])
def test_adamw_chain_is_one_step_bit_for_bit(shape: tuple[int, ...]) -> None:
    model = _adamw_model(list(shape))
    fused, plain = InferenceSession(model), InferenceSession(model, optimize=False)
    programs = _merged(fused)
    # p1 is read by Neg outside the chain: its Mul stays a step of its own; the 13 others merge
    assert [len(p.members) for p in programs] == [13]
    assert not _merged(plain)
    feeds = _feeds(shape)
    for _ in range(2):  # the first run records shapes for the buffer pool, the second runs the generated code
        got = fused.run(None, feeds)
    want = plain.run(None, feeds)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_array_equal(_bits(np.nan_to_num(g, nan=7.0)), _bits(np.nan_to_num(w, nan=7.0)))


@pytest.mark.parametrize(
    "case", ["float64", "broadcast state", "non-contiguous", "all single values", "int scalar shape [1, 1, 1]"]
)
def test_adamw_chain_falls_back_to_the_steps(case: str) -> None:
    """Where the program cannot run (another dtype, a broadcast operand that is not a single
    value, a strided feed, no full array), the merged step runs the kernels: the same answer."""
    shape = (4, 6)
    dtype = TensorProto.DOUBLE if case == "float64" else TensorProto.FLOAT
    model = _adamw_model([4, 6] if case != "broadcast state" else [None, 6], dtype)
    feeds = _feeds(shape, np.float64 if case == "float64" else np.float32)
    if case == "broadcast state":
        feeds["v"] = feeds["v"][:1].copy()  # (1, 6) against (4, 6)
    elif case == "non-contiguous":
        feeds["m"] = np.asfortranarray(feeds["m"])
    elif case == "all single values":
        model = _adamw_model([1])
        feeds = {k: v.reshape(-1)[:1].copy() for k, v in feeds.items()}
    elif case == "int scalar shape [1, 1, 1]":
        feeds["lr"] = feeds["lr"].reshape(1, 1, 1)  # broadcasts (4, 6) to (1, 4, 6)
    fused, plain = InferenceSession(model), InferenceSession(model, optimize=False)
    assert _merged(fused)
    got, want = fused.run(None, feeds), plain.run(None, feeds)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_array_equal(np.nan_to_num(g, nan=7.0), np.nan_to_num(w, nan=7.0))
