"""How a CPU run's memory is handed out: glibc's malloc with its mmap threshold fixed at 128 KiB.

glibc serves a block of at least the mmap threshold with a mapping of its own, returned to the system when
the block is freed; smaller blocks come from a heap that keeps freed memory for reuse. By default the
threshold grows to the size of each large block freed (up to 32 MiB), so after the first training step
nearly every tensor comes from the heap, and the process stays resident at whatever the heap once reached,
fragments included: 1.1 to 2 times the tensors' live bytes on the runs of benchmarks/memory_estimate.py.
With the threshold fixed (`mallopt(M_MMAP_THRESHOLD, 128 KiB)`, which also turns the growth off) resident
memory follows the tensors alive, which is what the memory estimate counts, and its peak is lower.

The user decides otherwise with malloc's own variables (`MALLOC_MMAP_THRESHOLD_`, `GLIBC_TUNABLES`), which
are then left as they are, or with `AUTOTRAIN_MALLOC=system` (glibc's default behaviour).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from functools import lru_cache

M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)
THRESHOLD = 128 * 1024
OPT_OUT = "AUTOTRAIN_MALLOC"


def mode() -> str:
    """How malloc will run in a CPU training process: "returning" (autotrain fixes the threshold),
    "user" (malloc's own variables are set: left as they are), "system" (AUTOTRAIN_MALLOC=system, or a C
    library without glibc's mallopt: freed blocks may stay resident)."""
    if os.environ.get(OPT_OUT, "").strip().lower() == "system":
        return "system"
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", ""):
        return "user"
    return "returning" if _mallopt() is not None else "system"


def return_freed_blocks() -> str:
    """Fix the mmap threshold for this process (see the module's docstring) when `mode()` says so; returns
    the mode."""
    how = mode()
    if how == "returning":
        _mallopt()(M_MMAP_THRESHOLD, THRESHOLD)
    return how


def trim() -> None:
    """Give the heap's free pages back to the system (`malloc_trim`), so that memory allocated next shows
    in the resident set as it is touched rather than filling pages already resident (no-op elsewhere)."""
    if _mallopt() is not None:
        function = getattr(_libc(), "malloc_trim", None)
        if function is not None:
            function(0)


@lru_cache(maxsize=1)
def _libc():
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")


@lru_cache(maxsize=1)
def _mallopt():
    """glibc's `mallopt`, or None on another C library (musl, macOS)."""
    if not hasattr(os, "confstr") or "glibc" not in (_confstr("CS_GNU_LIBC_VERSION") or ""):
        return None
    try:
        library = _libc()
    except OSError:
        return None
    function = getattr(library, "mallopt", None)
    if function is not None:
        function.argtypes, function.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return function


def _confstr(name: str) -> str | None:
    try:
        return os.confstr(name)
    except (ValueError, OSError):
        return None
