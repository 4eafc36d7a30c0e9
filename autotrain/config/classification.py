"""The `text-classification` and `image-classification` configs."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from autotrain.config.base import DataConfig, EarlyStopping, TaskConfig, TrainingArgs
from autotrain.fields import Bool, Float, Int


class ClassificationData(DataConfig):
    valid_size: Float = Field(
        0.1,
        gt=0,
        lt=1,
        description="Without `valid_split`: fraction of train held out (seeded) for evaluation.",
    )


class ClassificationTrainingArgs(TrainingArgs):
    lr: Float = Field(5e-5, gt=0, le=10, description="Peak learning rate.")
    early_stopping: EarlyStopping | None = Field(None, description="Stop when the metric stops improving.")
    load_best_model: Bool = Field(True, description="Keep the best checkpoint (by early_stopping.metric) at the end.")


class TextClassificationTrainingArgs(ClassificationTrainingArgs):
    # Text only: images are sized by the model's image processor, so image-classification has no max_length.
    max_length: Int = Field(512, ge=8, le=16_777_216, description="Tokens per text (longer texts are truncated).")


class TextClassificationConfig(TaskConfig):
    task: Literal["text-classification"] = Field(description="What to train.")
    data: ClassificationData = Field(description="Training data; column_mapping: text, target.")
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
