"""What the text tasks' data modules share: their splits with the task's column names, a seeded held-out
validation split, and checks that name the file, the row and the column of a bad value.

Every check runs before any weights load. Rows are counted from 0 in the order of the file, as `datasets`
reads them (a CSV's header line is not a row).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotrain.data.loading import FORMATS, MAPPING_HINT, load_split, require_columns
from autotrain.errors import UserInputError

INPUT_HINT = "the run reads the columns it was trained on, through its `data.column_mapping`"
Columns = tuple[Any, str, dict[str, str]]  # a split with a task's columns, its name, task column -> data's column


@dataclass
class Splits:
    train: Any  # datasets.Dataset with the task's own column names
    valid: Any  # the same columns: `valid_split`, or `valid_size` of train held out
    train_name: str  # the file (or hub split) each came from, for messages
    valid_name: str


def split_name(path: str, split: str) -> str:
    """The file a split comes from when it is local (what a message should name), else `PATH [SPLIT]`."""
    as_file = Path(split).expanduser()
    if as_file.suffix.lower() in FORMATS and as_file.is_file():
        return str(as_file)
    local = Path(path).expanduser()
    subset, _, part = split.rpartition(":")
    folder, part = (local / subset, part) if subset and part and local.is_dir() else (local, split)
    if local.is_file():
        return str(local)
    if folder.is_dir():
        for ext in FORMATS:
            candidates = [folder / f"{part}{ext}", *sorted(folder.glob(f"{part}-*{ext}"))]
            found = next((c for c in candidates if c.is_file()), None)
            if found is not None:
                return str(found)
    return f"{path} [{split}]"


def mapping(cfg, columns: Iterable[str], defaults: dict[str, tuple[str, ...]] | None = None, dataset=None) -> dict:
    """Task column -> dataset column: `data.column_mapping`, else the first of `defaults[column]` the data has,
    else the task column's own name."""
    given, defaults = cfg.data.column_mapping, defaults or {}
    names = dataset.column_names if dataset is not None else []
    out = {}
    for column in columns:
        found = next((c for c in defaults.get(column, ()) if c in names), column)
        out[column] = given.get(column, found)
    return out


def load_columns(
    cfg,
    path: str,
    split: str,
    columns: Iterable[str],
    defaults: dict[str, tuple[str, ...]] | None = None,
    token=None,
    hint: str = MAPPING_HINT,
) -> Columns:
    """The split with exactly the task's `columns` (renamed from the dataset's), the name to report, and
    task column -> the dataset column it came from (what messages name)."""
    name = split_name(path, split)
    dataset = load_split(path, split, token=token)
    wanted = mapping(cfg, columns, defaults, dataset)
    require_columns(dataset, wanted, name, hint)
    if len(set(wanted.values())) == len(wanted):
        dataset = dataset.select_columns(list(wanted.values()))
        renamed = {source: task for task, source in wanted.items() if source != task}
        dataset = dataset.rename_columns(renamed) if renamed else dataset
    else:  # one dataset column read as two task columns
        dataset = dataset.map(lambda row: {task: row[source] for task, source in wanted.items()})
        dataset = dataset.select_columns(list(wanted))
    return dataset, name, wanted


def holdout(count: int, size: float, seed: int, name: str) -> tuple[list[int], list[int]]:
    """Seeded split of `count` row indices into (train, valid): about `size` of them held out, at least one
    each way."""
    import numpy as np

    if count < 2:
        raise UserInputError(
            f"{name}: {count} row(s): too few to hold out a validation split; add rows or set `data.valid_split`"
        )
    order = np.random.default_rng(seed).permutation(count)
    held = min(max(1, round(count * size)), count - 1)
    return sorted(order[held:].tolist()), sorted(order[:held].tolist())


def load_splits(cfg, load_one: Callable[[Any, str, Any], tuple[Any, str]], token=None) -> Splits:
    """Train and validation splits through `load_one(cfg, split, token) -> (checked dataset, name)`."""
    train, train_name = load_one(cfg, cfg.data.train_split, token)
    if cfg.data.valid_split:
        valid, valid_name = load_one(cfg, cfg.data.valid_split, token)
        return Splits(train, valid, train_name, valid_name)
    keep, held = holdout(len(train), cfg.data.valid_size, cfg.training_args.seed, train_name)
    return Splits(train.select(keep), train.select(held), train_name, f"{train_name} (held out)")


def bad_row(name: str, row: int, column: str, problem: str) -> UserInputError:
    return UserInputError(f"{name}: row {row}, column `{column}`: {problem}")


def shown(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def check_texts(dataset, column: str, name: str, source: str | None = None, allow_empty: bool = False) -> None:
    """Every row of `column` holds text (an empty one only with `allow_empty`)."""
    for row, value in enumerate(dataset[column]):
        if is_missing(value):
            raise bad_row(name, row, source or column, "no text (the cell is empty)")
        if not isinstance(value, str):
            raise bad_row(name, row, source or column, f"must be text, got {type(value).__name__} {shown(value)}")
        if not allow_empty and not value.strip():
            raise bad_row(name, row, source or column, "the text is empty")


def as_number(value: Any, name: str, row: int, column: str) -> float:
    """A target cell as a finite number (a CSV may hold numbers as text)."""
    if isinstance(value, bool) or is_missing(value):
        raise bad_row(name, row, column, f"must be a number, got {shown(value)}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise bad_row(name, row, column, f"must be a number, got {shown(value)}") from None
    if not math.isfinite(number):
        raise bad_row(name, row, column, f"must be a finite number, got {shown(value)}")
    return number
