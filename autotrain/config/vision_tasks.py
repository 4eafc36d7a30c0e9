"""The configs of the vision tasks beyond classification: image-regression, object-detection and vlm (their
entries in autotrain/config/tasks.py name these classes).

Each holds out `data.valid_size` of train for evaluation when no `valid_split` is named, as classifiers do,
so every run reports its task's metrics; `early_stopping.metric` takes those metrics by name.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

from pydantic import Field

from autotrain.config.base import EvaluatedArgs, TaskConfig, task_training_args
from autotrain.config.classification import ClassificationData, data_field, label_names
from autotrain.config.llm import PeftConfig
from autotrain.config.rules import rule
from autotrain.config.tasks import VLM_TRAINERS
from autotrain.fields import Bool, Float, Int

Issue = tuple[tuple, str]

_AUGMENT = "Light augmentation of training images (random flip, brightness and contrast)."


# --- image-regression ----------------------------------------------------------------------------------


ImageRegressionTrainingArgs = task_training_args("ImageRegression", EvaluatedArgs, "image-regression")


class ImageRegressionConfig(TaskConfig):
    task: Literal["image-regression"] = Field(description="What to train.")
    data: ClassificationData = data_field(
        "image (a path, relative to the table, or a stored image), target (a number per image)",
        "metadata.jsonl/.csv (file_name, target)",
    )
    augment: Bool = Field(True, description=_AUGMENT)
    training_args: ImageRegressionTrainingArgs = Field(
        default_factory=ImageRegressionTrainingArgs, description="Training settings."
    )


# --- object-detection ------------------------------------------------------------------------------------

BOX_FORMATS = {
    "coco": "x_min, y_min, width, height in pixels (COCO; AutoTrain Advanced's)",
    "pascal_voc": "x_min, y_min, x_max, y_max in pixels",
    "yolo": "x_center, y_center, width, height as fractions of the image's width and height",
}


class DetectionData(ClassificationData):
    box_format: Literal[tuple(BOX_FORMATS)] = Field(
        "coco",
        description="How `objects.bbox` gives each box: " + "; ".join(f"{k}: {v}" for k, v in BOX_FORMATS.items()),
    )
    labels: list[str] | None = label_names(
        1,
        "The category names in id order (an integer category is an index into them). null: a ClassLabel's "
        "names, else the training split's category names sorted (integer categories: their ids).",
    )


class _DetectionArgs(EvaluatedArgs):
    image_square_size: Int = Field(
        600,
        ge=32,
        le=8192,
        description="Each image is resized so that its longer side has this many pixels, then padded to a square.",
    )


DetectionTrainingArgs = task_training_args(
    "Detection",
    _DetectionArgs,
    "object-detection",
    "Metric watched (COCO mAP, mAP@50, mAP@75, mAR@1/10/100; eval_loss: lower).",
)


class ObjectDetectionConfig(TaskConfig):
    task: Literal["object-detection"] = Field(description="What to train.")
    data: DetectionData = data_field(
        "image (a path or a stored image), objects ({bbox: [box, ...], category: [name or id, ...]} per image)",
        "metadata.jsonl (file_name, objects)",
    )
    augment: Bool = Field(
        True, description="Augment training images (flip, brightness and contrast, a box-safe crop); boxes move too."
    )
    training_args: DetectionTrainingArgs = Field(default_factory=DetectionTrainingArgs, description="Training.")


# --- vlm -------------------------------------------------------------------------------------------------


class VLMData(ClassificationData):
    prompt: str = Field(
        "caption en",
        min_length=1,
        max_length=10_000,
        description="trainer captioning: the text every image is asked with (vqa: each row's `prompt` column).",
    )


class _VLMArgs(EvaluatedArgs):
    lr: Float = Field(3e-5, gt=0, le=10, description="Peak learning rate.")
    max_length: Int = Field(
        1024, ge=16, le=16_777_216, description="Tokens per sample, the image's tokens included (longer: truncated)."
    )
    max_new_tokens: Int = Field(32, ge=1, le=100_000, description="Answer tokens generated at evaluation and predict.")


VLMTrainingArgs = task_training_args(
    "VLM", _VLMArgs, "vlm", "Metric watched (answers generated at each evaluation: SQuAD exact match, F1)."
)


class VLMConfig(TaskConfig):
    task: Literal["vlm"] = Field(description="What to train.")
    trainer: Literal[VLM_TRAINERS] = Field(
        VLM_TRAINERS[0],
        description="vqa: image + question (`prompt` column) -> answer; captioning: image -> caption (`answer` "
        "column), asked with `data.prompt`.",
    )
    data: VLMData = data_field(
        "image (a path or a stored image), prompt (vqa: the question), answer (the text to learn)"
    )
    peft: PeftConfig | None = Field(None, description="LoRA; absent or `enabled: false` = full fine-tune.")
    training_args: VLMTrainingArgs = Field(default_factory=VLMTrainingArgs, description="Training settings.")

    @property
    def uses_peft(self) -> bool:
        return self.peft is not None and self.peft.enabled


@rule("trainer", "data.column_mapping", task="vlm")
def _captions_need_no_prompt(cfg) -> Iterator[Issue]:
    if cfg.trainer == "captioning" and "prompt" in cfg.data.column_mapping:
        yield (
            ("data", "column_mapping", "prompt"),
            "`trainer: captioning` asks every image with `data.prompt`; a `prompt` column is for `trainer: vqa`",
        )
