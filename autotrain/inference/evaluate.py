"""`autotrain evaluate`: a finished run's metrics on a file.

Classifiers: the metrics training reports (loss, accuracy, macro F1 / precision / recall, from
`trainers.classification_common`) and a confusion matrix. LLMs: mean token loss and perplexity, on the
answer tokens only when the rows have them (assistant turns of chat messages, the completion of a prompt),
else on every token.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from pathlib import Path

from autotrain.errors import UserInputError
from autotrain.inference.inputs import Rows
from autotrain.inference.predict import check_output, progress_bar
from autotrain.inference.tasks import task_module

ScoredRow = tuple[list[int], list[int]]  # input ids, labels (-100 = not scored)


def evaluate_rows(run, rows: Rows, batch_size: int) -> dict:
    with progress_bar(len(rows), "evaluating") as advance:
        handler = task_module(run.task)
        if handler is not None:
            return handler.evaluate(run, rows, batch_size, advance)
        if run.task == "llm":
            return _llm_metrics(run, rows, batch_size, advance)
        return _classifier_metrics(run, rows, batch_size, advance)


def label_ids(rows: Rows, labels: list[str]) -> list[int]:
    """Each row's label as the run's label id; labels are matched by name, as training saved them."""
    ids = {name: i for i, name in enumerate(labels)}
    unknown = sorted({str(key) for key in rows.labels if str(key) not in ids})
    if unknown:
        shown = ", ".join(f"`{u}`" for u in unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        raise UserInputError(
            f"{rows.name}: label {shown} is not one the run was trained on (its labels: {', '.join(labels)})"
        )
    return [ids[str(key)] for key in rows.labels]


def _classifier_metrics(run, rows: Rows, batch_size: int, advance: Callable[[int], None]) -> dict:
    import numpy as np
    import torch

    from autotrain.inference.classify import classifier_logits
    from autotrain.trainers.classification_common import classification_metrics

    labels = run.labels
    truth = np.asarray(label_ids(rows, labels))
    logits = classifier_logits(run, rows.values, batch_size, advance)
    losses = torch.nn.functional.cross_entropy(torch.from_numpy(logits), torch.from_numpy(truth), reduction="none")
    predicted = logits.argmax(axis=1)
    confusion = np.zeros((len(labels), len(labels)), dtype=np.int64)
    np.add.at(confusion, (truth, predicted), 1)
    return {
        "rows": len(rows),
        "loss": float(losses.double().mean()),
        **classification_metrics(predicted, truth),
        "labels": labels,
        "confusion_matrix": confusion.tolist(),  # rows: true label, columns: predicted label
    }


# LLMs ---------------------------------------------------------------------------------------------------


def _conversation(tokenizer, row: dict, kind: str) -> tuple[list[dict], int] | None:
    """A chat row as (messages, index of the first scored turn); None for plain text."""
    from autotrain.inference.generate import render_chat

    if kind == "messages":
        messages, first = row["messages"], 0
    elif kind == "prompt" and not (isinstance(row["prompt"], str) and isinstance(row["completion"], str)):
        prompt, answer = row["prompt"], row["completion"]
        asked = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
        answered = [{"role": "assistant", "content": answer}] if isinstance(answer, str) else list(answer)
        messages, first = asked + answered, len(asked)
    else:
        return None
    render_chat(tokenizer, messages[:1])  # says clearly when there is no chat template
    return messages, first


def scored_tokens(tokenizer, row: dict, kind: str, max_tokens: int) -> ScoredRow:
    """Token ids (cut to `max_tokens`, as training cut them) and labels: the id where it is scored.

    Chat rows score the tokens training trains on (autotrain.data.answers: the assistant turns, their
    end-of-turn markers included); plain text every token, a plain prompt's completion its own.
    """
    from autotrain.data.answers import answer_tokens
    from autotrain.inference.bounds import clip_text

    chat = _conversation(tokenizer, row, kind)
    if chat is not None:
        ids, mask = answer_tokens(tokenizer, *chat)
        return ids[:max_tokens], [t if m else -100 for t, m in zip(ids[:max_tokens], mask, strict=False)]
    eos = tokenizer.eos_token or ""
    if kind == "text":
        text = row["text"] + eos  # training appends EOS to every document
        spans = [(0, len(text))]
    else:
        prompt, answer = row["prompt"], row["completion"]
        text = prompt + answer + eos
        spans = [(len(prompt), len(text))]
    text = clip_text(tokenizer, text, max_tokens, keep="start")  # only the first max_tokens are scored
    encoded = tokenizer(
        text, add_special_tokens=True, return_offsets_mapping=True, truncation=True, max_length=max_tokens
    )
    # A token counts when it overlaps a scored span: one that straddles the prompt's end (" blue" after
    # "the sea is") belongs to the answer, as when prompt and answer are tokenized apart.
    labels = [
        token if end > start and any(start < b and end > a for a, b in spans) else -100
        for token, (start, end) in zip(encoded["input_ids"], encoded["offset_mapping"], strict=True)
    ]
    return encoded["input_ids"], labels


def _token_losses(run, batch: list[ScoredRow]) -> tuple[float, int]:
    """Summed loss and count of the scored tokens of a batch (padded on the right)."""
    import torch

    width = max(len(ids) for ids, _ in batch)
    pad = run.processor.pad_token_id if run.processor.pad_token_id is not None else 0
    ids = torch.tensor([i + [pad] * (width - len(i)) for i, _ in batch], device=run.device)
    labels = torch.tensor([lab + [-100] * (width - len(lab)) for _, lab in batch], device=run.device)
    mask = torch.tensor([[1] * len(i) + [0] * (width - len(i)) for i, _ in batch], device=run.device)
    with torch.inference_mode():
        logits = run.model(input_ids=ids, attention_mask=mask).logits.float()
    shifted = labels[:, 1:]  # the token at position p is predicted from position p - 1
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), shifted, reduction="sum")
    return float(loss), int((shifted != -100).sum())


def _llm_metrics(run, rows: Rows, batch_size: int, advance: Callable[[int], None]) -> dict:
    try:
        scored = [scored_tokens(run.processor, row, rows.kind, run.max_tokens) for row in rows.values]
    except (TypeError, NotImplementedError) as exc:  # slow tokenizers give no character offsets
        raise UserInputError(f"evaluating needs a fast tokenizer (character offsets): {exc}") from None
    order = sorted(range(len(scored)), key=lambda i: len(scored[i][0]))
    total, count = 0.0, 0
    for start in range(0, len(order), batch_size):
        batch = [scored[i] for i in order[start : start + batch_size]]
        loss, tokens = _token_losses(run, batch)
        total, count = total + loss, count + tokens
        advance(len(batch))
    if count == 0:
        raise UserInputError(f"{rows.name}: no tokens left to score (answers cut off by max_length?)")
    answers = rows.kind == "messages" or rows.kind == "prompt"
    return {
        "rows": len(rows),
        "tokens": count,
        "scored": "answer tokens" if answers else "all tokens",
        "loss": total / count,
        "perplexity": math.exp(total / count),
    }


# Reporting ----------------------------------------------------------------------------------------------


def print_report(results: dict, title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(title)
    table = Table()
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in results.items():
        if isinstance(value, float):
            table.add_row(key, f"{value:.4f}")
        elif isinstance(value, (int, str)):
            table.add_row(key, str(value))
    console.print(table)
    if "confusion_matrix" in results:
        console.print(_confusion_table(results["labels"], results["confusion_matrix"]))


def _confusion_table(labels: list[str], matrix: list[list[int]]):
    from rich.table import Table

    table = Table(title="confusion matrix")
    table.add_column("true \\ predicted")
    for name in labels:
        table.add_column(name, justify="right")
    for name, counts in zip(labels, matrix, strict=True):
        table.add_row(name, *(str(c) for c in counts))
    return table


def run_evaluate(
    run_dir: Path,
    input_path: Path,
    output: Path | None = None,
    force: bool = False,
    as_json: bool = False,
    batch_size: int | None = None,
    device: str = "auto",
) -> dict:
    """The command: check, read the rows, load the run, evaluate, then a table and/or JSON."""
    from autotrain.inference.inputs import read_rows
    from autotrain.inference.load import load_run, read_config
    from autotrain.inference.predict import batch_size_of

    check_output(output, force)
    cfg = read_config(run_dir)
    rows = read_rows(cfg, input_path, labels=True)
    if rows.kind == "prompt" and any(row.get("completion") is None for row in rows.values):
        raise UserInputError(
            f"{input_path}: evaluating prompts needs their answers: a `completion` (or `chosen`) column, "
            "filled on every row"
        )
    run = load_run(run_dir, device, cfg)
    results = evaluate_rows(run, rows, batch_size_of(run, batch_size))
    text = json.dumps(results, indent=2) + "\n"
    if output is not None:
        output.write_text(text, encoding="utf-8")
    if as_json:
        sys.stdout.write(text)
    else:
        print_report(results, f"{run_dir} on {input_path}")
    return results
