"""Load a split from a local file, a local folder or a hub dataset id, with errors a user can act on."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from autotrain.errors import UserInputError

FORMATS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}
MAPPING_HINT = "fix `data.column_mapping`"


def _split_file(folder: Path, split: str) -> Path | None:
    for ext in FORMATS:
        for candidate in (folder / f"{split}{ext}", *sorted(folder.glob(f"{split}-*{ext}"))):
            if candidate.is_file():
                return candidate
    return None


def _load_file(file: Path, token: str | None = None):
    import datasets

    builder = FORMATS.get(file.suffix.lower())
    if builder is None:
        raise UserInputError(f"{file}: unsupported file type `{file.suffix}`; use one of {', '.join(FORMATS)}")
    kwargs = {"encoding": "utf-8"} if builder == "csv" else {}
    if file.stat().st_size == 0:
        raise UserInputError(f"{file}: the split is empty (the file has no rows)")
    with file_errors(file, builder):
        return datasets.load_dataset(builder, data_files=str(file), split="train", **kwargs)


@contextlib.contextmanager
def file_errors(file: Path, builder: str) -> Iterator[None]:
    """A file's rows read inside: a parser's failure becomes one UserInputError saying what is wrong with the
    file (the line that is not JSON, the bytes that are not UTF-8, ...)."""
    try:
        with _quiet_parser():
            yield
    except UserInputError:
        raise
    except UnicodeDecodeError as exc:
        raise UserInputError(
            f"{file}: not valid UTF-8 text ({exc.reason} at byte {exc.start}); save it as UTF-8"
        ) from None
    except Exception as exc:  # datasets wraps parser errors in its own types
        if "corresponds to no data" in str(exc):  # a header line and no rows
            raise UserInputError(f"{file}: the split is empty (the file has no rows)") from None
        shape = _json_lines_problem(file) if builder == "json" else None
        if shape:
            raise UserInputError(shape) from None
        cause = exc
        while cause.__cause__ is not None or cause.__context__ is not None:
            nxt = cause.__cause__ or cause.__context__
            if isinstance(nxt, UnicodeDecodeError):
                raise UserInputError(f"{file}: not valid UTF-8 text; save it as UTF-8") from None
            cause = nxt
        raise UserInputError(f"{file}: cannot read it as {builder}: {str(exc).splitlines()[0]}") from None


@contextlib.contextmanager
def _quiet_parser() -> Iterator[None]:
    """datasets logs a parser's failure (with its traceback) before raising it; the error raised here says
    it in one line, so that log is held back (AUTOTRAIN_DEBUG=1 shows it)."""
    import logging

    from autotrain.errors import debug_enabled

    parser = logging.getLogger("datasets.packaged_modules.json.json")
    before = parser.level
    if not debug_enabled():
        parser.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        parser.setLevel(before)


def _json_lines_problem(file: Path) -> str | None:
    """Why a JSON Lines file did not load, where a line says it: the first line that is not valid JSON or
    not an object (an array, a string, a number). None if every line is an object (or it is one JSON
    document, not JSON Lines)."""
    import json

    kinds = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "true/false"}
    with open(file, encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except ValueError as exc:
                if number == 1 and file.suffix.lower() == ".json":
                    return None  # a JSON document over several lines, not JSON Lines
                return f"{file}:{number}: not valid JSON ({exc.msg} at column {exc.colno})"
            if not isinstance(value, dict):
                kind = "null" if value is None else kinds.get(type(value), type(value).__name__)
                return (
                    f"{file}:{number}: the line holds {kind}, not an object; each line must be one JSON "
                    'object of columns, such as {"text": "..."}'
                )
    return None


@dataclass(frozen=True)
class Located:
    """Where one split's rows are: a file (`builder`: json, csv or parquet), a folder written by datasets'
    `save_to_disk` (`disk`), or a hub dataset (`hub`, with its `subset`)."""

    kind: str  # "file", "disk" or "hub"
    where: str  # the file, the folder, or the hub id
    split: str
    name: str  # how messages name it
    subset: str | None = None
    revision: str | None = None

    @property
    def builder(self) -> str:
        return FORMATS[Path(self.where).suffix.lower()]


def locate(path: str, split: str, revision: str | None = None) -> Located:
    """Where `path` keeps `split`, or a UserInputError naming what is missing (nothing is read):

    - a file: the file itself is the train split; another split may name another file;
    - a folder: `SPLIT.jsonl|json|csv|parquet` (or `SPLIT-*.ext`) inside it, or a `save_to_disk` dataset;
    - anything else: a hub dataset id.
    `SUBSET:SPLIT` (AutoTrain Advanced's way to name a hub dataset's subset) reads SPLIT of that subset, or of
    the folder `PATH/SUBSET` when PATH is a local folder.
    """
    local = Path(path).expanduser()
    split_as_file = Path(split).expanduser()
    if split_as_file.suffix.lower() in FORMATS and split_as_file.is_file():
        return _file(split_as_file)
    subset, _, part = split.rpartition(":")
    if subset and part:  # `SUBSET:SPLIT`: a hub dataset's subset (config), or locally its folder PATH/SUBSET
        if local.is_dir():
            return locate(str(local / subset), part, revision)
        if not local.exists():
            return Located("hub", path, part, f"{path} [{split}]", subset, revision)
    if local.is_file():
        if split != "train":
            raise UserInputError(
                f"{path} is a single file: it is the train split; for `{split}` give a file path "
                "as the split name or use a folder with one file per split"
            )
        return _file(local, str(local))
    if local.is_dir():
        if (local / "dataset_dict.json").is_file() or (local / "dataset_info.json").is_file():
            return Located("disk", str(local), split, f"{path} [{split}]")
        file = _split_file(local, split)
        if file is None:
            present = sorted(p.name for p in local.iterdir() if p.suffix.lower() in FORMATS)
            raise UserInputError(
                f"{path}: no file for split `{split}` (looked for {split}.jsonl/.json/.csv/.parquet); "
                f"files here: {', '.join(present) or 'none'}"
            )
        return _file(file)
    if path.startswith((".", "/", "~")) or path.count("/") > 1 or Path(path).suffix.lower() in FORMATS:
        raise UserInputError(f"data.path `{path}` does not exist")
    return Located("hub", path, split, f"{path} [{split}]", None, revision)


def _file(file: Path, name: str | None = None) -> Located:
    if FORMATS.get(file.suffix.lower()) is None:
        raise UserInputError(f"{file}: unsupported file type `{file.suffix}`; use one of {', '.join(FORMATS)}")
    if file.stat().st_size == 0:
        raise UserInputError(f"{file}: the split is empty (the file has no rows)")
    return Located("file", str(file), "train", name or str(file))


def load_split(path: str, split: str, token: str | None = None, revision: str | None = None):
    """One split as a `datasets.Dataset` (see `locate` for where it is looked for)."""
    located = locate(path, split, revision)
    if located.kind == "file":
        return _check_rows(_load_file(Path(located.where)), located.name)
    if located.kind == "disk":
        import datasets

        loaded = datasets.load_from_disk(located.where)
        if isinstance(loaded, datasets.DatasetDict):
            if located.split not in loaded:
                raise UserInputError(f"{located.where}: no split `{located.split}`; it has: {', '.join(loaded)}")
            loaded = loaded[located.split]
        return _check_rows(loaded, located.name)
    return _check_rows(load_hub(path, located.split, token, revision, located.subset), located.name)


def load_hub(path: str, split: str, token: str | None, revision: str | None, subset: str | None = None):
    import datasets

    try:
        return datasets.load_dataset(path, subset, split=split, token=token, revision=revision)
    except ValueError as exc:
        if "split" in str(exc).lower():
            raise UserInputError(f"{path}: no split `{split}` ({str(exc).splitlines()[0]})") from None
        raise UserInputError(f"cannot load dataset `{path}`: {str(exc).splitlines()[0]}") from None
    except (FileNotFoundError, ConnectionError, OSError) as exc:
        raise UserInputError(
            f"cannot load dataset `{path}` (not a local path, and the hub said: {str(exc).splitlines()[0]})"
        ) from None


def _check_rows(dataset, name: str):
    if len(dataset) == 0:
        raise UserInputError(f"{name}: the split is empty")
    return dataset


def require_columns(dataset, wanted: dict[str, str], name: str, hint: str = MAPPING_HINT) -> None:
    """`wanted` maps task columns to dataset columns; name every missing one and list what is there."""
    missing = [f"`{src}` (for {task})" for task, src in wanted.items() if src not in dataset.column_names]
    if missing:
        raise UserInputError(
            f"{name}: column {', '.join(missing)} not found; the data has columns: "
            f"{', '.join(dataset.column_names)} ({hint})"
        )
