"""The optimizers' updates run as compiled pointwise programs (``src/pointwise_compiled.h``):
every update generate_artifacts emits is in the table, and the compiled loop gives numpy's
bits (each operation one float32 ufunc, nothing contracted into a fused multiply-add)."""

from __future__ import annotations

import os
import pathlib
import platform
from typing import Any

import numpy as np
import pytest

import onnx_light.training as olt
from onnx_light.runtime import _fuse_pointwise, _native

MLP = pathlib.Path(__file__).parent.parent / "training" / "data" / "mlp.onnx"
_UFUNCS = {0: np.add, 1: np.subtract, 2: np.multiply, 3: np.divide, 4: np.sqrt}
OPTIMIZERS = [
    ("AdamW", {}),
    ("Adam", {}),
    ("Adam", {"weight_decay": 0.01}),
    ("AdamW", {"amsgrad": True}),
    ("SGD", {"momentum": 0.9, "weight_decay": 1e-4}),
    ("SGD", {"momentum": 0.9, "nesterov": True}),
    ("AdamW", {"max_grad_norm": 1.0}),
    ("Adam", {"max_grad_norm": 1.0}),
    ("Adam", {"amsgrad": True}),
    ("SGD", {"momentum": 0.9, "weight_decay": 1e-4, "max_grad_norm": 1.0}),
]


def _has_avx2_fma() -> bool:
    if platform.machine() not in ("x86_64", "AMD64"):
        return False
    try:
        flags = pathlib.Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False
    return "avx2" in flags and "fma" in flags


needs_compiled = pytest.mark.skipif(
    _native.NATIVE is None or not _has_avx2_fma(),
    reason="the compiled programs are the native extension's AVX2 code",
)


@np.errstate(all="ignore")
def _numpy_run(inputs: list[np.ndarray], n: int, code: np.ndarray, n_out: int) -> list[np.ndarray]:
    regs = {r: x.reshape(-1) if x.size == n else x.reshape(()) for r, x in enumerate(inputs)}
    for op, dst, a, b in code.tolist():
        u = _UFUNCS[op]
        regs[dst] = np.asarray(u(regs[a]) if u.nin == 1 else u(regs[a], regs[b]), np.float32)
    return [np.broadcast_to(regs[len(inputs) + k], (n,)) for k in range(n_out)]


def _updates(optimizer: str, options: dict[str, Any], d: str) -> list[tuple[np.ndarray, list[np.ndarray], int, int]]:
    """The pointwise programs one optimizer step runs (code, inputs, outputs, temporaries)."""
    olt.generate_artifacts(
        str(MLP), loss="CrossEntropyLoss", optimizer=optimizer, artifact_directory=d, lr=1e-2, **options
    )
    state = olt.CheckpointState.load_checkpoint(os.path.join(d, "checkpoint"))
    module = olt.Module(os.path.join(d, "training_model.onnx"), state)
    opt = olt.Optimizer(os.path.join(d, "optimizer_model.onnx"), module)
    calls = []
    run = _fuse_pointwise.pointwise_f32

    def record(inputs: list[np.ndarray], outputs: list[np.ndarray], code: np.ndarray, temps: int) -> None:
        calls.append((code.copy(), [x.copy() for x in inputs], len(outputs), temps))
        run(inputs, outputs, code, temps)

    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((8, 20)).astype(np.float32), np.arange(8) % 3  # the fixture's batch
    _fuse_pointwise.pointwise_f32 = record  # type: ignore[assignment]
    try:
        module(x, y)
        opt.step()
    finally:
        _fuse_pointwise.pointwise_f32 = run  # type: ignore[assignment]
    return calls


@needs_compiled
@pytest.mark.parametrize(("optimizer", "options"), OPTIMIZERS, ids=lambda v: str(v))
def test_the_optimizers_updates_run_compiled_with_numpys_bits(
    optimizer: str, options: dict[str, Any], tmp_path: pathlib.Path
) -> None:
    calls = _updates(optimizer, options, str(tmp_path))
    assert calls, f"{optimizer} {options}: no update ran as a pointwise program"
    rng = np.random.default_rng(3)
    for code, inputs, n_out, temps in calls:
        singles = sum(1 << r for r, x in enumerate(inputs) if x.size == 1)
        assert _native.NATIVE.pointwise_compiled(code, len(inputs), n_out, temps, singles), (
            f"{optimizer} {options}: the update {code.tolist()} is not in src/pointwise_compiled.h's table"
        )
        # the recorded operands, then random ones of other sizes (tails of 1..3 elements), NaN, inf, -0
        cases = [inputs]
        for n in (9, 1001, 4099):
            xs = [x if x.size == 1 else (rng.standard_normal(n) * 2).astype(np.float32) for x in inputs]
            next(x for x in xs if x.size > 1)[:3] = [np.nan, np.inf, -0.0]
            cases.append(xs)
        for xs in cases:
            n = max(x.size for x in xs)
            want = _numpy_run(xs, n, code, n_out)
            got = [np.full(n, 7.0, np.float32) for _ in range(n_out)]
            _native.NATIVE.pointwise_f32(xs, got, code, temps)
            for k, (g, w) in enumerate(zip(got, want)):
                assert np.array_equal(g.view(np.uint32), np.ascontiguousarray(w).view(np.uint32)), (
                    f"{optimizer} {options}: output {k} of n={n} differs from numpy's"
                )


@needs_compiled
def test_a_program_outside_the_table_or_its_pattern_is_interpreted(tmp_path: pathlib.Path) -> None:
    code = np.array([[0, 3, 0, 1], [2, 4, 3, 2], [1, 5, 4, 0], [3, 6, 5, 1], [0, 7, 6, 2], [2, 8, 7, 7]], np.int32)
    assert not _native.NATIVE.pointwise_compiled(code, 3, 1, 5, 0)
    adamw = _updates("AdamW", {}, str(tmp_path))[0][0]
    assert _native.NATIVE.pointwise_compiled(adamw, 11, 3, 11, 0b11111010010)
    assert not _native.NATIVE.pointwise_compiled(adamw, 11, 3, 11, 0)  # every input full: another pattern
    assert not _native.NATIVE.pointwise_compiled(adamw, 11, 3, 12, 0b11111010010)
