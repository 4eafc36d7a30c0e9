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
    native: dict[str, Any] = {}
    renamed: dict[Path_, Path_] = {}
    problems: list[tuple[Path_, str]] = []

    def put(path: tuple, value: Any, original: tuple) -> None:
        node = native
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
        renamed[path] = original

    for key in data:
        if key not in TOP_LEVEL:
            problems.append(((key,), f"unknown AutoTrain Advanced key{did_you_mean(key, TOP_LEVEL)}"))

    task_name = data.get("task")
    if not isinstance(task_name, str) or task_name not in ADVANCED_TASKS:
        problems.append(
            (
                ("task",),
                f"unknown AutoTrain Advanced task `{task_name}`"
                f"{did_you_mean(str(task_name), ADVANCED_TASKS)}; expected: {', '.join(ADVANCED_TASKS)}",
            )
        )
        return native, renamed, problems
    task, trainer = ADVANCED_TASKS[task_name]
    is_llm = task == "llm"
    put(("task",), task, ("task",))
    if trainer:
        put(("trainer",), trainer, ("task",))
    for key in ("base_model", "project_name"):
        if key in data:
            put((key,), data[key], (key,))
    if data.get("log") not in (None, "none"):
        put(("log",), data["log"], ("log",))

    params = data.get("params") or {}
    if not isinstance(params, dict):
        problems.append((("params",), "`params` must be a mapping"))
        params = {}
    peft_on = bool(params.get("peft", False))
    for key, value in params.items():
        if key not in PARAMS:
            problems.append((("params", key), f"unknown AutoTrain Advanced parameter{did_you_mean(key, PARAMS)}"))
            continue
        target = PARAMS[key]
        if target is None:
            continue
        if not is_llm and key in LLM_ONLY:
            problems.append((("params", key), f"`{key}` applies to LLM tasks only, not `task: {task_name}`"))
            continue
        if key == "trainer":
            if value not in ADVANCED_TRAINERS:
                problems.append(
                    (
                        ("params", key),
                        f"unknown trainer `{value}`{did_you_mean(str(value), ADVANCED_TRAINERS)}",
                    )
                )
                continue
            value = ADVANCED_TRAINERS[value]
        elif key == "disable_gradient_checkpointing":
            value = not value
        elif key == "mixed_precision" and value in (None, "none"):
            value = "no"
        elif target[0] == "peft" and key != "peft" and not peft_on:
            continue  # AutoTrain Advanced ignores LoRA settings when peft is off
        put(target, value, ("params", key))
    if is_llm and "trainer" not in native:
        put(("trainer",), "clm", ("task",))

    source_data = data.get("data") or {}
    if isinstance(source_data, dict):
        for key, value in source_data.items():
            if key in ("path", "train_split", "valid_split", "chat_template"):
                if key == "chat_template" and not is_llm:
                    continue
                put(
                    ("data", key),
                    "none" if key == "chat_template" and value is None else value,
                    ("data", key),
                )
            elif key == "column_mapping" and isinstance(value, dict):
                names = LLM_COLUMNS if is_llm else CLASSIFICATION_COLUMNS
                for column, dataset_column in value.items():
                    if column not in names:
                        problems.append(
                            (
                                ("data", "column_mapping", column),
                                f"unknown AutoTrain Advanced column{did_you_mean(column, names)}",
                            )
                        )
                        continue
                    native_column = names[column]
                    if is_llm and column == "text_column" and native.get("trainer") in ("orpo", "dpo", "reward"):
                        native_column = "chosen"
                    put(
                        ("data", "column_mapping", native_column),
                        dataset_column,
                        ("data", "column_mapping", column),
                    )
            else:
                problems.append(
                    (
                        ("data", key),
                        f"unknown AutoTrain Advanced data key{did_you_mean(key, DATA_KEYS)}",
                    )
                )

    hub = data.get("hub") or {}
    if isinstance(hub, dict):
        if hub.get("push_to_hub"):
            put(("hub", "push_to_hub"), True, ("hub", "push_to_hub"))
            if hub.get("username") and data.get("project_name"):
                put(("hub", "repo_id"), f"{hub['username']}/{data['project_name']}", ("hub", "username"))
        if hub.get("token"):
            put(("hub", "token"), hub["token"], ("hub", "token"))
    if is_llm and not peft_on:
        native.pop("peft", None)
    return native, renamed, problems
