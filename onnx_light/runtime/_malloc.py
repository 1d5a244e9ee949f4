"""Opt-in: tell glibc's malloc to keep freed memory (a process-wide setting).

The session's buffer pool (``_pool.py``) reuses the buffers of the values the plan writes
with ``out=``; arrays that kernels allocate themselves (the native convolution's output, its
packed panels, numpy temporaries) still come from malloc, which serves large blocks from
fresh mmaps and trims the heap when a run frees its activations, so the next run pays the
page faults again. :func:`keep_freed_memory` sets ``M_MMAP_THRESHOLD`` to 256 MiB and
``M_TRIM_THRESHOLD`` to 2 GiB (as ``MALLOC_MMAP_THRESHOLD_=268435456
MALLOC_TRIM_THRESHOLD_=2147483647`` in the environment would): freed memory then stays in
the process for the next allocation. The cost: the process keeps its peak heap (it does not give
memory back to the system), for every library in it. Hence opt-in: call it, or set
``ONNX_LIGHT_MALLOC_KEEP=1`` before the first ``InferenceSession`` is built.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

__all__ = ["keep_freed_memory", "keep_freed_memory_from_env"]

# mallopt parameters of glibc's malloc.h
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD = 256 << 20
_TRIM_THRESHOLD = 2**31 - 1  # mallopt takes an int
_applied = False


def keep_freed_memory() -> bool:
    """Makes glibc keep freed memory for reuse (process-wide, cannot be undone; see the module).

    Returns:
        True when glibc's ``mallopt`` took both settings; False elsewhere (another C library,
        another system), where nothing changes.
    """
    global _applied
    if _applied:
        return True
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    _applied = bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))
    return _applied


def keep_freed_memory_from_env() -> None:
    """Applies :func:`keep_freed_memory` when ``ONNX_LIGHT_MALLOC_KEEP=1`` (once per process)."""
    if not _applied and os.environ.get("ONNX_LIGHT_MALLOC_KEEP", "") == "1":
        keep_freed_memory()
