"""extractive-qa data: a `context`, a `question` and its `answers` in SQuAD's form, `{text: [...],
answer_start: [...]}` (character offsets into the context; a JSON string of it in a CSV cell).

Every answer is checked against its context before any weights load: the text must be at its offset (an
answer found elsewhere in the context is named with where it is), so a shifted offset is caught rather than
trained as a wrong span.
"""

from __future__ import annotations

import json
from typing import Any

from autotrain.data.text_tasks import INPUT_HINT, Splits, bad_row, check_texts, load_columns, load_splits, shown

DEFAULTS = {"context": ("context", "text"), "question": ("question",), "answers": ("answers", "answer")}


def _answers(value: Any, name: str, row: int, column: str) -> dict:
    """A cell as {text: [str, ...], answer_start: [int, ...]}, each list as long as the other."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise bad_row(
                name, row, column, f"not SQuAD answers ({{text: [...], answer_start: [...]}}), got {shown(value)}"
            ) from None
    if not isinstance(value, dict) or "text" not in value or "answer_start" not in value:
        raise bad_row(name, row, column, f"must be {{text: [...], answer_start: [...]}}, got {shown(value)}")
    texts, starts = value["text"], value["answer_start"]
    texts = [texts] if isinstance(texts, str) else texts
    starts = [starts] if isinstance(starts, int) and not isinstance(starts, bool) else starts
    if not isinstance(texts, list) or not isinstance(starts, list) or len(texts) != len(starts):
        raise bad_row(name, row, column, f"`text` and `answer_start` must be lists of one length, got {shown(value)}")
    if not texts:
        raise bad_row(name, row, column, "no answer: each question needs one (unanswerable questions are not trained)")
    for text, start in zip(texts, starts, strict=True):
        if not isinstance(text, str) or not text.strip():
            raise bad_row(name, row, column, f"an answer's text must be non-empty text, got {shown(text)}")
        if isinstance(start, bool) or not isinstance(start, int) or start < 0:
            raise bad_row(
                name, row, column, f"`answer_start` must be character offsets (0 or more), got {shown(start)}"
            )
    return {"text": list(texts), "answer_start": [int(s) for s in starts]}


def _in_context(answers: dict, context: str, name: str, row: int, column: str) -> None:
    for text, start in zip(answers["text"], answers["answer_start"], strict=True):
        if context[start : start + len(text)] == text:
            continue
        found = context.find(text)
        where = f"it is at {found}" if found >= 0 else "the context does not hold it"
        raise bad_row(
            name,
            row,
            column,
            f"the answer {shown(text)} is not at its answer_start {start} in the context ({where}; the context "
            f"holds {shown(context[start : start + len(text)])} there)",
        )


def checked(dataset, name: str, wanted: dict[str, str], labels: bool = True):
    """Texts as text, answers as SQuAD dicts found in their contexts (an `id` per row is added)."""
    check_texts(dataset, "context", name, wanted["context"])
    check_texts(dataset, "question", name, wanted["question"])
    columns = {"id": [str(i) for i in range(len(dataset))]}
    if labels:
        answers = []
        for row, (value, context) in enumerate(zip(dataset["answers"], dataset["context"], strict=True)):
            answer = _answers(value, name, row, wanted["answers"])
            _in_context(answer, context, name, row, wanted["answers"])
            answers.append(answer)
        columns["answers"] = answers
    from datasets import Dataset

    return Dataset.from_dict({"context": dataset["context"], "question": dataset["question"], **columns})


def _split(cfg, split: str, token=None):
    columns = ("context", "question", "answers")
    dataset, name, wanted = load_columns(cfg, cfg.data.path, split, columns, DEFAULTS, token)
    return checked(dataset, name, wanted), name


def load_qa_splits(cfg, token: str | None = None) -> Splits:
    return load_splits(cfg, _split, token)


def load_qa_rows(cfg, path: str, labels: bool):
    """A file's rows (context, question, and with `labels` answers) through the run's column mapping."""
    columns = ("context", "question", "answers") if labels else ("context", "question")
    dataset, name, wanted = load_columns(cfg, path, "train", columns, DEFAULTS, hint=INPUT_HINT)
    return checked(dataset, name, wanted, labels), name
