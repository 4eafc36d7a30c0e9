"""A split's rows read a batch at a time, with bounded memory: nothing of the whole split is held, and a local
file is read where it is (no copy of it is written).

A local file and a hub dataset in a streaming run are read by datasets' streaming readers; a hub dataset
otherwise through datasets' own download and cache (so that `HF_HUB_OFFLINE=1` finds it again), and a
`save_to_disk` folder from its Arrow files. Each batch is a pyarrow Table of the task's columns (renamed by
the column mapping). How many rows a split holds is known before reading for a JSON Lines, CSV or Parquet
file, a saved folder and a downloaded hub split (the progress display shows a share and a time left), and
only counted as it is read otherwise.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from autotrain.data.loading import Located, file_errors, load_hub, load_split
from autotrain.errors import UserInputError

BATCH_ROWS = 1000  # rows read, labelled and written together
JSON_CHUNK = 2 << 20  # bytes of a JSON Lines file parsed at once (datasets' default: 10 MiB)


def rows_dataset(located: Located, token: str | None = None, streaming: bool = False):
    """The split as a datasets IterableDataset (read as it is iterated)."""
    import datasets

    if located.kind == "file":
        kwargs = {"encoding": "utf-8"} if located.builder == "csv" else {}
        if located.builder == "json":
            kwargs["chunksize"] = JSON_CHUNK  # bytes parsed at once: what reading holds, whatever the file
        with file_errors(Path(located.where), located.builder):
            return datasets.load_dataset(
                located.builder, data_files=located.where, split="train", streaming=True, **kwargs
            )
    if located.kind == "hub" and streaming:
        try:
            return datasets.load_dataset(
                located.where,
                located.subset,
                split=located.split,
                token=token,
                revision=located.revision,
                streaming=True,
            )
        except (ValueError, FileNotFoundError, ConnectionError, OSError) as exc:
            raise UserInputError(f"cannot stream dataset `{located.where}`: {str(exc).splitlines()[0]}") from None
    if located.kind == "hub":
        dataset = load_hub(located.where, located.split, token, located.revision, located.subset)
    else:
        dataset = load_split(located.where, located.split)
    return dataset.to_iterable_dataset()


@contextlib.contextmanager
def read_errors(located: Located) -> Iterator[None]:
    """Reading the rows: a parser's failure becomes one line about the file (see loading.file_errors)."""
    if located.kind == "file":
        with file_errors(Path(located.where), located.builder):
            yield
        return
    try:
        yield
    except UserInputError:
        raise
    except Exception as exc:  # noqa: BLE001 - a hub dataset's reader: its own types
        raise UserInputError(f"{located.name}: cannot read the rows: {str(exc).strip().splitlines()[0]}") from None


def batches(dataset, located: Located, mapping: dict[str, str], size: int = BATCH_ROWS) -> Iterator:
    """pyarrow Tables of up to `size` rows, with the task's columns (`mapping`: task column -> the data's)."""
    import pyarrow as pa

    with read_errors(located):
        for table in dataset.with_format("arrow").iter(batch_size=size):
            yield pa.table({task: table.column(column) for task, column in mapping.items()})


def column_names(dataset, located: Located) -> list[str]:
    """The split's columns, from its features or, where the reader does not know them before, its first row."""
    if dataset.column_names is not None:
        return list(dataset.column_names)
    with read_errors(located):
        first = next(iter(dataset.with_format("arrow").iter(batch_size=1)), None)
    if first is None:
        raise UserInputError(f"{located.name}: the split is empty")
    return list(first.column_names)


def known_rows(located: Located, dataset=None) -> int | None:
    """How many rows the split holds, where that is cheap to know before reading it: a JSON Lines file's
    lines that hold something, a CSV file's lines after the header (a quoted field over several lines makes
    it an estimate), a Parquet file's metadata, a hub split's declared size; else None."""
    if located.kind == "file":
        file = Path(located.where)
        suffix = file.suffix.lower()
        if suffix == ".jsonl":
            return _lines(file)
        if suffix == ".csv":
            return max(0, _lines(file) - 1)
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            with contextlib.suppress(Exception):
                return pq.ParquetFile(file).metadata.num_rows
        return None
    info = getattr(dataset, "info", None)
    splits = getattr(info, "splits", None) or {}
    found = splits.get(located.split) if hasattr(splits, "get") else None
    return getattr(found, "num_examples", None) or None


def _lines(file: Path) -> int:
    """Lines holding more than white space, read in 16 MiB chunks."""
    count, chunk_tail = 0, b""
    with open(file, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 24), b""):
            lines = (chunk_tail + chunk).split(b"\n")
            chunk_tail = lines.pop()
            count += sum(1 for line in lines if line.strip())
    return count + int(bool(chunk_tail.strip()))
