"""`--preview [N]`: the first N training examples as the trainer will see them (see
autotrain.trainers.llm.preview), printed as text; the dry run prints the same block for local data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autotrain.training.plan import RunPlan

NO_LOSS = ("\u00ab", "\u00bb")  # «no loss»
TEXT_LIMIT = 400


def preview_record(cfg, plan: RunPlan, count: int, token: str | None = None) -> dict[str, Any]:
    """The preview for any task, as plain JSON data (the app returns it as it is)."""
    from autotrain.training.quiet import quiet_libraries

    quiet_libraries()
    if cfg.task == "llm":
        from autotrain.trainers.llm.preview import preview_llm

        return preview_llm(cfg, plan, count, token)
    if cfg.task not in ("text-classification", "image-classification"):
        from autotrain.trainers import task_preview

        return task_preview(cfg, count, token)  # the `preview` of the task's builder module
    return _classifier(cfg, count, token)


def _classifier(cfg, count: int, token: str | None) -> dict[str, Any]:
    """Text or image and label of the first rows, with how often each label occurs."""
    from collections import Counter

    from autotrain.data import classification

    load = classification.load_text_splits if cfg.task == "text-classification" else classification.load_image_splits
    splits = load(cfg, token)
    train = splits.train
    column = "text" if cfg.task == "text-classification" else "image"
    examples = []
    for row in train.select(range(min(count, len(train)))):
        value = row[column]
        if column == "image":
            value = getattr(value, "filename", "") or f"image {value.size[0]}x{value.size[1]} {value.mode}"
        examples.append({column: value, "label": splits.labels[row["labels"]]})
    counts = Counter(splits.labels[i] for i in train["labels"])
    summary = {"rows": len(train), "validation_rows": len(splits.valid), "labels": dict(counts.most_common())}
    return {"kind": "classification", "examples": examples, "summary": summary, "warnings": []}


def preview_lines(record: dict[str, Any]) -> list[str]:
    kind = record["kind"]
    lines = ["# data preview (the first examples as the trainer sees them)"]
    if kind in ("tokens", "blocks"):
        lines.append(f"  {NO_LOSS[0]}text in these marks{NO_LOSS[1]} carries no loss; the rest is trained")
    for i, example in enumerate(record["examples"]):
        lines.append(f"--- example {i}" + (f" from {example['source']}" if "source" in example else ""))
        lines += _example_lines(kind, example)
    lines.append("--- summary")
    lines += [f"  {key}: {value}" for key, value in record["summary"].items()]
    lines += [f"warning: {warning}" for warning in record["warnings"]]
    return lines


def _example_lines(kind: str, example: dict[str, Any]) -> list[str]:
    if kind in ("tokens", "blocks"):
        text = "".join(t if trained else f"{NO_LOSS[0]}{t}{NO_LOSS[1]}" for t, trained in example["segments"])
        cut = f", {example['cut_tokens']} cut by max_length" if example.get("cut_tokens") else ""
        return [text, f"  ({example['tokens']} tokens, {example['trained_tokens']} trained{cut})"]
    if kind == "pairs":
        return [
            f"prompt ({example['prompt_tokens']} tokens, no loss): {_short(example['prompt'])}",
            f"  chosen   ({example['chosen']['tokens']} tokens): {_short(example['chosen']['text'])}",
            f"  rejected ({example['rejected']['tokens']} tokens): {_short(example['rejected']['text'])}",
        ]
    if kind == "prompts":
        return [f"{_short(example['prompt'])}  ({example['tokens']} tokens)"]
    if kind == "rows":  # the other tasks: each column of the row as the trainer reads it
        return [f"{key}: {_short(str(value))}" for key, value in example.items()]
    value = example.get("text", example.get("image"))
    return [f"{_short(str(value))}  ->  label {example['label']}"]


def _short(text: str) -> str:
    return text if len(text) <= TEXT_LIMIT else text[:TEXT_LIMIT] + f"... ({len(text)} characters)"


def local_data(cfg) -> bool:
    """Whether the dry run may read the data: it is on this machine (a dry run downloads no dataset)."""
    paths = cfg.data.paths()
    return bool(paths) and all(Path(path).expanduser().exists() for _, path in paths)
