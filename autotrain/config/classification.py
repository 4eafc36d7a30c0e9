"""The `text-classification` and `image-classification` configs."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from autotrain.config.base import DataConfig, EarlyStopping, EvaluatedArgs, TaskConfig
from autotrain.fields import Bool, Float, Int


class ClassificationData(DataConfig):
    valid_size: Float = Field(
        0.1,
        gt=0,
        lt=1,
        description="Without `valid_split`: fraction of train held out (seeded) for evaluation.",
    )


def data_field(columns: str, metadata: str | None = None):
    """A task's `data` field, described by the columns `column_mapping` maps and (`metadata`) the metadata file
    of an AutoTrain Advanced image folder."""
    folder = (
        f" A folder SPLIT/ with images and a {metadata} is read as AutoTrain Advanced writes it." if metadata else ""
    )
    return Field(description=f"Training data; column_mapping: {columns}.{folder}")


def label_names(min_length: int, description: str):
    """`data.labels`: the names of the labels in id order, or null: the data's own (a rule checks that each
    is named once)."""
    return Field(None, min_length=min_length, max_length=100_000, description=description)


class ClassificationTrainingArgs(EvaluatedArgs):
    early_stopping: EarlyStopping | None = Field(None, description="Stop when the metric stops improving.")


class TextClassificationTrainingArgs(ClassificationTrainingArgs):
    # Text only: images are sized by the model's image processor, so image-classification has no max_length.
    max_length: Int = Field(512, ge=8, le=16_777_216, description="Tokens per text (longer texts are truncated).")


class TextClassificationConfig(TaskConfig):
    task: Literal["text-classification"] = Field(description="What to train.")
    data: ClassificationData = data_field("text, target")
    training_args: TextClassificationTrainingArgs = Field(
        default_factory=TextClassificationTrainingArgs, description="Training settings."
    )


class ImageClassificationConfig(TaskConfig):
    task: Literal["image-classification"] = Field(description="What to train.")
    data: ClassificationData = Field(
        description="An image folder (one sub-folder per class) or a table with image-path and target columns."
    )
    augment: Bool = Field(True, description="Light augmentation (random flip and crop) on training images.")
    training_args: ClassificationTrainingArgs = Field(
        default_factory=ClassificationTrainingArgs, description="Training settings."
    )
