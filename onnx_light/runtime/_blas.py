"""The number of BLAS threads numpy uses, set at run time.

On a small shared machine a multi-threaded GEMM collapses when the other core is
busy (measured: 24 ms per GEMM instead of ~1 ms), so an ``InferenceSession`` runs BLAS on
one thread unless told otherwise (its ``blas_threads`` option, ``ONNX_LIGHT_BLAS_THREADS``,
or :func:`set_blas_threads`). Nothing is set at import: the session sets the count when it
runs. The environment variables of OpenBLAS only work before numpy is imported; this module
finds the OpenBLAS library numpy has loaded and calls its ``set_num_threads`` entry point,
which works at any time.
"""

from __future__ import annotations

import ctypes
import functools
import os
from typing import Any

__all__ = ["set_blas_threads", "get_blas_threads"]

# OpenBLAS builds name their entry points with a prefix/suffix (numpy's wheels bundle
# "scipy_openblas" with a 64-bit interface suffix)
_SETTERS = ("scipy_openblas_set_num_threads64_", "openblas_set_num_threads64_", "openblas_set_num_threads")
_GETTERS = ("scipy_openblas_get_num_threads64_", "openblas_get_num_threads64_", "openblas_get_num_threads")


def _openblas() -> ctypes.CDLL | None:
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "openblas" in line.lower() and "/" in line}
    except OSError:  # not Linux: leave BLAS as it is
        return None
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        if any(hasattr(lib, name) for name in _SETTERS):
            return lib
    return None


@functools.cache
def _entry_points() -> tuple[Any, Any] | None:
    """OpenBLAS's (set_num_threads, get_num_threads), found once; None when it is not loaded."""
    import numpy  # noqa: F401  (loads the library)

    lib = _openblas()
    if lib is None:
        return None
    setter = next((getattr(lib, n) for n in _SETTERS if hasattr(lib, n)), None)
    getter = next((getattr(lib, n) for n in _GETTERS if hasattr(lib, n)), None)
    if setter is None or getter is None:
        return None
    getter.restype = ctypes.c_int
    return setter, getter


#: the count the user chose with set_blas_threads (sessions then default to it)
_chosen: list[int] = []


def set_blas_threads(n: int) -> bool:
    """Sets numpy's OpenBLAS thread count, now and for sessions that are not told another.

    Returns:
        False when no OpenBLAS is loaded.
    """
    _chosen[:] = [int(n)]
    entry = _entry_points()
    if entry is None:
        return False
    entry[0](ctypes.c_int(int(n)))
    return True


def get_blas_threads() -> int | None:
    """numpy's OpenBLAS thread count, or None when no OpenBLAS is loaded."""
    entry = _entry_points()
    return None if entry is None else int(entry[1]())


def default_blas_threads() -> int:
    """The thread count a session uses unless told: the last :func:`set_blas_threads`, else
    ``ONNX_LIGHT_BLAS_THREADS``, else 1."""
    if _chosen:
        return _chosen[0]
    return int(os.environ.get("ONNX_LIGHT_BLAS_THREADS", "1"))


def use_blas_threads(n: int) -> None:
    """Sets the thread count to ``n`` when it is not already (one cheap call when it is)."""
    entry = _entry_points()
    if entry is not None and entry[1]() != n:
        entry[0](ctypes.c_int(n))
