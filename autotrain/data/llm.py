"""Shape LLM data for each trainer: rename mapped columns, normalise chat/preference formats."""

from __future__ import annotations

from autotrain.config.llm import LLMConfig
from autotrain.config.trainers import TRAINERS
from autotrain.data.loading import load_split, require_columns
from autotrain.data.messages import as_messages, is_messages, not_messages
from autotrain.errors import UserInputError


def mapping_for(trainer: str, given: dict[str, str], columns: list[str], name: str) -> dict[str, str]:
    """Task column -> data column for `trainer`: `given`, or the first of the trainer's column groups that the
    data (`columns`) has, by name; an error naming what it needs otherwise."""
    if given:
        return dict(given)
    spec = TRAINERS[trainer]
    for group in spec.columns:
        if all(c in columns for c in group):
            mapping = {c: c for c in group}
            mapping.update({c: c for c in spec.optional_columns if c in columns})
            return mapping
    wanted = " or ".join("/".join(g) for g in spec.columns)
    raise UserInputError(
        f"{name}: `trainer: {trainer}` needs column(s) {wanted}; the data has: "
        f"{', '.join(columns)} (set `data.column_mapping`)"
    )


def columns_of(trainer: str, given: dict[str, str], names: list[str], name: str) -> dict[str, str]:
    """`mapping_for`, each data column it names checked to be among `names` (the columns of data read a batch
    at a time)."""
    mapping = mapping_for(trainer, given, names, name)
    missing = [f"`{src}` (for {task})" for task, src in mapping.items() if src not in names]
    if missing:
        raise UserInputError(
            f"{name}: column {', '.join(missing)} not found; the data has columns: {', '.join(names)} "
            "(fix `data.column_mapping`)"
        )
    return mapping


def renamed(dataset, mapping: dict[str, str]):
    """`dataset` with the task's columns only, named as the task names them (no copy of the rows unless two
    task columns read one data column)."""
    dataset = dataset.select_columns(list(dict.fromkeys(mapping.values())))
    if len(set(mapping.values())) == len(mapping):
        names = {src: task for task, src in mapping.items() if src != task}
        return dataset.rename_columns(names) if names else dataset
    return dataset.map(
        lambda rows: {task: rows[src] for task, src in mapping.items()},
        batched=True,
        remove_columns=[c for c in dataset.column_names if c not in mapping],
        desc=None,
    )


def _as_messages(value, role: str):
    if isinstance(value, str):
        return [{"role": role, "content": value}]
    return value


def load_llm_split(cfg: LLMConfig, split: str, token: str | None = None):
    """Load one split and rename/normalise it for the trainer (before any model is loaded). With several
    `data.sources`, the first source's validation split, else its training split (what a finished run's
    checks read prompts from)."""
    path, given = cfg.data.path, cfg.data.column_mapping
    if cfg.data.sources:
        first = cfg.data.split_sources()[0]
        path, given, split = first.path, first.column_mapping, first.valid_split or first.split
    dataset = load_split(path, split, token=token)
    name = f"{path} [{split}]"
    mapping = mapping_for(cfg.trainer, given, dataset.column_names, path)
    require_columns(dataset, mapping, name)
    return FORMATS[TRAINERS[cfg.trainer].data_format](renamed(dataset, mapping), cfg, name)


def _chat_format(dataset, cfg: LLMConfig, name: str):
    if "completion" in dataset.column_names:
        return _completion_format(dataset, cfg, name)
    if "messages" in dataset.column_names:
        _check_messages(dataset, "messages", name)
        if cfg.data.chat_template == "none":
            raise UserInputError(
                f"{name}: chat `messages` need a chat template; `data.chat_template: none` is for plain `text` data"
            )
    return dataset


def _blocks_format(dataset, cfg: LLMConfig, name: str):
    return dataset  # raw text: the builder tokenizes it into blocks


def _check_messages(dataset, column: str, name: str) -> None:
    """Every row of `column` is a list of {role, content} messages: a bad row is named here, not met
    mid-run as a library's KeyError."""
    if _typed_as_messages(dataset, column):
        return  # the column's type says so for every row: no need to look at each
    row = 0
    for batch in dataset.select_columns([column]).iter(batch_size=1000):
        for value in batch[column]:
            if not is_messages(as_messages(value)):
                raise UserInputError(f"{name}: {not_messages(row, column, value)}")
            row += 1


def _typed_as_messages(dataset, column: str) -> bool:
    """The Arrow type is a list of {role, content} structs, and no row is null."""
    from datasets import List

    feature = dataset.features.get(column)
    inner = feature.feature if isinstance(feature, List) else None
    return isinstance(inner, dict) and {"role", "content"} <= set(inner) and dataset.data.column(column).null_count == 0


def _preference_format(dataset, cfg: LLMConfig, name: str):
    """A `prompt` and the answers to it (chosen / rejected, or one completion): the texts may be message lists.

    Columns that hold neither text nor messages (a `label`) pass through untouched.
    """
    row = dataset[0]
    texts = [c for c in dataset.column_names if isinstance(row[c], (str, list))]
    conversational = any(isinstance(row[c], list) for c in texts)
    if cfg.data.chat_template == "none" and conversational:
        raise UserInputError(f"{name}: message-list columns need a chat template, not `chat_template: none`")
    if not conversational:
        return dataset

    # TRL's conversational format: prompt is a message list ending with the user turn, each answer is the
    # assistant turn(s) that follow.
    def convert(example):
        return {c: _as_messages(example[c], "user" if c == "prompt" else "assistant") for c in texts}

    return dataset.map(convert)


def _prompt_format(dataset, cfg: LLMConfig, name: str):
    """GRPO prompts: under a chat template a plain-text prompt becomes one user message, so that the model
    is prompted (and its completions scored) the way it chats; `chat_template: none` keeps plain text."""
    conversational = isinstance(dataset[0]["prompt"], list)
    if conversational:
        _check_messages(dataset, "prompt", name)
        if cfg.data.chat_template == "none":
            raise UserInputError(f"{name}: message-list prompts need a chat template, not `chat_template: none`")
        return dataset
    if cfg.data.chat_template == "none":
        return dataset
    return dataset.map(lambda row: {"prompt": _as_messages(row["prompt"], "user")})


def _completion_format(dataset, cfg: LLMConfig, name: str):
    """SFT prompt/completion rows: under a chat template, plain strings become one user and one assistant
    message (TRL's conversational prompt-completion format); `chat_template: none` keeps plain text."""
    conversational = isinstance(dataset[0]["prompt"], list)
    if cfg.data.chat_template == "none":
        if conversational:
            raise UserInputError(f"{name}: message-list prompts need a chat template, not `chat_template: none`")
        return dataset
    return dataset.map(
        lambda row: {
            "prompt": _as_messages(row["prompt"], "user"),
            "completion": _as_messages(row["completion"], "assistant"),
        }
    )


FORMATS = {  # autotrain.config.trainers.DATA_FORMATS -> the function that shapes its rows
    "chat": _chat_format,
    "blocks": _blocks_format,
    "preference": _preference_format,
    "prompts": _prompt_format,
}


# Rows of a finished run's inputs (predict, evaluate) ---------------------------------------------------

INPUT_KINDS = ("messages", "prompt", "text")  # in the order they are looked for
ANSWER_COLUMNS = ("completion", "chosen")  # the answer that follows a `prompt`


def load_prompt_rows(cfg: LLMConfig, path: str) -> tuple[str, str, list[dict]]:
    """A file's rows for a finished LLM run, read through its column mapping: `(kind, column, rows)`.

    `kind` is the first of `messages` (lists of {role, content}), `prompt` (a string or a message list,
    with its answer in `completion` / `chosen` when the file has one) and `text` that the file holds;
    each row is `{kind: value}`, plus `completion` for prompts with an answer. Rows keep their order.
    """
    dataset = load_split(path, "train")
    mapping = cfg.data.column_mapping
    found = [(kind, mapping.get(kind, kind)) for kind in INPUT_KINDS]
    present = [(kind, column) for kind, column in found if column in dataset.column_names]
    if not present:
        wanted = ", ".join(f"`{column}` ({kind})" for kind, column in found)
        raise UserInputError(
            f"{path}: none of the columns {wanted} found; the data has columns: {', '.join(dataset.column_names)}"
        )
    kind, column = present[0]
    if kind == "messages":
        _check_messages(dataset, column, path)
    answer = next((mapping.get(a, a) for a in ANSWER_COLUMNS if mapping.get(a, a) in dataset.column_names), None)
    values = [as_messages(value) for value in dataset[column]] if kind == "messages" else dataset[column]
    answers = dataset[answer] if kind == "prompt" and answer else None
    rows = [{kind: value} for value in values]
    if answers is not None:
        for row, value in zip(rows, answers, strict=True):
            row["completion"] = value
    empty = [i for i, value in enumerate(values) if not value]
    if empty:
        raise UserInputError(f"{path}: {len(empty)} row(s) have no `{column}` (first: row {empty[0]})")
    return kind, column, rows
