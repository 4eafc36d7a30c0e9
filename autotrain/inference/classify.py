"""Classifier forward passes over many rows: texts tokenized as in training (truncated to the run's
`max_length`), images through the saved image processor; logits come back in input order."""

from __future__ import annotations

from collections.abc import Callable


def classifier_logits(run, values: list, batch_size: int, advance: Callable[[int], None] = lambda n: None):
    """float32 logits, one row per value (a text, or an image path / stored image)."""
    if run.task == "text-classification":
        return _text_logits(run, values, batch_size, advance)
    return _image_logits(run, values, batch_size, advance)


def softmax(logits):
    import numpy as np

    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def _forward(run, batch):
    import torch

    with torch.inference_mode():
        return run.model(**batch.to(run.device)).logits.float().cpu().numpy()


def text_logits(run, texts: list[str], batch_size: int, advance=lambda n: None):
    """float32 outputs of a text model's head, one row per text (the classifiers' and the regressor's)."""
    return _text_logits(run, texts, batch_size, advance)


def _text_logits(run, texts: list[str], batch_size: int, advance):
    """Shortest texts batched together, so batches pad little; results put back in input order."""
    import numpy as np

    from autotrain.inference.bounds import clip_text

    tokenizer = run.processor
    keep = "end" if tokenizer.truncation_side == "left" else "start"
    texts = [clip_text(tokenizer, text, run.max_tokens, keep) for text in texts]  # truncation encodes all first
    encoded = tokenizer(texts, truncation=True, max_length=run.max_tokens)
    keys = list(encoded.keys())
    order = sorted(range(len(texts)), key=lambda i: len(encoded["input_ids"][i]))
    logits = np.empty((len(texts), run.model.config.num_labels), dtype=np.float32)
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        batch = tokenizer.pad([{k: encoded[k][i] for k in keys} for i in rows], return_tensors="pt")
        logits[rows] = _forward(run, batch)
        advance(len(rows))
    return logits


def _image_logits(run, images: list, batch_size: int, advance):
    import numpy as np

    from autotrain.inference.bounds import model_side, open_image

    side = model_side(run.processor)
    parts = []
    for start in range(0, len(images), batch_size):
        batch = [open_image(value, side) for value in images[start : start + batch_size]]
        parts.append(_forward(run, run.processor(images=batch, return_tensors="pt")))
        advance(len(batch))
    return np.concatenate(parts) if parts else np.zeros((0, run.model.config.num_labels), dtype=np.float32)
