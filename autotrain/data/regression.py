"""Regression data: an input and a numeric `target` per row (renamed from the data's own columns). The input
is the task's first column: a `text` (text-regression) or an `image` (image-regression: a table of image
paths or stored images, or AutoTrain Advanced's folder with a metadata file)."""

from __future__ import annotations

from autotrain.config.tasks import TASKS
from autotrain.data.images import check_images, load_image_columns
from autotrain.data.text_tasks import INPUT_HINT, Splits, as_number, check_texts, load_columns, load_splits

TARGETS = ("target", "label", "labels", "score")  # the target column when the mapping names none


def numeric_targets(dataset, name: str, source: str):
    """The `target` column as float32 numbers (a CSV may hold them as text); a cell that is no finite number
    is named by file, row and column (`source`: the data's name of the column)."""
    from datasets import Value

    targets = [as_number(v, name, row, source) for row, v in enumerate(dataset["target"])]
    dataset = dataset.remove_columns("target").add_column("target", targets)
    return dataset.cast_column("target", Value("float32"))


def _load(cfg, path: str, split: str, labels: bool, **options):
    """The split with its inputs checked (texts as text, images that open) and, with `labels`, its targets as
    float32 numbers; a bad cell is named by file, row and column."""
    inputs = TASKS[cfg.task].columns[0]
    columns = (inputs, "target") if labels else (inputs,)
    load = load_image_columns if inputs == "image" else load_columns
    dataset, name, wanted = load(cfg, path, split, columns, {"target": TARGETS}, **options)
    if inputs == "image":
        check_images(dataset, name, wanted["image"])
    else:
        check_texts(dataset, "text", name, wanted["text"])
    return (numeric_targets(dataset, name, wanted["target"]) if labels else dataset), name


def load_regression_splits(cfg, token: str | None = None) -> Splits:
    return load_splits(cfg, lambda cfg, split, token: _load(cfg, cfg.data.path, split, True, token=token), token)


def load_regression_rows(cfg, path: str, labels: bool):
    """A file's inputs (or AutoTrain Advanced folder's images), and with `labels` their targets, through the
    run's column mapping, in file order."""
    return _load(cfg, path, "train", labels, hint=INPUT_HINT)
