"""sentence-transformers data: the columns the trainer reads (autotrain.config.text_tasks.SENTENCE_COLUMNS),
in the order its loss takes them: sentence1, sentence2, sentence3 (triplets), and a `score` (pair_score: a
number) or a `label` (pair_class: a class, as names or ids), the names sentence-transformers' trainer reads
as the target."""

from __future__ import annotations

from dataclasses import dataclass

from autotrain.data.text_tasks import (
    INPUT_HINT,
    Splits,
    as_number,
    bad_row,
    check_texts,
    is_missing,
    load_columns,
    load_splits,
    shown,
)
from autotrain.errors import UserInputError

DEFAULTS = {
    "sentence1": ("sentence1", "anchor", "query", "premise", "question", "text1"),
    "sentence2": ("sentence2", "positive", "answer", "hypothesis", "text2"),
    "sentence3": ("sentence3", "negative"),
    "target": ("target", "score", "label", "labels"),
}
SENTENCES = ("sentence1", "sentence2", "sentence3")


@dataclass
class SentenceSplits(Splits):
    classes: list | None = None  # pair_class: the label of each class id


def _targets(dataset, trainer: str, name: str, column: str) -> list:
    values = list(dataset["target"])
    if trainer == "pair_score":
        return [as_number(v, name, row, column) for row, v in enumerate(values)]
    for row, value in enumerate(values):
        if is_missing(value) or isinstance(value, (bool, list, dict, float)):
            raise bad_row(name, row, column, f"must be a class (a name or a whole number), got {shown(value)}")
    return values


def _load(cfg, path: str, split: str, token=None, hint: str | None = None):
    from autotrain.config.text_tasks import SENTENCE_COLUMNS

    columns = SENTENCE_COLUMNS[cfg.trainer]
    kwargs = {"hint": hint} if hint else {}
    dataset, name, wanted = load_columns(cfg, path, split, columns, DEFAULTS, token, **kwargs)
    for column in columns:
        if column in SENTENCES:
            check_texts(dataset, column, name, wanted[column])
    return dataset, name, wanted


def _with_target(dataset, trainer: str, targets: list):
    from datasets import Value

    column = "score" if trainer == "pair_score" else "label"
    dataset = dataset.remove_columns("target").add_column(column, targets)
    return dataset.cast_column(column, Value("float32" if column == "score" else "int64"))


def load_sentence_splits(cfg, token: str | None = None) -> SentenceSplits:
    """Both splits as the trainer's loss reads them; pair_class labels as ids of the training split's classes."""
    raw: dict[str, list] = {}

    def one(cfg, split, token):
        dataset, name, wanted = _load(cfg, cfg.data.path, split, token)
        if "target" in dataset.column_names:
            raw[split] = _targets(dataset, cfg.trainer, name, wanted["target"])
            dataset = dataset.add_column("row", list(range(len(dataset))))
        return dataset, name

    splits = load_splits(cfg, one, token)
    out = SentenceSplits(splits.train, splits.valid, splits.train_name, splits.valid_name)
    if not raw:
        return out
    classes = _classes(raw[cfg.data.train_split], splits.train_name) if cfg.trainer == "pair_class" else None
    for attr, split, name in (
        ("train", cfg.data.train_split, out.train_name),
        ("valid", cfg.data.valid_split, out.valid_name),
    ):
        dataset = getattr(out, attr)
        values = raw[split or cfg.data.train_split]
        if classes is not None:
            values = _class_ids(values, classes, name, cfg.data.column_mapping.get("target", "target"))
        targets = [values[i] for i in dataset["row"]]
        setattr(out, attr, _with_target(dataset.remove_columns("row"), cfg.trainer, targets))
    out.classes = classes
    return out


def _classes(values: list, name: str) -> list:
    found = set(values)
    if len(found) < 2:
        raise UserInputError(f"{name}: pair_class needs at least two classes; every row has `{found.pop()}`")
    try:
        return sorted(found)
    except TypeError:  # names and numbers mixed
        return sorted(found, key=str)


def _class_ids(values: list, classes: list, name: str, column: str) -> list[int]:
    ids = {value: i for i, value in enumerate(classes)}
    for row, value in enumerate(values):
        if value not in ids:
            known = ", ".join(str(c) for c in classes)
            raise bad_row(name, row, column, f"class `{value}` never appears in the training split ({known})")
    return [ids[v] for v in values]


def load_sentence_rows(cfg, path: str, labels: bool):
    """A finished run's input rows: with `labels` the trainer's columns (its target as given), else whichever
    of sentence1 / sentence2 / sentence3 the file has (sentence1 at least)."""
    from autotrain.data.loading import load_split

    if labels:
        dataset, name, wanted = _load(cfg, path, "train", hint=INPUT_HINT)
        if "target" in dataset.column_names:
            targets = _targets(dataset, cfg.trainer, name, wanted["target"])
            if cfg.trainer == "pair_class":  # classes numbered as training numbered them: sorted
                targets = _class_ids(targets, _classes(targets, name), name, wanted["target"])
            dataset = _with_target(dataset, cfg.trainer, targets)
        return dataset, name
    present = load_split(path, "train").column_names
    columns = [c for c in SENTENCES if cfg.data.column_mapping.get(c, c) in present or c == "sentence1"]
    dataset, name, wanted = load_columns(cfg, path, "train", columns, hint=INPUT_HINT)
    for column in columns:
        check_texts(dataset, column, name, wanted[column])
    return dataset, name
