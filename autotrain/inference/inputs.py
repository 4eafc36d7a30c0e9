"""The rows of an input file (or image folder) as a finished run reads them: the columns it was trained on,
through its `data.column_mapping`, loaded by `autotrain.data`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from autotrain.config.base import TaskConfig
from autotrain.config.tasks import TASKS
from autotrain.data.loading import FORMATS
from autotrain.errors import UserInputError


@dataclass
class Rows:
    kind: str  # classifiers: text | image; LLMs: messages | prompt | text
    values: list  # classifiers: texts or images; LLMs: {kind: value} dicts (plus `completion` for prompts)
    labels: list | None = None  # classifiers, when asked for: the raw label of each row
    name: str = ""  # the input, for messages

    def __len__(self) -> int:
        return len(self.values)


def read_rows(cfg: TaskConfig, path: Path, labels: bool = False) -> Rows:
    """Rows of `path` in file order; with `labels`, classifiers also need each row's true label."""
    name = str(path)
    if not path.exists():
        raise UserInputError(f"--input `{path}` does not exist")
    if path.is_dir() and "image" not in TASKS[cfg.task].columns:  # image tasks read folders of images
        raise UserInputError(f"--input `{path}` is a folder; give a file ({', '.join(FORMATS)})")
    if path.is_file() and path.suffix.lower() not in FORMATS:
        raise UserInputError(f"--input `{path}`: unsupported file type `{path.suffix}`; use {', '.join(FORMATS)}")
    from autotrain.inference.tasks import task_module

    handler = task_module(cfg.task)
    if handler is not None:
        return handler.read_rows(cfg, path, labels)
    if cfg.task == "text-classification":
        from autotrain.data.classification import load_text_rows

        texts, keys = load_text_rows(cfg, name, labels)
        return Rows("text", list(texts["text"]), keys, name)
    if cfg.task == "image-classification":
        import warnings

        from PIL import Image

        from autotrain.data.classification import load_image_rows

        with warnings.catch_warnings():  # inference sets its own, lower bound on pixels (inference.bounds)
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            images, keys = load_image_rows(cfg, name, labels)
        return Rows("image", list(images["image"]), keys, name)
    from autotrain.data.llm import load_prompt_rows

    kind, _, rows = load_prompt_rows(cfg, name)
    return Rows(kind, rows, None, name)


def prompt_of(row: dict, kind: str) -> str | list[dict]:
    """What the model continues: a prompt or text as given; a conversation without its closing assistant
    turn(s), which are the reference answer."""
    if kind != "messages":
        return row[kind]
    messages = list(row["messages"])
    while len(messages) > 1 and messages[-1]["role"] == "assistant":
        messages.pop()
    return messages
