"""Read Hugging Face AutoTrain Advanced configs and translate them to the native format.

AutoTrain Advanced writes `task: llm-<trainer>`, keeps hyper-parameters in a flat `params:` section and names
columns `text_column`, `rejected_text_column`, ... Every command accepts such a file: it is translated
here (with a one-line notice) and validated as a native config, with errors pointing at the original lines.
"""

from __future__ import annotations

from typing import Any

from autotrain.config.suggest import did_you_mean
from autotrain.config.tasks import ADVANCED_LORA, TASKS, advanced_tasks
from autotrain.config.trainers import TRAINERS, trainer_fields

Path_ = tuple

# Task names and the aliases AutoTrain Advanced's config parser accepts for them.
ADVANCED_TASKS = {
    "llm": ("llm", None),
    "lm_training": ("llm", None),
    "llm_training": ("llm", None),
    "llm_finetuning": ("llm", None),
    # `llm-<name>`: each trainer of the table that AutoTrain Advanced has, under its first name there
    **{f"llm-{spec.advanced[0]}": ("llm", name) for name, spec in TRAINERS.items() if spec.advanced},
    **advanced_tasks(),  # every other task: the names the task table gives it
}
ADVANCED_TRAINERS = {advanced: name for name, spec in TRAINERS.items() for advanced in spec.advanced}
# What an LLM config leaves out of `params.trainer`: AutoTrain Advanced's own default trainer.
ADVANCED_DEFAULT_TRAINER = ADVANCED_TRAINERS["default"]

# AutoTrain Advanced column names -> native column names, per task family.
LLM_COLUMNS = {
    "text_column": "text",
    "prompt_text_column": "prompt",
    "rejected_text_column": "rejected",
    "answer_column": "answer",  # the reference answer that reward functions compare with
}

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
    "num_completions": ("training_args", "num_generations"),
    "temperature": ("training_args", "temperature"),
    "top_p": ("training_args", "top_p"),
    "top_k": ("training_args", "top_k"),
    "disable_gradient_checkpointing": ("training_args", "gradient_checkpointing"),
    "early_stopping_patience": ("training_args", "early_stopping", "patience"),
    "early_stopping_threshold": ("training_args", "early_stopping", "threshold"),
    "max_target_length": ("training_args", "max_target_length"),
    "max_doc_stride": ("training_args", "doc_stride"),
    "image_square_size": ("training_args", "image_square_size"),
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
    "auto_find_batch_size": ("training_args", "batch_size"),  # true: `auto` (see _auto_batch)
    "use_flash_attention_2": None,
    "distributed_backend": None,
    "unsloth": None,
    "liger_kernel": None,
    "pretrain": None,
    "model_ref": None,
    "username": None,
    "log": None,
}
LLM_ONLY = {
    "block_size",
    "max_prompt_length",
    "max_completion_length",
    "dpo_beta",
    "num_completions",
    "temperature",
    "top_p",
    "top_k",
    *ADVANCED_LORA,
    "trainer",
    "chat_template",
    "disable_gradient_checkpointing",
    "model_max_length",
    "padding",
    "add_eos_token",
    "model_ref",
    "use_flash_attention_2",
    "unsloth",
    "liger_kernel",
}
# Taken by the tasks whose table entry lists them in `advanced_params` only (LLM_ONLY's too, for those tasks).
TASK_ONLY = {"max_target_length", "max_doc_stride", "image_square_size"}
# Dropped like the None entries above, but when set they asked for something that will not happen: say so.
NOTED_WHEN_SET = {
    "unsloth": "Unsloth kernels are not used; training runs on plain transformers",
    "pretrain": "no equivalent; training starts from `base_model` as usual",
}
# AutoTrain Advanced's SFT has no such setting and trains on every token of the text; here the loss falls on
# the answers unless `train_on_inputs` says otherwise. The translation keeps the better default and says so.
ANSWERS_ONLY = (
    "the loss falls on the answers only (assistant turns, or the completion); AutoTrain Advanced trained on "
    "every token: set `training_args.train_on_inputs: true` for that"
)
_TRAINER_FIELDS = set(trainer_fields())
DATA_KEYS = ("path", "train_split", "valid_split", "chat_template", "column_mapping")
# Data options AutoTrain Advanced also takes among its parameters (its `--data-path`, `--train-split`,
# `--valid-split`, `--text-column`, ... on the command line): the `data:` section's keys here.
PARAMS_DATA = {"data_path": "path", "train_split": "train_split", "valid_split": "valid_split"}
HUB_KEYS = ("username", "token", "push_to_hub")
# Task names only AutoTrain Advanced writes begin so; a misspelt one (`llm-sftt`) is still its config.
ADVANCED_PREFIXES = (
    *("llm-", "llm_", "lm_", "text_", "image_", "token_", "extractive", "st:", "sentence-transformers:"),
    *("object", "vlm"),
)
TOP_LEVEL = {"task", "base_model", "project_name", "log", "backend", "data", "params", "hub"}


def is_advanced(data: dict) -> bool:
    """AutoTrain Advanced configs have a `params:` section or one of its task names."""
    task = data.get("task")
    return "params" in data or (
        isinstance(task, str)
        and (task in ADVANCED_TASKS or task.startswith(ADVANCED_PREFIXES))
        and task not in TASKS  # a native name (`seq2seq` and `extractive-qa` are both), without `params:`
    )


def translate(data: dict) -> tuple[dict, dict[Path_, Path_], list[tuple[Path_, str]], list[tuple[Path_, str]]]:
    """AutoTrain Advanced dict -> (native dict, native path -> original path, problems, notices).

    Notices name what was accepted but dropped: settings AutoTrain Advanced takes for every trainer and
    uses for some only (`max_prompt_length` in an SFT config), and features with no equivalent here.
    """
    out = _Translation()
    for key in data:
        if key not in TOP_LEVEL:
            out.problems.append(((key,), f"unknown AutoTrain Advanced key{did_you_mean(key, TOP_LEVEL)}"))
    task_name = data.get("task")
    if not isinstance(task_name, str) or task_name not in ADVANCED_TASKS:
        out.problems.append((("task",), _unknown_task(task_name)))
        return out.result()
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
        out.put(("trainer",), ADVANCED_DEFAULT_TRAINER, ("task",))
    _data(data.get("data"), task, out, data.get("params"))
    _hub(data, out)
    if task != "llm" and not peft_on and "peft" in out.native:  # seq2seq: LoRA settings off with `peft: false`
        out.native.pop("peft", None)
    if task == "llm" and not peft_on:
        out.native.pop("peft", None)
    if task == "llm":
        _liger_kernel(data.get("params"), out)
        _drop_unused_by_trainer(out)
    spec = TRAINERS.get(out.native.get("trainer"))
    if spec is not None and "train_on_inputs" in spec.fields:  # the trainer that trains on answers only
        out.notices.append((("task",), ANSWERS_ONLY))
    return out.result()


def _liger_kernel(params: Any, out: _Translation) -> None:
    """`liger_kernel: true`: of Liger's kernels, its fused linear cross-entropy is what saves the most memory;
    it is `training_args.cross_entropy: liger` on a machine with an NVIDIA GPU, and elsewhere (Liger's kernels
    need CUDA) `chunked`, which also never holds the whole logits tensor. Its other kernels are not used."""
    if not isinstance(params, dict) or not params.get("liger_kernel"):
        return
    spec = TRAINERS.get(out.native.get("trainer"))
    if spec is None or "cross_entropy" not in spec.fields:
        out.notices.append((("params", "liger_kernel"), "ignored: Liger kernels are not used"))
        return
    gpu = nvidia_gpu_visible()
    choice = "liger" if gpu and spec.kernel_losses else "chunked"
    out.put(("training_args", "cross_entropy"), choice, ("params", "liger_kernel"))
    where = "" if choice == "liger" else " (Liger's kernels need an NVIDIA GPU and none is visible here)"
    if choice == "chunked" and gpu:
        where = f" (`trainer: {spec.name}` takes chunked or full)"
    out.notices.append(
        (
            ("params", "liger_kernel"),
            f"Liger's fused linear cross-entropy becomes `training_args.cross_entropy: {choice}`{where}; its other "
            "kernels are not used",
        )
    )


def nvidia_gpu_visible() -> bool:
    """Whether this machine shows an NVIDIA GPU, without importing torch: the driver lists its GPUs in /proc,
    and CUDA_VISIBLE_DEVICES may hide them all."""
    import os
    from pathlib import Path

    hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
    if hidden is not None and hidden.strip() in ("", "-1"):
        return False
    gpus = Path("/proc/driver/nvidia/gpus")
    return gpus.is_dir() and any(gpus.iterdir())


def _unknown_task(task_name: Any) -> str:
    return (
        f"unknown AutoTrain Advanced task `{task_name}`"
        f"{did_you_mean(str(task_name), ADVANCED_TASKS)}; expected: {', '.join(ADVANCED_TASKS)}"
    )


def _drop_unused_by_trainer(out: _Translation) -> None:
    """AutoTrain Advanced takes `max_prompt_length`, `dpo_beta`, ... for every trainer and ignores them
    where they do not apply; a native config refuses them there, so the translation leaves them out."""
    trainer, args = out.native.get("trainer"), out.native.get("training_args", {})
    used = TRAINERS[trainer].fields if trainer in TRAINERS else ()
    for key in [key for key in args if key in _TRAINER_FIELDS]:
        if key not in used:
            del args[key]
            original = out.renamed.pop(("training_args", key))
            out.notices.append((original, f"dropped: `trainer: {trainer}` does not use it"))


class _Translation:
    """The native dict being built, where each value came from, and what could not be translated."""

    def __init__(self):
        self.native: dict[str, Any] = {}
        self.renamed: dict[Path_, Path_] = {}
        self.problems: list[tuple[Path_, str]] = []
        self.notices: list[tuple[Path_, str]] = []

    def result(self) -> tuple[dict, dict[Path_, Path_], list[tuple[Path_, str]], list[tuple[Path_, str]]]:
        return self.native, self.renamed, self.problems, self.notices

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
        if key in PARAMS_DATA or (is_llm and key in LLM_COLUMNS):
            continue  # a data option: translated with the `data:` section (_data)
        if key not in PARAMS:
            out.problems.append((("params", key), f"unknown AutoTrain Advanced parameter{did_you_mean(key, PARAMS)}"))
            continue
        target = PARAMS[key]
        if target is None:
            if key in NOTED_WHEN_SET and value:
                out.notices.append((("params", key), f"ignored: {NOTED_WHEN_SET[key]}"))
            continue
        refused = _not_for_task(key, ADVANCED_TASKS[task_name][0])
        if refused:
            out.problems.append((("params", key), f"`{key}` applies to {refused}, not `task: {task_name}`"))
            continue
        if target == ("training_args", "max_length") and ADVANCED_TASKS[task_name][0] == "image-classification":
            out.notices.append((("params", key), "dropped: image-classification sizes images, not tokens"))
            continue
        if key == "trainer" and not is_llm:
            value = _task_trainer(value, task_name, out)
            if value is None:
                continue
        elif key == "trainer":
            value = _trainer(value, task_name, out)
            if value is None:
                continue
        elif key == "auto_find_batch_size":
            if value:
                _auto_batch(params, out)
            continue
        elif key == "batch_size" and params.get("auto_find_batch_size"):
            continue  # the samples per step _auto_batch keeps
        elif key == "gradient_accumulation" and params.get("auto_find_batch_size"):
            continue
        elif key == "disable_gradient_checkpointing":
            value = not value
        elif key == "mixed_precision" and value in (None, "none"):
            value = "no"
        elif target[0] == "peft" and key != "peft" and not peft_on:
            continue  # AutoTrain Advanced ignores LoRA settings when peft is off
        out.put(target, value, ("params", key))
    return peft_on


def _auto_batch(params: dict, out: _Translation) -> None:
    """`auto_find_batch_size: true` (AutoTrain Advanced halves the batch on running out of memory and
    retries): `batch_size: auto`, the largest batch the memory estimate fits, with the samples per
    optimizer step the config asked for (batch_size x gradient_accumulation) kept as target_batch_size."""
    batch, accumulation = params.get("batch_size"), params.get("gradient_accumulation", 1)
    out.put(("training_args", "batch_size"), "auto", ("params", "auto_find_batch_size"))
    if isinstance(batch, int) and isinstance(accumulation, int) and not isinstance(batch, bool):
        out.put(("training_args", "target_batch_size"), batch * accumulation, ("params", "batch_size"))
        kept = f"{batch} x {accumulation} = {batch * accumulation} samples per optimizer step"
    else:
        kept = "the default target_batch_size"
    out.notices.append(
        (("params", "auto_find_batch_size"), f"batch_size: auto, keeping {kept} (gradient_accumulation follows)")
    )


def _not_for_task(key: str, task: str) -> str | None:
    """Which tasks take the AutoTrain Advanced parameter `key`, when `task` does not (None when it does)."""
    if key not in LLM_ONLY and key not in TASK_ONLY:
        return None
    takers = [name for name, spec in TASKS.items() if key in spec.advanced_params]
    if key in LLM_ONLY:
        takers.insert(0, "LLM tasks")
    if task == "llm" and key in LLM_ONLY or task in takers:
        return None
    if len(takers) > 1:
        return ", ".join(takers[:-1]) + " and " + takers[-1]
    return takers[0] + (" only" if takers[0] == "LLM tasks" else "")


def _task_trainer(value: Any, task_name: str, out: _Translation) -> str | None:
    """`params.trainer` of a task with trainers of its own (sentence-transformers): one of the table's."""
    task, of_task = ADVANCED_TASKS[task_name]
    choices = TASKS[task].trainers
    if not isinstance(value, str) or value not in choices:
        hint = did_you_mean(str(value), choices) if isinstance(value, str) else ""
        out.problems.append(
            (("params", "trainer"), f"unknown trainer `{value}`{hint}; expected one of: {', '.join(choices)}")
        )
        return None
    if of_task is not None and value != of_task:
        out.notices.append(
            (("params", "trainer"), f"`trainer: {value}` overrides `task: {task_name}`: this trains `{value}`")
        )
    return value


def _trainer(value: Any, task_name: str, out: _Translation) -> str | None:
    """`params.trainer` as a native trainer, or None (with the problem added). AutoTrain Advanced lets it
    override the task's own trainer (`task: llm-<one>` with `trainer: <another>` trains the other): so does the
    translation, with a note, since the two disagree."""
    choices = ", ".join(ADVANCED_TRAINERS)
    if not isinstance(value, str):
        out.problems.append((("params", "trainer"), f"must be one word, one of: {choices}"))
        return None
    if value not in ADVANCED_TRAINERS:
        hint = did_you_mean(value, ADVANCED_TRAINERS)
        out.problems.append((("params", "trainer"), f"unknown trainer `{value}`{hint}; expected one of: {choices}"))
        return None
    trainer, of_task = ADVANCED_TRAINERS[value], ADVANCED_TASKS[task_name][1]
    if of_task is not None and trainer != of_task:
        task_of_trainer = next(name for name, (_, t) in ADVANCED_TASKS.items() if t == trainer)
        out.notices.append(
            (
                ("params", "trainer"),
                f"`trainer: {value}` overrides `task: {task_name}`: this trains `{trainer}`, as AutoTrain "
                f"Advanced would; set `task: {task_of_trainer}` or drop `params.trainer` to say which you mean",
            )
        )
    return trainer


def _data(source: Any, task: str, out: _Translation, params: Any = None) -> None:
    is_llm = task == "llm"
    given = params if isinstance(params, dict) else {}
    for key, native in PARAMS_DATA.items():
        if key in given:
            out.put(("data", native), given[key], ("params", key))
    if is_llm:
        chat = (source or {}).get("chat_template", given.get("chat_template")) not in (None, "none")
        for column in [c for c in LLM_COLUMNS if c in given]:
            _columns({column: given[column]}, task, chat, out, ("params", column))
    if not isinstance(source, dict):
        return
    for key, value in source.items():
        if key in ("path", "train_split", "valid_split", "chat_template"):
            if key == "chat_template" and not is_llm:
                continue
            out.put(("data", key), "none" if key == "chat_template" and value is None else value, ("data", key))
        elif key == "column_mapping" and isinstance(value, dict):
            _columns(value, task, source.get("chat_template") not in (None, "none"), out)
        else:
            out.problems.append((("data", key), f"unknown AutoTrain Advanced data key{did_you_mean(key, DATA_KEYS)}"))


def _columns(mapping: dict, task: str, chat: bool, out: _Translation, original: tuple | None = None) -> None:
    """Column names (LLMs': LLM_COLUMNS; every other task's: its table entry's `advanced_columns`); an SFT
    `text_column` under a chat template holds message lists (AutoTrain Advanced applies the template to it),
    which is a `messages` column here."""
    is_llm = task == "llm"
    names = LLM_COLUMNS if is_llm else dict(TASKS[task].advanced_columns)
    for column, dataset_column in mapping.items():
        if column not in names:
            hint = did_you_mean(column, names)
            out.problems.append((("data", "column_mapping", column), f"unknown AutoTrain Advanced column{hint}"))
            continue
        native_column = names[column]
        if is_llm and column == "text_column":
            native_column = _text_column(out.native.get("trainer"), chat)
        where = original or ("data", "column_mapping", column)
        out.put(("data", "column_mapping", native_column), dataset_column, where)


def _text_column(trainer: str | None, chat: bool) -> str:
    """The native column of an LLM's `text_column`, by the trainer's data format."""
    data_format = TRAINERS[trainer].data_format if trainer in TRAINERS else "blocks"
    if data_format == "preference":
        return "chosen"
    if data_format == "prompts":
        return "prompt"  # the model writes the completions: its text is the prompt
    return "messages" if data_format == "chat" and chat else "text"


def _hub(data: dict, out: _Translation) -> None:
    hub = data.get("hub") or {}
    if not isinstance(hub, dict):
        out.problems.append((("hub",), "must be a mapping of `key: value` lines"))
        return
    for key in hub:
        if key not in HUB_KEYS:
            hint = f"{did_you_mean(str(key), HUB_KEYS)}; expected: {', '.join(HUB_KEYS)}"
            out.problems.append((("hub", key), f"unknown AutoTrain Advanced hub key{hint}"))
    username = hub.get("username")
    if username is not None and not isinstance(username, str):
        out.problems.append((("hub", "username"), "must be text: the hub user or organisation to push to"))
        return
    if hub.get("push_to_hub"):
        out.put(("hub", "push_to_hub"), True, ("hub", "push_to_hub"))
        if username and data.get("project_name"):
            out.put(("hub", "repo_id"), f"{hub['username']}/{data['project_name']}", ("hub", "username"))
    if hub.get("token"):
        out.put(("hub", "token"), hub["token"], ("hub", "token"))
