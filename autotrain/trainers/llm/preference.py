"""What DPO and ORPO share: prompts cut to `max_prompt_length`, `beta`, and the trainer call."""

from __future__ import annotations

from typing import Any

from autotrain.config.llm import LLMConfig
from autotrain.trainers.llm.base import prepare, prompt_trainer
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
    return prompt_trainer(trainer_cls, args_cls, cfg, plan, ready, callbacks, token, args=extra, **kwargs)
