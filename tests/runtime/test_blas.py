"""onnx-light runs numpy's BLAS on one thread by default, even if numpy came first."""

from __future__ import annotations

import subprocess
import sys


def _threads_after(code: str, env_extra: dict[str, str]) -> str:
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    env.update(env_extra)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return out.stdout.strip()


PROBE = """
import ctypes, numpy
paths = sorted({l.split()[-1] for l in open("/proc/self/maps") if "openblas" in l.lower() and "/" in l})
lib = next((ctypes.CDLL(p) for p in paths if hasattr(ctypes.CDLL(p), "scipy_openblas_set_num_threads64_")), None)
if lib is None:
    print("None None")
else:
    lib.scipy_openblas_set_num_threads64_(2)  # numpy first, with two threads
    before = lib.scipy_openblas_get_num_threads64_()
    import onnx_light
    print(before, lib.scipy_openblas_get_num_threads64_())
"""


def test_one_thread_by_default_even_after_numpy() -> None:
    before, after = _threads_after(PROBE, {}).split()
    if before == "None":
        import pytest

        pytest.xfail("numpy here is not linked with OpenBLAS")
    assert (before, after) == ("2", "1")


def test_thread_count_is_configurable() -> None:
    before, after = _threads_after(PROBE, {"ONNX_LIGHT_BLAS_THREADS": "2"}).split()
    assert after == before == "2" or before == "None"
