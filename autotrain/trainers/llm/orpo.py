"""ORPO: odds-ratio preference optimisation, no reference model.

ORPO lives in `trl.experimental` in current TRL; this is the only module that imports from there.
"""

from __future__ import annotations

import os

from autotrain.config.llm import LLMConfig
from autotrain.trainers.llm.preference import build_preference_trainer
from autotrain.training.plan import RunPlan


def build_trainer(cfg: LLMConfig, plan: RunPlan, callbacks: list, token: str | None = None):
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from trl.experimental.orpo import ORPOConfig, ORPOTrainer

    extra = {}
    if cfg.training_args.max_completion_length:
        extra["max_completion_length"] = cfg.training_args.max_completion_length
    return build_preference_trainer(ORPOTrainer, ORPOConfig, cfg, plan, callbacks, token, extra)
