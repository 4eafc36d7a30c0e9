"""A finished object-detection run: predict the labelled boxes of each image (in the run's `data.box_format`,
in the image's own pixels), draw them, and evaluate COCO mAP / mAP@50 / mAR on a file with true boxes.

Images go through what validation saw in training: the longer side resized to `image_square_size`, padded
to a square, the image processor; the boxes come back to the image's own coordinates (each axis by its own
rounded scale), clipped to the image.
"""

from __future__ import annotations

from pathlib import Path

from autotrain.inference.inputs import Rows

THRESHOLD = 0.5  # predict writes the boxes scored at least this (evaluation ranks every box, as COCO's AP does)


def read_rows(cfg, path: Path, labels: bool) -> Rows:
    """A table (or AutoTrain Advanced's folder with a metadata file) of images, with `labels` their objects
    too; without, a plain folder of images as well."""
    from autotrain.data.detection import load_detection_rows
    from autotrain.data.images import check_images, image_folder_rows, metadata_file

    if path.is_dir() and not labels and metadata_file(str(path), "train") is None:
        dataset = image_folder_rows(path)
        check_images(dataset, str(path), "image")
        return Rows("image", list(dataset["image"]), None, str(path))
    dataset, name = load_detection_rows(cfg, str(path), labels)
    if not labels:
        return Rows("image", list(dataset["image"]), None, name)
    truth = [{"boxes": b, "categories": c} for b, c in zip(dataset["boxes"], dataset["categories"], strict=True)]
    return Rows("image", list(dataset["image"]), truth, name)


def load(folder: Path, cfg, device: str):
    import torch
    from transformers import AutoModelForObjectDetection

    from autotrain.trainers.object_detection import build_processor
    from autotrain.training.verify import load_saved

    model = load_saved(
        AutoModelForObjectDetection, folder, "model", dtype=torch.float32, trust_remote_code=cfg.trust_remote_code
    )
    try:
        processor = build_processor(cfg, source=str(folder))
    except (OSError, ValueError) as exc:
        from autotrain.errors import UserInputError

        raise UserInputError(f"cannot load the image processor saved in `{folder}`: {exc}") from None
    return model.to(device), processor


def max_tokens(cfg, model, processor) -> int:
    return 0  # images: no tokens


def detections(run, values: list, batch_size: int, advance, threshold: float = 0.0) -> list[dict]:
    """Per image: {boxes (x1, y1, x2, y2 in the image's pixels), scores, labels}, best first."""
    import numpy as np
    import torch

    from autotrain.data.images import read_image
    from autotrain.trainers.object_detection import transforms

    side = run.config.training_args.image_square_size
    square = transforms(side, train=False)
    found = []
    for start in range(0, len(values), batch_size):
        images = [read_image(v) for v in values[start : start + batch_size]]
        # The whole image as a box goes through the same resize and pad: where it lands is the image's part
        # of the square (its rounded size), which maps the predicted boxes back exactly.
        squared = [square(image=np.asarray(image), bboxes=[[0, 0, *image.size]], categories=[0]) for image in images]
        batch = run.processor(images=[s["image"] for s in squared], return_tensors="pt").to(run.device)
        with torch.inference_mode():
            output = run.model(**batch)
        sizes = [(side, side)] * len(images)
        results = run.processor.post_process_object_detection(output, threshold, sizes)
        for image, placed, result in zip(images, squared, results, strict=True):
            order = result["scores"].argsort(descending=True)
            found.append(
                {
                    "boxes": to_image(result["boxes"][order].float().cpu(), placed["bboxes"][0], image.size),
                    "scores": result["scores"][order].float().cpu().tolist(),
                    "labels": result["labels"][order].cpu().tolist(),
                }
            )
        advance(len(images))
    return found


def to_image(boxes, placed, size: tuple[int, int]) -> list[list[float]]:
    """x1, y1, x2, y2 in the square's pixels -> in the image's, clipped to it (a box may reach into the
    padding). `placed`: the image's own box in the square (COCO x, y, width, height)."""
    import torch

    x, y, w, h = (float(v) for v in placed)
    width, height = size
    scale = torch.tensor([width / w, height / h, width / w, height / h])
    boxes = (boxes.reshape(-1, 4) - torch.tensor([x, y, x, y])) * scale
    limit = torch.tensor([width, height, width, height], dtype=boxes.dtype)
    return torch.minimum(boxes.clamp(min=0), limit).tolist()


def predict(run, values: list, batch_size: int, advance) -> list[dict]:
    from autotrain.data.detection import from_corners

    names, box_format = run.labels, run.config.data.box_format
    out = []
    for image, found in zip(values, detections(run, values, batch_size, advance, THRESHOLD), strict=True):
        size = _size(image)
        out.append(
            {
                "objects": [
                    {"label": names[label], "score": round(score, 4), "box": from_corners(box, box_format, size)}
                    for box, score, label in zip(found["boxes"], found["scores"], found["labels"], strict=True)
                ],
                "box_format": box_format,
            }
        )
    return out


def _size(value) -> tuple[int, int]:
    from autotrain.data.images import read_image

    return read_image(value).size


def draw(values: list, outputs: list[dict], rows: range, folder: Path) -> None:
    """Each image with its predicted boxes, labels and scores drawn on it: FOLDER/ROW-NAME.png."""
    from PIL import ImageDraw

    from autotrain.data.detection import to_coco
    from autotrain.data.images import read_image

    for row, value, output in zip(rows, values, outputs, strict=True):
        image = read_image(value)
        pen = ImageDraw.Draw(image)
        for found in output["objects"]:
            x, y, w, h = to_coco(found["box"], output["box_format"], image.size)
            pen.rectangle((x, y, x + w, y + h), outline=(255, 0, 255), width=max(1, round(max(image.size) / 200)))
            pen.text((x + 2, y + 1), f"{found['label']} {found['score']:.2f}", fill=(255, 0, 255))
        stem = Path(value).stem if isinstance(value, str) else "image"
        image.save(folder / f"{row:06d}-{stem}.png")


def evaluate(run, rows: Rows, batch_size: int, advance) -> dict:
    """COCO mAP, mAP@50, mAP@75, mAR@1/10/100 against the rows' boxes; a category the run was not trained on
    names the row."""
    from autotrain.data.detection import category_ids
    from autotrain.trainers.object_detection import coco_scores

    names = run.labels
    truth = [
        {
            "boxes": [[x, y, x + w, y + h] for x, y, w, h in row["boxes"]],
            "labels": category_ids(row["categories"], names, rows.name, i, "objects"),
        }
        for i, row in enumerate(rows.labels)
    ]
    found = detections(run, rows.values, batch_size, advance)
    return {
        "rows": len(rows),
        "boxes": sum(len(t["labels"]) for t in truth),
        **coco_scores(found, truth, len(run.labels)),
    }
