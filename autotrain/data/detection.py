"""object-detection data: an `image` and its `objects` per row, as AutoTrain Advanced and the hub's detection
sets give them: `{bbox: [box, ...], category: [name or id, ...]}` (extra keys such as `id` and `area` are
ignored). Boxes are read in `data.box_format` and checked against their image: a box outside it, one with no
width or height, a category outside the label list, or a bbox list and a category list of different lengths
names the file, the row and the column. Every split ends as COCO boxes in pixels (`boxes`) and category ids
(`categories`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from autotrain.data.images import check_images, load_image_columns
from autotrain.data.text_tasks import INPUT_HINT, bad_row, holdout, is_missing, shown
from autotrain.errors import UserInputError

OBJECTS = ("objects",)
SLACK = 1.0  # pixels a box may pass its image's edge by (rounding in the tools that wrote it)


@dataclass
class DetectionSplits:
    train: Any  # datasets.Dataset: image, boxes (COCO x, y, w, h in pixels), categories (ids)
    valid: Any
    labels: list[str]  # category names; the list index is the id
    train_name: str
    valid_name: str


def _objects(value, name: str, row: int, source: str) -> tuple[list, list]:
    if isinstance(value, str):  # a CSV holds them as JSON text
        try:
            value = json.loads(value)
        except ValueError:
            raise bad_row(name, row, source, f"not JSON objects: {shown(value)}") from None
    if not isinstance(value, dict) or "bbox" not in value or "category" not in value:
        raise bad_row(name, row, source, f"must be {{bbox: [...], category: [...]}}, got {shown(value)}")
    boxes, categories = value["bbox"], value["category"]
    if not isinstance(boxes, list) or not isinstance(categories, list):
        raise bad_row(name, row, source, "bbox and category must be lists (one entry per object)")
    if len(boxes) != len(categories):
        raise bad_row(name, row, source, f"{len(boxes)} boxes but {len(categories)} categories")
    return boxes, categories


def to_coco(box, box_format: str, size: tuple[int, int]) -> list[float]:
    """A box in `box_format` as COCO's x, y, width, height in pixels (unchecked)."""
    x, y, a, b = (float(v) for v in box)
    width, height = size
    if box_format == "pascal_voc":
        return [x, y, a - x, b - y]
    if box_format == "yolo":
        return [(x - a / 2) * width, (y - b / 2) * height, a * width, b * height]
    return [x, y, a, b]


def from_corners(box, box_format: str, size: tuple[int, int]) -> list[float]:
    """x1, y1, x2, y2 in pixels as a box in `box_format` (4 decimals)."""
    x1, y1, x2, y2 = (float(v) for v in box)
    width, height = size
    if box_format == "pascal_voc":
        out = [x1, y1, x2, y2]
    elif box_format == "yolo":
        out = [(x1 + x2) / 2 / width, (y1 + y2) / 2 / height, (x2 - x1) / width, (y2 - y1) / height]
    else:
        out = [x1, y1, x2 - x1, y2 - y1]
    return [round(v, 4) for v in out]


def box_problem(box, box_format: str, size: tuple[int, int]) -> str | None:
    """Why `box` cannot be one of this image's boxes (None when it can)."""
    if not isinstance(box, (list, tuple)) or len(box) != 4:
        return f"a box is 4 numbers ({box_format}), got {shown(box)}"
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) for v in box):
        return f"a box is 4 finite numbers, got {shown(box)}"
    if box_format == "yolo" and any(not 0 <= v <= 1 for v in box):
        return f"yolo boxes are fractions of the image (0 to 1), got {shown(box)}"
    x, y, w, h = to_coco(box, box_format, size)
    written = "[" + ", ".join(f"{v:g}" for v in box) + "]"
    if w <= 0 or h <= 0:
        return f"box {written} ({box_format}) has no area: width {w:g}, height {h:g}"
    width, height = size
    if x < -SLACK or y < -SLACK or x + w > width + SLACK or y + h > height + SLACK:
        return f"box {written} ({box_format}) reaches outside its {width}x{height} image"
    return None


def category_ids(categories: list, labels: list[str], name: str, row: int, source: str) -> list[int]:
    ids = {label: i for i, label in enumerate(labels)}
    out = []
    for category in categories:
        if isinstance(category, int) and not isinstance(category, bool):
            if not 0 <= category < len(labels):
                raise bad_row(name, row, source, f"category id {category} is not one of 0..{len(labels) - 1}")
            out.append(category)
        elif str(category) in ids:
            out.append(ids[str(category)])
        else:
            known = ", ".join(labels[:20]) + (", ..." if len(labels) > 20 else "")
            raise bad_row(name, row, source, f"unknown category `{category}` (categories: {known})")
    return out


def label_names(dataset, cfg) -> list[str]:
    """`data.labels`, else a ClassLabel's names, else the categories of the split: names sorted, ids in order."""
    if cfg.data.labels:
        return list(cfg.data.labels)
    feature = dataset.features["objects"]
    inner = feature.get("category") if isinstance(feature, dict) else None
    names = getattr(getattr(inner, "feature", inner), "names", None)
    if names:
        return list(names)
    seen = set()
    for value in dataset["objects"]:
        if isinstance(value, str):
            value = json.loads(value) if value.strip().startswith("{") else {}
        seen.update(c for c in (value or {}).get("category", []) if not isinstance(c, list))
    if not seen:
        raise UserInputError("no objects in the training split: detection needs at least one box")
    if all(isinstance(c, int) and not isinstance(c, bool) for c in seen):
        return [str(i) for i in range(max(seen) + 1)]
    return sorted(str(c) for c in seen)


def _checked(dataset, cfg, name: str, wanted: dict[str, str], labels: list[str] | None):
    """`boxes` (COCO, pixels) and `categories` (ids) per row, every box checked against its image."""
    sizes = check_images(dataset, name, wanted["image"])
    if "objects" not in dataset.column_names:
        return dataset, labels
    labels = label_names(dataset, cfg) if labels is None else labels
    source, box_format = wanted["objects"], cfg.data.box_format
    all_boxes, all_ids = [], []
    for row, value in enumerate(dataset["objects"]):
        if is_missing(value):
            raise bad_row(
                name, row, source, "no objects (the cell is empty); an image without any is `{bbox: [], category: []}`"
            )
        boxes, categories = _objects(value, name, row, source)
        for box in boxes:
            problem = box_problem(box, box_format, sizes[row])
            if problem:
                raise bad_row(name, row, source, problem)
        all_boxes.append([to_coco(box, box_format, sizes[row]) for box in boxes])
        all_ids.append(category_ids(categories, labels, name, row, source) if labels else list(categories))
    dataset = dataset.remove_columns("objects").add_column("boxes", all_boxes).add_column("categories", all_ids)
    return dataset, labels


def _split(cfg, split: str, labels: list[str] | None, token=None):
    dataset, name, wanted = load_image_columns(cfg, cfg.data.path, split, ("image", "objects"), {}, token)
    dataset, labels = _checked(dataset, cfg, name, wanted, labels)
    return dataset, name, labels


def load_detection_splits(cfg, token: str | None = None) -> DetectionSplits:
    """Train and validation splits (`valid_split`, or `valid_size` of train held out), category names from
    train (or `data.labels`)."""
    train, train_name, labels = _split(cfg, cfg.data.train_split, None, token)
    if cfg.data.valid_split:
        valid, valid_name, _ = _split(cfg, cfg.data.valid_split, labels, token)
        return DetectionSplits(train, valid, labels, train_name, valid_name)
    keep, held = holdout(len(train), cfg.data.valid_size, cfg.training_args.seed, train_name)
    return DetectionSplits(train.select(keep), train.select(held), labels, train_name, f"{train_name} (held out)")


def load_detection_rows(cfg, path: str, objects: bool):
    """A file's (or AutoTrain Advanced folder's) images and, with `objects`, their boxes (COCO, checked) and
    categories as written (the run's labels name them: `category_ids`)."""
    columns = ("image", "objects") if objects else ("image",)
    dataset, name, wanted = load_image_columns(cfg, path, "train", columns, {}, hint=INPUT_HINT)
    return _checked(dataset, cfg, name, wanted, [] if objects else None)[0], name
