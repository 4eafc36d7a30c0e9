"""How a CPU run's memory is handed out: glibc's malloc with its mmap threshold fixed at 128 KiB, raised
while an optimizer steps.

glibc serves a block of at least the mmap threshold with a mapping of its own, returned to the system when
the block is freed; smaller blocks come from a heap that keeps freed memory for reuse. By default the
threshold grows to the size of each large block freed (up to 32 MiB), so after the first training step
nearly every tensor comes from the heap, and the process stays resident at whatever the heap once reached,
fragments included: 1.1 to 2 times the tensors' live bytes on the runs of benchmarks/memory_estimate.py.
With the threshold fixed (`mallopt(M_MMAP_THRESHOLD, 128 KiB)`, which also turns the growth off) resident
memory follows the tensors alive, which is what the memory estimate counts, and its peak is lower.

A fresh mapping is faulted in page by page, so every large block costs time. An optimizer's step allocates
the same temporaries parameter after parameter (CAME's eager step: 1.4 million page faults on SmolLM2-135M
against 0.5 million from a heap), so while a step runs the threshold is 32 MiB, and when it ends the
threshold is 128 KiB again and the heap's free pages go back to the system (`malloc_trim`): the step's
temporaries are reused within it and not kept after it. Both through torch's global optimizer-step hooks.
Timings: docs/memory-and-preview.md.

The user decides otherwise with malloc's own variables (`MALLOC_MMAP_THRESHOLD_`, `GLIBC_TUNABLES`), which
are then left as they are, or with `AUTOTRAIN_MALLOC=system` (glibc's default behaviour).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from functools import lru_cache

M_MMAP_THRESHOLD = -3  # mallopt's parameter numbers (malloc.h)
M_TRIM_THRESHOLD = -1
THRESHOLD = 128 * 1024
STEP_THRESHOLD = 32 * 1024 * 1024  # while an optimizer steps (glibc's own ceiling)
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
    """Fix the mmap threshold for this process, raised while an optimizer steps (see the module's docstring),
    when `mode()` says so; returns the mode."""
    how = mode()
    if how == "returning":
        _mallopt()(M_MMAP_THRESHOLD, THRESHOLD)
        _hook_optimizer_steps()
    return how


@lru_cache(maxsize=1)
def _hook_optimizer_steps() -> None:
    """Every optimizer's step (once per process) takes its temporaries from the heap, trimmed after it."""
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    register_optimizer_step_pre_hook(_step_starts)
    register_optimizer_step_post_hook(_step_ends)


def _step_starts(*_) -> None:
    _mallopt()(M_MMAP_THRESHOLD, STEP_THRESHOLD)
    _mallopt()(M_TRIM_THRESHOLD, STEP_THRESHOLD)  # a block freed at the heap's top is not handed back at once


def _step_ends(*_) -> None:
    _mallopt()(M_MMAP_THRESHOLD, THRESHOLD)
    _mallopt()(M_TRIM_THRESHOLD, THRESHOLD)  # glibc's default
    trim()


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
