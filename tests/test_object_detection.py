"""object-detection: boxes with labels. A tiny YOLOS learns to find and name a coloured square (COCO mAP@50
far above the untrained model's), predicts boxes with labels and scores (and draws them), evaluates, and
bad boxes or images are one line naming the file, the row and the column. Augmentation moves the boxes
with the image."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from text_tasks_assets import built, results, write_config, write_rows
from vision_assets import box_rows, tiny_detr, tiny_yolos, write_jsonl

CONFIG = """\
task: object-detection
base_model: {model}
project_name: {project}
data:
  path: {data}
  valid_split: valid
augment: false
training_args:
  epochs: {epochs}
  batch_size: 8
  lr: {lr}
  warmup_ratio: 0.1
  image_square_size: 64
  optimizer: adamw_torch
  logging_steps: 50
  eval_strategy: "no"
  save_steps: 100000
"""


def data_folder(folder: Path, train: int = 256, valid: int = 64) -> Path:
    """AutoTrain Advanced's layout: train/ and valid/, each with its images and a metadata.jsonl; one red or
    blue square per image, 30-60% of the side."""
    rng = random.Random(0)
    for split, count in (("train", train), ("valid", valid)):
        rows = box_rows(folder / split, rng, count, most=1, sides=(0.3, 0.6))
        write_jsonl(folder / split / "metadata.jsonl", rows)
    return folder


@pytest.fixture(scope="session")
def detector(tmp_path_factory):
    """The tiny YOLOS untrained (one step at a learning rate of 1e-9, then evaluated) and trained for 25
    epochs (800 steps) on the squares. Without augmentation: it costs time, and what it does to boxes has
    its own test."""
    from typer.testing import CliRunner

    from autotrain.cli.main import app

    root = tmp_path_factory.getbasetemp() / "vision-tasks"

    def train(folder: Path) -> Path:
        model, data = tiny_yolos(folder / "tiny-yolos"), data_folder(folder / "data")
        for name, epochs, lr in (("untrained", 0.03125, "1.0e-9"), ("run", 25, "5.0e-4")):
            project = folder / name
            config = write_config(
                folder / f"{name}.yml", CONFIG, model=model, project=project, data=data, epochs=epochs, lr=lr
            )
            result = CliRunner().invoke(app, ["object-detection", "--config", str(config)])
            assert result.exit_code == 0, result.output
        return folder

    return built(root, "detection-run", train)


@pytest.mark.slow
def test_learns_to_find_and_name_the_square(detector):
    untrained, trained = results(detector / "untrained"), results(detector / "run")
    assert trained["eval_map_50"] > max(0.2, 3 * untrained["eval_map_50"]), (untrained, trained)
    assert trained["eval_mar_100"] > untrained["eval_mar_100"], (untrained, trained)
    card = (detector / "run" / "README.md").read_text()
    assert "| eval_map_50 |" in card and "plots/metrics.png" in card
