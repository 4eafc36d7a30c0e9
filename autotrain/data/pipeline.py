"""A split prepared once, in one pass: its rows read a batch at a time, each batch turned into training rows by a
`job` (templated, tokenized, labelled, cut or packed) in worker processes, and the results written, in the
rows' order, to one Arrow file of the cache entry. Memory stays bounded: the main process holds a few batches
in flight (two per worker), each worker one batch; nothing holds a column of the whole split.

The workers each hold the job and run the tokenizer on one thread (the processes are the parallelism); a
split of fewer than MIN_PARALLEL_ROWS known rows is prepared in this process.
"""

from __future__ import annotations

import os
import signal
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

MIN_PARALLEL_ROWS = 4000
IN_FLIGHT = 2  # batches per worker: one being worked on, one waiting
TURNS = 8  # a split of known size is cut into at least this many batches per worker (see batch_rows)
DATA_FILE = "data.arrow"
SHOWN_ROWS = 5  # left-out rows named by number
BATCH_BYTES = 16 << 20  # prepared rows gathered into one record batch of the file (see Writer)
_JOB: Any = None  # the job of a worker process (set by _start)
_STOPS = {signal.SIGTERM, signal.SIGINT}  # blocked while the workers start (see Workers)
_MASKABLE = hasattr(signal, "pthread_sigmask")  # POSIX; Windows has no signal masks


def usable_cpus() -> int:
    """CPUs this process may run on: its affinity, lowered by a cgroup CPU quota (a container's `--cpus`)."""
    count = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            count = min(count, max(1, int(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, count)


def worker_count(asked: int | str, rows: int | None) -> int:
    """Workers for a split: `asked` (a number, or "auto": every usable CPU); none (this process) for a small
    split."""
    if rows is not None and rows < MIN_PARALLEL_ROWS:
        return 0
    workers = usable_cpus() if asked == "auto" else int(asked)
    return workers if workers > 1 else 0


def batch_rows(job, rows: int | None, workers: int, most: int) -> int:
    """Rows a batch reads: `most`, or, where the job prepares each row on its own (`job.rows_apart`: what it
    makes does not depend on where batches start) and the split's size is known, few enough for at least
    TURNS batches per worker, so that the last batches, on which the other workers wait, are short (5,000 rows
    on 2 workers in 1,000-row batches: the fifth batch ran alone)."""
    if not rows or not workers or not getattr(job, "rows_apart", False):
        return most
    return max(1, min(most, -(-rows // (workers * TURNS))))


def _start(job) -> None:
    """A worker process: the job, one tokenizer thread (the workers are the parallelism), no bars, and the
    signals' own actions. The run's handlers (SIGTERM saves a checkpoint, or raises) are its process's: in a
    worker, a handler's exception caught by the pool as a batch's failure left the worker alive and the pool's
    terminate waiting on it forever. A worker ends at SIGTERM (the pool's terminate) and leaves SIGINT (a
    Ctrl-C reaches the whole process group) to the run. Both arrive blocked (see ``Workers``) and are let in
    once the worker's own actions are set: one that came earlier is taken by those."""
    global _JOB
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if _MASKABLE:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPS)
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    os.environ.setdefault("TQDM_DISABLE", "1")
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    _JOB = job


def _run(table, first_row: int):
    return _JOB(table, first_row)


class Workers:
    """`job(table, first_row)` on each table, in `count` worker processes (0: in this process), the results in
    the tables' order. The processes start when this is made: on Linux forked from this process (nothing to
    import or unpickle again, so small splits pay no start-up; made before the progress display starts its
    thread), elsewhere spawned afresh. A context manager: the processes end with it."""

    def __init__(self, job, count: int):
        import gc
        import multiprocessing
        import sys

        self.job, self.count, self.pool = job, count, None
        if count:
            method = "fork" if sys.platform.startswith("linux") else "spawn"
            gc.freeze()  # the parent's objects out of the workers' collections: their pages stay shared
            # The workers are made with SIGTERM and SIGINT blocked, until ``_start`` has set their own actions: a
            # pool terminated while a worker was starting (a large parent forks slowly) sent SIGTERM to the run's
            # handler in it, which let it live on, and the terminate waited on it forever. Here a signal in the
            # meantime waits the few milliseconds and then reaches the run's handler.
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS) if _MASKABLE else None
            try:
                self.pool = multiprocessing.get_context(method).Pool(count, initializer=_start, initargs=(job,))
            finally:
                if mask is not None:
                    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
                gc.unfreeze()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()

    def map(self, tables: Iterator, on_result: Callable[[Any, int], None]) -> None:
        """`on_result(result, rows_in)` for each table, in order; a job's error (a bad row) stops the rest and is
        raised here. At most IN_FLIGHT tables per worker are read ahead."""
        first = 0
        if self.pool is None:
            for table in tables:
                on_result(self.job(table, first), table.num_rows)
                first += table.num_rows
            return
        pending: deque = deque()
        for table in tables:
            pending.append((self.pool.apply_async(_run, (table, first)), table.num_rows))
            first += table.num_rows
            while len(pending) >= IN_FLIGHT * self.count:
                result, rows = pending.popleft()
                on_result(result.get(), rows)
        while pending:
            result, rows = pending.popleft()
            on_result(result.get(), rows)


class Writer:
    """The prepared rows, appended to one Arrow stream file (the format `datasets.Dataset.from_file` maps), in
    record batches of about BATCH_BYTES: reading the file maps each batch's header, and the kernel maps the
    pages around each one it touches (64 KiB), so a few large batches keep what a run's reading of the file
    holds in memory small (1,000-row batches cost 65 MiB at a million rows)."""

    def __init__(self, path: Path):
        self.path = path
        self.sink = self.writer = None
        self.rows = 0
        self.held: list = []

    def write(self, table) -> None:
        if not table.num_rows:  # a batch with every row left out
            return
        self.held.append(table)
        self.rows += table.num_rows
        if sum(t.nbytes for t in self.held) >= BATCH_BYTES:
            self._flush()

    def _flush(self, schema=None) -> None:
        import pyarrow as pa

        if self.writer is None and (self.held or schema is not None):
            self.sink = pa.OSFile(str(self.path), "wb")
            self.writer = pa.ipc.new_stream(self.sink, self.held[0].schema if self.held else schema)
        if self.held:
            self.writer.write_table(pa.concat_tables(self.held).combine_chunks())
            self.held = []

    def close(self, schema=None) -> None:
        """Write what is held; with no row at all, an empty file of `schema`'s columns."""
        self._flush(schema)
        if self.writer is not None:
            self.writer.close()
            self.sink.close()


def prepare(entry, workers: Workers, tables: Iterator, total: int | None, progress) -> dict:
    """Every table through the workers' job into the entry's data file, with `progress` (a RowProgress) and the
    entry's progress file moving as rows are done. Returns what done.json records: rows read, rows written,
    how many rows were left out and the first few of them."""
    writer = Writer(entry.file(DATA_FILE))
    state = {"read": 0, "dropped": 0, "first_dropped": [], "told": 0.0}

    def on_result(result, rows_in: int) -> None:
        table, dropped = result
        writer.write(table)
        if len(dropped):
            room = max(0, SHOWN_ROWS - len(state["first_dropped"]))
            state["first_dropped"] += [state["read"] + int(i) for i in dropped[:room]]
            state["dropped"] += len(dropped)
        state["read"] += rows_in
        progress.update(state["read"], total)
        if time.monotonic() - state["told"] > 1.0:  # the processes waiting for this one read it
            entry.progress(state["read"], total)
            state["told"] = time.monotonic()

    try:
        workers.map(tables, on_result)
    finally:
        writer.close(getattr(workers.job, "schema", None))
    return {
        "rows": state["read"],
        "written": writer.rows,
        "left_out": state["dropped"],
        "first_left_out": state["first_dropped"],
        "files": [DATA_FILE],
        "bytes": entry.file(DATA_FILE).stat().st_size if entry.file(DATA_FILE).exists() else 0,
    }


def load(entry, record: dict):
    """The prepared rows of a complete entry, memory-mapped."""
    from datasets import Dataset, concatenate_datasets

    parts = [Dataset.from_file(str(entry.file(name))) for name in record["files"]]
    return parts[0] if len(parts) == 1 else concatenate_datasets(parts)
