"""Does an exported task model predict what the trained one predicts? The same rows go through
`autotrain predict`'s own code (autotrain.inference.predict) with each model, and two things are compared:

- the predictions a user reads, without their numbers: generated text (seq2seq, vlm), labels, tags and
  entity spans, answer spans, box labels. A row "agrees" when these are equal;
- every floating output of the model's forward passes on the way (logits, start/end logits, boxes,
  embeddings, each generation step's logits), captured by a forward hook: the largest absolute difference.

Rows: the first few of the run's validation split (or training data), read as predict reads a file; fixed
probe inputs (texts, or images of coloured squares) when the data cannot be read here, said so."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotrain.errors import UserInputError

MAX_ROWS = 8
PROBE_TEXTS = ["a short probe sentence", "another one, with punctuation!", "numbers 1 2 3", "the end"]


@dataclass
class Outputs:
    predictions: list[dict]
    tensors: list[Any] = field(default_factory=list)  # float32 CPU tensors, in forward-call order


def probe_rows(cfg, limit: int = MAX_ROWS):
    """(Rows, where they came from): the run's data when it can be read here, else fixed probes."""
    from autotrain.inference.inputs import read_rows

    path = _split_input(cfg)
    if path is not None:
        try:
            rows = read_rows(cfg, path)
            if len(rows):
                rows.values = rows.values[:limit]
                return rows, f"{path}, first {len(rows)} rows"
            problem = "it has no rows"
        except (UserInputError, OSError, ValueError) as exc:
            problem = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
    else:
        problem = f"`{cfg.data.path}` [{cfg.data.valid_split or cfg.data.train_split}] is not a local file"
    return _fixed_probes(cfg), f"fixed probe inputs (the data could not be read: {problem})"


def _split_input(cfg) -> Path | None:
    """The local file of the run's validation split (else of its training split), or the folder of its
    images with their metadata file; None for a hub dataset."""
    from autotrain.data.images import metadata_file
    from autotrain.data.text_tasks import split_name

    split = cfg.data.valid_split or cfg.data.train_split
    named = Path(split_name(cfg.data.path, split))
    if named.is_file():
        return named
    metadata = metadata_file(cfg.data.path, split)
    return metadata.parent if metadata is not None else None


def _fixed_probes(cfg):
    from autotrain.config.tasks import TASKS
    from autotrain.inference.inputs import Rows

    columns = TASKS[cfg.task].columns
    if "image" in columns:
        images = _square_images(4)
        if cfg.task != "vlm":
            return Rows("image", images)
        prompt = {"prompt": "what color is the square ?"} if cfg.trainer == "vqa" else {}
        return Rows("image", [{"image": image, **prompt} for image in images])
    if "tokens" in columns:
        return Rows("tokens", [text.split() for text in PROBE_TEXTS])
    if "question" in columns:
        return Rows("question", [{"question": "what is it ?", "context": text} for text in PROBE_TEXTS])
    if "sentence1" in columns:
        return Rows("sentences", [{"sentence1": text} for text in PROBE_TEXTS])  # predict embeds each
    return Rows("text", list(PROBE_TEXTS))


def _square_images(count: int, side: int = 64) -> list:
    """Seeded images of one coloured square on grey (PIL, in memory)."""
    from PIL import Image, ImageDraw

    rng, images = random.Random(0), []
    for _ in range(count):
        image = Image.new("RGB", (side, side), (128, 128, 128))
        x, y, size = rng.randint(0, side // 2), rng.randint(0, side // 2), rng.randint(side // 8, side // 2)
        colour = tuple(rng.randint(0, 255) for _ in range(3))
        ImageDraw.Draw(image).rectangle((x, y, x + size, y + size), fill=colour)
        images.append(image)
    return images


def predict(run, rows) -> Outputs:
    """`rows` through predict's code with `run`'s model, its forward outputs captured."""
    from autotrain.inference.predict import batch_size_of, predict_rows

    outputs = Outputs([])
    hook = _hooked(run.model).register_forward_hook(lambda module, args, out: outputs.tensors.extend(_floats(out)))
    try:
        predict_rows(run, rows, outputs.predictions.append, batch_size_of(run, None))
    finally:
        hook.remove()
    return outputs


def _hooked(model):
    """The module whose output is the model's: the model itself, or a sentence-transformers model's last
    module (it calls its own `forward` directly, which runs no hooks of its own)."""
    import torch

    if isinstance(model, torch.nn.Sequential) and len(model):
        return model[len(model) - 1]
    return model


def _floats(value) -> list:
    """The floating tensors of a forward's output (a ModelOutput, dict, tuple or tensor), as float32 on the
    CPU; caches and integer tensors left out."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value.detach().float().cpu()] if value.is_floating_point() else []
    if isinstance(value, Mapping):  # a ModelOutput, or sentence-transformers' features (a BatchEncoding)
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _floats(item)]
    return []


def discrete(value):
    """A prediction without its numbers (scores, values, offsets stay; floats go): what must be equal."""
    if isinstance(value, dict):
        return {k: discrete(v) for k, v in value.items() if not isinstance(v, float)}
    if isinstance(value, list):
        return [discrete(v) for v in value if not isinstance(v, float)]
    return value


def numbers(value) -> list[float]:
    """The floats of a prediction (scores, values, similarities, embeddings), in order."""
    if isinstance(value, float):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    return [n for item in value for n in numbers(item)] if isinstance(value, list) else []


def compare(reference: Outputs, candidate: Outputs) -> dict:
    """Rows whose predictions agree; the largest difference of their numbers (rows that agree), and of the
    forward outputs (pairs of the same shape, in call order: when generations part, later steps do not pair)."""
    agreeing, number_diff = 0, 0.0
    for a, b in zip(reference.predictions, candidate.predictions, strict=True):
        if discrete(a) == discrete(b):
            agreeing += 1
            pairs = zip(numbers(a), numbers(b), strict=True)
            number_diff = max([number_diff, *(abs(x - y) for x, y in pairs)])
    worst, paired = 0.0, 0
    for a, b in zip(reference.tensors, candidate.tensors, strict=False):
        if a.shape == b.shape:
            worst, paired = max(worst, float((a - b).abs().max()) if a.numel() else 0.0), paired + 1
    count = len(reference.predictions)
    return {
        "prompts": count,
        "prompts_agreeing": agreeing,
        "agreement_pct": round(100.0 * agreeing / count, 2) if count else None,
        "max_logit_diff": worst,
        "max_prediction_diff": number_diff,
        "outputs_compared": paired,
        "outputs": len(reference.tensors),
    }
