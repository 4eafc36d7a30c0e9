"""The configs of the vision tasks beyond classification: image-regression, object-detection and vlm (their
entries in autotrain/config/tasks.py name these classes).

Each holds out `data.valid_size` of train for evaluation when no `valid_split` is named, as classifiers do,
so every run reports its task's metrics; `early_stopping.metric` takes those metrics by name.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

from pydantic import Field

from autotrain.config.base import EarlyStopping, TaskConfig, TrainingArgs
from autotrain.config.classification import ClassificationData
from autotrain.config.llm import PeftConfig
from autotrain.config.rules import rule
from autotrain.config.tasks import VLM_TRAINERS
from autotrain.config.text_tasks import _metric, _watched
from autotrain.fields import Bool, Float, Int

Issue = tuple[tuple, str]

_AUGMENT = "Light augmentation of training images (random flip, brightness and contrast)."


class _ImageArgs(TrainingArgs):
    load_best_model: Bool = Field(True, description="Keep the best checkpoint (by early_stopping.metric) at the end.")


# --- image-regression ----------------------------------------------------------------------------------


class ImageRegressionEarlyStopping(EarlyStopping):
    metric: _metric("image-regression") = Field("eval_loss", description=_watched("image-regression"))


class ImageRegressionTrainingArgs(_ImageArgs):
    early_stopping: ImageRegressionEarlyStopping | None = Field(
        None, description="Stop when the metric stops improving."
    )


class ImageRegressionConfig(TaskConfig):
    task: Literal["image-regression"] = Field(description="What to train.")
    data: ClassificationData = Field(
        description="Training data; column_mapping: image (a path, relative to the table, or a stored image), "
        "target (a number per image). A folder SPLIT/ with images and a metadata.jsonl/.csv (file_name, "
        "target) is read as AutoTrain Advanced writes it."
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
    labels: list[str] | None = Field(
        None,
        min_length=1,
        max_length=100_000,
        description="The category names in id order (an integer category is an index into them). null: a "
        "ClassLabel's names, else the training split's category names sorted (integer categories: their ids).",
    )


class DetectionEarlyStopping(EarlyStopping):
    metric: _metric("object-detection") = Field(
        "eval_loss", description="Metric watched (COCO mAP, mAP@50, mAP@75, mAR@1/10/100; eval_loss: lower)."
    )


class DetectionTrainingArgs(_ImageArgs):
    lr: Float = Field(5e-5, gt=0, le=10, description="Peak learning rate.")
    image_square_size: Int = Field(
        600,
        ge=32,
        le=8192,
        description="Each image is resized so that its longer side has this many pixels, then padded to a square.",
    )
    early_stopping: DetectionEarlyStopping | None = Field(None, description="Stop when the metric stops improving.")


class ObjectDetectionConfig(TaskConfig):
    task: Literal["object-detection"] = Field(description="What to train.")
    data: DetectionData = Field(
        description="Training data; column_mapping: image (a path or a stored image), objects ({bbox: [box, ...], "
        "category: [name or id, ...]} per image). A folder SPLIT/ with images and a metadata.jsonl (file_name, "
        "objects) is read as AutoTrain Advanced writes it."
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


class VLMEarlyStopping(EarlyStopping):
    metric: _metric("vlm") = Field(
        "eval_loss", description="Metric watched (answers generated at each evaluation: SQuAD exact match, F1)."
    )


class VLMTrainingArgs(TrainingArgs):
    lr: Float = Field(3e-5, gt=0, le=10, description="Peak learning rate.")
    max_length: Int = Field(
        1024, ge=16, le=16_777_216, description="Tokens per sample, the image's tokens included (longer: truncated)."
    )
    max_new_tokens: Int = Field(32, ge=1, le=100_000, description="Answer tokens generated at evaluation and predict.")
    load_best_model: Bool = Field(True, description="Keep the best checkpoint (by early_stopping.metric) at the end.")
    early_stopping: VLMEarlyStopping | None = Field(None, description="Stop when the metric stops improving.")


class VLMConfig(TaskConfig):
    task: Literal["vlm"] = Field(description="What to train.")
    trainer: Literal[VLM_TRAINERS] = Field(
        VLM_TRAINERS[0],
        description="vqa: image + question (`prompt` column) -> answer; captioning: image -> caption (`answer` "
        "column), asked with `data.prompt`.",
    )
    data: VLMData = Field(
        description="Training data; column_mapping: image (a path or a stored image), prompt (vqa: the question), "
        "answer (the text to learn)."
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
