"""Read Hugging Face AutoTrain Advanced configs and translate them to the native format.

AutoTrain Advanced writes `task: llm-orpo`, keeps hyper-parameters in a flat `params:` section and names
columns `text_column`, `rejected_text_column`, ... Every command accepts such a file: it is translated
here (with a one-line notice) and validated as a native config, with errors pointing at the original lines.
"""

from __future__ import annotations

from typing import Any

from autotrain.config.suggest import did_you_mean

Path_ = tuple

ADVANCED_TASKS = {
    "llm": ("llm", None),
    "llm-sft": ("llm", "sft"),
    "llm-orpo": ("llm", "orpo"),
    "llm-dpo": ("llm", "dpo"),
    "llm-reward": ("llm", "reward"),
    "llm-generic": ("llm", "clm"),
    "text_classification": ("text-classification", None),
    "text-classification": ("text-classification", None),
    "image_classification": ("image-classification", None),
    "image-classification": ("image-classification", None),
}
ADVANCED_TRAINERS = {
    "default": "clm",
    "generic": "clm",
    "sft": "sft",
    "orpo": "orpo",
    "dpo": "dpo",
    "reward": "reward",
}

# AutoTrain Advanced column names -> native column names, per task family.
LLM_COLUMNS = {"text_column": "text", "prompt_text_column": "prompt", "rejected_text_column": "rejected"}
CLASSIFICATION_COLUMNS = {"text_column": "text", "image_column": "image", "target_column": "target"}

# `params:` keys -> native paths. None = accepted and dropped (no native equivalent is needed).
PARAMS: dict[str, tuple[str, ...] | None] = {
    "epochs": ("training_args", "epochs"),
    "batch_size": ("training_args", "batch_size"),
    "lr": ("training_args", "lr"),
    "warmup_ratio": ("training_args", "warmup_ratio"),
    "weight_decay": ("training_args", "weight_decay"),
    "max_grad_norm": ("training_args", "max_grad_norm"),
    "seed": ("training_args", "seed"),
    "gradient_accumulation": ("training_args", "gradient_accumulation"),
    "mixed_precision": ("training_args", "mixed_precision"),
    "optimizer": ("training_args", "optimizer"),
    "scheduler": ("training_args", "scheduler"),
    "logging_steps": ("training_args", "logging_steps"),
    "save_total_limit": ("training_args", "save_total_limit"),
    "eval_strategy": ("training_args", "eval_strategy"),
    "max_seq_length": ("training_args", "max_length"),
    "block_size": ("training_args", "max_length"),
    "max_prompt_length": ("training_args", "max_prompt_length"),
    "max_completion_length": ("training_args", "max_completion_length"),
    "dpo_beta": ("training_args", "beta"),
    "disable_gradient_checkpointing": ("training_args", "gradient_checkpointing"),
    "early_stopping_patience": ("training_args", "early_stopping", "patience"),
    "early_stopping_threshold": ("training_args", "early_stopping", "threshold"),
    "peft": ("peft", "enabled"),
    "lora_r": ("peft", "r"),
    "lora_alpha": ("peft", "alpha"),
    "lora_dropout": ("peft", "dropout"),
    "target_modules": ("peft", "target_modules"),
    "quantization": ("peft", "quantization"),
    "merge_adapter": ("peft", "merge_adapter"),
    "trainer": ("trainer",),
    "chat_template": ("data", "chat_template"),
    "model_max_length": None,
    "padding": None,
    "add_eos_token": None,
    "auto_find_batch_size": None,
    "use_flash_attention_2": None,
    "distributed_backend": None,
    "unsloth": None,
    "model_ref": None,
    "username": None,
    "log": None,
}
LLM_ONLY = {
    "block_size",
    "max_prompt_length",
    "max_completion_length",
    "dpo_beta",
    "peft",
    "lora_r",
    "lora_alpha",
    "lora_dropout",
    "target_modules",
    "quantization",
    "merge_adapter",
    "trainer",
    "chat_template",
    "disable_gradient_checkpointing",
    "model_max_length",
    "padding",
    "add_eos_token",
    "model_ref",
    "use_flash_attention_2",
    "unsloth",
}
DATA_KEYS = ("path", "train_split", "valid_split", "chat_template", "column_mapping")
TOP_LEVEL = {"task", "base_model", "project_name", "log", "backend", "data", "params", "hub"}


def is_advanced(data: dict) -> bool:
    """AutoTrain Advanced configs have a `params:` section or one of its task names."""
    task = data.get("task")
    return "params" in data or (
        isinstance(task, str)
        and task in ADVANCED_TASKS
        and task not in ("llm", "text-classification", "image-classification")
    )


def translate(data: dict) -> tuple[dict, dict[Path_, Path_], list[tuple[Path_, str]]]:
    """AutoTrain Advanced dict -> (native dict, native path -> original path, problems)."""
    out = _Translation()
    for key in data:
        if key not in TOP_LEVEL:
            out.problems.append(((key,), f"unknown AutoTrain Advanced key{did_you_mean(key, TOP_LEVEL)}"))
    task_name = data.get("task")
    if not isinstance(task_name, str) or task_name not in ADVANCED_TASKS:
        out.problems.append(
            (
                ("task",),
                f"unknown AutoTrain Advanced task `{task_name}`"
                f"{did_you_mean(str(task_name), ADVANCED_TASKS)}; expected: {', '.join(ADVANCED_TASKS)}",
            )
        )
        return out.native, out.renamed, out.problems
    task, trainer = ADVANCED_TASKS[task_name]
    out.put(("task",), task, ("task",))
    if trainer:
        out.put(("trainer",), trainer, ("task",))
    for key in ("base_model", "project_name"):
        if key in data:
            out.put((key,), data[key], (key,))
    if data.get("log") not in (None, "none"):
        out.put(("log",), data["log"], ("log",))
    peft_on = _params(data.get("params"), task_name, task == "llm", out)
    if task == "llm" and "trainer" not in out.native:
        out.put(("trainer",), "clm", ("task",))
    _data(data.get("data"), task == "llm", out)
    _hub(data, out)
    if task == "llm" and not peft_on:
        out.native.pop("peft", None)
    return out.native, out.renamed, out.problems


class _Translation:
    """The native dict being built, where each value came from, and what could not be translated."""

    def __init__(self):
        self.native: dict[str, Any] = {}
        self.renamed: dict[Path_, Path_] = {}
        self.problems: list[tuple[Path_, str]] = []

    def put(self, path: tuple, value: Any, original: tuple) -> None:
        node = self.native
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
        self.renamed[path] = original


def _params(params: Any, task_name: str, is_llm: bool, out: _Translation) -> bool:
    """`params:` -> training_args / peft / trainer; returns whether LoRA is on."""
    params = params or {}
    if not isinstance(params, dict):
        out.problems.append((("params",), "`params` must be a mapping"))
        return False
    peft_on = bool(params.get("peft", False))
    for key, value in params.items():
        if key not in PARAMS:
            out.problems.append((("params", key), f"unknown AutoTrain Advanced parameter{did_you_mean(key, PARAMS)}"))
            continue
        target = PARAMS[key]
        if target is None:
            continue
        if not is_llm and key in LLM_ONLY:
            out.problems.append((("params", key), f"`{key}` applies to LLM tasks only, not `task: {task_name}`"))
            continue
        if key == "trainer":
            if value not in ADVANCED_TRAINERS:
                hint = did_you_mean(str(value), ADVANCED_TRAINERS)
                out.problems.append((("params", key), f"unknown trainer `{value}`{hint}"))
                continue
            value = ADVANCED_TRAINERS[value]
        elif key == "disable_gradient_checkpointing":
            value = not value
        elif key == "mixed_precision" and value in (None, "none"):
            value = "no"
        elif target[0] == "peft" and key != "peft" and not peft_on:
            continue  # AutoTrain Advanced ignores LoRA settings when peft is off
        out.put(target, value, ("params", key))
    return peft_on


def _data(source: Any, is_llm: bool, out: _Translation) -> None:
    if not isinstance(source, dict):
        return
    for key, value in source.items():
        if key in ("path", "train_split", "valid_split", "chat_template"):
            if key == "chat_template" and not is_llm:
                continue
            out.put(("data", key), "none" if key == "chat_template" and value is None else value, ("data", key))
        elif key == "column_mapping" and isinstance(value, dict):
            _columns(value, is_llm, out)
        else:
            out.problems.append((("data", key), f"unknown AutoTrain Advanced data key{did_you_mean(key, DATA_KEYS)}"))


def _columns(mapping: dict, is_llm: bool, out: _Translation) -> None:
    names = LLM_COLUMNS if is_llm else CLASSIFICATION_COLUMNS
    for column, dataset_column in mapping.items():
        if column not in names:
            hint = did_you_mean(column, names)
            out.problems.append((("data", "column_mapping", column), f"unknown AutoTrain Advanced column{hint}"))
            continue
        native_column = names[column]
        if is_llm and column == "text_column" and out.native.get("trainer") in ("orpo", "dpo", "reward"):
            native_column = "chosen"
        out.put(("data", "column_mapping", native_column), dataset_column, ("data", "column_mapping", column))


def _hub(data: dict, out: _Translation) -> None:
    hub = data.get("hub") or {}
    if not isinstance(hub, dict):
        return
    if hub.get("push_to_hub"):
        out.put(("hub", "push_to_hub"), True, ("hub", "push_to_hub"))
        if hub.get("username") and data.get("project_name"):
            out.put(("hub", "repo_id"), f"{hub['username']}/{data['project_name']}", ("hub", "username"))
    if hub.get("token"):
        out.put(("hub", "token"), hub["token"], ("hub", "token"))
