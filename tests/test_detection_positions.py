"""object-detection: where the boxes are, stage by stage, on grey noise with one green square. The targets
the model is trained on are where the square's pixels are (whatever the checkpoint's processor config
says), predicted boxes come back to the image's own pixels exactly, and a tiny RT-DETR trained by the CLI
on non-square images puts its boxes on squares in the corners, far from where a model that learned only
the boxes' sizes would (the image's centre)."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest
from text_tasks_assets import write_config
from vision_assets import noise_square_rows, tiny_rtdetr, write_jsonl

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


class _Answers:
    """A stand-in detection model: for each image, one confident box at the given x1, y1, x2, y2 (pixels
    of the 64-pixel square), as a DETR-family output (centre x, y, width, height as fractions)."""

    def __init__(self, boxes: list[list[float]]):
        self.boxes = boxes

    def __call__(self, pixel_values, **kwargs):
        import torch

        from autotrain.trainers.object_detection import Detections

        corners = torch.tensor(self.boxes[: len(pixel_values)]) / 64
        self.boxes = self.boxes[len(pixel_values) :]
        centres = torch.cat([(corners[:, :2] + corners[:, 2:]) / 2, corners[:, 2:] - corners[:, :2]], -1)
        logits = torch.tensor([[[8.0, -8.0]]]).expand(len(corners), 1, 2)  # `square`, then no-object
        return Detections(logits, centres[:, None])


def test_predicted_boxes_come_back_in_the_images_own_pixels(tmp_path):
    """A box the model puts on the square's place in the resized, padded input comes back as the image's own
    box (each side scaled by its own rounded size: 96x64 -> 64x43, 100x30 -> 64x19, 50x200 -> 16x64);
    a box reaching into the padding ends at the image's edge."""
    import numpy as np
    from PIL import Image

    from autotrain.inference.detection import detections
    from autotrain.inference.load import FinishedRun
    from autotrain.trainers.object_detection import build_processor, transforms

    cfg = _config(tmp_path, _processor_folder(tmp_path / "model", "yolos"))
    images = [Image.new("RGB", size, (128, 128, 128)) for size in ((96, 64), (100, 30), (50, 200), (96, 64))]
    truth = [[60.0, 40.0, 90.0, 62.0], [3.0, 11.0, 97.0, 29.0], [5.0, 150.0, 45.0, 197.0]]
    square, placed = transforms(64, train=False), []
    for image, (x1, y1, x2, y2) in zip(images, truth, strict=False):
        ((x, y, w, h),) = square(image=np.asarray(image), bboxes=[[x1, y1, x2 - x1, y2 - y1]], categories=[0])["bboxes"]
        placed.append([x, y, x + w, y + h])
    placed.append([40.0, 21.5, 64.0, 64.0])  # reaches past the image (43 rows of 64) into the padding
    model = _Answers(placed)
    run = FinishedRun(tmp_path, cfg, model, build_processor(cfg), "cpu", 0)
    found = detections(run, images, 2, lambda done: None, threshold=0.5)
    assert [f["labels"] for f in found] == [[0]] * 4
    for got, want in zip(found, [*truth, [60.0, 32.0, 96.0, 64.0]], strict=True):
        assert got["boxes"][0] == pytest.approx(want, abs=0.01), (got["boxes"], want)


def _centre_distance(found: list[dict], truth: list[list[float]]) -> float:
    """Mean distance (pixels) between the best-scored box's centre and the true box's (COCO x, y, w, h)."""
    total = 0.0
    for boxes, (x, y, w, h) in zip(found, truth, strict=True):
        x1, y1, x2, y2 = boxes["boxes"][0]
        total += math.hypot((x1 + x2) / 2 - (x + w / 2), (y1 + y2) / 2 - (y + h / 2))
    return total / len(truth)


@pytest.mark.slow
def test_a_tiny_detector_finds_squares_in_the_corners(tmp_path):
    """A tiny RT-DETR, trained by the CLI for 96 steps (augmented) on 96x64 noise images with a green square
    in a corner, predicts centres less than half as far from the truth as the untrained model's and as the
    image's centre (what a model that learned only the sizes predicts)."""
    import torch
    from transformers import AutoModelForObjectDetection

    from autotrain.inference.detection import detections
    from autotrain.inference.load import FinishedRun, load_run

    rng = random.Random(0)
    data = tmp_path / "data"
    for split, count in (("train", 128), ("valid", 32)):
        write_jsonl(data / split / "metadata.jsonl", noise_square_rows(data / split, rng, count, (96, 64), True))
    model, run = tiny_rtdetr(tmp_path / "model"), tmp_path / "run"
    config = write_config(tmp_path / "c.yml", CONFIG, model=model, project=run, data=data, augment="true", epochs=6)
    # In a process of its own, as a user runs it. Its augmentations draw from the run's seed: when albumentations
    # seeded itself from the OS, 3 of 7 runs of this config learned nothing (40-53 px from the centres); seeded,
    # the run is the same every time, and seeds 1-10 all land 2.7-13.5 px from them.
    done = subprocess.run(
        [sys.executable, "-m", "autotrain.cli.main", "object-detection", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    rows = [json.loads(line) for line in (data / "valid" / "metadata.jsonl").read_text().splitlines()]
    images, truth = [str(data / "valid" / r["file_name"]) for r in rows], [r["objects"]["bbox"][0] for r in rows]
    trained = load_run(run, "cpu")
    untrained = FinishedRun(
        run,
        trained.config,
        AutoModelForObjectDetection.from_pretrained(model, dtype=torch.float32).eval(),
        trained.processor,
        "cpu",
        0,
    )
    distances = {
        name: _centre_distance(detections(r, images, 8, lambda done: None), truth)
        for name, r in (("trained", trained), ("untrained", untrained))
    }
    distances["image centre"] = sum(math.hypot(x + w / 2 - 48, y + h / 2 - 32) for x, y, w, h in truth) / len(truth)
    print("mean centre distances (pixels):", {name: round(d, 1) for name, d in distances.items()})  # docs/tasks.md
    assert distances["trained"] < 0.5 * min(distances["untrained"], distances["image centre"]), distances
