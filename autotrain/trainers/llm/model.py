"""Tokenizer, model and LoRA for LLM fine-tuning."""

from __future__ import annotations

from autotrain.config.llm import LLMConfig
from autotrain.config.trainers import TRAINERS
from autotrain.trainers import common
from autotrain.training.plan import RunPlan
from autotrain.training.precision import Precision

CHAT_TEMPLATES = {
    "chatml": (
        "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>'"
        " + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
    ),
    "zephyr": (
        "{% for message in messages %}{{ '<|' + message['role'] + '|>\n' + message['content'] + eos_token + '\n' }}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
    ),
}


def build_tokenizer(cfg: LLMConfig, token: str | None = None):
    tokenizer = common.build_tokenizer(cfg, token)
    use_chat_template(tokenizer, cfg)
    return tokenizer


def use_chat_template(tokenizer, cfg: LLMConfig) -> bool:
    """Set the config's chat template on `tokenizer`; True when the tokenizer has none of its own and chatml
    stands in for it (`chat_template: tokenizer`)."""
    tokenizer.padding_side = "right"
    template = cfg.data.chat_template
    if template in CHAT_TEMPLATES:
        tokenizer.chat_template = CHAT_TEMPLATES[template]
    elif template == "tokenizer" and TRAINERS[cfg.trainer].data_format != "blocks" and not tokenizer.chat_template:
        tokenizer.chat_template = CHAT_TEMPLATES["chatml"]
        return True
    return False


def quantization_config(cfg: LLMConfig, precision: Precision):
    """bitsandbytes settings for QLoRA (the plan's preflight has refused them without CUDA)."""
    if not cfg.uses_peft or cfg.peft.quantization is None:
        return None
    import torch
    from transformers import BitsAndBytesConfig

    if cfg.peft.quantization == "int8":
        return BitsAndBytesConfig(load_in_8bit=True)
    compute = torch.bfloat16 if precision.mode == "bf16" else torch.float16
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=compute,
    )


def build_model(cfg: LLMConfig, plan: RunPlan, token: str | None = None, scorer: bool = False):
    """The causal LM to train (`scorer`: a one-logit sequence classifier instead, that scores texts)."""
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    quant = quantization_config(cfg, plan.precision)
    import torch

    kwargs = {"dtype": getattr(torch, plan.load_dtype), "attn_implementation": plan.attn_implementation}
    if quant is not None:
        kwargs["quantization_config"] = quant
    if scorer:
        cls, kwargs["num_labels"] = AutoModelForSequenceClassification, 1
    else:
        cls = AutoModelForCausalLM
    model = common.load_pretrained(cls, cfg, "weights", token, **kwargs)
    if quant is not None:
        from peft import prepare_model_for_kbit_training

        model = prepare_model_for_kbit_training(
            model, use_gradient_checkpointing=cfg.training_args.gradient_checkpointing
        )
    if cfg.training_args.gradient_checkpointing:
        model.config.use_cache = False
    return model


def build_lora_config(cfg: LLMConfig, task_type: str = "CAUSAL_LM"):
    """peft's LoraConfig for the config's `peft:` section (None without LoRA); `target_modules: all-linear` goes
    to peft as its own `all-linear` (every Linear layer but the output layer)."""
    if not cfg.uses_peft:
        return None
    from peft import LoraConfig

    from autotrain.training.adapter import init_lora_weights

    return LoraConfig(
        r=cfg.peft.r,
        lora_alpha=cfg.peft.alpha,
        lora_dropout=cfg.peft.dropout,
        target_modules=cfg.peft.target_modules,
        task_type=task_type,
        bias="none",
        use_dora=cfg.peft.use_dora,
        use_rslora=cfg.peft.use_rslora,
        init_lora_weights=init_lora_weights(cfg.peft),
    )
