"""Object detection: AutoModelForObjectDetection (DETR, Conditional DETR, Deformable DETR, YOLOS, RT-DETR, ...)
with a head for the data's categories, trained by transformers' Trainer on the model's own set-matching loss.

Augmentation is albumentations': its `bbox_params` move, clip and drop the boxes with every flip, crop and
shift of the image, it needs neither torchvision nor a GPU (torchvision's v2 transforms do the same, but
PyPI's torchvision wheels import only beside the torch build they were made for). Every image is then
resized so that its longer side is `image_square_size` and padded to a square (as AutoTrain Advanced does),
and the checkpoint's image processor (its PIL backend) normalises it and turns the COCO boxes into the
model's targets.

Each evaluation reports COCO's mAP (IoU 0.50:0.95), mAP@50, mAP@75 and mAR@1/10/100 from pycocotools' own
COCOeval (torchmetrics' MeanAveragePrecision wraps the same code but needs torchvision).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotrain.data.detection import load_detection_splits
from autotrain.data.images import read_image
from autotrain.errors import UserInputError
from autotrain.trainers.common import load_pretrained
from autotrain.trainers.task_common import head_model, label_kwargs, rows_preview, task_trainer
from autotrain.training.plan import RunPlan

COCO_STATS = {"map": 0, "map_50": 1, "map_75": 2, "mar_1": 6, "mar_10": 7, "mar_100": 8}
GREY = (128, 128, 128)


def build_processor(cfg, token: str | None = None, source=None):
    """The checkpoint's image processor, PIL backend (no torchvision), resizing left to the transforms.
    Boxes always leave it as the model's loss and `_corners` read them: centre x, y, width, height as
    fractions of the image. A processor saved with `do_convert_annotations: false` (older transformers tied it
    to `do_normalize`) would hand the model pixel corners, which its sigmoid boxes can never reach."""
    from transformers import AutoImageProcessor

    kwargs = {"backend": "pil", "do_resize": False, "do_pad": True, "do_convert_annotations": True}
    if source is not None:
        return AutoImageProcessor.from_pretrained(source, **kwargs)
    return load_pretrained(AutoImageProcessor, cfg, "image processor", token, **kwargs)


def transforms(side: int, train: bool):
    """albumentations: (training: flip, brightness/contrast, a small shift and scale, a box-safe crop) then
    the longer side to `side` pixels, padded to a square at the bottom and right."""
    import os

    # albumentations asks PyPI for a newer release when imported (a warning, or a 2 s wait offline): a run
    # makes no network call it was not asked for.
    os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
    import albumentations as A

    square = [A.LongestMaxSize(max_size=side), A.PadIfNeeded(side, side, position="top_left", border_mode=0, fill=GREY)]
    augment = [
        A.HorizontalFlip(p=0.5),
        A.RandomBrightnessContrast(brightness_limit=0.15, contrast_limit=0.15, p=0.5),
        A.Affine(scale=(0.9, 1.1), translate_percent=(-0.05, 0.05), border_mode=0, fill=GREY, p=0.3),
        A.RandomSizedBBoxSafeCrop(height=side, width=side, erosion_rate=0.0, p=0.1),
    ]
    boxes = A.BboxParams(format="coco", label_fields=["categories"], clip=True, min_area=1.0, min_width=1, min_height=1)
    return A.Compose([*(augment if train else []), *square], bbox_params=boxes)


class DetectionTransform:
    """`datasets` on-the-fly transform: image + COCO boxes -> `pixel_values` (+ `pixel_mask`) and `labels`."""

    def __init__(self, processor, side: int, train: bool):
        self.processor, self.transform = processor, transforms(side, train)
        self.seeded_in: int | None = None  # the process whose seed the augmentations draw from

    def __call__(self, batch: dict) -> dict:
        import os

        import numpy as np
        import torch

        if self.seeded_in != os.getpid():
            # albumentations draws from a generator of its own, seeded from the OS unless told otherwise: the same
            # config trained differently each time (a test's tiny detector learned the corners in some runs and
            # nothing in others). torch's seed of this process is the run's seed (DataLoader workers: derived
            # from it, one per worker), so each process draws its own reproducible augmentations.
            self.transform.set_random_seed(torch.initial_seed() % 2**32)
            self.seeded_in = os.getpid()
        images, annotations = [], []
        for i, (value, boxes, categories) in enumerate(
            zip(batch["image"], batch["boxes"], batch["categories"], strict=True)
        ):
            out = self.transform(image=np.asarray(read_image(value)), bboxes=boxes, categories=categories)
            images.append(out["image"])
            objects = [
                {"bbox": list(map(float, box)), "category_id": int(c), "area": float(box[2] * box[3]), "iscrowd": 0}
                for box, c in zip(out["bboxes"], out["categories"], strict=True)
            ]
            annotations.append({"image_id": i, "annotations": objects})
        encoded = self.processor(images=images, annotations=annotations, return_tensors="pt")
        return {key: list(value) if key != "labels" else value for key, value in encoded.items()}


def collate(rows: list[dict]) -> dict:
    import torch

    batch = {"pixel_values": torch.stack([row["pixel_values"] for row in rows]), "labels": [r["labels"] for r in rows]}
    if "pixel_mask" in rows[0]:
        batch["pixel_mask"] = torch.stack([row["pixel_mask"] for row in rows])
    return batch


@dataclass
class Detections:
    """What an image processor's `post_process_object_detection` reads of a model's output."""

    logits: Any
    pred_boxes: Any


def logits_and_boxes(outputs, labels=None):
    """The class logits and the boxes of a detection output (the Trainer hands them over as a tuple, in the
    order of the model's output fields: DETR-family models give logits first, then pred_boxes)."""
    import torch

    tensors = [t for t in outputs if torch.is_tensor(t) and t.ndim == 3]
    return tensors[0], tensors[1]


def coco_scores(predictions: list[dict], targets: list[dict], num_labels: int) -> dict[str, float]:
    """mAP, mAP@50, mAP@75, mAR@1/10/100 (pycocotools' COCOeval). `predictions`: per image {boxes (x1, y1,
    x2, y2), scores, labels}; `targets`: per image {boxes (x1, y1, x2, y2), labels}."""
    import contextlib
    import io

    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    truth, found = _coco_truth(targets, num_labels), []
    for image, predicted in enumerate(predictions):
        for (x1, y1, x2, y2), score, label in zip(
            predicted["boxes"], predicted["scores"], predicted["labels"], strict=True
        ):
            box = [float(x1), float(y1), float(x2 - x1), float(y2 - y1)]
            found.append({"image_id": image, "category_id": int(label), "bbox": box, "score": float(score)})
    if not truth["annotations"] or not found:
        return dict.fromkeys(COCO_STATS, 0.0)
    with contextlib.redirect_stdout(io.StringIO()):  # COCOeval prints its progress and its table
        ground = COCO()
        ground.dataset = truth
        ground.createIndex()
        evaluation = COCOeval(ground, ground.loadRes(found), "bbox")
        evaluation.evaluate()
        evaluation.accumulate()
        evaluation.summarize()
    return {name: max(float(evaluation.stats[i]), 0.0) for name, i in COCO_STATS.items()}


def _coco_truth(targets: list[dict], num_labels: int) -> dict:
    annotations = []
    for image, target in enumerate(targets):
        for (x1, y1, x2, y2), label in zip(target["boxes"], target["labels"], strict=True):
            w, h = float(x2 - x1), float(y2 - y1)
            annotations.append(
                {
                    "id": len(annotations) + 1,
                    "image_id": image,
                    "category_id": int(label),
                    "bbox": [float(x1), float(y1), w, h],
                    "area": w * h,
                    "iscrowd": 0,
                }
            )
    return {
        "images": [{"id": i} for i in range(len(targets))],
        "annotations": annotations,
        "categories": [{"id": i} for i in range(num_labels)],
    }


def metrics_function(processor, num_labels: int):
    """compute_metrics for the Trainer: the model's boxes post-processed by the image processor (score
    threshold 0: COCO's AP ranks every box), against the targets, both in the padded square's pixels."""

    def compute_metrics(eval_pred) -> dict[str, float]:
        import torch

        predictions, targets = [], []
        for (logits, boxes), labels in zip(eval_pred.predictions, eval_pred.label_ids, strict=True):
            sizes = [_size(target) for target in labels]
            output = Detections(torch.as_tensor(logits), torch.as_tensor(boxes))
            predictions += processor.post_process_object_detection(output, threshold=0.0, target_sizes=sizes)
            targets += [_corners(target) for target in labels]
        return coco_scores(predictions, targets, num_labels)

    return compute_metrics


def _size(target: dict) -> tuple[int, int]:
    """(height, width) of the image a target's boxes are relative to (without resizing: the image's own)."""
    return tuple(int(v) for v in target.get("size", target["orig_size"]))


def _corners(target: dict) -> dict:
    """A processor target (normalised centre x, y, width, height) as pixel corners."""
    import torch

    height, width = (float(v) for v in _size(target))
    cx, cy, w, h = torch.as_tensor(target["boxes"]).reshape(-1, 4).unbind(-1)
    boxes = torch.stack([(cx - w / 2) * width, (cy - h / 2) * height, (cx + w / 2) * width, (cy + h / 2) * height], -1)
    return {"boxes": boxes.tolist(), "labels": torch.as_tensor(target["class_labels"]).tolist()}


def build_model(cfg, labels: list[str], token: str | None):
    from transformers import AutoModelForObjectDetection

    try:
        return head_model(AutoModelForObjectDetection, cfg, token, "ForObjectDetection", **label_kwargs(labels))
    except ImportError as exc:  # a timm backbone (facebook/detr-resnet-50's) without timm installed
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserInputError(f"cannot build base_model `{cfg.base_model}`: {first}") from None


def build_trainer(cfg, plan: RunPlan, callbacks: list, token: str | None = None):
    from transformers import set_seed

    set_seed(cfg.training_args.seed)
    processor = build_processor(cfg, token)
    splits = load_detection_splits(cfg, token)
    model = build_model(cfg, splits.labels, token)
    side = cfg.training_args.image_square_size
    train = splits.train.with_transform(DetectionTransform(processor, side, train=cfg.augment))
    valid = splits.valid.with_transform(DetectionTransform(processor, side, train=False))
    # The Trainer would drop the image and box columns (no model argument has their names) before the
    # transform runs; predictions stay one entry per batch (targets differ in size from image to image).
    args = {"remove_unused_columns": False, "eval_do_concat_batches": False}
    metrics = {
        "compute_metrics": metrics_function(processor, len(splits.labels)),
        "preprocess_logits_for_metrics": logits_and_boxes,
    }
    return task_trainer(cfg, plan, callbacks, model, train, valid, processor, collate, args=args, **metrics)


def preview(cfg, count: int, token: str | None = None) -> dict:
    """The first training images with their boxes, and how many boxes each category has, for `--preview`."""
    from collections import Counter

    splits = load_detection_splits(cfg, token)
    per_category = Counter(splits.labels[c] for row in splits.train["categories"] for c in row)

    def example(row: dict) -> dict:
        return {
            "image": row["image"] if isinstance(row["image"], str) else "an image stored in the data",
            "objects": ", ".join(
                f"{splits.labels[c]} {[round(v, 1) for v in box]}"
                for box, c in zip(row["boxes"], row["categories"], strict=True)
            ),
        }

    summary = {"boxes per category": ", ".join(f"{name} {per_category.get(name, 0)}" for name in splits.labels)}
    missing = [name for name in splits.labels if not per_category.get(name)]
    warnings = [f"no training box of: {', '.join(missing)}"] if missing else []
    return rows_preview(splits, count, example, summary, warnings)
