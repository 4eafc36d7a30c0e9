"""A finished token-classification run: tag the words of each row, or find entities in plain text with
their character offsets (transformers' token-classification pipeline, each word's first sub-word deciding);
evaluate with seqeval."""

from __future__ import annotations

from pathlib import Path

from autotrain.inference.inputs import Rows


def read_rows(cfg, path: Path, labels: bool) -> Rows:
    """`tokens` rows (a list of words), or without labels also plain `text` rows."""
    from autotrain.data.tokens import load_token_rows

    kind, values, tags = load_token_rows(cfg, str(path), labels)
    return Rows(kind, values, tags, str(path))


def load(folder: Path, cfg, device: str):
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    from autotrain.inference.load import saved_model

    model, tokenizer = saved_model(folder, cfg, AutoModelForTokenClassification, AutoTokenizer)
    return model.to(device), tokenizer


def max_tokens(cfg, model, processor) -> int:
    from autotrain.trainers.text_classification import max_tokens as capped

    return capped(cfg, processor, model.config)


def _pipeline(run):
    from transformers import pipeline

    return pipeline(
        "token-classification",
        model=run.model,
        tokenizer=run.processor,
        aggregation_strategy="first",
        device=run.model.device,
    )


def _entities(found: list[dict]) -> list[dict]:
    return [
        {
            "entity": e["entity_group"],
            "text": e["word"],
            "start": int(e["start"]),
            "end": int(e["end"]),
            "score": float(e["score"]),
        }
        for e in found
    ]


def word_tags(run, rows: list[list[str]], batch_size: int, advance=lambda n: None) -> list[list[str]]:
    """Each word's predicted tag (its first sub-word's); words past max_length (cut in training too): O."""
    import torch

    from autotrain.trainers.token_classification import aligned

    names = [run.model.config.id2label[i] for i in range(run.model.config.num_labels)]
    out = []
    for start in range(0, len(rows), batch_size):
        batch = rows[start : start + batch_size]
        encoded = aligned(run.processor, batch, None, run.max_tokens)
        padded = run.processor.pad(dict(encoded), return_tensors="pt").to(run.device)
        with torch.inference_mode():
            ids = run.model(**padded).logits.argmax(dim=-1).cpu().tolist()
        for i, words in enumerate(batch):
            tags, seen = ["O"] * len(words), set()
            for position, word in enumerate(encoded.word_ids(i)):
                if word is not None and word not in seen:
                    seen.add(word)
                    tags[word] = names[ids[i][position]]
            out.append(tags)
        advance(len(batch))
    return out


def predict(run, values: list, batch_size: int, advance) -> list[dict]:
    """Words: their tags and the entities of the words joined by spaces; text: its entities."""
    tagger = _pipeline(run)
    if values and isinstance(values[0], str):
        found = tagger(values, batch_size=batch_size)
        advance(len(values))
        return [{"entities": _entities(f)} for f in found]
    tags = word_tags(run, values, batch_size)
    found = tagger([" ".join(words) for words in values], batch_size=batch_size)
    advance(len(values))
    return [{"tags": t, "entities": _entities(f)} for t, f in zip(tags, found, strict=True)]


def evaluate(run, rows: Rows, batch_size: int, advance) -> dict:
    """seqeval's entity-level scores over the rows, and per entity type."""
    from seqeval.metrics import classification_report

    from autotrain.data.tokens import check_known
    from autotrain.trainers.token_classification import seqeval_metrics

    names = [run.model.config.id2label[i] for i in range(run.model.config.num_labels)]
    check_known(rows.labels, names, rows.name, run.config.data.column_mapping.get("tags", "tags"))
    predicted = word_tags(run, rows.values, batch_size, advance)
    report = classification_report(rows.labels, predicted, output_dict=True, zero_division=0)
    types = {k: {m: float(v) for m, v in scores.items()} for k, scores in report.items() if "avg" not in k}
    return {"rows": len(rows), **seqeval_metrics(predicted, rows.labels), "entities": types}
