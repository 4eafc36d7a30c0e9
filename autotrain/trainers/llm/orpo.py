"""ORPO: odds-ratio preference optimisation, no reference model.

ORPO lives in `trl.experimental` in current TRL; this is the only module that imports from there.
"""

from __future__ import annotations

import os

from autotrain.config.llm import LLMConfig
from autotrain.trainers.common import attach_optimizer
from autotrain.trainers.llm.base import prepare, truncate_prompts
from autotrain.trainers.llm.model import build_lora_config, build_model


def _orpo_classes():
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from trl.experimental.orpo import ORPOConfig, ORPOTrainer

    return ORPOConfig, ORPOTrainer


def build_trainer(cfg: LLMConfig, callbacks: list, token: str | None = None):
    ORPOConfig, ORPOTrainer = _orpo_classes()
    ready = prepare(cfg, token)
    args = cfg.training_args
    extra = {"max_length": args.max_length}
    if args.max_completion_length:
        extra["max_completion_length"] = args.max_completion_length
    if args.beta is not None:
        extra["beta"] = args.beta
    valid = truncate_prompts(ready.valid, ready.tokenizer, args.max_prompt_length) if ready.valid else None
    trainer = ORPOTrainer(
        model=build_model(cfg, ready.precision, token),
        args=ORPOConfig(**ready.args_kwargs(cfg), **extra),
        train_dataset=truncate_prompts(ready.train, ready.tokenizer, args.max_prompt_length),
        eval_dataset=valid,
        processing_class=ready.tokenizer,
        peft_config=build_lora_config(cfg),
        callbacks=callbacks,
    )
    attach_optimizer(trainer, cfg)
    return trainer
