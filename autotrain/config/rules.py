"""Cross-field rules, on typed values. Each rule names both fields it relates.

The rules are part of validation: every task config runs them in a model validator (`enforce_rules`), so
`Config.model_validate` refuses what `load_config` refuses. When the schema has refused some fields the
model validator cannot run; `load_config` then runs the rules on a typed view of the config: every value
that passes the schema on its own, defaults filled in by the schema (never repeated here). A rule declares
the fields it reads and runs unless one of them is itself invalid, so the rules are reported in the same
pass as the schema's errors (every mistake at once) without guessing at values the schema refused.
"""

from __future__ import annotations

import typing
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Annotated, Any

from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import InitErrorDetails, PydanticCustomError

from autotrain.config.messages import OPTIMIZER_ARGS_ERROR, RULE_ERROR, plain, without_members
from autotrain.config.suggest import did_you_mean
from autotrain.config.tasks import TASKS
from autotrain.config.trainers import KERNEL_LOSSES, TRAINERS, trainer_fields, used_by
from autotrain.optimizers.table import OPTIMIZERS

Path = tuple[str, ...]
Issue = tuple[tuple, str]
LLM_ONLY_KEYS = ("trainer", "peft", "attn_implementation")
PEFT_TASKS = ("llm", "seq2seq", "vlm")  # the tasks with a `peft:` section (a LoRA adapter), whose rules they share


# --- the typed view ------------------------------------------------------------------------------------


_ADAPTERS: dict[int, TypeAdapter] = {}


def _adapter(field: FieldInfo) -> TypeAdapter:
    """The field's type with its constraints (`ge`, `le`, ...), to validate one value on its own."""
    if id(field) not in _ADAPTERS:
        typed = Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation
        _ADAPTERS[id(field)] = TypeAdapter(typed)
    return _ADAPTERS[id(field)]


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next((m for m in map(_model_in, typing.get_args(annotation)) if m is not None), None)


def typed_view(model: type[BaseModel], data: dict, prefix: Path = (), bad: set[Path] | None = None):
    """`model` built from the values of `data` that validate (defaults for the rest), and the paths that don't."""
    bad = set() if bad is None else bad
    values = {}
    for name, field in model.model_fields.items():
        if name not in data:
            if field.is_required():
                bad.add(prefix + (name,))
            continue
        try:
            values[name] = _adapter(field).validate_python(data[name])
        except ValidationError:
            inner = _model_in(field.annotation)
            if inner is not None and isinstance(data[name], dict):  # keep the section's valid fields
                values[name] = typed_view(inner, data[name], prefix + (name,), bad)[0]
            else:
                bad.add(prefix + (name,))
    return model.model_construct(**values), bad


def _usable(path: Path, bad: set[Path]) -> bool:
    """Neither the value at `path`, nor anything inside it, nor anything around it failed the schema."""
    return not any(b[: len(path)] == path or path[: len(b)] == b for b in bad)


# --- the rule table ------------------------------------------------------------------------------------

Rule = Callable[[Any], Iterator[Issue]]
RULES: list[tuple[tuple[Path, ...], str | None, Rule]] = []


def rule(*fields: str, task: str | tuple[str, ...] | None = None) -> Callable[[Rule], Rule]:
    """Register a rule that reads `fields` (dotted paths) of configs of `task`: a task's name, the `family` the
    task table gives several tasks (`classification`), a tuple of those, or None: every task."""

    def register(fn: Rule) -> Rule:
        for one in task if isinstance(task, tuple) else (task,):
            RULES.append((tuple(tuple(f.split(".")) for f in fields), one, fn))
        return fn

    return register


def _applies(for_task: str | None, task: str) -> bool:
    return for_task in (None, task, TASKS[task].rules)


def check_rules(model: type[BaseModel], raw: dict, task: str) -> Iterator[Issue]:
    """The rules on the parts of `raw` that pass the schema (for a config the schema refused in part)."""
    cfg, bad = typed_view(model, raw)
    for fields, for_task, fn in RULES:
        if _applies(for_task, task) and all(_usable(f, bad) for f in fields):
            yield from fn(cfg)
    if task != "llm":
        yield from _llm_only_keys(model, raw, task)


def enforce_rules(cfg: BaseModel) -> None:
    """Every rule of the config's task on a config the schema accepted; raise them all as one ValidationError."""
    issues = [issue for _, for_task, fn in RULES if _applies(for_task, cfg.task) for issue in fn(cfg)]
    if issues:
        raise _validation_error(type(cfg).__name__, RULE_ERROR, issues)


def _validation_error(title: str, kind: str, issues: list[Issue]) -> ValidationError:
    details = [
        # The message goes in through the context: a template would read its braces as placeholders.
        InitErrorDetails(type=PydanticCustomError(kind, "{message}", {"message": message}), loc=path, input=None)
        for path, message in issues
    ]
    return ValidationError.from_exception_data(title, details)


# --- every task ------------------------------------------------------------------------------------------


@rule("hub")
def _push_needs_repo(cfg) -> Iterator[Issue]:
    if cfg.hub.push_to_hub and not cfg.hub.repo_id:
        yield ("hub", "repo_id"), "`hub.push_to_hub: true` needs `hub.repo_id`"


@rule("training_args.eval_strategy", "training_args.eval_steps")
def _eval_steps(cfg) -> Iterator[Issue]:
    args = cfg.training_args
    if args.eval_strategy == "steps" and not args.eval_steps:
        yield ("training_args", "eval_steps"), "`training_args.eval_strategy: steps` needs `training_args.eval_steps`"


@rule("training_args.batch_size", "training_args.target_batch_size", "training_args.gradient_accumulation")
def _batch_auto(cfg) -> Iterator[Issue]:
    """`batch_size: auto` sets gradient_accumulation itself, to keep target_batch_size samples per step."""
    args = cfg.training_args
    if args.batch_size != "auto" and args.target_batch_size is not None:
        yield (
            ("training_args", "target_batch_size"),
            "`training_args.target_batch_size` is read only with `training_args.batch_size: auto` (the samples per "
            "optimizer step it keeps); with a number, set gradient_accumulation",
        )
    if args.batch_size == "auto" and "gradient_accumulation" in args.model_fields_set:
        yield (
            ("training_args", "gradient_accumulation"),
            "with `training_args.batch_size: auto` the run sets gradient_accumulation (batch_size x "
            "gradient_accumulation = target_batch_size); give the samples per optimizer step as "
            "`training_args.target_batch_size` instead",
        )


def typed_optimizer_args(name: str, given: Any) -> BaseModel:
    """`optimizer_args` as the typed arguments of optimizer `name` (the optimizer table's model for it).

    Raises a ValidationError whose issues sit at their keys inside `optimizer_args`, each message saying
    which optimizer it is about. The config's `training_args` calls this in its validation.
    """
    spec = OPTIMIZERS[name]
    if isinstance(given, spec.args):
        return given
    try:
        return spec.args.model_validate(given)
    except ValidationError as exc:
        raise _validation_error(
            "optimizer_args", OPTIMIZER_ARGS_ERROR, list(_optimizer_args_issues(name, exc))
        ) from None


def _optimizer_args_issues(name: str, exc: ValidationError) -> Iterator[Issue]:
    spec = OPTIMIZERS[name]
    errors = without_members(exc.errors(), spec.args)
    # A tuple given too few values fails once per absent item: report it once, at the tuple.
    absent = Counter(e["loc"][:-1] for e in errors if _absent_item(e))
    for err in errors:
        loc = tuple(err["loc"])
        if _absent_item(err):
            if err["loc"][:-1] in absent:
                got = len(err["input"]) if isinstance(err["input"], (list, tuple)) else 1
                yield (
                    loc[:-1],
                    f"expects {got + absent.pop(err['loc'][:-1])} values, got {got} (optimizer `{name}`)",
                )
        elif err["type"] == "extra_forbidden":
            key, known = str(err["loc"][-1]), spec.args.model_fields
            hint = (
                f" (set `training_args.{key}` instead)" if key in ("lr", "weight_decay") else did_you_mean(key, known)
            )
            yield loc, f"`{name}` takes no argument `{key}`{hint}; it takes: {', '.join(known)}"
        else:
            yield loc, f"{plain(err, spec.args)} (optimizer `{name}`)"


def _absent_item(err: dict) -> bool:
    return err["type"] == "missing" and isinstance(err["loc"][-1], int)


@rule("distributed")
def _distributed(cfg) -> Iterator[Issue]:
    dist = cfg.distributed
    for section in ("fsdp", "deepspeed"):
        if getattr(dist, section) is not None and dist.strategy != section:
            yield (
                ("distributed", section),
                f"`distributed.{section}` options given but `distributed.strategy` is `{dist.strategy}`",
            )
    if dist.machine_rank >= dist.num_machines:
        yield (
            ("distributed", "machine_rank"),
            f"`distributed.machine_rank` ({dist.machine_rank}) must be below `distributed.num_machines` "
            f"({dist.num_machines})",
        )
    if dist.num_machines > 1 and not dist.main_process_ip:
        yield ("distributed", "main_process_ip"), "`distributed.num_machines` > 1 needs `distributed.main_process_ip`"


@rule("distributed", "training_args.gradient_checkpointing")
def _two_recomputations(cfg) -> Iterator[Issue]:
    fsdp = cfg.distributed.fsdp
    if fsdp is not None and fsdp.activation_checkpointing and cfg.training_args.gradient_checkpointing:
        yield (
            ("distributed", "fsdp", "activation_checkpointing"),
            "`distributed.fsdp.activation_checkpointing` and `training_args.gradient_checkpointing` both "
            "recompute activations; enable one of them",
        )


@rule("distributed", "training_args.optimizer")
def _factored_optimizer_needs_whole_matrices(cfg) -> Iterator[Issue]:
    optimizer = cfg.training_args.optimizer
    flattened = _flattening(cfg.distributed)
    if flattened and OPTIMIZERS[optimizer].factored:
        yield (
            ("training_args", "optimizer"),
            f"`training_args.optimizer: {optimizer}` cannot run under {flattened}, which would turn CAME's "
            "factored statistics off. Use FSDP2 (`strategy: fsdp`, `fsdp.version: 2`) or `ddp`, or "
            "`optimizer: fused_adam` / `adamw_torch`",
        )


def _flattening(dist) -> str | None:
    """The setting that hands parameters to the optimizer as flattened 1-D buffers, if any.

    CAME would silently stop factoring its statistics on them (and lose its memory saving). FSDP2 keeps
    each parameter's shape (dim-0 shards), which the CAME optimizers handle exactly.
    """
    if dist.strategy == "deepspeed":
        return "`distributed.strategy: deepspeed` (ZeRO flattens the parameters)"
    if dist.strategy == "fsdp" and dist.fsdp is not None and dist.fsdp.version == 1:
        return "`distributed.strategy: fsdp` with `distributed.fsdp.version: 1` (FSDP1 flattens the parameters)"
    return None


# --- llm, seq2seq and vlm: the LoRA adapter (`peft:`) ----------------------------------------------------


@rule("distributed.strategy", "peft", task=PEFT_TASKS)
def _merge_needs_whole_weights(cfg) -> Iterator[Issue]:
    strategy = cfg.distributed.strategy
    if strategy in ("fsdp", "deepspeed") and cfg.uses_peft and cfg.peft.merge_adapter:
        # Sharded weights: merging on one rank would merge a shard, not the model.
        yield (
            ("peft", "merge_adapter"),
            f"`peft.merge_adapter` cannot run under `distributed.strategy: {strategy}` (the weights are "
            "sharded); merge the saved adapter afterwards, or use `strategy: ddp`",
        )


@rule("peft", task=PEFT_TASKS)
def _peft_needs_lora(cfg) -> Iterator[Issue]:
    peft = cfg.peft
    if peft is None or peft.enabled:
        return
    if peft.quantization:
        yield ("peft", "quantization"), "`peft.quantization` needs `peft.enabled: true` (QLoRA trains an adapter)"
    if peft.merge_adapter:
        yield ("peft", "merge_adapter"), "`peft.merge_adapter` needs `peft.enabled: true`"
    for key in ("use_dora", "use_rslora", "pissa_niter", "loraplus_lr_ratio"):
        if getattr(peft, key):
            yield ("peft", key), f"`peft.{key}` needs `peft.enabled: true` (it is a setting of the LoRA adapter)"
    if peft.init != "default":
        yield ("peft", "init"), f"`peft.init: {peft.init}` needs `peft.enabled: true` (it starts the LoRA adapter)"


# PiSSA and OLoRA move part of each base weight into the adapter (the base keeps the residual).
RESIDUAL_INITS = ("pissa", "olora")


@rule("peft", task=PEFT_TASKS)
def _adapter_init(cfg) -> Iterator[Issue]:
    peft = cfg.peft
    if peft is None or not peft.enabled:
        return
    if peft.pissa_niter is not None and peft.init != "pissa":
        yield (
            ("peft", "pissa_niter"),
            f"`peft.pissa_niter` sets PiSSA's fast SVD; it needs `peft.init: pissa` (got `peft.init: {peft.init}`)",
        )
    if peft.init not in RESIDUAL_INITS:
        return
    if peft.use_dora:
        yield (
            ("peft", "init"),
            f"`peft.init: {peft.init}` cannot be combined with `peft.use_dora: true`: the trained adapter is saved "
            "converted to a plain LoRA adapter on the unchanged base model, which has no place for DoRA's "
            "magnitudes; use one of them",
        )
    if peft.quantization:
        yield (
            ("peft", "init"),
            f"`peft.init: {peft.init}` cannot start from a `peft.quantization: {peft.quantization}` base model: it "
            "decomposes the full-precision weights and keeps their residual in the base; train unquantized, or "
            "use `peft.init: default`",
        )


@rule("peft", "distributed.strategy", task=PEFT_TASKS)
def _residual_init_needs_whole_weights(cfg) -> Iterator[Issue]:
    strategy = cfg.distributed.strategy
    if cfg.uses_peft and cfg.peft.init in RESIDUAL_INITS and strategy in ("fsdp", "deepspeed"):
        yield (
            ("peft", "init"),
            f"`peft.init: {cfg.peft.init}` cannot run under `distributed.strategy: {strategy}`: the adapter is "
            "converted to plain LoRA against its initial value when saved, which needs whole weights on one "
            "process; use `strategy: ddp`, or `peft.init: default`",
        )


# Optimizers that make their own parameter groups (low-rank projections, fused backward updates): LoRA+'s
# groups (B matrices at a higher rate) cannot be handed to them.
OWN_PARAM_GROUPS = ("galore_", "apollo_", "lomo", "adalomo")


@rule("peft", "training_args.optimizer", task=PEFT_TASKS)
def _loraplus_optimizer(cfg) -> Iterator[Issue]:
    optimizer = cfg.training_args.optimizer
    if cfg.uses_peft and cfg.peft.loraplus_lr_ratio is not None and optimizer.startswith(OWN_PARAM_GROUPS):
        yield (
            ("peft", "loraplus_lr_ratio"),
            f"`peft.loraplus_lr_ratio` cannot run with `training_args.optimizer: {optimizer}`, which makes its own "
            "parameter groups; use another optimizer (adamw_torch, came, fused_adam, ...), or remove "
            "`peft.loraplus_lr_ratio`",
        )


# --- llm -------------------------------------------------------------------------------------------------


@rule("trainer", "data.column_mapping", task="llm")
def _llm_columns(cfg) -> Iterator[Issue]:
    trainer, mapping = cfg.trainer, cfg.data.column_mapping
    groups = TRAINERS[trainer].columns
    yield from _mapping_rules(mapping, TRAINERS[trainer].all_columns, f"`trainer: {trainer}`")
    if not mapping:
        return
    present = [group for group in groups if any(c in mapping for c in group)]
    if len(present) > 1:
        either = " or ".join(f"`{'`, `'.join(group)}`" for group in groups)
        yield ("data", "column_mapping"), f"`trainer: {trainer}` takes {either} in `data.column_mapping`, not both"
    elif len(groups) == 1:
        missing = [c for c in groups[0] if c not in mapping]
        if missing:
            yield (
                ("data", "column_mapping"),
                f"`trainer: {trainer}` needs `{'`, `'.join(missing)}` in `data.column_mapping`",
            )


@rule("base_model", "gguf_file", "peft", task="llm")
def _gguf_file(cfg) -> Iterator[Issue]:
    if cfg.gguf is not None and cfg.uses_peft and cfg.peft.quantization:
        yield (
            ("peft", "quantization"),
            "`peft.quantization` cannot load a GGUF base model (it is de-quantized on loading); remove one",
        )
    if cfg.gguf_file is None:
        return
    if not cfg.gguf_file.lower().endswith(".gguf"):
        yield ("gguf_file",), f"`gguf_file` must name a .gguf file, got `{cfg.gguf_file}`"
    if cfg.base_model.lower().endswith(".gguf"):
        yield (
            ("gguf_file",),
            "`base_model` names a .gguf file already; give either that file as `base_model`, or its folder "
            "as `base_model` and the file name as `gguf_file`",
        )


@rule("trainer", "peft", "training_args.beta", task="llm")
def _residual_init_reference(cfg) -> Iterator[Issue]:
    """DPO, KTO and a sampling trainer with a KL term compare with the base model, which with LoRA is the model
    with its adapter switched off: after PiSSA or OLoRA that is the residual, not the base model."""
    if not cfg.uses_peft or cfg.peft.init not in RESIDUAL_INITS:
        return
    spec = TRAINERS[cfg.trainer]
    kl = "rewards" in spec.fields and (cfg.training_args.beta or 0) > 0
    if spec.reference_model or kl:
        yield (
            ("peft", "init"),
            f"`peft.init: {cfg.peft.init}` cannot train `trainer: {cfg.trainer}`"
            + (" with `training_args.beta` above 0" if kl else "")
            + ": its reference is the model with the adapter switched off, which after "
            f"{cfg.peft.init} is only the residual of the base weights; use `peft.init: default` or `gaussian`",
        )


# GRPO's built-in reward functions (autotrain/trainers/llm/rewards.py), each with the column it reads.
BUILTIN_REWARDS = {"answer_match": "answer", "exact_match": "answer"}
GRPO_DEFAULT_GENERATIONS = 8  # TRL's GRPOConfig default
GRPO_DEFAULT_REWARDS = ("answer_match",)  # training_args.rewards: null


@rule("trainer", "training_args", task="llm")
def _trainer_fields(cfg) -> Iterator[Issue]:
    args, spec = cfg.training_args, TRAINERS[cfg.trainer]
    for key in trainer_fields():
        value = getattr(args, key)
        # None / false / the default: left alone (padding_free is on by default and harmless elsewhere).
        if key not in spec.fields and value and value != type(args).model_fields[key].default:
            yield (
                ("training_args", key),
                f"`training_args.{key}` applies to {used_by(key).replace(' / ', '/')}, not `trainer: {spec.name}`",
            )
    for key in spec.positive:
        if getattr(args, key) == 0:
            yield ("training_args", key), f"`training_args.{key}` must be above 0 for `trainer: {spec.name}`"
    smallest = args.samples_per_step if args.batch_size == "auto" else args.batch_size
    if smallest < spec.min_batch_size:
        which = "target_batch_size" if args.batch_size == "auto" else "batch_size"
        yield (
            ("training_args", which),
            f"`trainer: {spec.name}` needs `training_args.{which}` of at least {spec.min_batch_size} (per "
            f"device; got {smallest}): its loss compares the samples of each batch",
        )
    if args.max_prompt_length is not None and args.max_prompt_length >= args.max_length:
        yield (
            ("training_args", "max_prompt_length"),
            f"`training_args.max_prompt_length` ({args.max_prompt_length}) must be below "
            f"`training_args.max_length` ({args.max_length})",
        )


@rule("trainer", "training_args.cross_entropy", task="llm")
def _kernel_losses(cfg) -> Iterator[Issue]:
    """Liger's and Cut Cross-Entropy's kernels compute a next-token loss from the hidden states and the head;
    a trainer that needs per-token log-probabilities takes `chunked` or `full`."""
    asked, spec = cfg.training_args.cross_entropy, TRAINERS[cfg.trainer]
    if asked in KERNEL_LOSSES and "cross_entropy" in spec.fields and not spec.kernel_losses:
        takers = "/".join(name for name, other in TRAINERS.items() if other.kernel_losses)
        yield (
            ("training_args", "cross_entropy"),
            f"`cross_entropy: {asked}` computes the loss of {takers}; `trainer: {spec.name}` takes chunked or full",
        )


@rule("trainer", "training_args", "data.column_mapping", task="llm")
def _sampled_completions(cfg) -> Iterator[Issue]:
    """Rewards that exist (or look importable), one weight each, and whole groups of completions per batch:
    for every trainer that samples scored completions (reads `rewards` and `num_generations`)."""
    if "rewards" not in TRAINERS[cfg.trainer].fields:
        return
    args = cfg.training_args
    rewards = args.rewards or list(GRPO_DEFAULT_REWARDS)
    for i, name in enumerate(rewards):
        if name not in BUILTIN_REWARDS and not _reward_reference(name):
            yield (
                ("training_args", "rewards", i),
                f"unknown reward `{name}`{did_you_mean(name, BUILTIN_REWARDS)}; use one of "
                f"{', '.join(BUILTIN_REWARDS)}, or your own as `module:function` or `path/to/file.py:function`",
            )
    if args.reward_weights is not None and len(args.reward_weights) != len(rewards):
        yield (
            ("training_args", "reward_weights"),
            f"{len(args.reward_weights)} weight(s) for {len(rewards)} reward(s) ({', '.join(rewards)}): give one "
            "weight per reward",
        )
    generations = args.num_generations or GRPO_DEFAULT_GENERATIONS
    per_step = args.samples_per_step
    if per_step % generations:
        fix = -(-per_step // generations) * generations
        given = (
            f"target_batch_size ({per_step})"
            if args.batch_size == "auto"
            else f"batch_size x gradient_accumulation ({args.batch_size} x {args.gradient_accumulation} = {per_step})"
        )
        yield (
            ("training_args", "num_generations"),
            f"{given} "
            f"must be a multiple of num_generations ({generations}): each prompt's {generations} completions are "
            f"scored against each other in one batch; e.g. make it {fix}, or lower num_generations",
        )
    if args.eval_batch_size is not None and args.eval_batch_size % generations:
        yield (
            ("training_args", "eval_batch_size"),
            f"eval_batch_size ({args.eval_batch_size}) must be a multiple of num_generations ({generations}), "
            "or null (batch_size rounded up to one)",
        )


def _reward_reference(name: str) -> bool:
    """`module.path:function` or `some/file.py:function` (imported when the run starts, not here)."""
    where, _, function = name.rpartition(":")
    if not where or not function.isidentifier():
        return False
    if where.endswith(".py"):
        return True
    return all(part.isidentifier() for part in where.split("."))


# --- every task but llm: the columns of the task table ----------------------------------------------------


@rule("task", "data.column_mapping")
def _task_columns(cfg) -> Iterator[Issue]:
    if cfg.task != "llm":  # the LLM's columns depend on its trainer (above)
        allowed = TASKS[cfg.task].all_columns
        yield from _mapping_rules(cfg.data.column_mapping, allowed, f"`task: {cfg.task}`")


# The tasks whose `data.labels` name their labels in id order, and what one of those labels is.
_LABELS = {"token-classification": "tag", "object-detection": "category"}


@rule("data.labels", task=tuple(_LABELS))
def _distinct_labels(cfg) -> Iterator[Issue]:
    labels = cfg.data.labels or []
    repeated = sorted({name for name in labels if labels.count(name) > 1})
    if repeated:
        yield ("data", "labels"), f"each {_LABELS[cfg.task]} once: `{'`, `'.join(repeated)}` appear(s) more than once"


def _llm_only_keys(model: type[BaseModel], raw: dict, task: str) -> Iterator[Issue]:
    """Keys of the LLM config in another task's: say which task they belong to, not just "unknown key"."""
    for key in LLM_ONLY_KEYS:
        if key in raw and key not in model.model_fields:  # seq2seq has `peft` too, sentence-transformers `trainer`
            yield (key,), f"`{key}` applies to `task: llm` only, not `task: {task}`"
    data = raw.get("data")
    if isinstance(data, dict) and "chat_template" in data:
        yield ("data", "chat_template"), f"`data.chat_template` applies to `task: llm` only, not `task: {task}`"
    args = raw.get("training_args")
    if task == "image-classification" and isinstance(args, dict) and "max_length" in args:
        yield (
            ("training_args", "max_length"),
            "`training_args.max_length` applies to text (llm, text-classification), not `task: image-classification`:"
            " images are sized by the model's image processor; remove it",
        )


def _mapping_rules(mapping: dict, allowed: tuple[str, ...], context: str) -> Iterator[Issue]:
    for key in mapping:
        if key not in allowed:
            yield (
                ("data", "column_mapping", key),
                f"`{key}` is not a column for {context}{did_you_mean(key, allowed)}; expected: {', '.join(allowed)}",
            )
