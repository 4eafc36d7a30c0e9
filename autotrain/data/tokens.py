"""token-classification data: a list of words (`tokens`) and a tag per word (`tags`) on each row.

Tags are names (`B-PER`, `O`) or ids: the ids of a dataset's `Sequence(ClassLabel)` take its names, ids
in a plain column index `data.labels` when it is given. The tag list (`labels`, id order) is
`data.labels`, else a ClassLabel's names, else the training split's tags sorted with `O` first; a tag
outside it (in the training or the validation split) is an error naming the file, row and column.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotrain.data.text_tasks import INPUT_HINT, Splits, bad_row, is_missing, load_columns, load_splits, shown
from autotrain.errors import UserInputError

DEFAULTS = {"tokens": ("tokens", "words"), "tags": ("tags", "ner_tags", "labels")}


@dataclass
class TokenSplits(Splits):
    labels: list[str] | None = None  # tag names; the index is the id


def declared_names(dataset, column: str) -> list[str] | None:
    """The tag names a `Sequence(ClassLabel)` column declares (a hub dataset's), or None."""
    feature = dataset.features.get(column)
    inner = getattr(feature, "feature", None)
    if inner is None and isinstance(feature, list) and feature:
        inner = feature[0]
    names = getattr(inner, "names", None)
    return list(names) if names else None


def check_words(dataset, name: str, column: str) -> None:
    for row, words in enumerate(dataset["tokens"]):
        if is_missing(words) or not isinstance(words, list):
            raise bad_row(name, row, column, f"must be a list of words, got {shown(words)}")
        if not words:
            raise bad_row(name, row, column, "the list of words is empty")
        bad = next((w for w in words if not isinstance(w, str) or not w.strip()), None)
        if bad is not None or any(not isinstance(w, str) for w in words):
            raise bad_row(name, row, column, f"every word must be non-empty text, got {shown(bad)}")


def raw_tags(dataset, name: str, wanted: dict[str, str], given: list[str] | None) -> list[list[str]]:
    """Each row's tags as names, checked against its words."""
    declared = declared_names(dataset, "tags")
    names = given or declared
    out = []
    for row, (words, tags) in enumerate(zip(dataset["tokens"], dataset["tags"], strict=True)):
        if not isinstance(tags, list):
            raise bad_row(name, row, wanted["tags"], f"must be a list of tags, got {shown(tags)}")
        if len(tags) != len(words):
            raise bad_row(name, row, wanted["tags"], f"{len(tags)} tags for {len(words)} words in `{wanted['tokens']}`")
        out.append([_tag_name(tag, names, name, row, wanted["tags"]) for tag in tags])
    return out


def _tag_name(tag: Any, names: list[str] | None, name: str, row: int, column: str) -> str:
    if isinstance(tag, bool) or is_missing(tag):
        raise bad_row(name, row, column, f"a tag must be a name or an id, got {shown(tag)}")
    if isinstance(tag, int):
        if names is None:
            return str(tag)  # plain ids without names: the ids are the tags
        if not 0 <= tag < len(names):
            raise bad_row(name, row, column, f"tag id {tag} is outside the {len(names)} tags ({', '.join(names)})")
        return names[tag]
    if not isinstance(tag, str) or not tag:
        raise bad_row(name, row, column, f"a tag must be a name or an id, got {shown(tag)}")
    return tag


def vocabulary(tags: list[list[str]], given: list[str] | None, declared: list[str] | None, name: str) -> list[str]:
    if given or declared:
        return list(given or declared)
    found = {tag for row in tags for tag in row}
    if len(found) < 2:
        raise UserInputError(f"{name}: token classification needs at least two tags; every word has `{found.pop()}`")
    return sorted(found, key=lambda t: (t != "O", t.isdigit() and int(t), t))


def encode(tags: list[list[str]], labels: list[str], name: str, column: str, where: str) -> list[list[int]]:
    ids = {tag: i for i, tag in enumerate(labels)}
    for row, row_tags in enumerate(tags):
        unknown = next((t for t in row_tags if t not in ids), None)
        if unknown is not None:
            known = ", ".join(labels[:20]) + (", ..." if len(labels) > 20 else "")
            raise bad_row(name, row, column, f"tag `{unknown}` is not in {where} ({known})")
    return [[ids[t] for t in row_tags] for row_tags in tags]


def _load(cfg, split: str, token=None, path: str | None = None, hint: str | None = None):
    kwargs = {"hint": hint} if hint else {}
    dataset, name, wanted = load_columns(
        cfg, path or cfg.data.path, split, ("tokens", "tags"), DEFAULTS, token, **kwargs
    )
    check_words(dataset, name, wanted["tokens"])
    return dataset, name, wanted


def load_token_splits(cfg, token: str | None = None) -> TokenSplits:
    """Both splits with `tokens` and int `tags`, and the tag names."""
    loaded = {}

    def one(cfg, split, token):
        dataset, name, wanted = _load(cfg, split, token)
        loaded[split] = (raw_tags(dataset, name, wanted, cfg.data.labels), declared_names(dataset, "tags"), wanted)
        return dataset.add_column("row", list(range(len(dataset)))), name

    splits = load_splits(cfg, one, token)
    train_tags, declared, wanted = loaded[cfg.data.train_split]
    labels = vocabulary(train_tags, cfg.data.labels, declared, splits.train_name)
    where = "data.labels" if cfg.data.labels else "the training split's tags"
    out = TokenSplits(splits.train, splits.valid, splits.train_name, splits.valid_name, labels)
    for attr, split, name in (
        ("train", cfg.data.train_split, splits.train_name),
        ("valid", cfg.data.valid_split, splits.valid_name),
    ):
        dataset = getattr(out, attr)
        every = encode(loaded[split or cfg.data.train_split][0], labels, name, wanted["tags"], where)
        ids = [every[i] for i in dataset["row"]]  # the rows of this split (train less the held-out ones)
        setattr(out, attr, dataset.remove_columns(["tags", "row"]).add_column("tags", ids))
    return out


def load_token_rows(cfg, path: str, labels: bool):
    """A file's rows for a finished run: `tokens` (a list of words) or, without labels, a `text` column of
    plain text; with `labels` also each row's tags as names. Returns (kind, rows, tags or None)."""
    from autotrain.data.loading import load_split

    dataset = load_split(path, "train")
    source = cfg.data.column_mapping.get("tokens", "tokens")
    if not labels and source not in dataset.column_names and "text" in dataset.column_names:
        from autotrain.data.text_tasks import check_texts

        check_texts(dataset, "text", path)
        return "text", list(dataset["text"]), None
    columns = ("tokens", "tags") if labels else ("tokens",)
    dataset, name, wanted = load_columns(cfg, path, "train", columns, DEFAULTS, hint=INPUT_HINT)
    check_words(dataset, name, wanted["tokens"])
    tags = raw_tags(dataset, name, wanted, cfg.data.labels) if labels else None
    return "tokens", list(dataset["tokens"]), tags


def check_known(tags: list[list[str]], labels: list[str], name: str, column: str) -> None:
    """Every tag is one of the run's `labels`; else the first that is not, with its row."""
    encode(tags, labels, name, column, "the tags the run was trained on")
