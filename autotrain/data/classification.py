"""Classification data: load the splits, map labels to ids, hold out a validation split, check images.

Every check here runs before any model weights are loaded, so a bad file costs seconds, not a model load.
Both tasks end with the same shape: a `text` (or `image`) column and an integer `labels` column, plus the
label names in id order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotrain.config.classification import ImageClassificationConfig, TextClassificationConfig
from autotrain.data.loading import FORMATS, MAPPING_HINT, load_split, require_columns
from autotrain.errors import UserInputError

IMAGE_EXTENSIONS = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff"}
TARGET_DEFAULTS = ("target", "label", "labels")


@dataclass
class ClassificationSplits:
    train: Any  # datasets.Dataset: `text` or `image`, and int `labels`
    valid: Any  # same columns, never None: `valid_split`, or held out of train
    labels: list[str]  # label names; the list index is the id


def column_mapping(cfg, dataset, input_column: str) -> dict[str, str]:
    """Task column -> dataset column; unmapped ones default to `text`/`image` and target/label/labels."""
    given = cfg.data.column_mapping
    target = given.get("target") or next((c for c in TARGET_DEFAULTS if c in dataset.column_names), "target")
    return {input_column: given.get(input_column, input_column), "target": target}


# Labels -------------------------------------------------------------------------------------------------


def label_keys(dataset, column: str, name: str) -> tuple[list, list | None]:
    """The raw label of every row (a ClassLabel id becomes its name), and the names a ClassLabel declares."""
    from datasets import ClassLabel

    feature = dataset.features.get(column)
    values = list(dataset[column])
    declared = isinstance(feature, ClassLabel)
    missing = [i for i, v in enumerate(values) if _is_missing(v) or (declared and v < 0)]
    if missing:
        raise UserInputError(f"{name}: {len(missing)} row(s) have no `{column}` label (first: row {missing[0]})")
    if isinstance(values[0], (list, dict)):
        raise UserInputError(
            f"{name}: column `{column}` holds {type(values[0]).__name__}s; classification needs one label per row"
        )
    if declared:
        return [feature.names[v] for v in values], list(feature.names)
    return values, None


def _is_missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def label_vocabulary(keys: list, declared: list | None, name: str) -> list:
    """Label keys in id order: a ClassLabel's own order, else sorted (so ids do not depend on row order)."""
    if declared:
        return declared
    unique = set(keys)
    if len(unique) < 2:
        raise UserInputError(f"{name}: classification needs at least two labels; every row has `{next(iter(unique))}`")
    try:
        return sorted(unique)
    except TypeError:  # mixed types, e.g. 1 and "1"
        return sorted(unique, key=str)


def encode_labels(keys: list, vocabulary: list, name: str, train_name: str) -> list[int]:
    ids = {key: i for i, key in enumerate(vocabulary)}
    unseen = sorted({k for k in keys if k not in ids}, key=str)
    if unseen:
        shown = ", ".join(f"`{u}`" for u in unseen[:5]) + (f" and {len(unseen) - 5} more" if len(unseen) > 5 else "")
        known = ", ".join(str(v) for v in vocabulary[:20]) + (", ..." if len(vocabulary) > 20 else "")
        raise UserInputError(
            f"{name}: label {shown} never appears in the training split {train_name}, so the "
            f"model cannot learn it (training labels: {known})"
        )
    return [ids[k] for k in keys]


def holdout(labels: list[int], size: float, seed: int) -> tuple[list[int], list[int]]:
    """Seeded, stratified split of row indices into (train, valid): about `size` of each class is held
    out, and every class keeps at least one training row."""
    import numpy as np

    rng = np.random.default_rng(seed)
    labels_array = np.asarray(labels)
    valid: list[int] = []
    largest = None
    for label in np.unique(labels_array):
        rows = np.flatnonzero(labels_array == label)
        rng.shuffle(rows)
        valid += rows[: min(round(len(rows) * size), len(rows) - 1)].tolist()
        if len(rows) > 1 and (largest is None or len(rows) > len(largest)):
            largest = rows
    if not valid:
        if largest is None:
            raise UserInputError(
                "too few rows to hold out a validation split (each label has one row); "
                "add rows or set `data.valid_split`"
            )
        valid = [int(largest[0])]
    held = set(valid)
    return [i for i in range(len(labels)) if i not in held], sorted(valid)


def _finish(train, train_keys, valid, valid_keys, vocabulary, cfg, train_name: str, valid_name: str):
    """Attach integer labels; without a valid split, hold one out of train."""
    train_ids = encode_labels(train_keys, vocabulary, train_name, train_name)
    train = train.add_column("labels", train_ids)
    if valid is None:
        keep, held = holdout(train_ids, cfg.data.valid_size, cfg.training_args.seed)
        train, valid = train.select(keep), train.select(held)
    else:
        valid = valid.add_column("labels", encode_labels(valid_keys, vocabulary, valid_name, train_name))
    return ClassificationSplits(train, valid, [str(v) for v in vocabulary])


def _as_column(dataset, source: str, task_column: str):
    dataset = dataset.select_columns([source])
    return dataset.rename_column(source, task_column) if source != task_column else dataset


# Text ---------------------------------------------------------------------------------------------------


def _text_split(cfg: TextClassificationConfig, split: str, token: str | None):
    name = f"{cfg.data.path} [{split}]"
    dataset = load_split(cfg.data.path, split, token=token)
    mapping = column_mapping(cfg, dataset, "text")
    require_columns(dataset, mapping, name)
    keys, declared = label_keys(dataset, mapping["target"], name)
    return _texts(dataset, mapping["text"], name), keys, declared, name


def _texts(dataset, source: str, name: str):
    """The `source` column as a `text` column of strings; a row without text is an error."""
    from datasets import Value

    texts = _as_column(dataset, source, "text")
    empty = [i for i, t in enumerate(texts["text"]) if t is None]
    if empty:
        raise UserInputError(f"{name}: {len(empty)} row(s) have no text in `{source}` (first: row {empty[0]})")
    if texts.features["text"] != Value("string"):
        texts = texts.cast_column("text", Value("string"))
    return texts


def _load_splits(cfg, load_one, token: str | None) -> ClassificationSplits:
    """Train and (if named) validation splits through `load_one`, labels numbered from train."""
    train, train_keys, declared, train_name = load_one(cfg, cfg.data.train_split, token)
    vocabulary = label_vocabulary(train_keys, declared, train_name)
    valid = valid_keys = None
    valid_name = ""
    if cfg.data.valid_split:
        valid, valid_keys, _, valid_name = load_one(cfg, cfg.data.valid_split, token)
    return _finish(train, train_keys, valid, valid_keys, vocabulary, cfg, train_name, valid_name)


def load_text_splits(cfg: TextClassificationConfig, token: str | None = None) -> ClassificationSplits:
    return _load_splits(cfg, _text_split, token)


# Images -------------------------------------------------------------------------------------------------


def _class_dirs(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))


def _split_folder(root: Path, split: str, train_split: str) -> Path | None:
    """The folder holding one sub-folder per class for `split`: ROOT/SPLIT/, or ROOT/ itself for the train
    split when ROOT has no split folders (a class folder holds images, a split folder holds folders)."""
    candidate = root / split
    if candidate.is_dir() and _class_dirs(candidate):
        return candidate
    if split == train_split and _class_dirs(root) and not any(_class_dirs(d) for d in _class_dirs(root)):
        return root
    return None


def is_image_folder(path: str, train_split: str) -> bool:
    root = Path(path).expanduser()
    if not root.is_dir() or (root / "dataset_info.json").is_file() or (root / "dataset_dict.json").is_file():
        return False
    if any((root / f"{train_split}{ext}").is_file() or any(root.glob(f"{train_split}-*{ext}")) for ext in FORMATS):
        return False
    return _split_folder(root, train_split, train_split) is not None


def _scan_image_folder(root: Path, split: str, train_split: str, name: str):
    from datasets import Dataset

    folder = _split_folder(root, split, train_split)
    if folder is None:
        present = ", ".join(p.name for p in _class_dirs(root)) or "none"
        raise UserInputError(
            f"{name}: no folder `{split}` with one sub-folder per class in {root} (sub-folders here: {present})"
        )
    paths, keys = [], []
    for class_dir in _class_dirs(folder):
        for file in sorted(class_dir.rglob("*")):
            if file.suffix.lower() in IMAGE_EXTENSIONS and not file.name.startswith(".") and file.is_file():
                paths.append(str(file))
                keys.append(class_dir.name)
    if not paths:
        raise UserInputError(
            f"{name}: the split is empty: no image files ({', '.join(sorted(IMAGE_EXTENSIONS))}) "
            f"in the class sub-folders of {folder}"
        )
    return Dataset.from_dict({"image": paths}), keys


def _table_dir(path: str, split: str) -> Path | None:
    """Where relative image paths of a table start: the folder of the table file."""
    as_file = Path(split).expanduser()
    if as_file.suffix.lower() in FORMATS and as_file.is_file():
        return as_file.parent
    local = Path(path).expanduser()
    if local.is_file():
        return local.parent
    return local if local.is_dir() else None


def _image_table(
    cfg: ImageClassificationConfig,
    path: str,
    split: str,
    name: str,
    token: str | None,
    labels: bool = True,
    hint: str = MAPPING_HINT,
):
    from datasets import Dataset, Image

    dataset = load_split(path, split, token=token)
    mapping = column_mapping(cfg, dataset, "image")
    require_columns(dataset, mapping if labels else {"image": mapping["image"]}, name, hint)
    keys, declared = label_keys(dataset, mapping["target"], name) if labels else (None, None)
    if isinstance(dataset.features[mapping["image"]], Image):  # hub datasets: images stored in the data
        return _as_column(dataset, mapping["image"], "image"), keys, declared
    base = _table_dir(path, split)
    paths = []
    for row, value in enumerate(dataset[mapping["image"]]):
        if not isinstance(value, str) or not value:
            raise UserInputError(f"{name}: row {row} of `{mapping['image']}` is not an image path ({value!r})")
        file = Path(value).expanduser()
        paths.append(str(file if file.is_absolute() or base is None else base / file))
    return Dataset.from_dict({"image": paths}), keys, declared


def check_images(paths: list[str], name: str) -> None:
    """Open and verify every image file (header and checksums, without decoding the pixels)."""
    from concurrent.futures import ThreadPoolExecutor

    def problem(path: str) -> str | None:
        from PIL import Image

        try:
            with Image.open(path) as image:
                image.verify()
        except FileNotFoundError:
            return f"{path}: file not found"
        except Exception as exc:  # PIL raises many types for broken files
            return f"{path}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        return None

    with ThreadPoolExecutor(max_workers=8) as pool:
        bad = [p for p in pool.map(problem, paths) if p]
    if bad:
        more = f" (and {len(bad) - 3} more)" if len(bad) > 3 else ""
        raise UserInputError(
            f"{name}: unreadable or corrupt image{'s' if len(bad) > 1 else ''}: " + "; ".join(bad[:3]) + more
        )


def _image_split(cfg: ImageClassificationConfig, split: str, token: str | None):
    from datasets import Value

    name = f"{cfg.data.path} [{split}]"
    if is_image_folder(cfg.data.path, cfg.data.train_split):
        images, keys = _scan_image_folder(Path(cfg.data.path).expanduser(), split, cfg.data.train_split, name)
        declared = None
    else:
        images, keys, declared = _image_table(cfg, cfg.data.path, split, name, token)
    if isinstance(images.features["image"], Value):  # file paths; hub images are checked as they decode
        check_images(images["image"], name)
    return images, keys, declared, name


def load_image_splits(cfg: ImageClassificationConfig, token: str | None = None) -> ClassificationSplits:
    return _load_splits(cfg, _image_split, token)


# Rows of a finished run's inputs (predict, evaluate) ---------------------------------------------------

INPUT_HINT = "the run reads the columns it was trained on, through its `data.column_mapping`"


def load_text_rows(cfg: TextClassificationConfig, path: str, labels: bool):
    """A file's texts, read through the run's column mapping, and with `labels` the raw label of each row
    (else None). Rows keep their order."""
    dataset = load_split(path, "train")
    mapping = column_mapping(cfg, dataset, "text")
    require_columns(dataset, mapping if labels else {"text": mapping["text"]}, path, INPUT_HINT)
    keys = label_keys(dataset, mapping["target"], path)[0] if labels else None
    return _texts(dataset, mapping["text"], path), keys


def load_image_rows(cfg: ImageClassificationConfig, path: str, labels: bool):
    """Images from a folder with one sub-folder per class, a table with an image-path column, or (without
    `labels`) a plain folder of images; with `labels` also the raw label of each image (else None)."""
    from datasets import Dataset, Value

    root = Path(path).expanduser()
    if root.is_dir() and is_image_folder(path, "train"):
        images, keys = _scan_image_folder(root, "train", "train", path)
    elif root.is_dir():
        if labels:
            raise UserInputError(
                f"{path}: evaluating needs each image's true label: a folder with one sub-folder per class, "
                "or a table with an image-path and a label column"
            )
        files = sorted(p for p in root.iterdir() if p.suffix.lower() in IMAGE_EXTENSIONS and p.is_file())
        if not files:
            raise UserInputError(f"{path}: no image files ({', '.join(sorted(IMAGE_EXTENSIONS))}) in this folder")
        images, keys = Dataset.from_dict({"image": [str(p) for p in files]}), None
    else:
        images, keys, _ = _image_table(cfg, path, "train", path, None, labels, INPUT_HINT)
    if isinstance(images.features["image"], Value):
        check_images(images["image"], path)
    return images, (keys if labels else None)
