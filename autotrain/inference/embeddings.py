"""A finished sentence-transformers run: embed sentences, and score pairs and triplets by cosine similarity;
evaluate with the evaluator of the run's trainer (retrieval, similarity correlation, classification by
similarity threshold, or triplet accuracy)."""

from __future__ import annotations

from pathlib import Path

from autotrain.inference.inputs import Rows

SENTENCES = ("sentence1", "sentence2", "sentence3")


def read_rows(cfg, path: Path, labels: bool) -> Rows:
    from autotrain.data.sentences import load_sentence_rows

    dataset, name = load_sentence_rows(cfg, str(path), labels)
    columns = [c for c in SENTENCES if c in dataset.column_names]
    values = [dict(zip(columns, texts, strict=True)) for texts in zip(*(dataset[c] for c in columns), strict=True)]
    return Rows("sentences", values, dataset if labels else None, name)


def load(folder: Path, cfg, device: str):
    from autotrain.trainers.sentence_transformers import load_model

    model = load_model(cfg, None, str(folder))
    return model.to(device), model.tokenizer


def max_tokens(cfg, model, processor) -> int:
    return int(model.max_seq_length)


def predict(run, values: list, batch_size: int, advance) -> list[dict]:
    """One sentence: its embedding; two: their cosine similarity; three: the anchor's to each other."""
    import torch

    columns = [c for c in SENTENCES if c in values[0]] if values else []
    vectors = {
        c: run.model.encode([v[c] for v in values], batch_size=batch_size, convert_to_tensor=True) for c in columns
    }
    advance(len(values))
    if len(columns) == 1:
        return [{"embedding": [round(float(x), 6) for x in row]} for row in vectors["sentence1"].cpu()]
    cosine = torch.nn.functional.cosine_similarity
    out = [{"similarity": float(s)} for s in cosine(vectors["sentence1"], vectors["sentence2"]).cpu()]
    if "sentence3" in vectors:
        negative = cosine(vectors["sentence1"], vectors["sentence3"]).cpu()
        for row, value in zip(out, negative, strict=True):
            row["similarity_sentence3"] = float(value)
    return out


def evaluate(run, rows: Rows, batch_size: int, advance) -> dict:
    from autotrain.trainers.sentence_transformers import build_evaluator

    cfg = run.config
    evaluator = build_evaluator(cfg.trainer, rows.labels)  # pair_class: the cosine threshold (no head is saved)
    metrics = evaluator(run.model)
    advance(len(rows))
    return {"rows": len(rows), "trainer": cfg.trainer, **{k: float(v) for k, v in metrics.items()}}
