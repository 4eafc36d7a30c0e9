"""What every LLM builder does first, in the order that keeps mistakes cheap: the tokenizer and the data
(a missing column fails here) before the model; and the trainer they all end with."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from autotrain.config.llm import PREPARED, LLMConfig
from autotrain.data.llm import load_llm_split
from autotrain.trainers.common import make_trainer
from autotrain.trainers.llm.model import build_lora_config, build_model, build_tokenizer
from autotrain.training.plan import RunPlan


@dataclass
class Prepared:
    tokenizer: Any
    train: Any
    valid: Any | None


@dataclass
class SplitPlan:
    """A split that the builder prepares itself (the trainers the trainer table marks `prepared`:
    autotrain.trainers.llm.prepared_splits), in place of loaded rows; `records` gets what was prepared of each
    source (rows, kept, share), for the plan."""

    which: str  # "train" or "valid"
    token: str | None = None
    records: list = field(default_factory=list)
    mixture: Any = None  # the draws of several sources (autotrain.data.mixture.Mixture): told each epoch


def prepare(cfg: LLMConfig, plan: RunPlan, token: str | None = None) -> Prepared:
    from transformers import set_seed

    set_seed(cfg.training_args.seed)
    tokenizer = build_tokenizer(cfg, token)
    if cfg.trainer in PREPARED:  # read, tokenized and cached by the builder, for every process at once
        valid = SplitPlan("valid", token) if cfg.data.has_valid else None
        return Prepared(tokenizer, SplitPlan("train", token), valid)
    train = load_llm_split(cfg, cfg.data.train_split, token)
    valid = load_llm_split(cfg, cfg.data.valid_split, token) if cfg.data.valid_split else None
    return Prepared(tokenizer, train, valid)


def llm_trainer(trainer_cls, args_cls, cfg: LLMConfig, plan: RunPlan, ready: Prepared, callbacks: list, **kwargs):
    """A TRL trainer on the prepared data with the plan's TrainingArguments, LoRA and optimizer.

    `args` extends (or overrides) the planned TrainingArguments with the trainer's own fields; `train` / `valid`
    replace the prepared splits when the builder transformed them.
    """
    extra = kwargs.pop("args", {})
    kwargs.setdefault("train_dataset", ready.train)
    kwargs.setdefault("eval_dataset", ready.valid)
    kwargs.setdefault("peft_config", build_lora_config(cfg))
    callbacks, plan = with_data(ready, callbacks, plan)
    return make_trainer(
        trainer_cls,
        plan,
        args=args_cls(**{**plan.training_args, **extra}),
        processing_class=ready.tokenizer,
        callbacks=callbacks,
        **kwargs,
    )


def on_training_device(model, cfg: LLMConfig, plan: RunPlan, args) -> None:
    """Move `model` where the Trainer would put it (this process's GPU) before the checks that run a few tokens
    through it: on the CPU they would take seconds for a large model. Quantized weights are already there;
    FSDP and DeepSpeed place the weights themselves."""
    sharded = plan.world_size > 1 and cfg.distributed.strategy != "ddp"
    if plan.precision.device == "cuda" and not sharded and getattr(model, "quantization_method", None) is None:
        model.to(args.device)


def loss_for_model(plan: RunPlan, model, cfg: LLMConfig) -> RunPlan:
    """`plan`, with `cross_entropy: full` where it computes the loss from the last hidden states and the output
    head and the loaded model's logits are not that head applied to those states (said once; see
    autotrain.training.lm_loss.head_problem), or LoRA will adapt the head. Every rank checks the same weights;
    they agree before going on."""
    from autotrain.training.lm_loss import adapts_head, head_problem
    from autotrain.training.ranks import on_every_rank

    if plan.cross_entropy in ("", "full"):
        return plan
    problem = head_problem(model)
    if problem is None and cfg.uses_peft and adapts_head(model, cfg.peft.target_modules):
        problem = "peft.target_modules adapts its output head, whose weight alone is then not its output"
    if on_every_rank(problem is None):
        return plan
    problem = problem or "another process's model failed the check"
    _say_once(
        f"note: training_args.cross_entropy: {plan.cross_entropy} computes the loss from the last hidden states "
        f"and the output head, which this model does not allow ({problem}): this run computes the full logits "
        "(cross_entropy: full)"
    )
    return plan.refine(problem, cross_entropy="full")


def _say_once(message: str) -> None:
    import os

    from autotrain.errors import eprint

    if os.environ.get("RANK", "0") == "0":  # every rank decided the same; one says so
        eprint(message)


def with_data(ready: Prepared, callbacks: list, plan: RunPlan) -> tuple[list, RunPlan]:
    """The callbacks and plan of a run on the data `ready` holds: a mixture of sources is told each epoch (it
    draws its rows again), and the plan records what was prepared of each source (run.json)."""
    from autotrain.data.mixture import mixture_epochs

    mixture = getattr(ready.train, "mixture", None)
    if mixture is not None:
        callbacks = [*callbacks, mixture_epochs()(mixture)]
    records = getattr(ready.train, "records", None)
    if records:
        plan = dataclasses.replace(plan, data={**plan.data, "sources": records})
    return callbacks, plan


def prompt_trainer(
    trainer_cls, args_cls, cfg: LLMConfig, plan: RunPlan, ready: Prepared, callbacks: list, token: str | None, **kwargs
):
    """`llm_trainer` for rows that hold a prompt (DPO, ORPO, KTO, GRPO): the prompts cut to `max_prompt_length`,
    then the model loaded, last."""
    train, valid = truncated_splits(ready, cfg.training_args.max_prompt_length)
    model = build_model(cfg, plan, token)
    return llm_trainer(
        trainer_cls,
        args_cls,
        cfg,
        plan,
        ready,
        callbacks,
        model=model,
        train_dataset=train,
        eval_dataset=valid,
        **kwargs,
    )


def truncated_splits(ready: Prepared, max_tokens: int | None) -> tuple[Any, Any | None]:
    """The prepared train and valid splits with their prompts cut to `max_tokens` (`truncate_prompts`)."""
    valid = truncate_prompts(ready.valid, ready.tokenizer, max_tokens) if ready.valid is not None else None
    return truncate_prompts(ready.train, ready.tokenizer, max_tokens), valid


def truncate_prompts(dataset, tokenizer, max_tokens: int | None):
    """Keep the last `max_tokens` tokens of each prompt (the end of a prompt matters most).

    Current TRL preference trainers have no prompt limit of their own, so `max_prompt_length` is
    applied here, on the text, before they tokenize it.
    """
    if not max_tokens or "prompt" not in dataset.column_names:
        return dataset

    def cut(text: str) -> str:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        return text if len(ids) <= max_tokens else tokenizer.decode(ids[-max_tokens:])

    def apply(example):
        prompt = example["prompt"]
        if isinstance(prompt, str):
            return {"prompt": cut(prompt)}
        last = dict(prompt[-1])
        last["content"] = cut(last["content"])
        return {"prompt": [*prompt[:-1], last]}

    return dataset.map(apply)
