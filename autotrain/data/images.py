"""What the vision tasks' data modules share: tables whose rows hold an image (a path, relative to the table,
or an image stored in the data), AutoTrain Advanced's image folders (`SPLIT/` with the images and a
`metadata.jsonl` or `metadata.csv` naming each one in `file_name`), and images checked before any weights
load: a missing, unreadable or oversized image names the file, the row and the column.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from autotrain.data.classification import IMAGE_EXTENSIONS
from autotrain.data.text_tasks import Columns, bad_row, load_columns
from autotrain.errors import UserInputError

# The most pixels an image may have (PIL refuses about three times as many as a decompression bomb); the
# same bound inference reads images with (autotrain.inference.bounds).
MAX_PIXELS = 8192 * 8192
METADATA = ("metadata.jsonl", "metadata.csv", "metadata.parquet")


def metadata_file(path: str, split: str) -> Path | None:
    """AutoTrain Advanced's local layout: PATH/SPLIT/metadata.jsonl (or .csv, .parquet) beside the images."""
    folder = Path(path).expanduser() / split
    if not folder.is_dir():
        folder = Path(path).expanduser() if split == "train" else folder
    return next((folder / m for m in METADATA if (folder / m).is_file()), None)


def load_image_columns(
    cfg, path: str, split: str, columns: Iterable[str], defaults=None, token=None, **options
) -> Columns:
    """`load_columns` (`options`: its hint) for a task with an `image` column: the split with the task's
    `columns` (`image`: an absolute path, or an image stored in the data), the name to report, and task column
    -> the data's column. A metadata file's `file_name` is the image column when the data has no column of the
    mapped name (as `datasets`' imagefolder reads it)."""
    defaults = dict(defaults or {})
    metadata = metadata_file(path, split)
    if metadata is not None:
        defaults["image"] = (*defaults.get("image", ()), "image", "file_name")
        cfg = _file_name_as_image(cfg, metadata)
        dataset, name, wanted = load_columns(cfg, str(metadata), "train", columns, defaults, token, **options)
        return _absolute(dataset, metadata.parent), str(metadata), wanted
    dataset, name, wanted = load_columns(cfg, path, split, columns, defaults, token, **options)
    table = Path(name)
    return _absolute(dataset, table.parent if table.is_file() else None), name, wanted


def _file_name_as_image(cfg, metadata: Path):
    """`column_mapping.image` names the column `datasets`' imagefolder makes of a metadata file's `file_name`
    (AutoTrain Advanced's local configs say `image_column: image`): read `file_name` for it when the file has
    no column of that name."""
    from autotrain.data.loading import load_split

    image = cfg.data.column_mapping.get("image")
    if image is None or image == "file_name":
        return cfg
    names = load_split(str(metadata), "train").column_names
    if image in names or "file_name" not in names:
        return cfg
    data = cfg.data.model_copy(update={"column_mapping": {**cfg.data.column_mapping, "image": "file_name"}})
    return cfg.model_copy(update={"data": data})


def _absolute(dataset, base: Path | None):
    """Relative image paths made absolute against the table's folder (stored images stay as they are)."""
    feature = dataset.features["image"]
    if getattr(feature, "dtype", None) not in ("string", "large_string") or base is None:
        return dataset

    def resolve(batch: dict) -> dict:
        out = []
        for value in batch["image"]:
            file = Path(value).expanduser() if isinstance(value, str) and value else None
            out.append(str(file if file is None or file.is_absolute() else base / file) if file else value)
        return {"image": out}

    return dataset.map(resolve, batched=True, desc=None)


def check_images(dataset, name: str, source: str) -> list[tuple[int, int]]:
    """Every row's image opens (header and checksums, without decoding the pixels) and is within MAX_PIXELS;
    the first bad one is named by file, row and column. Returns each image's (width, height)."""
    from concurrent.futures import ThreadPoolExecutor

    from datasets import Image

    if isinstance(dataset.features["image"], Image):  # stored images: checked undecoded, as {bytes, path}
        dataset = dataset.cast_column("image", Image(decode=False))
    column = dataset["image"]
    with ThreadPoolExecutor(max_workers=8) as pool:
        sizes = list(pool.map(_size_or_problem, column))
    for row, size in enumerate(sizes):
        if isinstance(size, str):
            raise bad_row(name, row, source, size)
    return sizes


def _size_or_problem(value) -> tuple[int, int] | str:
    from PIL import Image

    if value is None or value == "":
        return "no image (the cell is empty)"
    if isinstance(value, str) and not Path(value).is_file():
        return f"{value}: file not found"
    source, where = _source(value)
    if source is None:
        return f"not an image path or a stored image, got {type(value).__name__}"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # the bound below is lower
            with Image.open(source) as image:
                size = image.size
                if size[0] * size[1] > MAX_PIXELS:
                    return f"{where}: {size[0]}x{size[1]} pixels, more than the {MAX_PIXELS:,} read: scale it down"
                image.verify()
    except Image.DecompressionBombError:
        return f"{where}: more pixels than PIL opens (the most read: {MAX_PIXELS:,}): scale it down"
    except Exception as exc:  # PIL raises many types for broken files
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return f"{where}: not a readable image ({first})"
    return size


def _source(value) -> tuple[Any, str]:
    """What PIL opens for a cell, and how a message names it."""
    if isinstance(value, str):
        return value, value
    if isinstance(value, dict) and (value.get("bytes") or value.get("path")):
        if value.get("bytes"):
            return io.BytesIO(value["bytes"]), value.get("path") or "the image stored in the data"
        return value["path"], value["path"]
    return None, ""


def read_image(value, where: str = ""):
    """A cell's image as RGB PIL (a path, {bytes, path}, or a decoded image); a broken one is named."""
    from PIL import Image

    if hasattr(value, "convert") and not isinstance(value, (str, dict)):
        return value.convert("RGB")
    source, name = _source(value)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(source) as image:
                if image.size[0] * image.size[1] > MAX_PIXELS:
                    raise UserInputError(f"image {where or name}: {image.size[0]}x{image.size[1]} pixels: too large")
                return image.convert("RGB")
    except UserInputError:
        raise
    except Exception as exc:  # PIL raises many types for broken files
        raise UserInputError(f"cannot read image {where or name}: {exc}") from None


def image_folder_rows(path: Path) -> Any:
    """A plain folder of images (predict): one row per image file, sorted by name."""
    from datasets import Dataset

    files = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_EXTENSIONS and p.is_file())
    if not files:
        raise UserInputError(f"{path}: no image files ({', '.join(sorted(IMAGE_EXTENSIONS))}) in this folder")
    return Dataset.from_dict({"image": [str(p) for p in files]})
