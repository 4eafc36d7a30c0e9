"""What DPO and ORPO share: prompts cut to `max_prompt_length`, `beta`, and the trainer call."""

from __future__ import annotations

from typing import Any

from autotrain.config.llm import LLMConfig
from autotrain.trainers.llm.base import llm_trainer, prepare, truncate_prompts
from autotrain.trainers.llm.model import build_model
from autotrain.training.plan import RunPlan


def build_preference_trainer(
    trainer_cls,
    args_cls,
    cfg: LLMConfig,
    plan: RunPlan,
    callbacks: list,
    token: str | None,
    extra: dict[str, Any],
    **kwargs: Any,
):
    ready = prepare(cfg, plan, token)
    args = cfg.training_args
    extra = {"max_length": args.max_length, **extra}
    if args.beta is not None:
        extra["beta"] = args.beta
    limit = args.max_prompt_length
    valid = truncate_prompts(ready.valid, ready.tokenizer, limit) if ready.valid is not None else None
    return llm_trainer(
        trainer_cls,
        args_cls,
        cfg,
        plan,
        ready,
        callbacks,
        model=build_model(cfg, plan, token),
        args=extra,
        train_dataset=truncate_prompts(ready.train, ready.tokenizer, limit),
        eval_dataset=valid,
        **kwargs,
    )
