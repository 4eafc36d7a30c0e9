"""The training data as the trainer will see it, before any weight is loaded: the first examples after the
chat template and truncation, each token marked as carrying loss or not.

SFT examples go through the builder's own labelling (autotrain.trainers.llm.sft_data) and TRL's collator
(padding), so the marks are the labels the trainer trains on (tests/test_preview.py compares them with a built
trainer's). Preference pairs show the prompt (no loss) and each answer (loss) after the chat template;
prompt-only trainers show the prompts they will generate from; block trainers the blocks they cut. Needs the
tokenizer and the data, not the model. SFT and block data are read as a stream: the first rows only, however
large the file; with several `data.sources`, the first examples of each.
"""

from __future__ import annotations

from typing import Any

from autotrain.config.llm import PREPARED, LLMConfig
from autotrain.config.trainers import TRAINERS
from autotrain.trainers.llm.model import use_chat_template
from autotrain.training.plan import RunPlan

SCANNED = 1000  # rows whose length is measured for the truncation figures
SHOWN_ROWS = 5  # dropped rows named by number


def preview_llm(cfg: LLMConfig, plan: RunPlan, count: int, token: str | None = None) -> dict[str, Any]:
    """`{"kind", "examples", "summary", "warnings"}` for the first `count` training rows (plain JSON data)."""
    from autotrain.trainers.common import build_tokenizer

    tokenizer = build_tokenizer(cfg, token)
    fallback = use_chat_template(tokenizer, cfg)
    if cfg.trainer in PREPARED:
        return _prepared_preview(cfg, plan, tokenizer, fallback, count, token)
    from autotrain.data.llm import load_llm_split

    dataset = load_llm_split(cfg, cfg.data.train_split, token)
    chat = any(isinstance(value, list) for value in dataset[0].values())
    warnings = [_MISSING] if fallback and chat else []
    rows = dataset.select(range(min(len(dataset), SCANNED)))
    spec = TRAINERS[cfg.trainer]
    if spec.data_format == "preference" and "chosen" in spec.all_columns:
        record = _pairs(cfg, tokenizer, rows, count)
    else:  # unpaired answers, or prompts: their prompts
        record = _prompts(cfg, tokenizer, rows, count)
    record["summary"]["rows"] = len(dataset)
    record["summary"]["rows_scanned"] = len(rows)
    return {**record, "warnings": warnings}


def _prepared_preview(cfg: LLMConfig, plan: RunPlan, tokenizer, fallback: bool, count: int, token) -> dict[str, Any]:
    """Data autotrain prepares itself: the first SCANNED rows of each source, read as a stream (however large
    the data), labelled or cut into blocks as the builder does; several sources: `count` examples of each, a
    summary per source."""
    from autotrain.trainers.llm.prepared_splits import tokenizer_for

    sources = cfg.data.split_sources()
    examples, summaries, chat = [], {}, False
    for i, (source, share) in enumerate(zip(sources, cfg.data.shares(), strict=True)):
        own = tokenizer_for(cfg, tokenizer, source.chat_template, token)
        rows, total = _first_rows(cfg, source, token)
        chat = chat or any(isinstance(value[0], list) for value in rows.values() if value)
        if TRAINERS[cfg.trainer].data_format == "blocks":
            record = _blocks(cfg, own, rows["text"], count)
        else:
            record = _sft(cfg, plan, own, rows, count, source.chat_template)
        record["summary"].update(
            rows=total if total is not None else "unknown", rows_scanned=len(next(iter(rows.values())))
        )
        if len(sources) == 1:
            return {**record, "warnings": [_MISSING] if fallback and chat else []}
        name = f"source {i} ({source.path} [{source.split}], share {share:.3g})"
        examples += [{**example, "source": name} for example in record["examples"]]
        summaries[name] = record["summary"]
    warnings = [_MISSING] if fallback and chat else []
    return {"kind": record["kind"], "examples": examples, "summary": summaries, "warnings": warnings}


def _first_rows(cfg: LLMConfig, source, token) -> tuple[dict[str, list], int | None]:
    """(the first SCANNED rows of the source's training split, task columns -> values; its rows, where known
    without reading it all)."""
    from autotrain.data.loading import locate
    from autotrain.data.reading import batches, column_names, known_rows, rows_dataset
    from autotrain.data.sft_rows import SftJob, SftSettings

    located = locate(source.path, source.split)
    dataset = rows_dataset(located, token, streaming=True)
    job = SftJob(None, SftSettings("text", source.chat_template != "none", False, 1, False), trainer=cfg.trainer)
    if TRAINERS[cfg.trainer].data_format == "blocks":
        from autotrain.data.blocks import BlockJob

        job = BlockJob(None, cfg.training_args.max_length, trainer=cfg.trainer)
    mapping = job.columns(column_names(dataset, located), located.name, dict(source.column_mapping))
    table = next(batches(dataset, located, mapping, SCANNED))
    return table.to_pydict(), known_rows(located, dataset)


_MISSING = (
    "data.chat_template: the tokenizer of base_model has no chat template, so chatml is used: a base model that "
    "never saw chatml learns the format from scratch. Set `data.chat_template: chatml` (or zephyr) to say so, "
    "or use a model with its own template"
)


def _segments(tokenizer, ids: list[int], labels: list[int]) -> list[list]:
    """[[text, carries loss], ...]: runs of tokens with the same mark, decoded."""
    out: list[list] = []
    start = 0
    for i in range(1, len(ids) + 1):
        if i == len(ids) or (labels[i] != -100) != (labels[start] != -100):
            out.append([tokenizer.decode(ids[start:i]), labels[start] != -100])
            start = i
    return out


def _sft(cfg: LLMConfig, plan: RunPlan, tokenizer, rows: dict[str, list], count: int, template=None) -> dict:
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    from autotrain.trainers.llm.sft_data import label_rows, unanswered

    limit = cfg.training_args.max_length
    all_ids, all_labels = label_rows(cfg, tokenizer, rows, template)
    lengths = [len(ids) for ids in all_ids]
    cut = [n - limit for n in lengths if n > limit]
    # what the trainer keeps: each example cut to max_length, those left without a trained token dropped
    lost = unanswered(all_labels, limit)
    kept = sorted(set(range(len(all_ids))) - set(lost))
    shown = [(all_ids[i], all_labels[i]) for i in kept[:count]]
    examples = []
    for i, (ids, labels) in zip(kept, shown, strict=False):
        examples.append(
            {
                "segments": _segments(tokenizer, ids[:limit], labels[:limit]),
                "input_ids": ids[:limit],
                "loss_mask": [int(label != -100) for label in labels[:limit]],
                "tokens": min(len(ids), limit),
                "trained_tokens": sum(label != -100 for label in labels[:limit]),
                "cut_tokens": max(0, lengths[i] - limit),
            }
        )
    batch = min(plan.batch_size, len(shown))
    collator = DataCollatorForLanguageModeling(pad_token_id=tokenizer.pad_token_id)
    first = collator([{"input_ids": ids[:limit], "labels": labels[:limit]} for ids, labels in shown][:batch])
    padding = int((first["attention_mask"] == 0).sum()) if batch else 0
    trained = sum(sum(label != -100 for label in labels[:limit]) for labels in all_labels)
    return {
        "kind": "tokens",
        "examples": examples,
        "summary": {
            "max_length": limit,
            "trained_tokens": trained,
            "tokens": sum(min(lengths[i], limit) for i in kept),
            "cut_examples": len(cut),
            "cut_tokens_max": max(cut, default=0),
            "cut_tokens_mean": round(sum(cut) / len(cut), 1) if cut else 0,
            "dropped_examples": len(lost),  # nothing trained left after the cut: the trainer leaves them out
            **({"dropped_rows": lost[:SHOWN_ROWS]} if lost else {}),
            "loss_on": "every token" if cfg.training_args.train_on_inputs else _answers(list(rows)),
            "padding_in_first_batch": padding if not plan.padding_free else 0,
            "batches": "padding-free (rows)" if plan.padding_free else "padded to the longest sample",
        },
    }


def _answers(columns: list[str]) -> str:
    if "messages" in columns:
        return "the assistant turns (training_args.train_on_inputs: true trains on every token)"
    if "completion" in columns:
        return "the completions (training_args.train_on_inputs: true trains on the prompts too)"
    return "every token (plain text)"


def _render(tokenizer, value, generation_prompt: bool) -> str:
    if isinstance(value, list):
        return tokenizer.apply_chat_template(value, tokenize=False, add_generation_prompt=generation_prompt)
    return value


def _pairs(cfg: LLMConfig, tokenizer, rows, count: int) -> dict[str, Any]:
    """Chosen and rejected after the template: the prompt carries no loss, each answer does."""
    args = cfg.training_args
    examples, cut = [], 0
    for row in rows:
        prompt = row.get("prompt")
        prompt_text = _render(tokenizer, prompt, True) if prompt is not None else ""
        sides = {}
        for side in ("chosen", "rejected"):
            whole = _render(tokenizer, (prompt or []) + row[side] if isinstance(row[side], list) else None, False)
            answer = (
                whole[len(prompt_text) :]
                if whole and whole.startswith(prompt_text)
                else _render(tokenizer, row[side], False)
            )
            ids = tokenizer(answer, add_special_tokens=False)["input_ids"]
            sides[side] = {"text": answer, "tokens": len(ids)}
        prompt_tokens = len(tokenizer(prompt_text, add_special_tokens=False)["input_ids"]) if prompt_text else 0
        longest = prompt_tokens + max(s["tokens"] for s in sides.values())
        over = longest > args.max_length or (args.max_prompt_length and prompt_tokens > args.max_prompt_length)
        cut += bool(over)
        if len(examples) < count:
            examples.append({"prompt": prompt_text, "prompt_tokens": prompt_tokens, **sides})
    return {
        "kind": "pairs",
        "examples": examples,
        "summary": {"max_length": args.max_length, "max_prompt_length": args.max_prompt_length, "cut_examples": cut},
    }


def _prompts(cfg: LLMConfig, tokenizer, rows, count: int) -> dict[str, Any]:
    examples = []
    for row in rows.select(range(min(count, len(rows)))):
        text = _render(tokenizer, row["prompt"], True)
        examples.append({"prompt": text, "tokens": len(tokenizer(text, add_special_tokens=False)["input_ids"])})
    return {"kind": "prompts", "examples": examples, "summary": {"note": "completions are generated while training"}}


def _blocks(cfg: LLMConfig, tokenizer, texts: list[str], count: int) -> dict[str, Any]:
    """Blocks: the texts joined and cut into blocks of max_length tokens, every token trained."""
    size = cfg.training_args.max_length
    ids: list[int] = []
    for text in texts:
        ids += tokenizer(text)["input_ids"] + ([tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else [])
    blocks = [ids[i : i + size] for i in range(0, len(ids) - size + 1, size)]
    examples = [{"segments": [[tokenizer.decode(b), True]], "tokens": len(b), "trained_tokens": len(b)} for b in blocks]
    summary = {"max_length": size, "blocks": len(blocks), "dropped_tail_tokens": len(ids) - len(blocks) * size}
    return {"kind": "blocks", "examples": examples[:count], "summary": summary}
