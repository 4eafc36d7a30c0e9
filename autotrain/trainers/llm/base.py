"""What every LLM builder does first, in the order that keeps mistakes cheap: check the hardware,
load the tokenizer and the data (a missing column fails here), and only then the model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotrain.config.llm import LLMConfig
from autotrain.data.llm import load_llm_split
from autotrain.runtime.precision import Precision, resolve_precision
from autotrain.trainers.common import training_kwargs
from autotrain.trainers.llm.model import build_tokenizer, quantization_config


@dataclass
class Prepared:
    precision: Precision
    tokenizer: Any
    train: Any
    valid: Any | None

    def args_kwargs(self, cfg: LLMConfig) -> dict[str, Any]:
        return training_kwargs(cfg, self.precision, self.valid is not None)


def prepare(cfg: LLMConfig, token: str | None = None) -> Prepared:
    from transformers import set_seed

    set_seed(cfg.training_args.seed)
    precision = resolve_precision(cfg.training_args.mixed_precision)
    quantization_config(cfg, precision)  # refuses int4/int8 without CUDA before anything is loaded
    tokenizer = build_tokenizer(cfg, token)
    train = load_llm_split(cfg, cfg.data.train_split, token)
    valid = load_llm_split(cfg, cfg.data.valid_split, token) if cfg.data.valid_split else None
    return Prepared(precision, tokenizer, train, valid)


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
