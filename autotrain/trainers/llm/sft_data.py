"""SFT rows as the trainer trains on them: tokenized, each token labelled as trained or not, cut to `max_length`
(or packed into `max_length` blocks), and the examples that `max_length` leaves without a trained token
reported and left out.

By default the loss falls on the answers: the assistant turns of chat `messages` (every one of a multi-turn
conversation, its end-of-turn marker included; see autotrain.data.answers) and the completion of
`prompt` / `completion` rows. `training_args.train_on_inputs: true` trains on every token instead. Plain
`text` is trained on whole. The labelling is autotrain.data.sft_rows, batch by batch; the builder, the data
preview and the token counts all read it. The prepared splits are cached (autotrain.data.cache) and made
once for every process of a run (autotrain.data.prepared); with `data.streaming` they are prepared as
training reads them instead. Several `data.sources` are mixed by their shares (autotrain.data.mixture).
TRL's SFTTrainer is told the data is ready (`skip_prepare_dataset`).
"""

from __future__ import annotations

from typing import Any

from autotrain.config.llm import LLMConfig
from autotrain.errors import UserInputError, eprint
from autotrain.training.plan import RunPlan

SHOWN_ROWS = 5  # row numbers named when examples are left out


def sft_arguments(cfg: LLMConfig) -> dict:
    """SFTConfig's own fields, beside the planned TrainingArguments."""
    args = cfg.training_args
    return {
        "max_length": args.max_length,
        "packing": args.packing,
        "dataset_text_field": "text",
        # prompt / completion rows: the completion only, unless the prompt is trained too
        "completion_only_loss": not args.train_on_inputs,
        "dataset_kwargs": {"skip_prepare_dataset": True},  # labelled, cut and packed here (answered_splits)
    }


def sft_job(cfg: LLMConfig, tokenizer, chat_template: str | None = None):
    """The job that prepares a batch of this run's SFT rows (its format is set once the columns are known)."""
    from autotrain.data.sft_rows import SftJob, SftSettings

    args = cfg.training_args
    chat = (chat_template or cfg.data.chat_template) != "none"
    settings = SftSettings("text", chat, args.train_on_inputs, args.max_length, args.packing)
    return SftJob(tokenizer, settings, trainer=cfg.trainer)


def job_inputs(cfg: LLMConfig, tokenizer, job) -> dict:
    """What shapes the prepared rows besides the source: the cache key (autotrain.data.cache)."""
    from autotrain.data.tokenizer_key import tokenizer_key

    return {"trainer": cfg.trainer, "tokenizer": tokenizer_key(tokenizer), "settings": job.settings}


def answered_splits(cfg: LLMConfig, plan: RunPlan, tokenizer, train, valid) -> tuple[Any, Any]:
    """Train and validation rows prepared (labelled, cut to max_length or packed), without the examples left
    with nothing to train on after the cut to `max_length`; those are named on stderr, once. `train` and
    `valid` are what the builder's `prepare` returned: which splits to prepare (autotrain.trainers.llm.base);
    `train.records` gets what was prepared of each source."""
    from autotrain.trainers.llm.prepared_splits import prepared_splits, streamed_splits

    if cfg.data.streaming:
        return streamed_splits(cfg, tokenizer, valid is not None, sft_job)
    return prepared_splits(cfg, tokenizer, train, valid, sft_job, job_inputs, report)


def report(cfg: LLMConfig, name: str, record: dict) -> None:
    """The note on the examples a split left out (all of them: an error)."""
    rows, lost = record["rows"], record["left_out"]
    if rows and lost == rows:
        raise UserInputError(_nothing_left(cfg, name, rows))
    if lost:
        _say(_left_out(cfg, name, lost, rows, record["first_left_out"]))


def label_rows(cfg: LLMConfig, tokenizer, rows: dict[str, list], chat_template: str | None = None):
    """Rows (task columns -> values) labelled and uncut, in this process: (input_ids, labels) lists per row, for
    the preview and the token counts."""
    from dataclasses import replace

    from autotrain.data.sft_rows import label_batch

    job = sft_job(cfg, tokenizer, chat_template)
    job.columns(list(rows), "the rows", {})
    table, _ = label_batch(tokenizer, rows, replace(job.settings, max_length=2**62, packing=False))
    return table.column("input_ids").to_pylist(), table.column("labels").to_pylist()


def unanswered(labels: list[list[int]], limit: int) -> list[int]:
    """Indices of the examples with no trained token among their first `limit` tokens."""
    return [i for i, row in enumerate(labels) if all(label == -100 for label in row[:limit])]


def _what(cfg: LLMConfig) -> str:
    return "token" if cfg.training_args.train_on_inputs else "answer token"


def _nothing_left(cfg: LLMConfig, name: str, count: int) -> str:
    limit = cfg.training_args.max_length
    return (
        f"none of the {count} {name} examples has an {_what(cfg)} within the first {limit} tokens "
        f"(training_args.max_length): raise max_length, or shorten the prompts"
    )


def _left_out(cfg: LLMConfig, name: str, count: int, total: int, first: list[int]) -> str:
    rows = ", ".join(str(i) for i in first[:SHOWN_ROWS]) + (", ..." if count > SHOWN_ROWS else "")
    return (
        f"note: {count} of {total} {name} examples have no {_what(cfg)} within the first "
        f"{cfg.training_args.max_length} tokens (training_args.max_length) and are left out "
        f"({'row' if count == 1 else 'rows'} {rows}, counting from 0); `--preview` counts them"
    )


def _say(message: str) -> None:
    import os

    if os.environ.get("RANK", "0") == "0":  # every rank leaves out the same rows; one says so
        eprint(message)
