"""The `distributed:` section as accelerate sees it: launcher flags per strategy, the DeepSpeed JSON, and
the hardware checks that must fail before any process starts.

The strategy travels as `accelerate launch` flags (they become ACCELERATE_* / FSDP_* variables in each
rank), which the Trainer reads through its Accelerator; TrainingArguments stay the same for every
strategy, so a config moves from one GPU to DDP, FSDP or DeepSpeed by editing `distributed:` only.
"""

from __future__ import annotations

import json
from pathlib import Path

from autotrain.config.base import DeepSpeedConfig, FsdpConfig, TaskConfig
from autotrain.errors import UserInputError

# Written into the project folder when `distributed.deepspeed.config_file` is not given.
DEEPSPEED_FILE = "deepspeed.json"


def _flag(value: bool) -> str:
    return "true" if value else "false"


def decoder_layer_classes(base_model: str, revision: str | None = None) -> list[str] | None:
    """The model's `_no_split_modules` (its decoder layer classes, e.g. LlamaDecoderLayer), read from a
    local config.json or the hub cache only: no download, so a dry run stays offline and fast.

    None when unknown (remote code, nothing cached): accelerate then reads `_no_split_modules` from the
    loaded model itself, which wraps the same layers.
    """
    config_file = Path(base_model) / "config.json"
    if not config_file.is_file():
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(base_model, "config.json", revision=revision)
        except Exception:  # an id the hub library rejects: nothing to read
            return None
        if not isinstance(cached, str):
            return None
        config_file = Path(cached)
    try:
        architectures = json.loads(config_file.read_text(encoding="utf-8")).get("architectures") or []
    except (OSError, ValueError):
        return None
    import transformers

    from autotrain.compat.transformers import no_split_modules

    for name in architectures:
        try:
            cls = getattr(transformers, name)
        except AttributeError:  # remote-code architecture
            continue
        layers = no_split_modules(cls)
        if layers:
            return layers
    return None


def fsdp_flags(fsdp: FsdpConfig, cfg: TaskConfig) -> list[str]:
    flags = ["--use_fsdp", "--fsdp_version", str(fsdp.version)]
    if fsdp.version == 2:
        flags += ["--fsdp_reshard_after_forward", _flag(fsdp.reshard_after_forward)]
    else:
        # FSDP1 names the same choice as a sharding strategy, and needs the original parameters kept for LoRA.
        strategy = "FULL_SHARD" if fsdp.reshard_after_forward else "SHARD_GRAD_OP"
        flags += [
            "--fsdp_reshard_after_forward",
            strategy,
            "--fsdp_use_orig_params",
            "true",
            "--fsdp_sync_module_states",
            "true",
        ]
    if fsdp.auto_wrap:
        flags += ["--fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP"]
        layers = decoder_layer_classes(cfg.base_model, cfg.revision)
        if layers:
            flags += ["--fsdp_transformer_layer_cls_to_wrap", ",".join(layers)]
    else:
        flags += ["--fsdp_auto_wrap_policy", "NO_WRAP"]
    # Full state dict: the final model is saved as ordinary safetensors that from_pretrained loads.
    flags += [
        "--fsdp_offload_params",
        _flag(fsdp.cpu_offload),
        "--fsdp_activation_checkpointing",
        _flag(fsdp.activation_checkpointing),
        "--fsdp_state_dict_type",
        "FULL_STATE_DICT",
    ]
    return flags


def deepspeed_file(cfg: TaskConfig) -> Path:
    """The user's DeepSpeed JSON, or the one autotrain writes into the project folder at launch."""
    ds = cfg.distributed.deepspeed or DeepSpeedConfig()
    return Path(ds.config_file) if ds.config_file else Path(cfg.project_name) / DEEPSPEED_FILE


def deepspeed_config(ds: DeepSpeedConfig) -> dict:
    """A ZeRO config whose sizes are "auto": the Trainer fills them from `training_args`, so the two can
    never disagree (batch size, accumulation, clipping, bf16/fp16)."""
    zero: dict = {"stage": ds.stage, "overlap_comm": True, "contiguous_gradients": True}
    if ds.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if ds.stage == 3:
        # Gather the shards when saving, so the final model is one loadable checkpoint.
        zero["stage3_gather_16bit_weights_on_model_save"] = True
    config = {
        "train_batch_size": "auto",
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "gradient_clipping": "auto",
        "bf16": {"enabled": "auto"},
        "fp16": {"enabled": "auto"},
        "zero_optimization": zero,
    }
    if ds.offload_optimizer:
        # Keep the optimizer named in `training_args.optimizer` (DeepSpeed would insist on its own CPU Adam).
        config["zero_force_ds_cpu_optimizer"] = False
    return config


def deepspeed_flags(cfg: TaskConfig) -> list[str]:
    flags = ["--use_deepspeed", "--deepspeed_config_file", str(deepspeed_file(cfg))]
    if cfg.distributed.num_machines > 1:
        # Each machine starts its own ranks (as with DDP/FSDP) instead of DeepSpeed's ssh/pdsh launcher.
        flags += ["--deepspeed_multinode_launcher", "standard"]
    return flags


def strategy_flags(cfg: TaskConfig) -> list[str]:
    dist = cfg.distributed
    if dist.strategy == "fsdp":
        return fsdp_flags(dist.fsdp or FsdpConfig(), cfg)
    if dist.strategy == "deepspeed":
        return deepspeed_flags(cfg)
    return ["--multi_gpu"]  # DDP; on a machine without GPUs the ranks fall back to gloo on the CPU


def check_hardware(cfg: TaskConfig, gpus: int, per_machine: int) -> None:
    """Refuse, before starting any process, what accelerate would run differently from what was asked."""
    problems = hardware_problems(cfg, gpus, per_machine)
    if problems:
        raise UserInputError("; ".join(problems))


def hardware_problems(cfg: TaskConfig, gpus: int, per_machine: int, why_no_gpu: str = "") -> list[str]:
    """What several processes of `cfg` need from this machine and it lacks, one line each (the preflight
    reads them too; `why_no_gpu` says why torch sees none)."""
    dist, problems = cfg.distributed, []
    if dist.strategy in ("fsdp", "deepspeed") and gpus == 0:
        # Accelerate silently drops FSDP on CPU processes (they would train as plain DDP copies).
        problems.append(
            f"distributed.strategy: {dist.strategy} needs CUDA GPUs and none is visible"
            + (f" ({why_no_gpu})" if why_no_gpu else "")
            + "; use `strategy: ddp` to train with several CPU processes"
        )
    if gpus and per_machine > gpus:
        problems.append(
            f"distributed.num_processes ({per_machine}) is more than the {gpus} visible GPU(s); "
            "use `num_processes: auto` (one process per GPU) or a smaller number"
        )
    if dist.strategy == "deepspeed":
        import importlib.util

        if importlib.util.find_spec("deepspeed") is None:
            from autotrain.hints import install_hint

            hint = install_hint("deepspeed")
            problems.append(f"distributed.strategy: deepspeed needs the `deepspeed` package ({hint})")
        ds = dist.deepspeed or DeepSpeedConfig()
        if ds.config_file and not Path(ds.config_file).is_file():
            problems.append(f"distributed.deepspeed.config_file `{ds.config_file}` does not exist")
    return problems


def write_launch_files(cfg: TaskConfig) -> list[Path]:
    """Files the launch command refers to (the generated DeepSpeed JSON); never called by a dry run."""
    ds = cfg.distributed.deepspeed or DeepSpeedConfig()
    if cfg.distributed.strategy != "deepspeed" or ds.config_file:
        return []
    path = deepspeed_file(cfg)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(deepspeed_config(ds), indent=2) + "\n", encoding="utf-8")
    return [path]
