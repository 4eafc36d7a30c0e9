"""Extractive question answering: a span head (start and end logits over the tokens) trained with
transformers' Trainer, as transformers' question-answering examples train it.

A context longer than `max_length` (with its question) is read in overlapping windows, `doc_stride` tokens
shared between neighbours; a window that does not hold the whole answer is trained to point at the first
token ([CLS]: no answer here). Evaluation runs every window, takes the `n_best` start and end candidates of
each, keeps spans inside the context no longer than `max_answer_length`, and answers with the most probable
span over the windows; SQuAD exact match and F1 (torchmetrics' implementation of the official script)
score it against every reference answer.
"""

from __future__ import annotations

from typing import Any

from autotrain.data.qa import load_qa_splits
from autotrain.errors import eprint
from autotrain.trainers.task_common import head_model, rows_preview, task_trainer
from autotrain.trainers.token_classification import fast_tokenizer
from autotrain.training.plan import RunPlan


def windows(tokenizer, questions: list[str], contexts: list[str], length: int, stride: int):
    """Question + context windows, padded to `length`, with offsets and each window's example."""
    right = tokenizer.padding_side == "right"  # the question goes on the side without padding
    questions, contexts = list(questions), list(contexts)
    return tokenizer(
        [q.lstrip() for q in questions] if right else contexts,
        contexts if right else [q.lstrip() for q in questions],
        truncation="only_second" if right else "only_first",
        max_length=length,
        stride=stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        padding="max_length",
    )


def _context_side(tokenizer) -> int:
    return 1 if tokenizer.padding_side == "right" else 0


def span_labels(encoded, answers: list[dict], tokenizer) -> tuple[list[int], list[int]]:
    """Each window's start and end token of its example's first answer, or 0 (the first token) if the
    window does not hold the whole answer."""
    side, starts, ends = _context_side(tokenizer), [], []
    for i, offsets in enumerate(encoded["offset_mapping"]):
        answer = answers[encoded["overflow_to_sample_mapping"][i]]
        first, text = answer["answer_start"][0], answer["text"][0]
        last = first + len(text)
        sequence = encoded.sequence_ids(i)
        inside = [k for k, s in enumerate(sequence) if s == side]
        if not inside or offsets[inside[0]][0] > first or offsets[inside[-1]][1] < last:
            starts.append(0)
            ends.append(0)
            continue
        start = next(k for k in inside if offsets[k][1] > first)
        end = next(k for k in reversed(inside) if offsets[k][0] < last)
        starts.append(start)
        ends.append(end)
    return starts, ends


def features(dataset, tokenizer, length: int, stride: int, labels: bool = True):
    """Windows of every example as a datasets.Dataset: model inputs, span labels, and for post-processing
    `example` (its row) and `context_offsets` (character offsets, None outside the context)."""
    from datasets import Dataset

    encoded = windows(tokenizer, dataset["question"], dataset["context"], length, stride)
    side = _context_side(tokenizer)
    columns: dict[str, Any] = {k: encoded[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in encoded}
    columns["example"] = list(encoded["overflow_to_sample_mapping"])
    columns["context_offsets"] = [
        [o if s == side else None for o, s in zip(offsets, encoded.sequence_ids(i), strict=True)]
        for i, offsets in enumerate(encoded["offset_mapping"])
    ]
    if labels:
        columns["start_positions"], columns["end_positions"] = span_labels(encoded, list(dataset["answers"]), tokenizer)
    return Dataset.from_dict(columns)


def best_answers(contexts: list[str], windows_of, start_logits, end_logits, n_best: int, max_answer: int) -> list[dict]:
    """The most probable span of each example over its windows: {text, start, end, score}. A window's span
    probability is softmax(start)[i] x softmax(end)[j] over that window's tokens, as transformers'
    question-answering pipeline scores it; an example with no valid span answers "" with score 0."""
    import numpy as np

    best: list[dict] = [{"text": "", "start": 0, "end": 0, "score": 0.0} for _ in contexts]
    for window, (example, offsets) in enumerate(windows_of):
        starts, ends = np.asarray(start_logits[window], np.float64), np.asarray(end_logits[window], np.float64)
        p_start, p_end = np.exp(starts - starts.max()), np.exp(ends - ends.max())
        p_start, p_end = p_start / p_start.sum(), p_end / p_end.sum()
        for i in np.argsort(starts)[::-1][:n_best]:
            for j in np.argsort(ends)[::-1][:n_best]:
                if i >= len(offsets) or j >= len(offsets) or offsets[i] is None or offsets[j] is None:
                    continue
                if j < i or j - i + 1 > max_answer:
                    continue
                score = float(p_start[i] * p_end[j])
                if score > best[example]["score"]:
                    begin, finish = offsets[i][0], offsets[j][1]
                    best[example] = {
                        "text": contexts[example][begin:finish],
                        "start": begin,
                        "end": finish,
                        "score": score,
                    }
    return best


def squad_scores(predicted: list[str], answers: list[dict]) -> dict[str, float]:
    """SQuAD exact match and F1, in percent (torchmetrics' implementation of the official script)."""
    from torchmetrics.functional.text import squad

    preds = [{"prediction_text": text, "id": str(i)} for i, text in enumerate(predicted)]
    target = [{"answers": answer, "id": str(i)} for i, answer in enumerate(answers)]
    scores = squad(preds, target)
    return {"exact_match": float(scores["exact_match"]), "f1": float(scores["f1"])}


def window_stride(doc_stride: int, length: int, say=None) -> int:
    """`doc_stride`, or a quarter of the window when base_model caps max_length below twice it (the windows
    would barely move on)."""
    if doc_stride < length // 2:
        return doc_stride
    stride = max(1, length // 4)
    if say is not None:
        say(
            f"note: training_args.doc_stride {doc_stride} is not below half of the {length}-token window "
            f"base_model takes; using {stride}"
        )
    return stride


def build_trainer(cfg, plan: RunPlan, callbacks: list, token: str | None = None):
    from transformers import AutoModelForQuestionAnswering, default_data_collator, set_seed

    from autotrain.trainers.text_classification import max_tokens

    set_seed(cfg.training_args.seed)
    args = cfg.training_args
    tokenizer = fast_tokenizer(cfg, token)
    splits = load_qa_splits(cfg, token)
    model = head_model(AutoModelForQuestionAnswering, cfg, token, "ForQuestionAnswering", num_labels=2)
    length = max_tokens(cfg, tokenizer, model.config)
    stride = window_stride(args.doc_stride, length, eprint)
    train = features(splits.train, tokenizer, length, stride).remove_columns(["example", "context_offsets"])
    valid = features(splits.valid, tokenizer, length, stride)
    windows_of = list(zip(valid["example"], valid["context_offsets"], strict=True))
    contexts, references = list(splits.valid["context"]), list(splits.valid["answers"])

    def compute_metrics(eval_pred):
        start_logits, end_logits = eval_pred.predictions[:2]
        found = best_answers(contexts, windows_of, start_logits, end_logits, args.n_best, args.max_answer_length)
        return squad_scores([f["text"] for f in found], references)

    valid = valid.remove_columns(["example", "context_offsets"])
    return task_trainer(
        cfg, plan, callbacks, model, train, valid, tokenizer, default_data_collator, compute_metrics=compute_metrics
    )


def preview(cfg, count: int, token: str | None = None) -> dict:
    """The first questions with their answers, and how many windows the contexts make."""
    from autotrain.trainers.common import build_tokenizer

    splits = load_qa_splits(cfg, token)
    summary: dict[str, Any] = {}
    try:
        tokenizer = build_tokenizer(cfg, token)
        args = cfg.training_args
        made = windows(tokenizer, splits.train["question"], splits.train["context"], args.max_length, args.doc_stride)
        summary["windows"] = len(made["input_ids"])
    except Exception as exc:  # noqa: BLE001 - the preview shows the rows without the tokenizer
        summary["windows"] = f"unknown ({type(exc).__name__}: {exc})"
    return rows_preview(splits, count, _example, summary)


def _example(row: dict) -> dict:
    return {"question": row["question"], "answer": row["answers"]["text"][0], "context": row["context"]}
