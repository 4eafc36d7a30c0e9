"""DPO: direct preference optimisation against a frozen reference model.

With LoRA the reference is the base model with the adapter switched off (TRL does this when
`ref_model` is None and the model is a PEFT model), so no second copy is loaded. Without LoRA the
reference is a second, frozen copy of `base_model`.
"""

from __future__ import annotations

from autotrain.config.llm import LLMConfig
from autotrain.trainers.llm.model import build_model
from autotrain.trainers.llm.preference import build_preference_trainer
from autotrain.training.plan import RunPlan


def build_trainer(cfg: LLMConfig, plan: RunPlan, callbacks: list, token: str | None = None):
    from trl import DPOConfig, DPOTrainer

    ref_model = None
    if not cfg.uses_peft:
        ref_model = build_model(cfg, plan, token)
        ref_model.requires_grad_(False).eval()
    return build_preference_trainer(DPOTrainer, DPOConfig, cfg, plan, callbacks, token, {}, ref_model=ref_model)
