"""Text generation for chat and predict: prompts through the chat template, the run's prompt budget,
greedy decoding unless a temperature is given, and stopping at the end of the assistant's turn."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotrain.errors import UserInputError

# End-of-turn markers of common chat templates: generation stops at them as it does at EOS.
TURN_ENDS = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>")


@dataclass(frozen=True)
class GenerationSettings:
    max_new_tokens: int = 256
    temperature: float = 0.0  # 0 = greedy: the same prompt always gets the same answer
    top_p: float = 1.0

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise UserInputError(f"--max-new-tokens must be at least 1 (got {self.max_new_tokens})")
        if self.temperature < 0:
            raise UserInputError(f"--temperature must be 0 (greedy) or more (got {self.temperature})")
        if not 0 < self.top_p <= 1:
            raise UserInputError(f"--top-p must be in (0, 1] (got {self.top_p})")


def stop_ids(tokenizer, model) -> list[int]:
    """EOS of the model and the tokenizer, and the end-of-turn token the chat template writes."""
    ids: list[int] = []
    for value in (model.generation_config.eos_token_id, tokenizer.eos_token_id):
        ids += value if isinstance(value, list) else [value] if value is not None else []
    template = tokenizer.chat_template if isinstance(tokenizer.chat_template, str) else ""
    for marker in TURN_ENDS:
        token = tokenizer.convert_tokens_to_ids(marker) if marker in template else None
        if isinstance(token, int) and token != tokenizer.unk_token_id:
            ids.append(token)
    return list(dict.fromkeys(ids))


def generation_config(settings: GenerationSettings, tokenizer, model):
    """A fresh config, so the checkpoint's own sampling defaults never make greedy decoding random."""
    from transformers import GenerationConfig

    sampling = {"temperature": settings.temperature, "top_p": settings.top_p} if settings.temperature > 0 else {}
    return GenerationConfig(
        max_new_tokens=settings.max_new_tokens,
        # A prompt that is a complete text (a training row ends there, and EOS follows it) is still continued:
        # the stop tokens are barred from the first new token, so no completion is empty.
        min_new_tokens=1,
        do_sample=settings.temperature > 0,
        eos_token_id=stop_ids(tokenizer, model),
        pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id,
        **sampling,
    )


def prompt_ids(tokenizer, prompt: str | list[dict], budget: int | None) -> list[int]:
    """Token ids of a prompt: a string is continued as plain text, a message list goes through the chat
    template (ending with the assistant's turn). Over `budget` tokens, the end of the prompt is kept."""
    from autotrain.inference.bounds import clip_messages, clip_text

    if isinstance(prompt, str):
        text = prompt if budget is None else clip_text(tokenizer, prompt, budget, keep="end")
        ids = tokenizer(text, add_special_tokens=True)["input_ids"]
    else:
        messages = prompt if budget is None else clip_messages(tokenizer, prompt, budget)
        ids = tokenizer(render_chat(tokenizer, messages, reply=True), add_special_tokens=False)["input_ids"]
    return ids if budget is None else ids[-budget:]


def render_chat(tokenizer, messages: list[dict], reply: bool = False) -> str:
    if not tokenizer.chat_template:
        raise UserInputError(
            "the run's tokenizer has no chat template (`data.chat_template: none`), so it cannot take "
            "message lists; give plain-text prompts (a `prompt` or `text` column) instead"
        )
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=reply)


def generate(run, prompts: list[list[int]], config, streamer: Any = None) -> list[str]:
    """Complete a batch of tokenized prompts (left-padded, so every row ends where generation starts)."""
    import torch

    tokenizer = run.processor
    tokenizer.padding_side = "left"
    batch = tokenizer.pad({"input_ids": prompts}, padding=True, return_tensors="pt").to(run.device)
    with torch.inference_mode():
        out = run.model.generate(**batch, generation_config=config, streamer=streamer)
    new = out[:, batch["input_ids"].shape[1] :].tolist()
    return [continuation(tokenizer, prompt, ids) for prompt, ids in zip(prompts, new, strict=True)]


def continuation(tokenizer, prompt: list[int], new: list[int]) -> str:
    """The text the new tokens add to the prompt, its leading space included: decoded together with the
    prompt and cut after the prompt's text, because tokenizers that mark word starts (SentencePiece) drop
    the first word's space when its tokens are decoded alone."""
    whole = tokenizer.decode(prompt + new, skip_special_tokens=True)
    before = tokenizer.decode(prompt, skip_special_tokens=True)
    if whole.startswith(before):
        return whole[len(before) :]
    return tokenizer.decode(new, skip_special_tokens=True)
