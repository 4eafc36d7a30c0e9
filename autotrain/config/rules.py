"""Cross-field rules, checked on the raw (interpolated) config so they are reported together with
every schema error, not only after those are fixed. Each rule names both fields it relates."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

from pydantic import ValidationError

from autotrain.config.llm import OPTIONAL_COLUMNS, TRAINER_COLUMNS
from autotrain.config.optimizers import OPTIMIZER_ARGS
from autotrain.config.suggest import did_you_mean

Issue = tuple[tuple, str]
CLASSIFICATION_COLUMNS = {
    "text-classification": ("text", "target"),
    "image-classification": ("image", "target"),
}


def _get(data: Any, *path: str, default: Any = None) -> Any:
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return default
        data = data[key]
    return data


def _section(data: Any, *path: str) -> dict:
    value = _get(data, *path)
    return value if isinstance(value, dict) else {}


def check_rules(raw: dict, task: str) -> Iterator[Issue]:
    yield from _training_rules(raw)
    yield from _distributed_rules(raw)
    if _get(raw, "hub", "push_to_hub") is True and not _get(raw, "hub", "repo_id"):
        yield ("hub", "repo_id"), "`hub.push_to_hub: true` needs `hub.repo_id`"
    if task == "llm":
        yield from _llm_rules(raw)
    else:
        yield from _classification_rules(raw, task)


def _training_rules(raw: dict) -> Iterator[Issue]:
    args = _section(raw, "training_args")
    name = args.get("optimizer", "adamw_torch")
    given = args.get("optimizer_args")
    if isinstance(name, str) and name in OPTIMIZER_ARGS and isinstance(given, dict):
        try:
            OPTIMIZER_ARGS[name].model_validate(given)
        except ValidationError as exc:
            errors = exc.errors()
            # A tuple given too few values fails once per absent item: report it once, at the tuple.
            absent = Counter(e["loc"][:-1] for e in errors if _absent_item(e))
            for err in errors:
                loc = ("training_args", "optimizer_args", *err["loc"])
                if _absent_item(err):
                    if err["loc"][:-1] in absent:
                        got = len(err["input"]) if isinstance(err["input"], (list, tuple)) else 1
                        expected = got + absent.pop(err["loc"][:-1])
                        yield loc[:-1], f"expects {expected} values, got {got} (optimizer `{name}`)"
                elif err["type"] == "extra_forbidden":
                    known = OPTIMIZER_ARGS[name].model_fields
                    hint = did_you_mean(str(err["loc"][-1]), known)
                    if err["loc"][-1] in ("lr", "weight_decay"):
                        hint = f" (set `training_args.{err['loc'][-1]}` instead)"
                    yield (
                        loc,
                        f"`{name}` takes no argument `{err['loc'][-1]}`{hint}; it takes: {', '.join(known)}",
                    )
                else:
                    yield loc, f"{err['msg']} (optimizer `{name}`)"
    if args.get("eval_strategy") == "steps" and not args.get("eval_steps"):
        yield (
            ("training_args", "eval_steps"),
            "`training_args.eval_strategy: steps` needs `training_args.eval_steps`",
        )


def _absent_item(err: dict) -> bool:
    return err["type"] == "missing" and isinstance(err["loc"][-1], int)


def _distributed_rules(raw: dict) -> Iterator[Issue]:
    dist = _section(raw, "distributed")
    strategy = dist.get("strategy", "ddp")
    for section in ("fsdp", "deepspeed"):
        if dist.get(section) is not None and strategy != section:
            yield (
                ("distributed", section),
                (f"`distributed.{section}` options given but `distributed.strategy` is `{strategy}`"),
            )
    machines, rank = dist.get("num_machines", 1), dist.get("machine_rank", 0)
    if isinstance(machines, int) and isinstance(rank, int) and rank >= machines:
        yield (
            ("distributed", "machine_rank"),
            (f"`distributed.machine_rank` ({rank}) must be below `distributed.num_machines` ({machines})"),
        )
    if isinstance(machines, int) and machines > 1 and not dist.get("main_process_ip"):
        yield (
            ("distributed", "main_process_ip"),
            "`distributed.num_machines` > 1 needs `distributed.main_process_ip`",
        )
    if strategy in ("fsdp", "deepspeed") and _get(raw, "peft", "merge_adapter") is True:
        # Sharded weights: merging on one rank would merge a shard, not the model.
        yield (
            ("peft", "merge_adapter"),
            (
                f"`peft.merge_adapter` cannot run under `distributed.strategy: {strategy}` (the weights are "
                "sharded); merge the saved adapter afterwards, or use `strategy: ddp`"
            ),
        )
    if (
        _get(dist, "fsdp", "activation_checkpointing") is True
        and _get(raw, "training_args", "gradient_checkpointing") is True
    ):
        yield (
            ("distributed", "fsdp", "activation_checkpointing"),
            (
                "`distributed.fsdp.activation_checkpointing` and `training_args.gradient_checkpointing` both "
                "recompute activations; enable one of them"
            ),
        )
    optimizer = _get(raw, "training_args", "optimizer")
    # Only for known names: an unknown one is reported (with a suggestion) by the schema instead.
    known = isinstance(optimizer, str) and optimizer in OPTIMIZER_ARGS
    flattened = _flattening(dist, strategy)
    if flattened and known and optimizer.startswith("came"):
        yield (
            ("training_args", "optimizer"),
            (
                f"`training_args.optimizer: {optimizer}` cannot run under {flattened}, which would turn "
                "CAME's factored statistics off. Use FSDP2 (`strategy: fsdp`, `fsdp.version: 2`) or `ddp`, "
                "or `optimizer: fused_adam` / `adamw_torch`"
            ),
        )


def _flattening(dist: dict, strategy: Any) -> str | None:
    """The setting that hands parameters to the optimizer as flattened 1-D buffers, if any.

    CAME would silently stop factoring its statistics on them (and lose its memory saving). FSDP2
    keeps each param's shape (dim-0 shards), which the CAME optimizers handle exactly.
    """
    if strategy == "deepspeed":
        return "`distributed.strategy: deepspeed` (ZeRO flattens the parameters)"
    if strategy == "fsdp" and _get(dist, "fsdp", "version") == 1:
        return "`distributed.strategy: fsdp` with `distributed.fsdp.version: 1` (FSDP1 flattens the parameters)"
    return None


def _mapping_rules(mapping: Any, allowed: tuple[str, ...], context: str) -> Iterator[Issue]:
    if not isinstance(mapping, dict):
        return
    for key in mapping:
        if key not in allowed:
            yield (
                ("data", "column_mapping", key),
                (f"`{key}` is not a column for {context}{did_you_mean(key, allowed)}; expected: {', '.join(allowed)}"),
            )


def _llm_rules(raw: dict) -> Iterator[Issue]:
    trainer = raw.get("trainer", "sft")
    if trainer not in TRAINER_COLUMNS:
        return
    mapping = _get(raw, "data", "column_mapping")
    groups = TRAINER_COLUMNS[trainer]
    allowed = tuple(dict.fromkeys(c for group in groups for c in group)) + OPTIONAL_COLUMNS.get(trainer, ())
    yield from _mapping_rules(mapping, allowed, f"`trainer: {trainer}`")
    if isinstance(mapping, dict) and mapping:
        present = [group for group in groups if any(c in mapping for c in group)]
        if trainer == "sft" and len(present) > 1:
            yield (
                ("data", "column_mapping"),
                "`trainer: sft` takes `text` or `messages` in `data.column_mapping`, not both",
            )
        elif len(groups) == 1:
            missing = [c for c in groups[0] if c not in mapping]
            if missing:
                yield (
                    ("data", "column_mapping"),
                    (f"`trainer: {trainer}` needs `{'`, `'.join(missing)}` in `data.column_mapping`"),
                )
    peft = _section(raw, "peft")
    if peft.get("quantization") and peft.get("enabled", True) is False:
        yield (
            ("peft", "quantization"),
            "`peft.quantization` needs `peft.enabled: true` (QLoRA trains an adapter)",
        )
    if peft.get("merge_adapter") and peft.get("enabled", True) is False:
        yield ("peft", "merge_adapter"), "`peft.merge_adapter` needs `peft.enabled: true`"
    args = _section(raw, "training_args")
    if trainer not in ("orpo", "dpo", "reward"):
        for key in ("max_prompt_length", "beta"):
            if args.get(key) is not None:
                yield (
                    ("training_args", key),
                    f"`training_args.{key}` applies to orpo/dpo/reward, not `trainer: {trainer}`",
                )
    if trainer not in ("orpo", "dpo") and args.get("max_completion_length") is not None:
        yield (
            ("training_args", "max_completion_length"),
            (f"`training_args.max_completion_length` applies to orpo/dpo, not `trainer: {trainer}`"),
        )
    if trainer != "sft":
        for key in ("packing", "completion_only_loss"):
            if args.get(key):
                yield (
                    ("training_args", key),
                    f"`training_args.{key}` applies to sft, not `trainer: {trainer}`",
                )
    prompt, length = args.get("max_prompt_length"), args.get("max_length", 1024)
    if isinstance(prompt, int) and isinstance(length, int) and prompt >= length:
        yield (
            ("training_args", "max_prompt_length"),
            (f"`training_args.max_prompt_length` ({prompt}) must be below `training_args.max_length` ({length})"),
        )


def _classification_rules(raw: dict, task: str) -> Iterator[Issue]:
    for key in ("trainer", "peft"):
        if key in raw:
            yield (key,), f"`{key}` applies to `task: llm` only, not `task: {task}`"
    allowed = CLASSIFICATION_COLUMNS[task]
    yield from _mapping_rules(_get(raw, "data", "column_mapping"), allowed, f"`task: {task}`")
    if _get(raw, "data", "chat_template") is not None:
        yield (
            ("data", "chat_template"),
            f"`data.chat_template` applies to `task: llm` only, not `task: {task}`",
        )
