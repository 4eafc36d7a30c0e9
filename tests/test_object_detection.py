"""object-detection: boxes with labels. A tiny YOLOS learns to find and name a coloured square (COCO mAP@50
far above the untrained model's), predicts boxes with labels and scores (and draws them), evaluates, and
bad boxes or images are one line naming the file, the row and the column. Augmentation moves the boxes
with the image."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from text_tasks_assets import built, results, write_config
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


@pytest.mark.slow
def test_predict_draws_and_evaluate_measures_what_training_did(cli, detector, tmp_path):
    run, valid = detector / "run", detector / "data" / "valid"
    out, drawn = tmp_path / "boxes.jsonl", tmp_path / "drawn"
    result = cli("predict", run, "-i", valid, "-o", out, "--draw", drawn)
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    truth = [json.loads(line) for line in (valid / "metadata.jsonl").read_text().splitlines()]
    assert len(rows) == 64 and all(r["box_format"] == "coco" for r in rows)
    hits = 0
    for row, true in zip(rows, truth, strict=True):
        assert row["image"].endswith(true["file_name"])
        best = row["objects"][0] if row["objects"] else None
        hits += bool(
            best
            and best["label"] == true["objects"]["category"][0]
            and iou(best["box"], true["objects"]["bbox"][0]) > 0.5
        )
    assert hits > 0.5 * len(rows), rows[:3]  # boxes come back in the image's own pixels, as COCO x, y, w, h
    assert len(list(drawn.glob("*.png"))) == 64
    result = cli("evaluate", run, "-i", valid, "--json")
    assert result.exit_code == 0, result.output
    measured = json.loads(result.stdout)
    assert measured["rows"] == 64 and measured["boxes"] == 64
    assert measured["map_50"] == pytest.approx(results(run)["eval_map_50"], abs=0.02)


def iou(a: list[float], b: list[float]) -> float:
    """Intersection over union of two COCO boxes."""
    x1, y1 = max(a[0], b[0]), max(a[1], b[1])
    x2, y2 = min(a[0] + a[2], b[0] + b[2]), min(a[1] + a[3], b[1] + b[3])
    inter = max(0.0, x2 - x1) * max(0.0, y2 - y1)
    return inter / (a[2] * a[3] + b[2] * b[3] - inter)


def _config(tmp_path: Path, *sets: str):
    from autotrain.config.load import load_config

    config = write_config(
        tmp_path / "c.yml", CONFIG, model="m", project=tmp_path / "run", data=tmp_path / "data", epochs=1, lr="1.0e-3"
    )
    return load_config(config, ["data.valid_split=null", *sets]).config


@pytest.mark.parametrize(
    ("objects", "sets", "expected"),
    [
        (
            {"bbox": [[50, 10, 20, 20]], "category": ["red"]},
            [],
            "box [50, 10, 20, 20] (coco) reaches outside its 64x64 image",
        ),
        ({"bbox": [[10, 10, -4, 20]], "category": ["red"]}, [], "has no area: width -4, height 20"),
        (
            {"bbox": [[10, 10, 20, 20]], "category": ["green"]},
            ["data.labels=[red,blue]"],
            "unknown category `green` (categories: red, blue)",
        ),
        ({"bbox": [[10, 10, 20, 20]], "category": [5]}, ["data.labels=[red,blue]"], "category id 5 is not one of 0..1"),
        ({"bbox": [[10, 10, 20, 20]], "category": []}, [], "1 boxes but 0 categories"),
        ({"bbox": [[10, 10, 20]], "category": ["red"]}, [], "a box is 4 numbers (coco), got [10.0, 10.0, 20.0]"),
        ({"bbox": [[0.5, 0.5, 1.2, 0.1]], "category": ["red"]}, ["data.box_format=yolo"], "yolo boxes are fractions"),
        ({"bbox": [[30, 10, 20, 40]], "category": ["red"]}, ["data.box_format=pascal_voc"], "has no area: width -10"),
    ],
    ids=["outside", "negative", "unknown-name", "unknown-id", "lengths", "three-numbers", "yolo-range", "voc-order"],
)
def test_a_bad_box_names_the_file_row_and_column(tmp_path, objects, sets, expected):
    from autotrain.data.detection import from_corners, load_detection_splits
    from autotrain.errors import UserInputError

    train = tmp_path / "data" / "train"
    rows = box_rows(train, random.Random(0), 4)
    box_format = next((s.partition("=")[2] for s in sets if s.startswith("data.box_format")), "coco")
    for row in rows:  # the good rows in the format the config states
        row["objects"]["bbox"] = [
            from_corners([x, y, x + w, y + h], box_format, (64, 64)) for x, y, w, h in row["objects"]["bbox"]
        ]
    rows[2]["objects"] = objects
    write_jsonl(train / "metadata.jsonl", rows)
    with pytest.raises(UserInputError) as caught:
        load_detection_splits(_config(tmp_path, *sets))
    message = str(caught.value)
    assert "metadata.jsonl: row 2, column `objects`: " in message and expected in message, message
    assert "\n" not in message


def test_box_formats_read_the_same_boxes(tmp_path):
    """One square written as COCO, Pascal VOC and YOLO boxes reads back as the same COCO box."""
    from autotrain.data.detection import from_corners, load_detection_splits

    train = tmp_path / "data" / "train"
    rows = box_rows(train, random.Random(0), 4, most=1)
    coco = [row["objects"]["bbox"][0] for row in rows]
    for box_format in ("coco", "pascal_voc", "yolo"):
        for row, (x, y, w, h) in zip(rows, coco, strict=True):
            row["objects"]["bbox"] = [from_corners([x, y, x + w, y + h], box_format, (64, 64))]
        write_jsonl(train / "metadata.jsonl", rows)
        splits = load_detection_splits(_config(tmp_path, f"data.box_format={box_format}", "data.valid_size=0.25"))
        read = sorted(box for boxes in [*splits.train["boxes"], *splits.valid["boxes"]] for box in boxes)
        assert [v for box in read for v in box] == pytest.approx([v for box in sorted(coco) for v in box], abs=0.01)


def test_augmentation_moves_the_boxes_with_the_image():
    """A flipped, shifted, scaled and cropped image keeps its box on the square: every box pixel is red."""
    import numpy as np
    from PIL import Image, ImageDraw

    from autotrain.trainers.object_detection import transforms

    image = Image.new("RGB", (96, 64), (128, 128, 128))
    ImageDraw.Draw(image).rectangle((10, 20, 29, 39), fill=(220, 30, 30))
    train = transforms(48, train=True)
    moved = 0
    for seed in range(30):
        import random as stdlib_random

        stdlib_random.seed(seed)
        np.random.seed(seed)
        out = train(image=np.asarray(image), bboxes=[[10, 20, 20, 20]], categories=[1])
        assert out["image"].shape == (48, 48, 3) and list(out["categories"]) == [1]
        ((x, y, w, h),) = out["bboxes"]
        inside = out["image"][round(y) + 1 : round(y + h) - 1, round(x) + 1 : round(x + w) - 1]
        assert inside.size and (inside[..., 0] > 150).all() and (inside[..., 2] < 90).all(), (seed, x, y, w, h)
        moved += abs(x - 10 / 2) > 1  # resized by half without augmentation: x would be 5
    assert moved > 5  # the flip and the shift moved it


def test_a_run_of_another_task_has_nothing_to_draw(cli, tmp_path):
    from autotrain.errors import UserInputError
    from autotrain.inference.predict import check_draw

    with pytest.raises(UserInputError, match="runs of `task: image-regression` have nothing to draw"):
        check_draw(tmp_path / "drawn", "image-regression")
    (tmp_path / "drawn").mkdir()
    with pytest.raises(UserInputError, match="already exists; give a new folder"):
        check_draw(tmp_path / "drawn", "object-detection")


@pytest.mark.slow
def test_a_bad_box_is_one_line_and_exit_2_before_any_weights(cli, tmp_path, monkeypatch):
    import shutil

    monkeypatch.chdir(tmp_path)
    train = tmp_path / "data" / "train"
    rows = box_rows(train, random.Random(0), 6)
    rows[4]["objects"]["bbox"][0] = [60, 60, 10, 10]
    write_jsonl(train / "metadata.jsonl", rows)
    processor_only = tmp_path / "no-weights-here"  # the image processor loads, then the data is checked
    model = tiny_yolos(tmp_path / "model")
    processor_only.mkdir()
    shutil.copy(model / "preprocessor_config.json", processor_only)
    shutil.rmtree(model)
    config = write_config(
        tmp_path / "c.yml",
        CONFIG,
        model=processor_only,
        project=tmp_path / "run",
        data=tmp_path / "data",
        epochs=1,
        lr="1.0e-3",
    )
    result = cli("object-detection", "--config", config, "--set", "data.valid_split=null")
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "metadata.jsonl: row 4, column `objects`: box [60, 60, 10, 10]" in errors[0], (
        result.output
    )
    assert "Traceback" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yml", "data", "no-weights-here"]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["detr", "conditional_detr"])
def test_detr_models_train_evaluate_and_predict(cli, tmp_path, kind):
    """DETR (softmax classes with no-object) and Conditional DETR (sigmoid classes) on a ConvNeXt backbone
    built from its config: two steps, the final COCO evaluation, boxes predicted and drawn."""
    model, data = tiny_detr(tmp_path / "model", kind=kind), data_folder(tmp_path / "data", train=8, valid=4)
    config = write_config(
        tmp_path / "c.yml", CONFIG, model=model, project=tmp_path / "run", data=data, epochs=1, lr="1.0e-3"
    )
    result = cli("object-detection", "--config", config, "--set", "training_args.max_steps=2")
    assert result.exit_code == 0, result.output
    measured = results(tmp_path / "run")
    assert 0 <= measured["eval_map_50"] <= 1 and measured["eval_loss"] == measured["eval_loss"]
    result = cli(
        "predict", tmp_path / "run", "-i", data / "valid", "-o", tmp_path / "boxes.jsonl", "--draw", tmp_path / "drawn"
    )
    assert result.exit_code == 0, result.output
    assert (
        len((tmp_path / "boxes.jsonl").read_text().splitlines()) == 4 and len(list((tmp_path / "drawn").iterdir())) == 4
    )


def test_the_augmentation_asks_no_server_for_albumentations_updates():
    """albumentations checks PyPI for a newer release on import unless told not to: the run tells it."""
    import subprocess
    import sys

    probe = (
        "import os, urllib.request\n"
        "os.environ.pop('NO_ALBUMENTATIONS_UPDATE', None)\n"
        "asked = []\n"
        "def refuse(self, request, *args, **kwargs):\n"
        "    asked.append(getattr(request, 'full_url', request))\n"
        "    raise OSError('no network in this test')\n"
        "urllib.request.OpenerDirector.open = refuse\n"
        "from autotrain.trainers.object_detection import transforms\n"
        "transforms(64, train=True)\n"
        "print('asked', asked)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "asked []", done.stdout
