"""The number of BLAS threads numpy uses, set at run time.

On a small shared machine a multi-threaded GEMM collapses when the other core is
busy (measured: 24 ms per GEMM instead of ~1 ms), so onnx-light runs BLAS on one
thread unless told otherwise (``ONNX_LIGHT_BLAS_THREADS`` or
:func:`set_blas_threads`). The environment variables only work before numpy is
imported; this module finds the OpenBLAS library numpy has loaded and calls its
``set_num_threads`` entry point, which works at any time.
"""

from __future__ import annotations

import ctypes
import os

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


def set_blas_threads(n: int) -> bool:
    """Sets numpy's OpenBLAS thread count; returns False when no OpenBLAS is loaded."""
    import numpy  # noqa: F401  (loads the library)

    lib = _openblas()
    if lib is None:
        return False
    for name in _SETTERS:
        if hasattr(lib, name):
            getattr(lib, name)(ctypes.c_int(int(n)))
            return True
    return False


def get_blas_threads() -> int | None:
    """numpy's OpenBLAS thread count, or None when no OpenBLAS is loaded."""
    import numpy  # noqa: F401

    lib = _openblas()
    if lib is None:
        return None
    for name in _GETTERS:
        if hasattr(lib, name):
            fn = getattr(lib, name)
            fn.restype = ctypes.c_int
            return int(fn())
    return None


def apply_default() -> None:
    """One BLAS thread unless ``ONNX_LIGHT_BLAS_THREADS`` says otherwise."""
    set_blas_threads(int(os.environ.get("ONNX_LIGHT_BLAS_THREADS", "1")))
