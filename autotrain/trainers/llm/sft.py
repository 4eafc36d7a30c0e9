"""Supervised fine-tuning on plain `text` or chat `messages` (TRL SFTTrainer)."""

from __future__ import annotations

from autotrain.config.llm import LLMConfig
from autotrain.trainers.llm.base import llm_trainer, prepare
from autotrain.trainers.llm.model import build_model
from autotrain.training.plan import RunPlan


def build_trainer(cfg: LLMConfig, plan: RunPlan, callbacks: list, token: str | None = None):
    from trl import SFTConfig, SFTTrainer

    ready = prepare(cfg, plan, token)
    args = cfg.training_args
    extra = {"max_length": args.max_length, "packing": args.packing, "dataset_text_field": "text"}
    if args.completion_only_loss is not None:
        extra["completion_only_loss"] = args.completion_only_loss
    model = build_model(cfg, plan, token)
    return llm_trainer(SFTTrainer, SFTConfig, cfg, plan, ready, callbacks, model=model, args=extra)
