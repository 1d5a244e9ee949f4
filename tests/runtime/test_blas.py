"""A session runs numpy's BLAS on one thread by default, even if numpy came first; importing
onnx-light leaves the thread count alone (STYLE convention 10: no process-wide state at import)."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _threads_after(code: str, env_extra: dict[str, str]) -> list[str]:
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    env.pop("ONNX_LIGHT_BLAS_THREADS", None)
    env.update(env_extra)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return out.stdout.split()


# prints the thread count: before the import, after it, after a session ran (twice: the
# default session, then one with the option given as {option})
PROBE = """
import ctypes, numpy as np
paths = sorted({{l.split()[-1] for l in open("/proc/self/maps") if "openblas" in l.lower() and "/" in l}})
lib = next((ctypes.CDLL(p) for p in paths if hasattr(ctypes.CDLL(p), "scipy_openblas_set_num_threads64_")), None)
if lib is None:
    print("None")
else:
    lib.scipy_openblas_set_num_threads64_(2)  # numpy first, with two threads
    count = lib.scipy_openblas_get_num_threads64_
    before = count()
    import onnx_light as ol
    from onnx_light import TensorProto, helper
    after_import = count()
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    x = {{"x": np.ones(2, np.float32)}}
    ol.runtime.InferenceSession(g).run(None, x)
    after_run = count()
    lib.scipy_openblas_set_num_threads64_(2)
    ol.runtime.InferenceSession(g, {option}).run(None, x)
    print(before, after_import, after_run, count())
"""


def _probe(option: str, env: dict[str, str]) -> list[str]:
    out = _threads_after(PROBE.format(option=option), env)
    if out == ["None"]:
        pytest.xfail("numpy here is not linked with OpenBLAS")
    return out


def test_import_leaves_blas_alone_and_a_run_uses_one_thread() -> None:
    assert _probe("blas_threads=0", {}) == ["2", "2", "1", "2"]


def test_thread_count_is_an_option_of_the_session() -> None:
    assert _probe("blas_threads=1", {}) == ["2", "2", "1", "1"]


def test_thread_count_default_follows_the_environment() -> None:
    assert _probe("blas_threads=None", {"ONNX_LIGHT_BLAS_THREADS": "2"}) == ["2", "2", "2", "2"]


CHOSEN = PROBE.replace(
    "    lib.scipy_openblas_set_num_threads64_(2)\n    ol.runtime.InferenceSession(g, {option})",
    "    ol.runtime.set_blas_threads(2)\n    ol.runtime.InferenceSession(g)",
)


def test_a_count_chosen_with_set_blas_threads_is_the_sessions_default() -> None:
    assert CHOSEN != PROBE
    out = _threads_after(CHOSEN.format(), {})
    if out == ["None"]:
        pytest.xfail("numpy here is not linked with OpenBLAS")
    assert out == ["2", "2", "1", "2"]
