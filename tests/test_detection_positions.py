"""object-detection: where the boxes are, stage by stage, on grey noise with one green square. The targets
the model is trained on are where the square's pixels are, whatever the checkpoint's processor config
says."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from text_tasks_assets import write_config
from vision_assets import noise_square_rows, write_jsonl

CONFIG = """\
task: object-detection
base_model: {model}
project_name: {project}
data:
  path: {data}
  valid_split: valid
augment: {augment}
training_args:
  epochs: {epochs}
  batch_size: 8
  lr: 1.0e-3
  image_square_size: 64
  optimizer: adamw_torch
  logging_steps: 50
  eval_strategy: "no"
  save_steps: 100000
"""


def _config(tmp_path: Path, model: Path, augment: bool = False):
    from autotrain.config.load import load_config

    config = write_config(
        tmp_path / "c.yml",
        CONFIG,
        model=model,
        project=tmp_path / "run",
        data=tmp_path / "data",
        augment=str(augment).lower(),
        epochs=1,
    )
    return load_config(config, ["data.valid_split=null"]).config


def _processor_folder(folder: Path, kind: str) -> Path:
    """A checkpoint folder with only an image processor: YOLOS' (pixels to [-1, 1]), RT-DETR's (pixels to
    [0, 1], no normalising), or YOLOS' saved with `do_convert_annotations: false`."""
    from transformers.models.rt_detr.image_processing_pil_rt_detr import RTDetrImageProcessorPil
    from transformers.models.yolos.image_processing_pil_yolos import YolosImageProcessorPil

    if kind == "rt_detr":
        RTDetrImageProcessorPil(size={"height": 64, "width": 64}).save_pretrained(folder)
        return folder
    kwargs = {"do_convert_annotations": False} if kind == "no_conversion" else {}
    square = {"shortest_edge": 64, "longest_edge": 64}
    YolosImageProcessorPil(size=square, image_mean=[0.5] * 3, image_std=[0.5] * 3, **kwargs).save_pretrained(folder)
    return folder


def _green_box(pixel_values, processor) -> tuple[float, float, float, float]:
    """The green square's x1, y1, x2, y2 in a model input, found from its pixels."""
    import numpy as np

    image = pixel_values.numpy().transpose(1, 2, 0)
    if processor.do_normalize:
        image = image * np.array(processor.image_std) + np.array(processor.image_mean)
    green = (image[..., 1] - image[..., 0] > 0.3) & (image[..., 1] - image[..., 2] > 0.3)
    ys, xs = np.nonzero(green)
    return float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1)


@pytest.mark.parametrize("augment", [False, True], ids=["plain", "augmented"])
@pytest.mark.parametrize("kind", ["yolos", "rt_detr", "no_conversion"])
def test_the_targets_are_where_the_square_is(tmp_path, kind, augment):
    """Each `labels` box the model gets (centre x, y, width, height as fractions of its input) lies on the
    green pixels of that input: after the resize and pad of a 96x64 image, and after augmentation."""
    from autotrain.data.detection import load_detection_splits
    from autotrain.trainers.object_detection import DetectionTransform, build_processor

    rows = noise_square_rows(tmp_path / "data" / "train", random.Random(0), 16, size=(96, 64))
    write_jsonl(tmp_path / "data" / "train" / "metadata.jsonl", rows)
    cfg = _config(tmp_path, _processor_folder(tmp_path / "model", kind), augment)
    processor = build_processor(cfg)
    train = load_detection_splits(cfg).train  # (valid_size of the rows held out)
    out = DetectionTransform(processor, 64, train=augment)(train[: len(train)])
    tolerance = 1.5 if augment else 0.75  # pixels: resampling blurs the square's edges
    for pixels, target in zip(out["pixel_values"], out["labels"], strict=True):
        assert tuple(pixels.shape) == (3, 64, 64) and target["class_labels"].tolist() == [0]
        ((cx, cy, w, h),) = target["boxes"].tolist()
        assert all(0 <= v <= 1 for v in (cx, cy, w, h)), target["boxes"]
        x1, y1, x2, y2 = _green_box(pixels, processor)
        found = [64 * (cx - w / 2), 64 * (cy - h / 2), 64 * (cx + w / 2), 64 * (cy + h / 2)]
        assert found == pytest.approx([x1, y1, x2, y2], abs=tolerance), (found, (x1, y1, x2, y2))
