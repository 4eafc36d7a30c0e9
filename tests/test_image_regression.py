"""image-regression: a number per image. The tiny ViT learns how many red squares an image holds (R2 far
above the 0 of predicting the mean), predicts and evaluates, and bad data is one line naming the file, the
row and the column."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
from text_tasks_assets import built, results, write_config, write_rows
from vision_assets import count_rows, write_jsonl

ASSETS = Path(__file__).resolve().parent / "assets"
CONFIG = """\
task: image-regression
base_model: {model}
project_name: {project}
data:
  path: {data}
  valid_split: valid
training_args:
  epochs: 6
  batch_size: 16
  lr: 2.0e-3
  optimizer: adamw_torch
  logging_steps: 10
"""


def data_folder(folder: Path, train: int = 320, valid: int = 80) -> Path:
    """AutoTrain Advanced's layout: train/ and valid/, each with its images and a metadata.jsonl."""
    rng = random.Random(0)
    for split, count in (("train", train), ("valid", valid)):
        write_jsonl(folder / split / "metadata.jsonl", count_rows(folder / split, rng, count))
    return folder


@pytest.fixture(scope="session")
def regressor(tmp_path_factory):
    """An image-regression run of the tiny ViT on square counts (trained once per session)."""
    from typer.testing import CliRunner

    from autotrain.cli.main import app

    root = tmp_path_factory.getbasetemp() / "vision-tasks"

    def train(folder: Path) -> Path:
        config = write_config(
            folder / "config.yml",
            CONFIG,
            model=ASSETS / "tiny-vit",
            project=folder / "run",
            data=data_folder(folder / "data"),
        )
        result = CliRunner().invoke(app, ["image-regression", "--config", str(config)])
        assert result.exit_code == 0, result.output
        return folder

    return built(root, "image-regression-run", train)


@pytest.mark.slow
def test_learns_to_count_the_squares(regressor):
    metrics = results(regressor / "run")
    # Predicting the mean gives R2 0; a model that ignored the squares could do no better.
    assert metrics["eval_r2"] > 0.5, metrics
    assert metrics["eval_spearman"] > 0.7, metrics
    assert metrics["eval_mse"] == pytest.approx(metrics["eval_loss"], rel=1e-4)
    card = (regressor / "run" / "README.md").read_text()
    assert "| eval_r2 |" in card and "plots/metrics.png" in card


@pytest.mark.slow
def test_predict_and_evaluate(cli, regressor, tmp_path):
    run, valid = regressor / "run", regressor / "data" / "valid"
    out = tmp_path / "predictions.jsonl"
    result = cli("predict", run, "-i", valid, "-o", out)
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 80 and all(isinstance(r["value"], float) and r["image"].endswith(".png") for r in rows)
    result = cli("evaluate", run, "-i", valid, "--json")
    assert result.exit_code == 0, result.output
    measured = json.loads(result.stdout)
    assert measured["rows"] == 80
    assert measured["r2"] == pytest.approx(results(run)["eval_r2"], abs=1e-3)  # what training measured


def _broken_png(folder: Path) -> str:
    (folder / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    return "broken.png"


def _huge_png(folder: Path) -> str:
    from PIL import Image

    Image.new("1", (9000, 8000)).save(folder / "huge.png")  # 72 million pixels, a few kB on disk
    return "huge.png"


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda f: "missing.png", "metadata.jsonl: row 3, column `file_name`: "),
        (_broken_png, "metadata.jsonl: row 3, column `file_name`: "),
        (_huge_png, "9000x8000 pixels, more than the 67,108,864 read"),
    ],
    ids=["missing", "unreadable", "huge"],
)
def test_a_bad_image_names_the_file_row_and_column(tmp_path, make, expected):
    from autotrain.config.load import load_config
    from autotrain.data.regression import load_regression_splits
    from autotrain.errors import UserInputError

    train = tmp_path / "data" / "train"
    rows = count_rows(train, random.Random(0), 6)
    rows[3]["file_name"] = make(train)
    write_jsonl(train / "metadata.jsonl", rows)
    config = write_config(
        tmp_path / "c.yml", CONFIG, model="some/model", project=tmp_path / "run", data=tmp_path / "data"
    )
    cfg = load_config(config, ["data.valid_split=null"]).config
    with pytest.raises(UserInputError) as caught:
        load_regression_splits(cfg)
    message = str(caught.value)
    assert expected in message and "\n" not in message, message
    assert rows[3]["file_name"] in message


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        ([{"file_name": "a.png", "target": "high"}], "metadata.jsonl: row 0, column `target`: must be a number"),
        ([{"file_name": "a.png", "rating": 1.0}], "column `target` (for target) not found"),
        ([], "the split is empty"),
    ],
    ids=["not-a-number", "missing-column", "empty-file"],
)
def test_bad_rows_name_the_file_row_and_column(tmp_path, rows, expected):
    from autotrain.config.load import load_config
    from autotrain.data.regression import load_regression_splits
    from autotrain.errors import UserInputError

    train = tmp_path / "data" / "train"
    count_rows(train, random.Random(0), 1)
    shutil.copy(train / "0000.png", train / "a.png")
    (train / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows * 4))
    config = write_config(
        tmp_path / "c.yml", CONFIG, model="some/model", project=tmp_path / "run", data=tmp_path / "data"
    )
    cfg = load_config(config, ["data.valid_split=null"]).config
    with pytest.raises(UserInputError) as caught:
        load_regression_splits(cfg)
    assert expected in str(caught.value) and "\n" not in str(caught.value)


def test_a_table_with_relative_paths(tmp_path):
    """A CSV beside its images: paths are read relative to the table's folder."""
    from autotrain.config.load import load_config
    from autotrain.data.regression import load_regression_splits

    rows = count_rows(tmp_path / "data" / "pics", random.Random(1), 10)
    write_rows(
        tmp_path / "data" / "train.csv", [{"path": f"pics/{r['file_name']}", "score": r["target"]} for r in rows]
    )
    config = write_config(tmp_path / "c.yml", CONFIG, model="m", project=tmp_path / "run", data=tmp_path / "data")
    sets = ["data.valid_split=null", "data.column_mapping.image=path", "data.column_mapping.target=score"]
    splits = load_regression_splits(load_config(config, sets).config)
    assert len(splits.train) + len(splits.valid) == 10
    assert all(Path(p).is_file() for p in splits.train["image"])


@pytest.mark.slow
def test_the_app_previews_the_images(tmp_path):
    """The Data tab's preview of an image task shows each image as a small PNG beside its fields."""
    import base64
    import io

    from fastapi.testclient import TestClient
    from PIL import Image

    from autotrain.app.server import create_app

    data = data_folder(tmp_path / "data", train=4, valid=2)
    config = CONFIG.format(model=ASSETS / "tiny-vit", project=tmp_path / "runs" / "scores", data=data)
    client = TestClient(create_app(tmp_path / "runs", tmp_path), base_url="http://127.0.0.1")
    response = client.post("/api/preview?count=2", content=config)
    assert response.status_code == 200, response.text
    record = response.json()
    assert record["kind"] == "rows" and len(record["examples"]) == 2
    first = record["examples"][0]
    assert first["image"].endswith(".png") and isinstance(first["target"], float)
    png = base64.b64decode(first["thumbnail"].removeprefix("data:image/png;base64,"))
    assert Image.open(io.BytesIO(png)).size == (32, 32)
