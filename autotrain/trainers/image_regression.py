"""Image regression: one number per image, from a one-output image-classification head trained with MSE
(transformers' `problem_type: regression`), as AutoTrain Advanced's image scoring does. Each evaluation
reports MSE, MAE, R2 and the Pearson and Spearman correlations (scipy), as text regression does.

Augmentation flips and changes brightness and contrast, never crops: a score belongs to the whole image,
and a crop could cut away what it scores.
"""

from __future__ import annotations

from autotrain.data.images import read_image
from autotrain.data.regression import load_regression_splits
from autotrain.trainers.image_classification import build_processor
from autotrain.trainers.task_common import head_model, task_trainer
from autotrain.trainers.text_regression import compute_metrics, target_preview
from autotrain.training.plan import RunPlan


def photometric(image):
    """A random horizontal flip and brightness and contrast each scaled by 0.9-1.1."""
    import torch
    from PIL import ImageEnhance, ImageOps

    if torch.rand(()) < 0.5:
        image = ImageOps.mirror(image)
    for enhance in (ImageEnhance.Brightness, ImageEnhance.Contrast):
        image = enhance(image).enhance(float(torch.empty(()).uniform_(0.9, 1.1)))
    return image


class ScoredImages:
    """`datasets` on-the-fly transform: images -> `pixel_values` (augmented when training), targets -> labels."""

    def __init__(self, processor, train: bool):
        self.processor, self.train = processor, train

    def __call__(self, batch: dict) -> dict:
        images = [read_image(value) for value in batch["image"]]
        if self.train:
            images = [photometric(image) for image in images]
        out = {"pixel_values": self.processor(images=images, return_tensors="pt")["pixel_values"]}
        if "target" in batch:
            out["labels"] = batch["target"]
        return out


def collate(rows: list[dict]) -> dict:
    import torch

    return {
        "pixel_values": torch.stack([row["pixel_values"] for row in rows]),
        "labels": torch.tensor([row["labels"] for row in rows], dtype=torch.float32),
    }


def build_trainer(cfg, plan: RunPlan, callbacks: list, token: str | None = None):
    from transformers import AutoModelForImageClassification, set_seed

    set_seed(cfg.training_args.seed)
    processor = build_processor(cfg, token)
    splits = load_regression_splits(cfg, token)
    model = head_model(
        AutoModelForImageClassification, cfg, token, "ForImageClassification", num_labels=1, problem_type="regression"
    )
    train = splits.train.with_transform(ScoredImages(processor, train=cfg.augment))
    valid = splits.valid.with_transform(ScoredImages(processor, train=False))
    # The Trainer would drop the `image` column (no model argument has that name) before the transform runs.
    args = {"remove_unused_columns": False}
    return task_trainer(
        cfg, plan, callbacks, model, train, valid, processor, collate, args=args, compute_metrics=compute_metrics
    )


def preview(cfg, count: int, token: str | None = None) -> dict:
    return target_preview(load_regression_splits(cfg, token), count, "image", _shown)


def _shown(value) -> str:
    """An image cell as a preview shows it: its path, or what a stored image is."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return value.get("path") or "an image stored in the data"
    return f"image {value.size[0]}x{value.size[1]} {value.mode}"
