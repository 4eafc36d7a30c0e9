"""Nearest-name suggestions for typos, and the names users bring from other training tools."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable

# Keys of transformers' TrainingArguments, TRL's configs, LLaMA-Factory and axolotl -> where the same
# setting lives here (a dotted path from the top of the config). Used only to suggest a key: values are
# never translated, since their meanings differ in details (`bf16: true` vs `mixed_precision: bf16`).
FOREIGN_KEYS = {
    # transformers TrainingArguments (TRL's configs extend it)
    "learning_rate": "training_args.lr",
    "num_train_epochs": "training_args.epochs",
    "per_device_train_batch_size": "training_args.batch_size",
    "per_device_eval_batch_size": "training_args.eval_batch_size",
    "train_batch_size": "training_args.batch_size",
    "gradient_accumulation_steps": "training_args.gradient_accumulation",
    "lr_scheduler_type": "training_args.scheduler",
    "optim": "training_args.optimizer",
    "optim_args": "training_args.optimizer_args",
    "bf16": "training_args.mixed_precision",
    "fp16": "training_args.mixed_precision",
    "evaluation_strategy": "training_args.eval_strategy",
    "load_best_model_at_end": "training_args.load_best_model",
    "early_stopping_patience": "training_args.early_stopping.patience",
    "early_stopping_threshold": "training_args.early_stopping.threshold",
    "metric_for_best_model": "training_args.early_stopping.metric",
    "output_dir": "project_name",
    "model_name_or_path": "base_model",
    "report_to": "log",
    "hub_model_id": "hub.repo_id",
    "hub_token": "hub.token",
    "hub_private_repo": "hub.private",
    # TRL
    "max_seq_length": "training_args.max_length",
    "dataset_name": "data.path",
    "dataset_text_field": "data.column_mapping.text",
    "use_peft": "peft.enabled",
    "lora_r": "peft.r",
    "lora_alpha": "peft.alpha",
    "lora_dropout": "peft.dropout",
    "lora_target_modules": "peft.target_modules",
    "load_in_4bit": "peft.quantization",
    "load_in_8bit": "peft.quantization",
    "init_lora_weights": "peft.init",  # peft's LoraConfig name
    "completion_only_loss": "training_args.train_on_inputs",  # inverted: true here trains the prompt too
    "assistant_only_loss": "training_args.train_on_inputs",
    # LLaMA-Factory
    "stage": "trainer",
    "finetuning_type": "peft.enabled",
    "lora_rank": "peft.r",
    "lora_target": "peft.target_modules",
    "quantization_bit": "peft.quantization",
    "cutoff_len": "training_args.max_length",
    "dataset": "data.path",
    "template": "data.chat_template",
    "pref_beta": "training_args.beta",
    "val_size": "data.valid_size",
    "train_on_prompt": "training_args.train_on_inputs",
    "pissa_init": "peft.init",
    "pissa_iter": "peft.pissa_niter",
    # axolotl
    "datasets": "data.path",
    "sequence_len": "training_args.max_length",
    "micro_batch_size": "training_args.batch_size",
    "num_epochs": "training_args.epochs",
    "lr_scheduler": "training_args.scheduler",
    "adapter": "peft.enabled",
    "peft_use_dora": "peft.use_dora",
    "peft_use_rslora": "peft.use_rslora",
    "sample_packing": "training_args.packing",
    "rl": "trainer",
    "val_set_size": "data.valid_size",
    "wandb_project": "log",
    # torchtune
    "enable_activation_checkpointing": "training_args.gradient_checkpointing",
    "dtype": "training_args.mixed_precision",
    "max_steps_per_epoch": "training_args.max_steps",
    "log_every_n_steps": "training_args.logging_steps",
}


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`" (did you mean `x`?)"` for the closest choice, or "" when nothing is close."""
    match = nearest(word, choices)
    return f" (did you mean `{match}`?)" if match else ""


def nearest(word: str, choices: Iterable[str]) -> str | None:
    """The choice `word` was probably meant to be: a choice it begins, a close spelling, another case."""
    choices = [str(c) for c in choices]
    prefixed = [c for c in choices if c.startswith(str(word)) and word]
    if prefixed:
        return prefixed[0]
    match = difflib.get_close_matches(str(word), choices, n=1, cutoff=0.6)
    if not match:
        lowered = {c.lower(): c for c in choices}
        match = [lowered[w] for w in (str(word).lower(),) if w in lowered]
    return match[0] if match else None


# Keys of other tools that have no counterpart in a config here, with what to do instead.
FOREIGN_NOTES = {
    "do_train": "not needed: a training command always trains",
    "shuffle": "not needed: training batches are drawn in a new random order each epoch",
    # where FOREIGN_KEYS' place for them does not exist (an LLM config holds no fraction out)
    "val_set_size": "an LLM run evaluates on a split of its own: `data.valid_split`",
    "val_size": "an LLM run evaluates on a split of its own: `data.valid_split`",
    "overwrite_output_dir": "not a config key: pass `--overwrite` to the command",
    "resume_from_checkpoint": "not a config key: pass `--resume` to the command",
}


def key_hint(key: str, where: tuple, known: Iterable[str], exists: Callable[[tuple], bool]) -> str:
    """The suggestion for unknown `key` in the section at `where` whose keys are `known` (see `key_target`),
    as the end of its message."""
    target = key_target(key, where, known, exists)
    if target:
        return f" (did you mean `{'.'.join(target)}`?)"
    note = FOREIGN_NOTES.get(key) if not where else None
    return f" ({note})" if note else ""


def key_target(key: str, where: tuple, known: Iterable[str], exists: Callable[[tuple], bool]) -> tuple | None:
    """Where unknown `key` in the section at `where` whose keys are `known` probably belongs, as a path
    relative to that section when it is inside it: a close spelling, else the key's place here when another
    tool names it so (`learning_rate` -> `lr`) or when it belongs in another section (`lr` at the top ->
    `training_args.lr`). `exists(path)` says whether the config has a field at that path (the sections
    differ by task)."""
    native = FOREIGN_KEYS.get(key) or FOREIGN_KEYS.get(key.lower())
    if native and exists(tuple(native.split("."))):
        return _relative(tuple(native.split(".")), where)
    if not where and key in FOREIGN_NOTES:
        return None
    match = nearest(key, known)
    if match or where:
        return (match,) if match else None
    # A flat layout (axolotl's) at the top: the key may be one of a section's.
    for section in ("training_args", "data", "peft", "hub", "distributed"):
        if exists((section, key)):
            return _relative((section, key), where)
    return None


def _relative(path: tuple, where: tuple) -> tuple:
    """The path relative to the section the key was found in, when it is inside it; else from the top."""
    return path[len(where) :] if path[: len(where)] == where else path
