"""The pages of memory-mapped data that a run has read, let go of after each step (Linux).

A run reads its prepared rows from memory-mapped Arrow files (datasets' `Dataset.from_file`), in a shuffled
order. On each read the kernel maps the file's pages around the row into the process, a large folio at a time
(2 MiB and more on recent kernels), and leaves them mapped: the process's resident set grows with every batch,
toward the size of the whole file over an epoch (39 MiB after 20 rows of a 135 MB file, measured here). Those
pages belong to the page cache and the kernel can take them back, but they count in the resident set that
`top`, a container's monitor and the run's own memory figures show. After each training step and each
evaluation, `ReleasedPages` tells the kernel that the process no longer needs them (madvise MADV_DONTNEED on
the files' mappings): the pages stay in the page cache and the next read maps them again.

Only a mapping that holds a buffer of one of the datasets is touched. The callback keeps the datasets (and so
their mappings) alive, so no other memory can take the mapping's place. Where madvise is not available (not
Linux), nothing is done.
"""

from __future__ import annotations

import ctypes
import os
import sys
from functools import lru_cache

from transformers import TrainerCallback

MADV_DONTNEED = 4


def _buffer_addresses(dataset) -> list[int]:
    """Where the Arrow buffers of a `datasets.Dataset` lie in this process's memory."""
    table = getattr(getattr(dataset, "data", None), "table", None)
    if table is None:
        return []
    return [
        buffer.address
        for column in table.columns
        for chunk in column.chunks
        for buffer in chunk.buffers()
        if buffer is not None and buffer.size
    ]


def _with_sources(dataset) -> list:
    """`dataset`, and where it reads the rows of others (a mixture's sources: autotrain.data.mixture), those."""
    form = getattr(dataset, "format", None)
    transform = form.get("format_kwargs", {}).get("transform") if isinstance(form, dict) else None
    return [dataset, *getattr(transform, "parts", [])]


def file_mappings(datasets) -> list[tuple[int, int]]:
    """(start, length) of each file mapping of this process that holds a buffer of one of `datasets` (or of the
    sources a mixture of them reads)."""
    every = [d for dataset in datasets if dataset is not None for d in _with_sources(dataset)]
    addresses = sorted({a for dataset in every for a in _buffer_addresses(dataset)})
    if not addresses or not sys.platform.startswith("linux"):
        return []
    found = []
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as handle:
        for line in handle:
            fields = line.split(maxsplit=5)
            if len(fields) < 6 or not fields[5].startswith("/"):  # anonymous memory, [heap], [stack], ...
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            if any(start <= a < end for a in addresses):
                found.append((start, end - start))
    return found


@lru_cache(maxsize=1)
def _madvise():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        function = libc.madvise
    except (OSError, AttributeError, TypeError):  # no C library to load by name None (Windows)
        return None
    function.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    function.restype = ctypes.c_int
    return function


class ReleasedPages(TrainerCallback):
    """After each step and each evaluation, the mapped pages of `datasets` are let go of (see the module)."""

    def __init__(self, *datasets) -> None:
        self.datasets = [d for d in datasets if d is not None]  # held: their mappings stay where they are
        self._pid: int | None = None
        self._mappings: list[tuple[int, int]] = []

    def release(self) -> None:
        if self._pid != os.getpid():  # a forked process has the same mappings, a spawned one its own
            self._mappings, self._pid = file_mappings(self.datasets), os.getpid()
        madvise = _madvise() if self._mappings else None  # none found: not Linux, or nothing memory-mapped
        if madvise is None:
            return
        for start, length in self._mappings:
            madvise(start, length, MADV_DONTNEED)

    def on_step_end(self, args, state, control, **kwargs):
        self.release()

    def on_evaluate(self, args, state, control, **kwargs):
        self.release()
