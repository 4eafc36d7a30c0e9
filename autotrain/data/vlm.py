"""vlm data: an `image`, the `answer` to learn and (trainer vqa) the `prompt` that asks for it, per row,
renamed from the data's own columns. Images open and texts are text before any weights load: a bad cell
names the file, the row and the column."""

from __future__ import annotations

from autotrain.data.images import check_images, load_image_columns
from autotrain.data.text_tasks import INPUT_HINT, Splits, check_texts, load_splits

DEFAULTS = {"answer": ("answer", "text", "caption", "multiple_choice_answer"), "prompt": ("prompt", "question")}


def columns(cfg, answers: bool = True) -> tuple[str, ...]:
    asked = ("image", "prompt") if cfg.trainer == "vqa" else ("image",)
    return (*asked, "answer") if answers else asked


def _checked(dataset, name: str, wanted: dict[str, str]):
    check_images(dataset, name, wanted["image"])
    for column in ("prompt", "answer"):
        if column in wanted:
            check_texts(dataset, column, name, wanted[column])
    return dataset


def _split(cfg, split: str, token=None):
    dataset, name, wanted = load_image_columns(cfg, cfg.data.path, split, columns(cfg), DEFAULTS, token)
    return _checked(dataset, name, wanted), name


def load_vlm_splits(cfg, token: str | None = None) -> Splits:
    return load_splits(cfg, _split, token)


def load_vlm_rows(cfg, path: str, answers: bool):
    """A file's (or AutoTrain Advanced folder's) images and prompts, with `answers` the answers too."""
    dataset, name, wanted = load_image_columns(cfg, path, "train", columns(cfg, answers), DEFAULTS, hint=INPUT_HINT)
    return _checked(dataset, name, wanted), name
