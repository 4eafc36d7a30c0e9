"""The run plan: every decision the hardware and the config make together, taken once.

A validated config says what was asked (`mixed_precision: auto`, `optimizer: came_8bit`,
`num_processes: auto`); the plan says what this machine will do (bf16 on cuda, the optimizer class and
its arguments, 8 processes, the TrainingArguments fields). Builders read the plan and never decide these
again; the runner records it beside the config in `autotrain.yaml` and `run.json`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from autotrain.config.base import TaskConfig
from autotrain.config.tasks import TASKS
from autotrain.errors import UserInputError
from autotrain.hints import install_hint
from autotrain.training.adapter import AdapterPlan, resolve_adapter
from autotrain.training.precision import Precision, resolve_precision


def visible_gpus() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def processes_per_machine(num_processes: int | str) -> int:
    if num_processes == "auto":
        return max(1, visible_gpus())
    return int(num_processes)


def world_size(cfg: TaskConfig) -> int:
    dist = cfg.distributed
    return processes_per_machine(dist.num_processes) * dist.num_machines


@dataclass(frozen=True)
class OptimizerPlan:
    """A bundled optimizer goes to the Trainer as `optimizer_cls_and_kwargs` (its param grouping still
    applies); any other name becomes TrainingArguments settings (`optim`, betas, ...)."""

    name: str
    kwargs: dict[str, Any] = field(default_factory=dict)  # a bundled optimizer's constructor arguments
    hf_settings: dict[str, Any] = field(default_factory=dict)

    @property
    def cls(self) -> type | None:
        """A bundled optimizer's class (the optimizer table names it; importing it imports torch)."""
        from autotrain.optimizers.table import OPTIMIZERS

        spec = OPTIMIZERS[self.name]
        return spec.load_class() if spec.bundled else None

    @property
    def cls_and_kwargs(self) -> tuple[type, dict[str, Any]] | None:
        cls = self.cls
        return (cls, dict(self.kwargs)) if cls is not None else None

    def record(self) -> dict[str, Any]:
        from autotrain.optimizers.table import OPTIMIZERS

        spec = OPTIMIZERS[self.name]
        shown: dict[str, Any] = {"name": self.name}
        if spec.bundled:
            shown["class"] = spec.target.replace(":", ".")
            shown["kwargs"] = self.kwargs
        else:
            shown["training_arguments"] = self.hf_settings
        return shown


@dataclass(frozen=True)
class BatchChoice:
    """`training_args.batch_size: auto` decided: the per-device batch, the accumulation that keeps the
    samples per optimizer step asked for, and why (autotrain.training.batch_size.choose_batch)."""

    batch_size: int
    gradient_accumulation: int
    why: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunPlan:
    precision: Precision
    asked_precision: str
    processes_per_machine: int
    num_machines: int
    effective_batch_size: int
    optimizer: OptimizerPlan
    training_args: dict[str, Any]  # TrainingArguments fields; a builder adds only its trainer's own
    problems: tuple[str, ...] = ()  # what this machine cannot do as asked (autotrain.run.preflight says it)
    length_grouped: bool = False  # batches of similar length in random order (see `groups_by_length`)
    padding_free: str = ""  # "rows", "one sequence" or "" (padded; see `padding_free`)
    load_dtype: str = "float32"  # the torch dtype the model's weights are loaded in (see `load_dtype`)
    attn_implementation: str = ""  # the attention kernel an LLM loads with (see `attention`; "" for classifiers)
    cross_entropy: str = ""  # how an LLM trainer computes its next-token loss (see `cross_entropy`; "": its own)
    notes: tuple[str, ...] = ()  # what the plan chose instead of what was asked, and why (said before the run)
    dtypes: dict[str, str] = field(default_factory=dict)  # of trained weights, gradients, state (`tensor_dtypes`)
    # (field, planned, used, why): what a builder changed once the model was loaded (see `refine`)
    refined: tuple[tuple[str, Any, Any, str], ...] = ()
    adapter: AdapterPlan | None = None  # the LoRA adapter (method, scale, init, LoRA+); None: full fine-tune
    batch_size: int = 1  # per device and forward pass (`batch_size: auto` resolved)
    gradient_accumulation: int = 1
    batch_choice: dict[str, Any] = field(default_factory=dict)  # how `batch_size: auto` was decided
    # The data's sources and their shares of an epoch (see `data_plan`); once prepared, rows of each too.
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def world_size(self) -> int:
        return self.processes_per_machine * self.num_machines

    def refine(self, why: str, **changes: Any) -> RunPlan:
        """A new plan with `changes`, each recorded beside what was planned and why.

        The one way a builder changes the plan: a check on the loaded model that overrules a decision
        (a model that would attend across padding-free rows keeps padded batches). The runner records the
        plan the builder returns.
        """
        notes = tuple((key, getattr(self, key), value, why) for key, value in changes.items())
        return dataclasses.replace(self, **changes, refined=self.refined + notes)

    def record(self) -> dict[str, Any]:
        """What was asked beside what was resolved, as plain JSON data: saved in autotrain.yaml and run.json."""
        import json

        return json.loads(json.dumps(self._record(), default=str))

    def _record(self) -> dict[str, Any]:
        return {
            "mixed_precision": {"asked": self.asked_precision, "resolved": self.precision.mode},
            "device": self.precision.device,
            "world_size": self.world_size,
            "processes_per_machine": self.processes_per_machine,
            "effective_batch_size": self.effective_batch_size,
            "batch_size": self.batch_size,
            "gradient_accumulation": self.gradient_accumulation,
            **({"batch_size_auto": self.batch_choice} if self.batch_choice else {}),
            "optimizer": self.optimizer.record(),
            "training_arguments": {k: v for k, v in self.training_args.items() if k != "output_dir"},
            "length_grouped_batches": self.length_grouped,
            "padding_free": self.padding_free,
            "load_dtype": self.load_dtype,
            "attn_implementation": self.attn_implementation,
            "cross_entropy": self.cross_entropy,
            "notes": list(self.notes),
            "dtypes": self.dtypes,
            "adapter": self.adapter.record() if self.adapter is not None else None,
            "refined_after_loading": [
                {"field": key, "planned": planned, "used": used, "why": why} for key, planned, used, why in self.refined
            ],
            **({"data": self.data} if self.data else {}),
        }


def resolve_plan(cfg: TaskConfig, device: str | None = None, batch: BatchChoice | None = None) -> RunPlan:
    """Decide precision, topology, optimizer and TrainingArguments for `cfg` on this machine.

    What this machine cannot do as asked (fp16 without CUDA, ...) is kept in `problems` (the plan then
    falls back to fp32), so that the preflight (autotrain.run.preflight) reports it with every other problem at once.
    `batch`: what `training_args.batch_size: auto` became (the memory estimate decides it, in the run layer:
    autotrain.run.fit.planned); without it an `auto` batch is planned as one sample per forward pass.
    """
    args = cfg.training_args
    problems: tuple[str, ...] = ()
    try:
        precision = resolve_precision(args.mixed_precision, device)
    except UserInputError as exc:
        problems, precision = (str(exc),), resolve_precision("no", device)
    per_machine = processes_per_machine(cfg.distributed.num_processes)
    optimizer = resolve_optimizer(args.optimizer, args.optimizer_args, args.lr, args.max_steps)
    attn, batching, notes = attention(cfg, precision)
    batch = batch or fixed_batch(cfg)
    machines = cfg.distributed.num_machines
    loss, loss_notes = cross_entropy(cfg, per_machine * machines)
    return RunPlan(
        precision=precision,
        asked_precision=args.mixed_precision,
        processes_per_machine=per_machine,
        num_machines=cfg.distributed.num_machines,
        effective_batch_size=batch.batch_size * batch.gradient_accumulation * per_machine * machines,
        optimizer=optimizer,
        training_args=training_arguments(cfg, precision, optimizer, batch),
        problems=problems,
        length_grouped=groups_by_length(cfg),
        padding_free=batching,
        load_dtype=load_dtype(cfg, precision),
        attn_implementation=attn,
        cross_entropy=loss,
        notes=notes + loss_notes + data_notes(cfg),
        dtypes=tensor_dtypes(cfg, optimizer, load_dtype(cfg, precision)),
        adapter=resolve_adapter(cfg),
        batch_size=batch.batch_size,
        gradient_accumulation=batch.gradient_accumulation,
        batch_choice=batch.why,
        data=data_plan(cfg),
    )


def _prepared(cfg: TaskConfig) -> bool:
    """The LLM trainers whose data autotrain prepares and caches itself (autotrain.data.prepared)."""
    from autotrain.config.llm import PREPARED

    return cfg.task == "llm" and cfg.trainer in PREPARED


def data_plan(cfg: TaskConfig) -> dict[str, Any]:
    """LLM data that autotrain prepares itself: each source and its share of an epoch's rows, and whether the
    rows are streamed (the builder adds the rows of each source once they are prepared)."""
    if not _prepared(cfg):
        return {}
    sources = cfg.data.split_sources()
    shares = cfg.data.shares()
    listed = [{"path": s.path, "split": s.split, "share": round(x, 6)} for s, x in zip(sources, shares, strict=True)]
    return {"streaming": cfg.data.streaming, "sources": listed}


def data_notes(cfg: TaskConfig) -> tuple[str, ...]:
    """What a streaming run cannot offer, said before it starts."""
    if cfg.task != "llm" or not getattr(cfg.data, "streaming", False):
        return ()
    return (
        "data.streaming: rows are prepared as training reads them, so the rows that max_length leaves without "
        "a trained token are left out as they come, not counted before training (`--preview` counts them in "
        "the first rows); the rows are shuffled in a buffer of 1,000, not over the whole data; nothing is "
        "cached for the next run",
    )


def fixed_batch(cfg: TaskConfig) -> BatchChoice:
    """The batch a config gives as a number; `auto` not yet decided: one sample per forward pass, with as many
    passes per step as the samples per step asked for (`target_batch_size`)."""
    args = cfg.training_args
    if args.batch_size == "auto":
        return BatchChoice(1, args.samples_per_step)
    return BatchChoice(args.batch_size, args.gradient_accumulation)


def tensor_dtypes(cfg: TaskConfig, optimizer: OptimizerPlan, loaded: str) -> dict[str, str]:
    """What the trained weights, their gradients and the optimizer's state are kept in (autocast computes in
    the half dtype from fp32 weights). The bundled optimizers keep fp32 (or 8-bit) state whatever the
    weights, and fp32 master weights of half-precision ones unless `master_weights: false`; torch's keep
    their state in the weights' dtype."""
    from autotrain.optimizers.table import OPTIMIZERS

    spec = OPTIMIZERS[optimizer.name]
    trained = "float32" if getattr(cfg, "uses_peft", False) else loaded  # PEFT keeps adapter weights in fp32
    state = trained if not spec.bundled else "float32"
    state = "8-bit moments, float32 statistics" if spec.state_quantized else state
    dtypes = {"weights": trained, "gradients": trained, "optimizer_state": state}
    parts = [kwargs for _, kwargs in spec.part_kwargs(optimizer.kwargs)]
    if spec.bundled and trained != "float32" and all(part.get("master_weights", True) for part in parts):
        dtypes["master_weights"] = "float32"
    return dtypes


def load_dtype(cfg: TaskConfig, precision: Precision) -> str:
    """The dtype the weights are loaded in (a torch dtype's name; inference loads a run's model in it too).

    Classifiers: fp32 (small models; mixed precision runs under autocast). LLMs: LoRA trains on a frozen
    base, kept in the compute dtype; a full fine-tune keeps fp32 weights unless bf16 on a GPU (fp16 AMP
    needs fp32 master weights; CPU bf16 runs fp32 weights under autocast).
    """
    if cfg.task not in ("llm", "vlm") or precision.mode == "no":  # vlm: a language model with an image
        return "float32"
    half = "bfloat16" if precision.mode == "bf16" else "float16"
    if cfg.uses_peft and precision.device != "cpu":
        return half
    if precision.mode == "bf16" and precision.device == "cuda":
        return half
    return "float32"


def resolve_optimizer(name: str, optimizer_args, lr: float, max_steps: int | None = None) -> OptimizerPlan:
    """`optimizer_args`: the typed arguments of a validated config (or a plain mapping, validated here)."""
    from autotrain.optimizers.registry import hf_optimizer_settings, optimizer_cls_and_kwargs
    from autotrain.optimizers.table import OPTIMIZERS

    if OPTIMIZERS[name].bundled:
        _, kwargs = optimizer_cls_and_kwargs(name, optimizer_args)
        for _, part in OPTIMIZERS[name].part_kwargs(kwargs):
            _give_run_length(part, max_steps)
        # The Trainer passes param groups (with weight_decay) but not lr on this path.
        return OptimizerPlan(name, kwargs={**kwargs, "lr": lr})
    return OptimizerPlan(name, hf_settings=hf_optimizer_settings(name, optimizer_args))


def _give_run_length(kwargs: dict[str, Any], max_steps: int | None) -> None:
    """A CAME variant with `compile: null` (auto) weighs compiling each group of same-shaped params against
    the run's length (what a group's compilation costs is paid back in proportion to its size and the
    steps left: `came_compile.compiles`), so it is given `total_steps`, recorded with the plan. A run given in
    epochs has no known length here (auto then compiles the groups of 2**20 elements or more)."""
    if max_steps is not None and "compile" in kwargs and kwargs["compile"] is None:
        kwargs["total_steps"] = max_steps


def has_eval(cfg: TaskConfig) -> bool:
    """Classifiers always hold out a validation split (`valid_split` or `valid_size`); LLMs only when asked."""
    return cfg.task != "llm" or cfg.data.has_valid


def training_arguments(
    cfg: TaskConfig, precision: Precision, optimizer: OptimizerPlan, batch: BatchChoice | None = None
) -> dict[str, Any]:
    """The TrainingArguments fields autotrain controls, for any Trainer/TRL config class."""
    args = cfg.training_args
    batch = batch or fixed_batch(cfg)
    eval_strategy = args.eval_strategy if has_eval(cfg) else "no"
    kwargs: dict[str, Any] = {
        "output_dir": cfg.project_name,
        "num_train_epochs": args.epochs,
        "max_steps": args.max_steps or -1,
        "per_device_train_batch_size": batch.batch_size,
        "per_device_eval_batch_size": args.eval_batch_size or batch.batch_size,
        "gradient_accumulation_steps": batch.gradient_accumulation,
        "learning_rate": args.lr,
        "warmup_steps": args.warmup_ratio,  # transformers >= 5: a float below 1 is a ratio of the total steps
        "weight_decay": args.weight_decay,
        "max_grad_norm": args.max_grad_norm or 0.0,
        "lr_scheduler_type": args.scheduler,
        "seed": args.seed,
        "data_seed": args.seed,
        "gradient_checkpointing": args.gradient_checkpointing,
        "logging_steps": args.logging_steps,
        "logging_first_step": True,
        "save_strategy": "steps" if args.save_steps else "epoch",
        # Rotation is AtomicCheckpoints' (complete checkpoints only), not the Trainer's.
        "save_total_limit": None,
        "eval_strategy": eval_strategy,
        "report_to": [] if cfg.log == "none" else [cfg.log],
        "dataloader_num_workers": args.dataloader_num_workers,
        "disable_tqdm": True,  # autotrain draws its own progress display
        **precision.training_args,
        **optimizer.hf_settings,
    }
    if args.save_steps:
        kwargs["save_steps"] = args.save_steps
    if eval_strategy == "steps":
        kwargs["eval_steps"] = args.eval_steps
    if args.gradient_checkpointing:
        kwargs["gradient_checkpointing_kwargs"] = {"use_reentrant": False}
    if cfg.task != "llm":
        _keep_best_model(cfg, kwargs)
    elif _prepared(cfg):  # autotrain prepared the rows: what the model takes, read through a transform
        kwargs["remove_unused_columns"] = False
    return kwargs


def groups_by_length(cfg: TaskConfig) -> bool:
    """Batches of samples of similar length (`length_grouping`, for the trainers that read it), padded to
    each batch's longest sample (TRL's collator): as many batches per epoch as random ones, about as many
    tokens in each, in random order (autotrain.training.batching). Packed blocks all have the same length.

    The other LLM trainers keep random batches: their datasets have no `input_ids` to sort by (preference
    pairs), or blocks of one length.
    """
    args = cfg.training_args
    return _reads(cfg, "length_grouping") and args.length_grouping and not args.packing


def _reads(cfg: TaskConfig, field: str) -> bool:
    """The config's trainer reads `training_args.<field>` (the trainer table says which do)."""
    from autotrain.config.trainers import TRAINERS

    return cfg.task == "llm" and field in TRAINERS[cfg.trainer].fields


def padding_free(cfg: TaskConfig, precision: Precision) -> str:
    """How batches drop their padding: "one sequence", "rows", or "" (padded batches).

    flash_attention_2 on CUDA takes the sample boundaries of one flattened sequence from the position ids
    and computes no padding at all. Other kernels get a mask built from the position ids, as long as the
    sequence it covers: the samples are packed into rows as long as the batch's longest sample
    (autotrain.training.batching.pack_rows), so attention costs no more than with padding.
    """
    args = cfg.training_args
    if not (_reads(cfg, "padding_free") and args.padding_free and not args.packing):
        return ""
    return "one sequence" if precision.device == "cuda" and cfg.attn_implementation == "flash_attention_2" else "rows"


def flash_attention_runs(precision: Precision) -> bool:
    """Whether flash_attention_2 can run here: the flash-attn package (CUDA kernels) and a CUDA device."""
    import importlib.util

    return precision.device == "cuda" and importlib.util.find_spec("flash_attn") is not None


def attention(cfg: TaskConfig, precision: Precision) -> tuple[str, str, tuple[str, ...]]:
    """(attention kernel, padding-free mode, notes). flash_attention_2 where it cannot run (no flash-attn,
    no CUDA) falls back to sdpa only in a padding-free run, with a note: its batches then pack rows, the
    same samples and the same loss without padding (the loaded model is checked to keep them apart). A run
    with padded batches asked for the kernel itself: the preflight refuses it instead."""
    asked = getattr(cfg, "attn_implementation", "")
    batching = padding_free(cfg, precision)
    if asked != "flash_attention_2" or not batching or flash_attention_runs(precision):
        return asked, batching, ()
    why = "no CUDA GPU is visible" if precision.device != "cuda" else "the flash-attn package is not installed"
    return (
        "sdpa",
        "rows",
        (
            f"attn_implementation: flash_attention_2 cannot run here ({why}): attention runs sdpa and the "
            "padding-free batches pack rows instead of one sequence (the same samples and loss); for one sequence, "
            f"on a CUDA machine: {install_hint('flash-attn')}",
        ),
    )


def cross_entropy(cfg: TaskConfig, world: int) -> tuple[str, tuple[str, ...]]:
    """(how the next-token loss is computed, notes): `training_args.cross_entropy` for the trainers that read it
    ("" for the others: DPO, KTO and GRPO compute their log-probabilities with TRL's own fused LM head, a scorer
    model has no vocabulary), or `full` where the processes shard the weights (FSDP, DeepSpeed): every other way
    reads the output head's weight outside the head's own forward, which those strategies gather only there.

    The builder checks the loaded model too (autotrain.training.lm_loss.head_problem) and refines this: a model
    that post-processes its logits computes them in full."""
    if not _reads(cfg, "cross_entropy"):
        return "", ()
    asked, strategy = cfg.training_args.cross_entropy, cfg.distributed.strategy
    if asked == "full" or world == 1 or strategy == "ddp":
        return asked, ()
    return "full", (
        f"training_args.cross_entropy: {asked} reads the output head's weight outside its module, which "
        f"distributed.strategy: {strategy} shards: this run computes the full logits (cross_entropy: full)",
    )


def _keep_best_model(cfg: TaskConfig, kwargs: dict[str, Any]) -> None:
    """Classifiers: what keeping the best model and early stopping need.

    The Trainer only restores the best model from checkpoints saved at evaluation points, so saving
    follows the evaluation schedule whenever the best model is kept.
    """
    args = cfg.training_args
    evaluating = kwargs["eval_strategy"] != "no"
    if args.early_stopping is not None and not evaluating:
        raise UserInputError(
            "training_args.early_stopping needs evaluations; set training_args.eval_strategy to `epoch` or `steps`"
        )
    if args.early_stopping is not None or (args.load_best_model and evaluating):
        metric = args.early_stopping.metric if args.early_stopping is not None else "eval_loss"
        kwargs["metric_for_best_model"] = metric
        kwargs["greater_is_better"] = metric not in ("eval_loss", *TASKS[cfg.task].lower_is_better)
    if args.load_best_model and evaluating:
        kwargs["load_best_model_at_end"] = True
        kwargs["save_strategy"] = kwargs["eval_strategy"]
        if kwargs["eval_strategy"] == "steps":
            save_steps = kwargs.get("save_steps") or args.eval_steps
            kwargs["save_steps"] = save_steps if save_steps % args.eval_steps == 0 else args.eval_steps
        else:
            kwargs.pop("save_steps", None)
