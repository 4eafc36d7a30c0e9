"""Reward model: a one-logit sequence classifier that scores `chosen` above `rejected` (TRL RewardTrainer)."""

from __future__ import annotations

from autotrain.config.llm import LLMConfig
from autotrain.trainers.llm.base import llm_trainer, prepare
from autotrain.trainers.llm.model import build_lora_config, build_model
from autotrain.training.plan import RunPlan


def _join_prompt(dataset):
    """RewardTrainer scores whole texts: put the prompt in front of both answers when there is one."""
    if "prompt" not in dataset.column_names:
        return dataset
    return dataset.map(
        lambda ex: {
            "chosen": _concat(ex["prompt"], ex["chosen"]),
            "rejected": _concat(ex["prompt"], ex["rejected"]),
        },
        remove_columns=["prompt"],
    )


def _concat(prompt, answer):
    if isinstance(prompt, str) and isinstance(answer, str):
        return prompt + " " + answer
    return list(prompt) + list(answer)


def build_trainer(cfg: LLMConfig, plan: RunPlan, callbacks: list, token: str | None = None):
    from trl import RewardConfig, RewardTrainer

    ready = prepare(cfg, plan, token)
    model = build_model(cfg, plan, token, scorer=True)
    model.config.pad_token_id = ready.tokenizer.pad_token_id
    return llm_trainer(
        RewardTrainer,
        RewardConfig,
        cfg,
        plan,
        ready,
        callbacks,
        model=model,
        args={"max_length": cfg.training_args.max_length},
        train_dataset=_join_prompt(ready.train),
        eval_dataset=_join_prompt(ready.valid) if ready.valid is not None else None,
        peft_config=build_lora_config(cfg, task_type="SEQ_CLS"),
    )
