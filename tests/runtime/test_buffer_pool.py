"""The session's buffer pool (``runtime/_pool.py``): large intermediates written into buffers
kept across runs, lent for their values' lifetimes, never to the caller (issue 13 §3, 15 §1)."""

from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np
import pytest

from onnx_light import RuntimeFailure, TensorProto, helper
from onnx_light.runtime import InferenceSession, _pool
from onnx_light.runtime.kernels.linalg import gemm, matmul
from onnx_light.runtime.kernels.tensor import cast_6, cast_19, expand
from onnx_light.runtime.kernels.unfold import max_unpool

N = 256  # 256 x 256 float32: 256 KiB, above the pool's 128 KiB


def _session(nodes: list, outputs: list[str], batch: int | str = N, **kwargs: object) -> InferenceSession:
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [batch, N]) for n in ("x", "y")]
    graph = helper.make_graph(
        nodes, "g", inputs, [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs]
    )
    return InferenceSession(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), **kwargs)


# a = x*x is pooled; t, a view of a, outlives a; b = y+y is pooled after a's own last use;
# c = t * b (in place into b); out = c @ x
_VIEW_NODES = [
    helper.make_node("Mul", ["x", "x"], ["a"]),
    helper.make_node("Transpose", ["a"], ["t"]),
    helper.make_node("Add", ["y", "y"], ["b"]),
    helper.make_node("Mul", ["t", "b"], ["c"]),
    helper.make_node("MatMul", ["c", "x"], ["out"]),
]


def _view_reference(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return ((x * x).T * (y + y)) @ x


def _feeds(seed: int, rows: int = N) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal((rows, N)).astype(np.float32) for n in ("x", "y")}


def _pooled(sess: InferenceSession) -> dict[str, int]:
    """The names of the pooled values and their buffers."""
    arenas = sess._plan.arenas
    assert arenas is not None, "nothing was pooled: the test would not test the pool"
    names = {s: n for n, s in sess._plan.slot_of.items()}
    return {names[s]: arenas.layout[k][0] for s, k in arenas.index.items()}


def test_a_view_keeps_its_base_from_being_recycled() -> None:
    sess = _session(_VIEW_NODES, ["out"])
    for seed in range(3):
        feeds = _feeds(seed)
        (out,) = sess.run(None, feeds)
        np.testing.assert_allclose(out, _view_reference(**feeds), rtol=1e-4, atol=1e-3)
    pooled = _pooled(sess)
    assert set(pooled) == {"a", "b"}
    assert pooled["a"] != pooled["b"]  # a's buffer is busy while its transposed view t lives


def test_a_wrong_lifetime_is_caught_when_the_buffer_is_lent(monkeypatch: pytest.MonkeyPatch) -> None:
    # the plan's analysis told nothing about views: a and b get one buffer, the lend check must refuse
    monkeypatch.setattr(_pool, "_may_share", lambda steps, free_after, shared: {})
    sess = _session(_VIEW_NODES, ["out"])
    for seed in range(3):
        feeds = _feeds(seed)
        (out,) = sess.run(None, feeds)
        np.testing.assert_allclose(out, _view_reference(**feeds), rtol=1e-4, atol=1e-3)
    pooled = _pooled(sess)
    assert pooled["a"] == pooled["b"]


def test_a_result_is_not_overwritten_by_the_next_run() -> None:
    nodes = [
        helper.make_node("Mul", ["x", "y"], ["a"]),
        helper.make_node("MatMul", ["a", "y"], ["m"]),
        helper.make_node("Sub", ["m", "x"], ["out"]),
    ]
    sess = _session(nodes, ["out"])
    first = _feeds(1)
    (r1,) = sess.run(None, first)
    kept = r1.copy()
    for seed in range(2, 5):
        sess.run(None, _feeds(seed))
        np.testing.assert_array_equal(r1, kept)
    assert set(_pooled(sess)) == {"a"}  # m is not: out is written in place into it


def test_a_result_held_by_the_caller_is_never_lent_again() -> None:
    # force the pool to lend the output's own buffer (the plan never does): the lend check sees
    # the caller's reference and the next runs allocate instead of overwriting it
    nodes = [helper.make_node("Mul", ["x", "y"], ["out"])]
    sess = _session(nodes, ["out"])
    sess.run(None, _feeds(0))
    plan = sess._plan
    slot = plan.slot_of["out"]
    plan.arenas = _pool.Arenas([N * N * 4], [(0, np.dtype(np.float32), (N, N))], {slot: 0})
    plan.fast = _pool_generate(plan)
    first = _feeds(1)
    (r1,) = sess.run(None, first)
    assert r1.base is not None  # it is the arena's view
    kept = r1.copy()
    for seed in range(2, 4):
        (r,) = sess.run(None, _feeds(seed))
        np.testing.assert_array_equal(r1, kept)
        assert not np.may_share_memory(r, r1)


def _pool_generate(plan: object) -> object:
    from onnx_light.runtime._codegen import generate

    return generate(plan)  # type: ignore[arg-type]


def test_pooled_and_unpooled_runs_agree_bitwise_across_shapes() -> None:
    nodes = [
        helper.make_node("Mul", ["x", "y"], ["a"]),
        helper.make_node("Gemm", ["a", "w"], ["g"], transB=1),
        helper.make_node("Relu", ["g"], ["r"]),
        helper.make_node("Add", ["r", "x"], ["s"]),
        helper.make_node("Exp", ["s"], ["e"]),
        helper.make_node("ReduceSum", ["e"], ["out"], keepdims=0),
    ]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["n", N]) for n in ("x", "y")]
    w = helper.make_tensor("w", TensorProto.FLOAT, [N, N], np.linspace(-0.01, 0.01, N * N, dtype=np.float32))
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    pooled, plain = InferenceSession(model), InferenceSession(model, buffer_pool=False)
    for seed, rows in [(0, N), (1, N), (2, 512), (3, N), (4, 3)]:
        feeds = _feeds(seed, rows)
        np.testing.assert_array_equal(pooled.run(None, feeds)[0], plain.run(None, feeds)[0])
    assert plain._plan.arenas is None
    assert set(_pooled(pooled)) >= {"a", "g"}


def test_concurrent_runs_take_separate_arenas() -> None:
    sess = _session(_VIEW_NODES, ["out"])
    sess.run(None, _feeds(0))
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        try:
            for k in range(8):
                feeds = _feeds(seed * 100 + k)
                (out,) = sess.run(None, feeds)
                np.testing.assert_allclose(out, _view_reference(**feeds), rtol=1e-4, atol=1e-3)
        except BaseException as err:  # noqa: BLE001 - reported by the main thread
            errors.append(err)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_a_failing_run_drops_its_arena() -> None:
    sess = _session(_VIEW_NODES, ["out"], batch="n")
    sess.run(None, _feeds(0))  # observed (no arena yet)
    sess.run(None, _feeds(1))
    arenas = sess._plan.arenas
    assert arenas is not None and len(arenas.kept) == 1
    bad = {"x": np.ones((N, N), np.float32), "y": np.ones((4, N), np.float32)}
    with pytest.raises(RuntimeFailure, match="Mul"):
        sess.run(None, bad)
    assert not arenas.kept  # the failed run's views may still be referenced by its traceback
    feeds = _feeds(5)
    np.testing.assert_allclose(sess.run(None, feeds)[0], _view_reference(**feeds), rtol=1e-4, atol=1e-3)


_UNPOOL = {"kernel_shape": [2, 2], "strides": [2, 2]}
_GEMM = {"transB": 1, "alpha": 2.0}


@pytest.mark.parametrize(
    ("fn", "args", "kwargs"),
    [
        (expand, (np.arange(4, dtype=np.float32).reshape(4, 1), np.array([4, 5])), {}),
        (max_unpool, (np.ones((1, 1, 2, 2), np.float32), np.array([[[[0, 3], [9, 15]]]])), _UNPOOL),
        (matmul, (np.ones((2, 3, 4), np.float32), np.ones((4, 5), np.float32)), {}),
        (matmul, (np.ones((2, 3, 4), np.float32), np.ones((2, 4, 5), np.float32)), {}),
        (gemm, (np.ones((3, 4), np.float32), np.ones((5, 4), np.float32), np.ones(5, np.float32)), _GEMM),
        (cast_6, (np.array([[0.0, -1.5, np.nan, 2.0]], np.float32),), {"to": TensorProto.BOOL}),
        (cast_6, (np.array([[True, False, True]]),), {"to": TensorProto.FLOAT}),
        (cast_19, (np.array([[0.5, -1.5, 3e9, 2.0]], np.float64),), {"to": TensorProto.INT32}),
    ],
    ids=["Expand", "MaxUnpool", "MatMul-stacked", "MatMul-batched", "Gemm", "Cast-bool", "Cast-float", "Cast-int"],
)
def test_kernels_write_into_a_lent_buffer_of_the_right_type_only(fn, args, kwargs) -> None:  # type: ignore[no-untyped-def]
    with np.errstate(all="ignore"):  # as a session runs kernels (3e9 does not fit an int32)
        want = fn(*args, **kwargs)
        out = np.full(want.shape, 7, want.dtype)
        got = fn(*args, **kwargs, out=out)
        assert got is out
        np.testing.assert_array_equal(got, want)
        other_dtype = np.float64 if want.dtype != np.float64 else np.float32
        for wrong in (np.empty((1, *want.shape), want.dtype), np.empty(want.shape, other_dtype)):
            other = fn(*args, **kwargs, out=wrong)
            assert other is not wrong
            np.testing.assert_array_equal(other, want)


def test_keep_freed_memory_is_opt_in_and_process_wide() -> None:
    code = (
        "import os; from onnx_light.runtime import _malloc, InferenceSession;"
        "print(_malloc._applied, _malloc.keep_freed_memory(), _malloc._applied)"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.split()
    assert out[0] == "False"  # importing the runtime changes nothing
    if sys.platform.startswith("linux"):
        assert out[1:] == ["True", "True"]


def test_an_arena_lends_only_unreferenced_buffers() -> None:
    layout = [(0, np.dtype(np.float32), (64, 64)), (0, np.dtype(np.float32), (32, 32)), (1, np.dtype(np.int64), (8,))]
    arena = _pool.Arena([64 * 64 * 4, 64], layout)
    assert arena.lend(0) is arena.views[0]
    held = arena.lend(1)  # a value alive on buffer 0: no other view of buffer 0 is lent
    assert held is not None and arena.lend(0) is None and arena.lend(2) is not None
    del held
    view = arena.views[0].T  # a view of a dead value still reads buffer 0
    assert arena.lend(0) is None and arena.lend(1) is None
    del view
    assert arena.lend(0) is not None
