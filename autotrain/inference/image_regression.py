"""A finished image-regression run: predict a number per image, evaluate MSE / MAE / R2 / correlations."""

from __future__ import annotations

from pathlib import Path

from autotrain.inference.inputs import Rows


def read_rows(cfg, path: Path, labels: bool) -> Rows:
    """A table (or AutoTrain Advanced's folder with a metadata file) of images; without `labels`, a plain
    folder of images too."""
    from autotrain.data.images import check_images, image_folder_rows, metadata_file
    from autotrain.data.regression import load_regression_rows

    if path.is_dir() and not labels and metadata_file(str(path), "train") is None:
        dataset = image_folder_rows(path)
        check_images(dataset, str(path), "image")
        return Rows("image", list(dataset["image"]), None, str(path))
    dataset, name = load_regression_rows(cfg, str(path), labels)
    return Rows("image", list(dataset["image"]), list(dataset["target"]) if labels else None, name)


def load(folder: Path, cfg, device: str):
    from transformers import AutoImageProcessor, AutoModelForImageClassification

    from autotrain.inference.load import saved_model

    model, processor = saved_model(folder, cfg, AutoModelForImageClassification, AutoImageProcessor, "image processor")
    return model.to(device), processor


def max_tokens(cfg, model, processor) -> int:
    return 0  # images: no tokens


def predict(run, values: list, batch_size: int, advance) -> list[dict]:
    from autotrain.inference.classify import classifier_logits

    return [{"value": float(v)} for v in classifier_logits(run, values, batch_size, advance)[:, 0]]


def evaluate(run, rows: Rows, batch_size: int, advance) -> dict:
    from autotrain.inference.classify import classifier_logits
    from autotrain.trainers.text_regression import regression_metrics

    predictions = classifier_logits(run, rows.values, batch_size, advance)[:, 0]
    return {"rows": len(rows), **regression_metrics(predictions, rows.labels)}
