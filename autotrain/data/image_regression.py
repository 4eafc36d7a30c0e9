"""image-regression data: an `image` and a numeric `target` per row (renamed from the data's own columns)."""

from __future__ import annotations

from autotrain.data.images import check_images, load_image_columns
from autotrain.data.regression import TARGETS
from autotrain.data.text_tasks import INPUT_HINT, Splits, as_number, load_splits


def _checked(dataset, name: str, wanted: dict[str, str], labels: bool = True):
    """Images that open, targets as float32 numbers; a bad cell is named by file, row and column."""
    from datasets import Value

    check_images(dataset, name, wanted["image"])
    if not labels:
        return dataset
    targets = [as_number(v, name, row, wanted["target"]) for row, v in enumerate(dataset["target"])]
    dataset = dataset.remove_columns("target").add_column("target", targets)
    return dataset.cast_column("target", Value("float32"))


def _split(cfg, split: str, token=None):
    dataset, name, wanted = load_image_columns(
        cfg, cfg.data.path, split, ("image", "target"), {"target": TARGETS}, token
    )
    return _checked(dataset, name, wanted), name


def load_image_regression_splits(cfg, token: str | None = None) -> Splits:
    return load_splits(cfg, _split, token)


def load_image_regression_rows(cfg, path: str, labels: bool):
    """A file's (or AutoTrain Advanced folder's) images, and with `labels` their targets, in file order."""
    columns = ("image", "target") if labels else ("image",)
    dataset, name, wanted = load_image_columns(cfg, path, "train", columns, {"target": TARGETS}, hint=INPUT_HINT)
    return _checked(dataset, name, wanted, labels), name
