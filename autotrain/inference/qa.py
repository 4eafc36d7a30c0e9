"""A finished extractive-qa run: answer each question from its context (the span, its character offsets
and its probability, long contexts read in the windows training used); evaluate SQuAD exact match and F1."""

from __future__ import annotations

from pathlib import Path

from autotrain.inference.inputs import Rows


def read_rows(cfg, path: Path, labels: bool) -> Rows:
    from autotrain.data.qa import load_qa_rows

    dataset, name = load_qa_rows(cfg, str(path), labels)
    values = [{"question": q, "context": c} for q, c in zip(dataset["question"], dataset["context"], strict=True)]
    return Rows("question", values, list(dataset["answers"]) if labels else None, name)


def load(folder: Path, cfg, device: str):
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    from autotrain.inference.load import saved_model

    model, tokenizer = saved_model(folder, cfg, AutoModelForQuestionAnswering, AutoTokenizer)
    return model.to(device), tokenizer


def max_tokens(cfg, model, processor) -> int:
    from autotrain.trainers.text_classification import max_tokens as capped

    return capped(cfg, processor, model.config)


def answers(run, values: list[dict], batch_size: int, advance=lambda n: None) -> list[dict]:
    """The best span of each row: {answer, start, end, score}."""
    import numpy as np
    import torch
    from datasets import Dataset

    from autotrain.trainers.extractive_qa import best_answers, features, window_stride

    args = run.config.training_args
    rows = Dataset.from_dict({k: [v[k] for v in values] for k in ("question", "context")})
    stride = window_stride(args.doc_stride, run.max_tokens)
    windows = features(rows, run.processor, run.max_tokens, stride, labels=False)
    inputs = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in windows.column_names]
    starts, ends = [], []
    for first in range(0, len(windows), batch_size):
        batch = windows.select(range(first, min(first + batch_size, len(windows))))
        tensors = {k: torch.tensor(batch[k], device=run.device) for k in inputs}
        with torch.inference_mode():
            out = run.model(**tensors)
        starts.append(out.start_logits.float().cpu().numpy())
        ends.append(out.end_logits.float().cpu().numpy())
    advance(len(values))
    start_logits, end_logits = np.concatenate(starts), np.concatenate(ends)
    windows_of = list(zip(windows["example"], windows["context_offsets"], strict=True))
    found = best_answers(
        list(rows["context"]), windows_of, start_logits, end_logits, args.n_best, args.max_answer_length
    )
    return [{"answer": f["text"], "start": f["start"], "end": f["end"], "score": f["score"]} for f in found]


def predict(run, values: list, batch_size: int, advance) -> list[dict]:
    return answers(run, values, batch_size, advance)


def evaluate(run, rows: Rows, batch_size: int, advance) -> dict:
    from autotrain.trainers.extractive_qa import squad_scores

    found = answers(run, rows.values, batch_size, advance)
    return {"rows": len(rows), **squad_scores([f["answer"] for f in found], rows.labels)}
