"""text-regression data: a `text` and a numeric `target` per row (renamed from the data's own columns)."""

from __future__ import annotations

from autotrain.data.text_tasks import INPUT_HINT, Splits, as_number, check_texts, load_columns, load_splits

TARGETS = ("target", "label", "labels", "score")  # the target column when the mapping names none


def _checked(dataset, name: str, wanted: dict[str, str], labels: bool = True):
    """Texts as text, targets as float32 numbers; a bad cell is named by file, row and column."""
    from datasets import Value

    check_texts(dataset, "text", name, wanted["text"])
    if not labels:
        return dataset
    targets = [as_number(v, name, row, wanted["target"]) for row, v in enumerate(dataset["target"])]
    dataset = dataset.remove_columns("target").add_column("target", targets)
    return dataset.cast_column("target", Value("float32"))


def _split(cfg, split: str, token=None):
    dataset, name, wanted = load_columns(cfg, cfg.data.path, split, ("text", "target"), {"target": TARGETS}, token)
    return _checked(dataset, name, wanted), name


def load_regression_splits(cfg, token: str | None = None) -> Splits:
    return load_splits(cfg, _split, token)


def load_regression_rows(cfg, path: str, labels: bool):
    """A file's texts (and with `labels` its targets), through the run's column mapping, in file order."""
    columns = ("text", "target") if labels else ("text",)
    dataset, name, wanted = load_columns(cfg, path, "train", columns, {"target": TARGETS}, hint=INPUT_HINT)
    return _checked(dataset, name, wanted, labels), name
