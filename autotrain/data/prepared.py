"""One split of one source, prepared once and cached (autotrain.data.cache), for every process of the run.

A complete cache entry is used as it is (memory-mapped). Otherwise the first process of each machine tries
to claim the entry and, if it does, prepares it (autotrain.data.pipeline) with progress on the terminal or
as lines in the log; every other process waits for the entry's files, the first process of each machine
showing the preparer's progress. No process waits on a collective meanwhile.
"""

from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from autotrain.data import cache, pipeline
from autotrain.data.loading import Located, load_hub, locate
from autotrain.errors import UserInputError


@dataclass(frozen=True)
class SplitSource:
    """A split of a data source, as a run reads it: its task columns come from `mapping` (given, or found)."""

    path: str
    split: str
    mapping: dict[str, str] = field(default_factory=dict)  # task column -> the data's; empty: found by name

    @property
    def name(self) -> str:
        return f"{self.path} [{self.split}]"


def local_main() -> bool:
    """The first process of this machine (LOCAL_RANK 0, or a process no launcher started)."""
    return os.environ.get("LOCAL_RANK", "0") == "0"


def identity(located: Located, token: str | None = None) -> tuple[dict, dict]:
    """(what the source is, what says whether it changed): a file's path and its size and modification time; a
    saved folder's files' sizes and times; a hub dataset's id, subset and split, and the files datasets keeps
    of its download (their names hold the revision it resolved)."""
    if located.kind == "file":
        stat = Path(located.where).stat()
        return {"file": str(Path(located.where).resolve())}, {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    if located.kind == "disk":
        folder = Path(located.where).resolve()
        files = sorted(p for p in folder.rglob("*") if p.is_file())
        stats = [(str(p.relative_to(folder)), p.stat().st_size, p.stat().st_mtime_ns) for p in files[:1000]]
        return {"folder": str(folder), "split": located.split}, {"files": stats}
    loaded = load_hub(located.where, located.split, token, located.revision, located.subset)
    files = [Path(f["filename"]).parts[-4:] for f in loaded.cache_files]
    return {"hub": located.where, "subset": located.subset, "split": located.split}, {"files": files}


def prepared_split(source: SplitSource, job, inputs: dict, what: str, workers: int | str, token: str | None = None):
    """(the prepared rows of `source` as a memory-mapped Dataset, the record of its preparation: rows read,
    written, left out). `job(table, first_row) -> (table, left-out rows)` prepares a batch (see pipeline);
    `job.columns(names, name)` gives the task-column mapping of the data's columns (raising what is missing);
    `inputs`: everything besides the source that shapes the result."""
    from autotrain.data.rows import FORMAT

    located = locate(source.path, source.split)
    what_, changed = identity(located, token)
    entry = cache.Entry(what_, {**inputs, "source": changed, "mapping": source.mapping, "format": FORMAT})
    try:
        record = entry.record() or _made_or_waited(entry, source, located, job, what, workers, token)
        entry.hold()
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise  # a full disk: said as such by the run (autotrain.training.disk)
        raise UserInputError(
            f"the data cache {entry.root} cannot be written ({exc.strerror or exc}): set {cache.CACHE_ENV} to a "
            "folder this user can write"
        ) from None
    return pipeline.load(entry, record), record


def _made_or_waited(entry, source: SplitSource, located: Located, job, what: str, workers, token) -> dict:
    """The entry's record: prepared here when this process claims it, else once the process that did is done."""
    if not (local_main() and entry.claim()) and _waited(entry, what):
        return entry.record()
    try:
        record = _prepare(entry, source, located, job, what, workers, token)
    except UserInputError as exc:
        entry.fail(str(exc))
        raise
    except BaseException:
        entry.fail("the process preparing the data stopped before it was done; start the run again")
        raise
    entry.publish(record)
    return record


def _waited(entry, what: str) -> bool:
    """Wait for the process preparing the entry (True), or until this one takes a stale claim over (False);
    the first process of each machine shows the preparer's progress."""
    from autotrain.data.progress import RowProgress

    shown = RowProgress(f"{what}: waiting for another process to prepare it") if local_main() else None
    try:
        return cache.wait_for(entry, local_main(), lambda done, total: shown and shown.update(done, total))
    finally:
        if shown is not None:
            shown.close()


def _prepare(entry, source: SplitSource, located: Located, job, what: str, workers, token) -> dict:
    from autotrain.data.progress import RowProgress
    from autotrain.data.reading import BATCH_ROWS, batches, column_names, known_rows, rows_dataset

    dataset = rows_dataset(located, token)
    mapping = job.columns(column_names(dataset, located), source.name, source.mapping)
    total = known_rows(located, dataset)
    count = pipeline.worker_count(workers, total)
    began = time.perf_counter()
    with pipeline.Workers(job, count) as pool:  # before the progress display's thread: forked workers
        progress = RowProgress(f"{what}: reading, templating, tokenizing and writing", total)
        try:
            tables = batches(dataset, located, mapping, pipeline.batch_rows(job, total, count, BATCH_ROWS))
            record = pipeline.prepare(entry, pool, tables, total, progress)
        finally:
            progress.close()
    seconds = time.perf_counter() - began
    _give_back_memory()
    record.update(seconds=round(seconds, 3), workers=count)
    size = record["bytes"] / 2**20
    progress.close(
        f"{what}: {record['rows']:,} row{'s' if record['rows'] != 1 else ''} prepared in {seconds:.1f} s "
        f"({record['rows'] / max(seconds, 1e-9):,.0f} "
        f"rows/s, {max(count, 1)} process{'es' if count > 1 else ''}), {record['written']:,} written "
        f"({size:,.1f} MiB in {entry.folder})"
    )
    return record


def _give_back_memory() -> None:
    """Return what reading and writing the split left in Arrow's memory pool to the system (the run trains on
    for hours with it otherwise)."""
    import gc

    import pyarrow as pa

    gc.collect()
    pa.default_memory_pool().release_unused()
