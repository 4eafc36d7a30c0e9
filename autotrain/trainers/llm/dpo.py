"""DPO: direct preference optimisation against a frozen reference model.

With LoRA the reference is the base model with the adapter switched off (TRL does this when
`ref_model` is None and the model is a PEFT model), so no second copy is loaded. Without LoRA the
reference is a second, frozen copy of `base_model`.
"""

from __future__ import annotations

from autotrain.config.llm import LLMConfig
from autotrain.trainers.common import attach_optimizer
from autotrain.trainers.llm.base import prepare, truncate_prompts
from autotrain.trainers.llm.model import build_lora_config, build_model


def build_trainer(cfg: LLMConfig, callbacks: list, token: str | None = None):
    from trl import DPOConfig, DPOTrainer

    ready = prepare(cfg, token)
    args = cfg.training_args
    extra = {"max_length": args.max_length}
    if args.beta is not None:
        extra["beta"] = args.beta
    model = build_model(cfg, ready.precision, token)
    ref_model = None
    if not cfg.uses_peft:
        ref_model = build_model(cfg, ready.precision, token)
        ref_model.requires_grad_(False).eval()
    valid = truncate_prompts(ready.valid, ready.tokenizer, args.max_prompt_length) if ready.valid else None
    trainer = DPOTrainer(
        model=model,
        ref_model=ref_model,
        args=DPOConfig(**ready.args_kwargs(cfg), **extra),
        train_dataset=truncate_prompts(ready.train, ready.tokenizer, args.max_prompt_length),
        eval_dataset=valid,
        processing_class=ready.tokenizer,
        peft_config=build_lora_config(cfg),
        callbacks=callbacks,
    )
    attach_optimizer(trainer, cfg)
    return trainer
