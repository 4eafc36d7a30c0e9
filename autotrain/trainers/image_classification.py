"""Image classification: an image-classification head on a hub or local checkpoint (transformers Trainer).

Images are decoded, augmented and run through the checkpoint's image processor (its resizing and
normalisation) batch by batch as the Trainer reads them, so a large image set never sits in memory.
"""

from __future__ import annotations

import math

from autotrain.config.classification import ImageClassificationConfig
from autotrain.data.classification import load_image_splits
from autotrain.errors import UserInputError
from autotrain.trainers.classification_common import base_config, classification_trainer
from autotrain.trainers.common import load_pretrained
from autotrain.trainers.task_common import head_model, label_kwargs
from autotrain.training.plan import RunPlan


def build_processor(cfg: ImageClassificationConfig, token: str | None = None):
    from transformers import AutoImageProcessor

    return load_pretrained(AutoImageProcessor, cfg, "image processor", token)


def open_rgb(value):
    """A file path, a hub image (PIL, or {bytes, path}) -> an RGB PIL image; a broken file is named."""
    import io

    from PIL import Image

    if isinstance(value, dict):
        source = io.BytesIO(value["bytes"]) if value.get("bytes") else value.get("path")
        where = value.get("path") or "an image stored in the dataset"
    elif isinstance(value, str):
        source = where = value
    else:
        return value.convert("RGB")
    try:
        with Image.open(source) as image:
            return image.convert("RGB")
    except Exception as exc:  # PIL raises many types for broken files
        raise UserInputError(f"cannot read image {where}: {exc}") from None


def augment(image, scale: tuple[float, float] = (0.8, 1.0), ratio: tuple[float, float] = (3 / 4, 4 / 3)):
    """Random horizontal flip, then a random crop of 80-100% of the area resized back to the image size.

    Light on purpose: small datasets overfit without it, and a stronger crop can cut the object out.
    """
    import numpy as np
    import torch
    from PIL import Image

    pixels = torch.from_numpy(np.array(image)).permute(2, 0, 1)  # (C, H, W) uint8
    if torch.rand(()) < 0.5:
        pixels = pixels.flip(-1)
    _, height, width = pixels.shape
    area = height * width * torch.empty(()).uniform_(*scale).item()
    aspect = math.exp(torch.empty(()).uniform_(math.log(ratio[0]), math.log(ratio[1])).item())
    crop_w = min(width, max(1, round(math.sqrt(area * aspect))))
    crop_h = min(height, max(1, round(math.sqrt(area / aspect))))
    top = int(torch.randint(0, height - crop_h + 1, ()))
    left = int(torch.randint(0, width - crop_w + 1, ()))
    crop = pixels[:, top : top + crop_h, left : left + crop_w].unsqueeze(0).float()
    resized = torch.nn.functional.interpolate(crop, size=(height, width), mode="bilinear", antialias=True)
    return Image.fromarray(resized[0].round().clamp(0, 255).to(torch.uint8).permute(1, 2, 0).numpy())


class ImageTransform:
    """`datasets` on-the-fly transform: image column -> `pixel_values`, with augmentation when training."""

    def __init__(self, processor, train: bool):
        self.processor = processor
        self.train = train

    def __call__(self, batch: dict) -> dict:
        images = [open_rgb(v) for v in batch["image"]]
        if self.train:
            images = [augment(image) for image in images]
        pixels = self.processor(images=images, return_tensors="pt")["pixel_values"]
        return {"pixel_values": pixels, "labels": batch["labels"]}


def collate(rows: list[dict]) -> dict:
    import torch

    return {
        "pixel_values": torch.stack([row["pixel_values"] for row in rows]),
        "labels": torch.tensor([row["labels"] for row in rows]),
    }


def build_trainer(cfg: ImageClassificationConfig, plan: RunPlan, callbacks: list, token: str | None = None):
    from transformers import AutoModelForImageClassification, set_seed

    set_seed(cfg.training_args.seed)
    config = base_config(cfg, token)
    processor = build_processor(cfg, token)
    splits = load_image_splits(cfg, token)
    train = splits.train.with_transform(ImageTransform(processor, train=cfg.augment))
    valid = splits.valid.with_transform(ImageTransform(processor, train=False))
    model = head_model(
        AutoModelForImageClassification,
        cfg,
        token,
        "ForImageClassification",
        config=config,
        **label_kwargs(splits.labels),
    )
    # The Trainer would drop the `image` column (no model argument has that name) before the transform runs.
    args = {"remove_unused_columns": False}
    return classification_trainer(cfg, plan, callbacks, model, train, valid, processor, collate, args=args)
