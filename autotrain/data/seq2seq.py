"""seq2seq data: an input `text` and the `target` text the model learns to write for it."""

from __future__ import annotations

from autotrain.data.text_tasks import INPUT_HINT, Splits, check_texts, load_columns, load_splits

DEFAULTS = {
    "text": ("text", "input", "source", "document", "dialogue"),
    "target": ("target", "summary", "output", "translation"),
}


def _checked(dataset, name: str, wanted: dict[str, str], labels: bool = True):
    check_texts(dataset, "text", name, wanted["text"])
    if labels:
        check_texts(dataset, "target", name, wanted["target"])
    return dataset


def _split(cfg, split: str, token=None):
    dataset, name, wanted = load_columns(cfg, cfg.data.path, split, ("text", "target"), DEFAULTS, token)
    return _checked(dataset, name, wanted), name


def load_seq2seq_splits(cfg, token: str | None = None) -> Splits:
    return load_splits(cfg, _split, token)


def load_seq2seq_rows(cfg, path: str, labels: bool):
    """A file's inputs (and with `labels` its targets) through the run's column mapping, in file order."""
    columns = ("text", "target") if labels else ("text",)
    dataset, name, wanted = load_columns(cfg, path, "train", columns, DEFAULTS, hint=INPUT_HINT)
    return _checked(dataset, name, wanted, labels), name
