"""SFT rows as the trainer trains on them: tokenized, each token labelled as trained or not, and the examples
that `max_length` leaves without a trained token reported and left out.

By default the loss falls on the answers: the assistant turns of chat `messages` (every one of a multi-turn
conversation, its end-of-turn marker included; see autotrain.data.answers) and the completion of
`prompt` / `completion` rows. `training_args.train_on_inputs: true` trains on every token instead. Plain
`text` is trained on whole. The builder, the data preview and the token counts all read this one module.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from autotrain.config.llm import LLMConfig
from autotrain.errors import UserInputError, eprint
from autotrain.training.plan import RunPlan

SHOWN_ROWS = 5  # row numbers named when examples are left out


def sft_arguments(cfg: LLMConfig) -> dict:
    """SFTConfig's own fields, beside the planned TrainingArguments (the data preview reads them too)."""
    args = cfg.training_args
    return {
        "max_length": args.max_length,
        "packing": args.packing,
        "dataset_text_field": "text",
        # prompt / completion rows: the completion only, unless the prompt is trained too
        "completion_only_loss": not args.train_on_inputs,
    }


def sft_prepared(cfg: LLMConfig, plan: RunPlan, tokenizer, rows, max_length: int | None):
    """`rows` tokenized and labelled (`input_ids`, `labels`: -100 where no loss), cut to `max_length` (None:
    uncut). Chat messages are labelled here; the other formats by TRL's own SFT preparation."""
    from trl import SFTConfig, SFTTrainer

    if "messages" in rows.column_names:
        rows = label_messages(rows, tokenizer, cfg.training_args.train_on_inputs)
    settings = {**plan.training_args, **sft_arguments(cfg), "max_length": max_length, "dataset_num_proc": None}
    args = SFTConfig(**settings)
    owner = SimpleNamespace(  # what _prepare_dataset reads from the trainer; set as SFTTrainer.__init__ does
        _tokenizer=tokenizer, chat_template=None, completion_only_loss=args.completion_only_loss
    )
    return SFTTrainer._prepare_dataset(owner, rows, tokenizer, args, False, None, "preview")


def label_messages(rows, tokenizer, train_on_inputs: bool):
    """Chat `messages` rows -> `input_ids` and `labels`: the assistant turns' tokens, or every token."""
    from autotrain.data.answers import answer_tokens

    def label(row: dict) -> dict:
        ids, mask = answer_tokens(tokenizer, row["messages"])
        labels = [t if train_on_inputs or m else -100 for t, m in zip(ids, mask, strict=True)]
        return {"input_ids": ids, "labels": labels}

    return rows.map(label, remove_columns=rows.column_names)


def unanswered(labels: list[list[int]], limit: int) -> list[int]:
    """Indices of the examples with no trained token among their first `limit` tokens."""
    return [i for i, row in enumerate(labels) if all(label == -100 for label in row[:limit])]


def answered_splits(cfg: LLMConfig, plan: RunPlan, tokenizer, train, valid) -> tuple[Any, Any]:
    """Train and validation rows prepared (uncut: the trainer cuts and packs them), without the examples left
    with nothing to train on after the cut to `max_length`; those are named on stderr, once."""
    out = []
    for name, rows in (("training", train), ("validation", valid)):
        if rows is None:
            out.append(None)
            continue
        prepared = sft_prepared(cfg, plan, tokenizer, rows, None)
        lost = unanswered(prepared["labels"], cfg.training_args.max_length)
        if len(lost) == len(prepared):
            raise UserInputError(_nothing_left(cfg, name, len(prepared)))
        if lost:
            _say(_left_out(cfg, name, lost, len(prepared)))
            prepared = prepared.select(sorted(set(range(len(prepared))) - set(lost)))
        out.append(prepared)
    return out[0], out[1]


def _what(cfg: LLMConfig) -> str:
    return "token" if cfg.training_args.train_on_inputs else "answer token"


def _nothing_left(cfg: LLMConfig, name: str, count: int) -> str:
    limit = cfg.training_args.max_length
    return (
        f"none of the {count} {name} examples has an {_what(cfg)} within the first {limit} tokens "
        f"(training_args.max_length): raise max_length, or shorten the prompts"
    )


def _left_out(cfg: LLMConfig, name: str, lost: list[int], count: int) -> str:
    rows = ", ".join(str(i) for i in lost[:SHOWN_ROWS]) + (", ..." if len(lost) > SHOWN_ROWS else "")
    return (
        f"note: {len(lost)} of {count} {name} examples have no {_what(cfg)} within the first "
        f"{cfg.training_args.max_length} tokens (training_args.max_length) and are left out "
        f"({'row' if len(lost) == 1 else 'rows'} {rows}, counting from 0); `--preview` counts them"
    )


def _say(message: str) -> None:
    import os

    if os.environ.get("RANK", "0") == "0":  # every rank leaves out the same rows; one says so
        eprint(message)
