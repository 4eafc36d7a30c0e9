"""What every builder shares: loading from base_model with errors a user can act on, the tokenizer's
padding, and handing the planned optimizer to the Trainer."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from autotrain.config.base import TaskConfig
from autotrain.errors import UserInputError
from autotrain.training.plan import RunPlan


def load_pretrained(loader, cfg: TaskConfig, what: str, token: str | None = None, **kwargs: Any):
    """`loader.from_pretrained(base_model, ...)` with the config's revision and remote-code choice.

    A GGUF base model is read from its folder (or hub repo) with `gguf_file=`, its weights de-quantized
    into a plain model of the dtype asked for, so it trains and saves like any other checkpoint. A
    checkpoint that cannot be loaded is bad input (exit 2) named with the library's first line.
    """
    source = cfg.base_model
    if loader.__name__.startswith("AutoModel") and Path(source).expanduser().is_dir():
        from autotrain.training.verify import weights_problem

        problem = weights_problem(Path(source).expanduser())  # cut short: named here, not by the library
        if problem:
            raise UserInputError(f"cannot load the {what} of base_model `{cfg.base_model}`: {problem}")
    gguf = getattr(cfg, "gguf", None)
    if gguf is not None:
        source, kwargs["gguf_file"] = gguf
        if loader.__name__.startswith("AutoModel"):
            kwargs.update(_dequantized())
    try:
        return loader.from_pretrained(
            source, revision=cfg.revision, token=token, trust_remote_code=cfg.trust_remote_code, **kwargs
        )
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserInputError(f"cannot load the {what} of base_model `{cfg.base_model}`: {first}") from None


def _dequantized() -> dict[str, Any]:
    """Recent transformers may keep GGUF weights in their quantized blocks (not trainable, not savable as
    safetensors); ask for plain tensors. Older ones always de-quantize and have no such setting."""
    try:
        from transformers import GgufConfig
    except ImportError:
        return {}
    return {"quantization_config": GgufConfig(dequantize=True)}


def build_tokenizer(cfg: TaskConfig, token: str | None = None):
    from transformers import AutoTokenizer

    tokenizer = load_pretrained(AutoTokenizer, cfg, "tokenizer", token)
    if tokenizer.pad_token is None:
        # Decoder-only checkpoints have no pad token; padding is masked out, so EOS (or UNK) serves.
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    return tokenizer


def make_trainer(trainer_cls, plan: RunPlan, **kwargs: Any) -> tuple[Any, RunPlan]:
    """`trainer_cls(**kwargs)` with the planned bundled optimizer, if any, and the plan it runs: the pair
    every builder returns (a builder that refines the plan returns `plan.refine(...)` instead).

    It goes in as `optimizer_cls_and_kwargs`, so the Trainer still builds the param groups (no weight
    decay on biases and norms) and the LR scheduler. TRL's DPO, KTO, GRPO and ORPO trainers do not take
    that argument; for them `with_planned_optimizer` names a subclass that takes it. With LoRA+
    (`plan.adapter.loraplus_lr_ratio`) the trainer's `create_optimizer` makes LoRA+'s groups for that same
    optimizer instead (autotrain.trainers.loraplus).
    """
    ratio = plan.adapter.loraplus_lr_ratio if plan.adapter is not None else None
    if ratio is not None:
        from autotrain.trainers.loraplus import with_loraplus

        trainer_cls = with_loraplus(trainer_cls, ratio)
    chosen = plan.optimizer.cls_and_kwargs
    if chosen is not None:
        if "optimizer_cls_and_kwargs" not in inspect.signature(trainer_cls.__init__).parameters:
            trainer_cls = with_planned_optimizer(trainer_cls)
        kwargs["optimizer_cls_and_kwargs"] = chosen
    trainer = trainer_cls(**kwargs)
    if plan.adapter is not None and plan.adapter.converts:  # PiSSA / OLoRA: the start the final save subtracts
        from autotrain.training.adapter import save_initial_adapter

        save_initial_adapter(trainer)
    return trainer, plan


class _PlannedOptimizer:
    """Takes `optimizer_cls_and_kwargs` for a Trainer class that does not, and answers the Trainer's own
    `create_optimizer` with it where it asks which optimizer to build (`get_optimizer_cls_and_kwargs`, the
    public hook): the decay / no-decay param groups are still the Trainer's."""

    def __init__(self, *args: Any, optimizer_cls_and_kwargs: tuple[type, dict[str, Any]], **kwargs: Any) -> None:
        self.planned_optimizer = optimizer_cls_and_kwargs
        super().__init__(*args, **kwargs)

    def get_optimizer_cls_and_kwargs(self, args, model=None) -> tuple[type, dict[str, Any]]:
        cls, kwargs = self.planned_optimizer
        return cls, dict(kwargs)


def with_planned_optimizer(trainer_cls: type) -> type:
    """`trainer_cls` taking `optimizer_cls_and_kwargs` (a subclass named after it: DPOTrainerWithOptimizer)."""
    return type(f"{trainer_cls.__name__}WithOptimizer", (_PlannedOptimizer, trainer_cls), {})
