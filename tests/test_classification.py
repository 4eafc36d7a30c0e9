"""Text and image classification through the CLI on tiny models built here, plus the data checks."""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file
from typer.testing import CliRunner

from autotrain.cli.main import app


def _load_assets_module():
    path = Path(__file__).parent / "assets" / "make_classification_assets.py"
    spec = importlib.util.spec_from_file_location("make_classification_assets", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


assets = _load_assets_module()
TEXT_ARGS = {
    "max_steps": 30,
    "batch_size": 16,
    "lr": 6e-3,
    "warmup_ratio": 0.1,
    "max_length": 32,
    "logging_steps": 5,
    "mixed_precision": "no",
    "save_total_limit": 1,
}
IMAGE_ARGS = {
    "max_steps": 16,
    "batch_size": 16,
    "lr": 2e-3,
    "logging_steps": 4,
    "mixed_precision": "no",
    "save_total_limit": 1,
}


# Fixtures: tiny models and easy data ------------------------------------------------------------------


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tiny-bert")
    assets.make_text_model(out, num_labels=3)  # a 3-label head: two labels need a new one
    return out


@pytest.fixture(scope="session")
def tiny_vit(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tiny-vit")
    assets.make_image_model(out)
    return out


@pytest.fixture(scope="session")
def text_data(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("text-data")
    rng = random.Random(1)
    assets.write_csv(folder / "train.csv", assets.sentiment_rows(rng, 160))
    assets.write_csv(folder / "validation.csv", assets.sentiment_rows(rng, 40))
    return folder


@pytest.fixture(scope="session")
def image_folder(tmp_path_factory) -> Path:
    """ROOT/red/*.png, ROOT/blue/*.png: no split folders, so validation is held out of train."""
    root = tmp_path_factory.mktemp("image-folder")
    assets.write_images(root, random.Random(2), 40)
    return root


@pytest.fixture(scope="session")
def image_table(tmp_path_factory) -> Path:
    """train.csv and validation.csv with `file` (relative to the table) and `color` columns."""
    root = tmp_path_factory.mktemp("image-table")
    rng = random.Random(3)
    for split, count in (("train", 32), ("validation", 8)):
        written = assets.write_images(root / "images" / split, rng, count)
        rows = [{"file": str(path.relative_to(root)), "color": color} for path, color in written]
        assets.write_csv(root / f"{split}.csv", rows)
    return root


def write_config(tmp_path: Path, task: str, base_model: Path, data: dict, **sections) -> Path:
    config = {
        "task": task,
        "base_model": str(base_model),
        "project_name": str(tmp_path / "run"),
        "data": data,
        "training_args": dict(TEXT_ARGS if task == "text-classification" else IMAGE_ARGS),
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key] = {**config[key], **value}
        else:
            config[key] = value
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(config))
    return path


def invoke(task: str, path: Path):
    return CliRunner().invoke(app, [task, "--config", str(path)])


def train(task: str, path: Path):
    result = invoke(task, path)
    assert result.exit_code == 0, result.output
    return result


def assert_weights_changed(run: Path, base: Path) -> None:
    before, after = load_file(base / "model.safetensors"), load_file(run / "model.safetensors")
    shared = [k for k in after if k in before and before[k].shape == after[k].shape]
    unchanged = [k for k in shared if torch.equal(before[k], after[k])]
    assert shared and not unchanged, f"unchanged: {unchanged}"


def eval_results(run: Path) -> dict:
    return json.loads((run / "eval_results.json").read_text())


# Metrics, labels and splits ----------------------------------------------------------------------------


def test_metrics_are_macro_averages():
    from autotrain.trainers.classification_common import classification_metrics

    labels = [0, 0, 0, 1, 1, 2]
    predictions = [0, 0, 1, 1, 1, 1]
    metrics = classification_metrics(predictions, labels)
    # per class precision 1, 2/4, 0; recall 2/3, 1, 0; f1 0.8, 2/3, 0
    assert metrics["accuracy"] == pytest.approx(4 / 6)
    assert metrics["precision"] == pytest.approx((1 + 0.5 + 0) / 3)
    assert metrics["recall"] == pytest.approx((2 / 3 + 1 + 0) / 3)
    assert metrics["f1"] == pytest.approx((0.8 + 2 / 3 + 0) / 3)


def test_holdout_is_seeded_and_stratified():
    from autotrain.data.classification import holdout

    labels = [0] * 30 + [1] * 10
    train_rows, valid_rows = holdout(labels, 0.2, seed=7)
    assert holdout(labels, 0.2, seed=7) == (train_rows, valid_rows)
    assert sorted(train_rows + valid_rows) == list(range(40))
    assert [labels[i] for i in valid_rows].count(0) == 6 and [labels[i] for i in valid_rows].count(1) == 2


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_text_files_with_integer_labels(tmp_path, suffix):
    import datasets

    from autotrain.config.classification import TextClassificationConfig
    from autotrain.data.classification import load_text_splits

    rows = {"sentence": [f"row {i}" for i in range(20)], "stars": [5, 1, 3, 5] * 5}
    path = tmp_path / f"train{suffix}"
    table = datasets.Dataset.from_dict(rows)
    table.to_json(path) if suffix == ".jsonl" else table.to_parquet(path)
    cfg = TextClassificationConfig.model_validate(
        {
            "task": "text-classification",
            "base_model": "unused",
            "project_name": str(tmp_path / "run"),
            "data": {
                "path": str(path),
                "valid_size": 0.25,
                "column_mapping": {"text": "sentence", "target": "stars"},
            },
        }
    )
    splits = load_text_splits(cfg)
    assert splits.labels == ["1", "3", "5"]
    assert splits.train.column_names == ["text", "labels"] and len(splits.train) + len(splits.valid) == 20
    assert set(splits.valid["labels"]) == {0, 1, 2}


def test_saved_dataset_with_image_and_class_label_features(tmp_path, tiny_vit, image_table):
    """Hub-style data: images stored in the dataset, labels as a ClassLabel (whose order gives the ids)."""
    import datasets

    from autotrain.config.classification import ImageClassificationConfig
    from autotrain.data.classification import load_image_splits
    from autotrain.trainers.image_classification import ImageTransform, build_processor

    rows = [line.split(",") for line in (image_table / "train.csv").read_text().splitlines()[1:]]
    features = datasets.Features({"img": datasets.Image(), "y": datasets.ClassLabel(names=["red", "blue"])})
    table = datasets.Dataset.from_dict(
        {"img": [str(image_table / f) for f, _ in rows], "y": [c for _, c in rows]}, features=features
    )
    datasets.DatasetDict({"train": table}).save_to_disk(tmp_path / "saved")
    cfg = ImageClassificationConfig.model_validate(
        {
            "task": "image-classification",
            "base_model": str(tiny_vit),
            "project_name": str(tmp_path / "run"),
            "data": {"path": str(tmp_path / "saved"), "column_mapping": {"image": "img", "target": "y"}},
        }
    )
    splits = load_image_splits(cfg)
    assert splits.labels == ["red", "blue"]
    row = splits.train.with_transform(ImageTransform(build_processor(cfg), train=True))[0]
    assert row["pixel_values"].shape == (3, 32, 32) and row["labels"] == splits.train[0]["labels"]


# End to end ----------------------------------------------------------------------------------------------


def test_text_classification(tmp_path, tiny_bert, text_data):
    run = tmp_path / "run"
    data = {
        "path": str(text_data),
        "valid_split": "validation",
        "column_mapping": {"text": "text", "target": "label"},
    }
    result = train("text-classification", write_config(tmp_path, "text-classification", tiny_bert, data))
    assert "new 2-label head (ignore_mismatched_sizes=True)" in result.output
    assert "accuracy" in result.output and "validation" in result.output  # the final metrics table
    assert_weights_changed(run, tiny_bert)
    metrics = eval_results(run)
    assert metrics["eval_accuracy"] >= 0.9, metrics
    assert {"eval_f1", "eval_precision", "eval_recall"} <= set(metrics)

    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(run).eval()
    tokenizer = AutoTokenizer.from_pretrained(run)
    assert model.config.id2label == {0: "negative", 1: "positive"}
    batch = tokenizer(
        ["the movie was really wonderful", "what a dull plot , so awful"], padding=True, return_tensors="pt"
    )
    with torch.no_grad():
        predicted = model(**batch).logits.argmax(-1).tolist()
    assert [model.config.id2label[i] for i in predicted] == ["positive", "negative"]


def test_text_early_stopping(tmp_path, tiny_bert, text_data):
    run = tmp_path / "run"
    data = {"path": str(text_data / "train.csv"), "valid_size": 0.2}  # `text` and `label` found by name
    args = {
        "max_steps": 60,
        "lr": 8e-3,
        "eval_strategy": "steps",
        "eval_steps": 5,
        "gradient_accumulation": 2,
        "early_stopping": {"patience": 2, "metric": "accuracy"},
    }
    train(
        "text-classification",
        write_config(tmp_path, "text-classification", tiny_bert, data, training_args=args),
    )
    state = json.loads((run / "trainer_state.json").read_text())
    assert state["best_model_checkpoint"] and state["best_metric"] >= 0.9
    assert state["global_step"] < 60, "training did not stop early"
    assert eval_results(run)["eval_accuracy"] == state["best_metric"]  # the best model was kept


def _predict_colors(run: Path) -> list[str]:
    from transformers import AutoImageProcessor, AutoModelForImageClassification

    model = AutoModelForImageClassification.from_pretrained(run).eval()
    processor = AutoImageProcessor.from_pretrained(run)
    rng = random.Random(9)
    images = [assets.color_image(rng, "red"), assets.color_image(rng, "blue")]
    with torch.no_grad():
        predicted = model(**processor(images=images, return_tensors="pt")).logits.argmax(-1).tolist()
    return [model.config.id2label[i] for i in predicted]


def test_image_folder(tmp_path, tiny_vit, image_folder):
    run = tmp_path / "run"
    data = {"path": str(image_folder), "valid_size": 0.25}
    train("image-classification", write_config(tmp_path, "image-classification", tiny_vit, data, augment=True))
    assert_weights_changed(run, tiny_vit)
    assert eval_results(run)["eval_accuracy"] >= 0.9
    assert (run / "preprocessor_config.json").is_file()
    assert _predict_colors(run) == ["red", "blue"]


def test_image_table(tmp_path, tiny_vit, image_table):
    run = tmp_path / "run"
    data = {
        "path": str(image_table),
        "valid_split": "validation",
        "column_mapping": {"image": "file", "target": "color"},
    }
    train("image-classification", write_config(tmp_path, "image-classification", tiny_vit, data, augment=False))
    assert eval_results(run)["eval_accuracy"] >= 0.9
    assert _predict_colors(run) == ["red", "blue"]


# Bad data: exit code 2, a message naming the problem, and no model weights loaded ----------------------


@pytest.fixture
def no_weights(monkeypatch):
    """Loading weights fails the test: every data check must come first."""
    from transformers import AutoModelForImageClassification, AutoModelForSequenceClassification

    def refuse(*args, **kwargs):
        raise AssertionError("model weights were loaded before the data was checked")

    for cls in (AutoModelForSequenceClassification, AutoModelForImageClassification):
        monkeypatch.setattr(cls, "from_pretrained", refuse)


def _bad_text(tmp_path: Path, text_data: Path, case: str) -> dict:
    folder = tmp_path / "data"
    folder.mkdir()
    train_csv = (text_data / "train.csv").read_text()
    (folder / "train.csv").write_text(train_csv)
    data = {"path": str(folder), "valid_split": "validation"}
    if case == "missing-column":
        (folder / "validation.csv").write_text(train_csv)
        data["column_mapping"] = {"text": "sentence"}
    elif case == "empty-split":
        (folder / "validation.csv").write_text("text,label\n")
    elif case == "empty-file":
        (folder / "validation.csv").write_bytes(b"")
    elif case == "unseen-label":
        (folder / "validation.csv").write_text("text,label\nthe plot was fine,neutral\nthe film was great,positive\n")
    elif case == "not-utf8":
        (folder / "validation.csv").write_bytes("text,label\ncaf\u00e9 was great,positive\n".encode("latin-1"))
    return data


@pytest.mark.parametrize(
    "case, fragment",
    [
        ("missing-column", "`sentence` (for text) not found; the data has columns: text, label"),
        ("empty-split", "the split is empty"),
        ("empty-file", "the split is empty"),
        ("unseen-label", "label `neutral` never appears in the training split"),
        ("not-utf8", "not valid UTF-8"),
    ],
)
def test_bad_text_data(tmp_path, tiny_bert, text_data, no_weights, case, fragment):
    path = write_config(tmp_path, "text-classification", tiny_bert, _bad_text(tmp_path, text_data, case))
    result = invoke("text-classification", path)
    assert result.exit_code == 2, result.output
    assert fragment in result.output


def test_corrupt_image(tmp_path, tiny_vit, no_weights):
    root = tmp_path / "images"
    assets.write_images(root, random.Random(4), 4)
    (root / "blue" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n this is not an image")
    path = write_config(tmp_path, "image-classification", tiny_vit, {"path": str(root)})
    result = invoke("image-classification", path)
    assert result.exit_code == 2, result.output
    assert "corrupt image" in result.output and "broken.png" in result.output


def test_missing_image_file(tmp_path, tiny_vit, image_table, no_weights):
    (tmp_path / "train.csv").write_text("file,color\nnowhere/red.png,red\n")
    data = {"path": str(tmp_path / "train.csv"), "column_mapping": {"image": "file", "target": "color"}}
    result = invoke("image-classification", write_config(tmp_path, "image-classification", tiny_vit, data))
    assert result.exit_code == 2, result.output
    assert "nowhere/red.png" in result.output
