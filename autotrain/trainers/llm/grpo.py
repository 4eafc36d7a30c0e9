"""GRPO: the model samples `num_generations` completions per prompt, reward functions score them, and each
completion is pushed up or down by how it scored against the others of its group (TRL GRPOTrainer).

No reference model by default (`beta` 0, TRL's default); with `beta` above 0 and LoRA the reference is the
base model with the adapter switched off, as for DPO.
"""

from __future__ import annotations

from autotrain.config.llm import LLMConfig
from autotrain.config.rules import GRPO_DEFAULT_GENERATIONS, GRPO_DEFAULT_REWARDS
from autotrain.trainers.llm import rewards
from autotrain.trainers.llm.base import prepare, prompt_trainer
from autotrain.training.plan import RunPlan

# training_args field -> GRPOConfig field, passed when set (TRL's defaults otherwise).
GRPO_FIELDS = {
    "num_generations": "num_generations",
    "max_completion_length": "max_completion_length",
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "beta": "beta",
    "reward_weights": "reward_weights",
}


def build_trainer(cfg: LLMConfig, plan: RunPlan, callbacks: list, token: str | None = None):
    from trl import GRPOConfig, GRPOTrainer

    ready = prepare(cfg, plan, token)
    args = cfg.training_args
    # Rewards are found (and their columns checked) before the model loads: mistakes stay cheap.
    reward_funcs = rewards.resolve(args.rewards or list(GRPO_DEFAULT_REWARDS), ready.train.column_names)
    extra = {grpo: getattr(args, ours) for ours, grpo in GRPO_FIELDS.items() if getattr(args, ours) is not None}
    if args.eval_batch_size is None:  # an evaluation batch holds whole groups of completions too
        extra["per_device_eval_batch_size"] = eval_batch_size(plan.batch_size, args.num_generations)
    return prompt_trainer(
        GRPOTrainer, GRPOConfig, cfg, plan, ready, callbacks, token, reward_funcs=reward_funcs, args=extra
    )


def eval_batch_size(batch_size: int, generations: int | None) -> int:
    """`batch_size` rounded up to whole groups of completions (TRL evaluates whole groups per batch)."""
    generations = generations or GRPO_DEFAULT_GENERATIONS
    return -(-batch_size // generations) * generations
