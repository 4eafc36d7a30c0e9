"""Shared pieces of every task config: strict base model and the sections all tasks have."""

from __future__ import annotations

import os
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_validator,
)
from pydantic.json_schema import WithJsonSchema

from autotrain.config.tasks import TASKS
from autotrain.config.trainers import columns_help
from autotrain.fields import BatchSize, Bool, ByteSize, Float, Int, NoWord
from autotrain.optimizers.table import DEFAULT as DEFAULT_OPTIMIZER
from autotrain.optimizers.table import OPTIMIZERS

TaskName = Literal[tuple(TASKS)]  # every task of the task table
MixedPrecision = Annotated[Literal["auto", "no", "fp16", "bf16"], NoWord]
OptimizerName = Literal[tuple(OPTIMIZERS)]  # every name in the optimizer table
Scheduler = Literal[
    "linear",
    "cosine",
    "cosine_with_restarts",
    "polynomial",
    "constant",
    "constant_with_warmup",
    "inverse_sqrt",
    "reduce_lr_on_plateau",
    "cosine_with_min_lr",
    "warmup_stable_decay",
]


class StrictModel(BaseModel):
    """Unknown keys are errors (with a suggestion), and the JSON Schema says so."""

    model_config = ConfigDict(extra="forbid", validate_default=True, allow_inf_nan=False, defer_build=True)


class DataConfig(StrictModel):
    path: str = Field(description="Hub dataset id, a local file (.jsonl .json .csv .parquet) or a folder.")
    train_split: str = Field("train", description="Split (or file stem inside a folder) used for training.")
    valid_split: str | None = Field(
        None, description="Split used for evaluation; null = none (classification: see `valid_size`)."
    )
    column_mapping: dict[str, str] = Field(
        default_factory=dict,
        description=f"Task columns -> dataset columns. llm, by trainer: {columns_help()}; classification: "
        "text | image, target.",
    )

    def paths(self) -> list[tuple[str, str]]:
        """(field, path) of each place the data comes from (one; an LLM's `sources`: each)."""
        return [("data.path", self.path)] if self.path else []


class HubConfig(StrictModel):
    push_to_hub: Bool = Field(False, description="Upload the result to the Hugging Face Hub when training ends.")
    repo_id: str | None = Field(None, description="Hub repository id, e.g. `me/my-model`.")
    private: Bool = Field(True, description="Create the hub repository as private.")
    token: str | None = Field(None, description="Hub token; use `${HF_TOKEN}`. Never printed or saved.")


def _process_count(value: Any) -> Any:
    """The bounds of a number of processes, checked here: as `ge`/`le` on the `int | "auto"` field, pydantic
    would apply them to "auto" too and crash with a TypeError."""
    if isinstance(value, int) and not isinstance(value, bool) and not 1 <= value <= 1024:
        raise ValueError("must be from 1 to 1024, or `auto`")
    return value


ProcessCount = Annotated[Int | Literal["auto"], BeforeValidator(_process_count)]


class FsdpConfig(StrictModel):
    version: Literal[1, 2] = Field(2, description="FSDP version (2 = per-parameter sharding).")
    reshard_after_forward: Bool = Field(True, description="Full shard (true) or shard-grad-op (false).")
    auto_wrap: Bool = Field(True, description="Wrap each decoder layer of the model.")
    cpu_offload: Bool = Field(False, description="Keep parameters and optimizer state on the CPU.")
    activation_checkpointing: Bool = Field(False, description="FSDP activation checkpointing.")


class DeepSpeedConfig(StrictModel):
    stage: Literal[2, 3] = Field(2, description="ZeRO stage.")
    config_file: str | None = Field(None, description="Path to your own DeepSpeed JSON (overrides `stage`).")
    offload_optimizer: Bool = Field(False, description="Offload optimizer state to the CPU.")


class DistributedConfig(StrictModel):
    num_processes: ProcessCount = Field(
        1, description="Processes (GPUs) per machine, 1-1024; `auto` = every visible GPU."
    )
    strategy: Literal["ddp", "fsdp", "deepspeed"] = Field("ddp", description="How processes share the work.")
    fsdp: FsdpConfig | None = Field(None, description="FSDP options (strategy: fsdp).")
    deepspeed: DeepSpeedConfig | None = Field(None, description="DeepSpeed options (strategy: deepspeed).")
    num_machines: Int = Field(1, ge=1, le=4096, description="Number of machines (nodes).")
    machine_rank: Int = Field(0, ge=0, le=4095, description="This machine's rank, 0 .. num_machines-1.")
    main_process_ip: str | None = Field(None, description="Address of machine 0 (multi-node).")
    main_process_port: Int = Field(29500, ge=1, le=65535, description="Port on machine 0 (multi-node).")
    backend: Literal["accelerate", "ray"] = Field(
        "accelerate",
        description="Who starts the processes: accelerate (torch's elastic agent, one machine or several started "
        "by you or a scheduler) or ray (Ray Train workers, num_processes x num_machines of them; pip install "
        "'autotrain[ray]').",
    )
    ray_address: str | None = Field(
        None, description="backend: ray: an existing Ray cluster (`auto`, `ray://host:10001`); null = a local Ray."
    )
    rendezvous_timeout: Int = Field(
        60,
        ge=5,
        le=86_400,
        description="Multi-node: seconds from each machine's start by which every machine has checked in at "
        "main_process_ip:port, or this one has stopped with one line naming who came and who did not.",
    )


class ClusterConfig(StrictModel):
    """What only a scheduler needs (`autotrain launch --target ...`); training never reads it."""

    nodes: Int | None = Field(
        None, ge=1, le=4096, description="Machines to ask for (default: distributed.num_machines)."
    )
    gpus_per_node: Int = Field(1, ge=0, le=64, description="GPUs per machine; one process per GPU.")
    cpus_per_process: Int | None = Field(
        None,
        ge=1,
        le=1024,
        description="CPU cores per training process (Slurm --cpus-per-task: this x the processes of a machine, "
        "whose one task runs them all); null: 4, plus one per training_args.dataloader_num_workers.",
    )
    gpu_type: str | None = Field(
        None, description="GPU model, e.g. `A100` or `H100` (SkyPilot accelerators; Slurm --gpus-per-node TYPE:N)."
    )
    image: str | None = Field(None, description="Container image with autotrain installed (needed for Kubernetes).")
    partition: str | None = Field(None, description="Slurm partition.")
    account: str | None = Field(None, description="Slurm account.")
    namespace: str = Field("default", description="Kubernetes namespace.")
    volume_claim: str | None = Field(
        None,
        description="Kubernetes PersistentVolumeClaim mounted at /workspace: data and the project folder live there.",
    )
    time_limit_minutes: Int | None = Field(None, ge=1, le=10**7, description="Job time limit (Slurm --time).")
    stop_before_limit: Int = Field(
        300,
        ge=30,
        le=86_400,
        description="Seconds before the time limit at which the run is told to checkpoint and stop.",
    )
    setup: str | None = Field(None, description="SkyPilot setup commands (default: `pip install -e .` unless `image`).")


class EarlyStopping(StrictModel):
    patience: Int = Field(3, ge=1, le=1_000_000, description="Evaluations without improvement before stopping.")
    threshold: Float = Field(0.0, ge=0, le=1e6, description="Minimum improvement that counts.")
    metric: Literal["eval_loss", "accuracy", "f1", "precision", "recall"] = Field(
        "eval_loss", description="Metric watched (f1, precision and recall are macro averages)."
    )


DEFAULT_TARGET_BATCH = 8  # batch_size's own default: `batch_size: auto` keeps as many samples per step


class TrainingArgs(StrictModel):
    epochs: Float = Field(1, gt=0, le=100_000, description="Passes over the training data.")
    max_steps: Int | None = Field(
        None, ge=1, le=10**12, description="Stop after this many optimizer steps (overrides epochs)."
    )
    batch_size: BatchSize = Field(
        8,
        description="Samples per device per forward pass, or `auto`: the largest the memory estimate fits in the "
        "device's free memory (or memory_budget), gradient_accumulation then set to keep target_batch_size samples "
        "per optimizer step.",
    )
    target_batch_size: Int | None = Field(
        None,
        ge=1,
        le=1_048_576,
        description="With batch_size: auto: the samples per device per optimizer step to keep (batch_size x "
        f"gradient_accumulation; default {DEFAULT_TARGET_BATCH}).",
    )
    memory_budget: (
        Annotated[ByteSize, Field(ge=2**20, le=2**60), WithJsonSchema({"type": ["integer", "string"]})] | None
    ) = Field(
        None,
        description="Memory one device may use (`12GB`, `12GiB` or bytes): what batch_size: auto fills and the dry "
        "run checks the estimate against; default: the device's free memory (CPU: available RAM).",
    )
    eval_batch_size: Int | None = Field(
        None, ge=1, le=1_048_576, description="Samples per device for evaluation (default: batch_size)."
    )
    lr: Float = Field(5e-5, gt=0, le=10, description="Peak learning rate.")
    warmup_ratio: Float = Field(0.0, ge=0, lt=1, description="Fraction of steps used for linear warmup.")
    weight_decay: Float = Field(0.0, ge=0, le=100, description="Decoupled weight decay (not applied to biases/norms).")
    max_grad_norm: Float | None = Field(1.0, gt=0, le=1e9, description="Gradient clipping norm; null = no clipping.")
    seed: Int = Field(42, ge=0, lt=2**32, description="Seed for weights init, data order and dropout.")
    gradient_accumulation: Int = Field(1, ge=1, le=1_048_576, description="Forward/backward passes per optimizer step.")
    mixed_precision: MixedPrecision = Field(
        "auto", description="auto: bf16 on GPUs that support it, else fp16 on CUDA, fp32 on CPU."
    )
    optimizer: OptimizerName = Field(
        DEFAULT_OPTIMIZER,
        description="Bundled (came, came_8bit, fused_adam, came_8bit+fused_adam) or transformers'.",
    )
    # Given as a mapping; once validated, the chosen optimizer's typed arguments (its model in the optimizer
    # table), which is what the plan builds the optimizer from. Dumped back as the mapping that was given.
    optimizer_args: Annotated[
        dict[str, Any] | BaseModel, WithJsonSchema({"type": "object", "additionalProperties": True})
    ] = Field(
        default_factory=dict,
        description="Constructor arguments of the chosen optimizer (typed per optimizer; lr and weight_decay "
        "come from training_args).",
    )
    scheduler: Scheduler = Field("linear", description="Learning-rate schedule after warmup.")
    gradient_checkpointing: Bool = Field(False, description="Recompute activations in backward to save memory.")
    logging_steps: Int = Field(10, ge=1, le=10**12, description="Log every N optimizer steps.")
    save_steps: Int | None = Field(
        None, ge=1, le=10**12, description="Checkpoint every N steps; null = at each epoch end."
    )
    save_total_limit: Int | None = Field(2, ge=1, le=1_000_000, description="Keep at most N checkpoints.")
    eval_strategy: Annotated[Literal["no", "steps", "epoch"], NoWord] = Field(
        "epoch", description="When to evaluate (needs a valid split)."
    )
    eval_steps: Int | None = Field(None, ge=1, le=10**12, description="Evaluate every N steps (eval_strategy: steps).")
    nan_policy: Literal["halt", "skip_batch"] = Field(
        "halt", description="On a non-finite loss: stop with exit code 3, or skip that batch."
    )
    dataloader_num_workers: Int = Field(0, ge=0, le=256, description="Data-loading worker processes.")

    @property
    def samples_per_step(self) -> int:
        """Samples per device per optimizer step: batch_size x gradient_accumulation, or with `batch_size:
        auto` the target it keeps."""
        if self.batch_size == "auto":
            return self.target_batch_size or DEFAULT_TARGET_BATCH
        return self.batch_size * self.gradient_accumulation

    @field_validator("optimizer_args", mode="before")
    @classmethod
    def _typed_optimizer_args(cls, value: Any, info: ValidationInfo) -> Any:
        if "optimizer" not in info.data or not isinstance(value, dict):
            return value  # the optimizer (reported already) or the mapping itself is wrong
        from autotrain.config.rules import typed_optimizer_args

        return typed_optimizer_args(info.data["optimizer"], value)

    @field_serializer("optimizer_args")
    def _given_optimizer_args(self, value: Any, info) -> Any:
        return value.model_dump(mode=info.mode, exclude_unset=True) if isinstance(value, BaseModel) else value


class EvaluatedArgs(TrainingArgs):
    """The training settings of a task whose evaluations report its metrics (every task but llm)."""

    load_best_model: Bool = Field(True, description="Keep the best checkpoint (by early_stopping.metric) at the end.")


def task_training_args(prefix: str, base: type[EvaluatedArgs], task: str, watched: str | None = None):
    """`base` with the `early_stopping` of `task`: its `metric` is `eval_loss` or one of the metrics the task
    table lists for the task, described by `watched` (by default: which of them are better lower). The models
    are `{prefix}TrainingArgs` and `{prefix}EarlyStopping` in the JSON Schema: every task but llm and the
    classifiers declares its training settings through it."""
    from pydantic import create_model

    if watched is None:
        lower = TASKS[task].lower_is_better
        watched = (
            "Metric watched ("
            + (f"lower is better: eval_loss, {', '.join(lower)}" if lower else "eval_loss: lower")
            + ")."
        )
    metric = Literal[("eval_loss", *TASKS[task].metrics)]
    stopping = create_model(
        f"{prefix}EarlyStopping",
        __base__=EarlyStopping,
        __module__=__name__,
        metric=(metric, Field("eval_loss", description=watched)),
    )
    stop = Field(None, description="Stop when the metric stops improving.")
    return create_model(
        f"{prefix}TrainingArgs", __base__=base, __module__=__name__, early_stopping=(stopping | None, stop)
    )


class TaskConfig(StrictModel):
    """Fields every task has. Validation runs the cross-field rules too (autotrain/config/rules.py)."""

    task: TaskName = Field(description="What to train.")
    base_model: str = Field(description="Hub model id or local folder to start from.")
    project_name: str = Field(
        description="Output folder for checkpoints, the model and logs (`~` expands); a folder of its own."
    )
    log: Literal["none", "tensorboard", "wandb", "mlflow", "trackio"] = Field(
        "none", description="Where metrics are reported (transformers' report_to; needs that package)."
    )
    revision: str | None = Field(None, description="Hub revision (branch, tag or commit) of base_model.")
    trust_remote_code: Bool = Field(False, description="Run model code from the hub repo. Off unless you ask.")
    distributed: DistributedConfig = Field(default_factory=DistributedConfig, description="Multi-GPU / multi-node.")
    hub: HubConfig = Field(default_factory=HubConfig, description="Pushing the result to the Hugging Face Hub.")
    cluster: ClusterConfig = Field(
        default_factory=ClusterConfig,
        description="Scheduler settings for `autotrain launch` (Slurm, Kubernetes, SkyPilot).",
    )

    @field_validator("project_name")
    @classmethod
    def _expand_home(cls, value: str) -> str:
        return os.path.expanduser(value) if value.startswith("~") else value

    @model_validator(mode="after")
    def _cross_field_rules(self):
        from autotrain.config.rules import enforce_rules

        enforce_rules(self)
        return self
