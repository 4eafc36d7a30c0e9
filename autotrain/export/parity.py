"""Does the exported model answer like the trained one? Prompts from the run's validation split (or its
training data), the same greedy tokens and the same logits, read back the way users will read the file.

Two references, because they answer two questions. Against the trained model (fp32, adapters merged):
what the export changed, rounding included (a q4_0 file answers differently by design; an f16 one must not).
Against the trained model with every weight rounded exactly as the file stores it: whether the file holds
the model it should (names, Q/K layout, norms, tokenizer), a check that holds for every quant type."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from autotrain.errors import UserInputError

GREEDY_TOKENS = 32
MAX_PROMPTS = 8
PROMPT_TOKENS = 96  # the end of longer prompts is kept
LOGIT_TOLERANCE = 1e-3  # the file against the weights it holds, in fp32 logits
EXACT_QUANTS = ("f32", "f16")  # the greedy tokens of these must equal the trained model's
# The other types change answers by design (a near-tie tips the other way, and a prompt's 32 greedy tokens
# then part): what they must keep is the share of positions along the trained model's greedy answers where
# the export's top token is the trained model's (`token_agreement_pct`). Measured on SmolLM2-135M-Instruct
# (docs/export.md): bf16 98%, q8_0 95%, q5_1 82%, q5_0 85%, q4_1 85%, q4_0 68%; the quick start's tiny
# Llama: q8_0 99%, q4_0 92%.
MIN_TOKEN_AGREEMENT = {"bf16": 90.0, "q8_0": 90.0, "q5_1": 75.0, "q5_0": 75.0, "q4_1": 60.0, "q4_0": 60.0}


def rule(task: str, quant: str) -> str:
    """What the export of `task` at `quant` must keep of the trained model's answers, in words."""
    if quant in EXACT_QUANTS or task != "llm" and quant not in MIN_TOKEN_AGREEMENT:
        return f"{quant}: every {'prompt' if task == 'llm' else 'row'} required"
    if task != "llm":  # predictions of other tasks at bf16: reported
        return f"{quant}: reported, not required"
    return f"{quant}: at least {MIN_TOKEN_AGREEMENT[quant]:g}% of tokens required"


@dataclass
class Prompts:
    ids: list[list[int]]
    conversations: list[list[dict]] = field(default_factory=list)  # chat prompts, for the template checks
    texts: list[str] = field(default_factory=list)  # what each prompt renders to, before tokenizing
    source: str = ""
    system: str | None = None  # the system prompt every conversation of the data opens with, if one


def collect_prompts(cfg, tokenizer, limit: int = MAX_PROMPTS) -> Prompts:
    """Up to `limit` prompts from the validation split, else the training split; fixed probes when the data
    cannot be read here (a hub dataset offline), said so in `source`."""
    from autotrain.data.llm import load_llm_split
    from autotrain.data.loading import FORMATS

    split = cfg.data.valid_split or cfg.data.train_split
    try:
        dataset = load_llm_split(cfg, split, token=cfg.hub.token)
        rows = [dataset[i] for i in range(min(limit, len(dataset)))]
        named = split if split.endswith(tuple(FORMATS)) else f"{cfg.data.path} [{split}]"  # a split given as a file
        source = f"{named}, first {len(rows)} rows"
    except (UserInputError, OSError, ValueError) as exc:
        rows, source = [], f"fixed probes (the data could not be read: {str(exc).splitlines()[0][:120]})"
    prompts = Prompts([], source=source)
    for row in rows or _probes(tokenizer):
        _add(prompts, row, tokenizer)
    systems = {c[0]["content"] for c in prompts.conversations if c and c[0]["role"] == "system"}
    every = all(c and c[0]["role"] == "system" for c in prompts.conversations)
    prompts.system = systems.pop() if rows and every and len(systems) == 1 else None
    return prompts


def _probes(tokenizer) -> list[dict]:
    if tokenizer.chat_template:
        return [{"messages": [{"role": "user", "content": q}]} for q in ("Hello, who are you?", "Name a color.")]
    return [{"text": "Once upon a time"}, {"text": "The capital of France is"}]


def _add(prompts: Prompts, row: dict, tokenizer) -> None:
    value = row.get("messages") or row.get("prompt") or row.get("text")
    if isinstance(value, list):
        conversation = list(value)
        while len(conversation) > 1 and conversation[-1]["role"] == "assistant":
            conversation.pop()
        conversation = [{"role": m["role"], "content": m["content"]} for m in conversation]
        text = tokenizer.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        prompts.conversations.append(conversation)
    elif isinstance(value, str) and value:
        ids = tokenizer(value, add_special_tokens=True)["input_ids"]
        ids = ids[: max(8, min(len(ids) // 2, PROMPT_TOKENS))] if "text" in row else ids
        text = tokenizer.decode(ids)
    else:
        return
    prompts.ids.append(ids[-PROMPT_TOKENS:])
    prompts.texts.append(text)


# --- comparing two models ----------------------------------------------------------------------------------


def greedy(model, ids: list[int], steps: int = GREEDY_TOKENS) -> list[int]:
    """The first `steps` greedy tokens (through EOS: a continuation is compared in full)."""
    import torch

    with torch.inference_mode():
        out = model(input_ids=torch.tensor([ids]), use_cache=True)
        tokens: list[int] = []
        for _ in range(steps):
            tokens.append(int(out.logits[0, -1].argmax()))
            # transformers 5 calls the cache `cache`; earlier releases `past_key_values`
            cached = {"cache": out.cache} if hasattr(out, "cache") else {"past_key_values": out.past_key_values}
            out = model(input_ids=torch.tensor([[tokens[-1]]]), use_cache=True, **cached)
    return tokens


def logits(model, ids: list[int]):
    import torch

    with torch.inference_mode():
        return model(input_ids=torch.tensor([ids])).logits[0].float()


def compare(reference, candidate, prompts: Prompts, answers: list[list[int]]) -> dict[str, Any]:
    """Greedy agreement and the largest logit difference, each prompt followed by the trained model's greedy
    `answers`, in one forward pass per model: the candidate picks the reference's top token at every position
    of that answer exactly when its own greedy answer is the same (a prompt "agrees"); positions that
    differ are counted in `token_agreement_pct` (top-1 agreement along the answer)."""
    agreeing, positions, same_positions, worst = 0, 0, 0, 0.0
    for ids, answer in zip(prompts.ids, answers, strict=True):
        full = ids + answer
        ref, got = logits(reference, full), logits(candidate, full)
        span = slice(len(ids) - 1, len(full) - 1)
        same = ref[span].argmax(-1) == got[span].argmax(-1)
        agreeing += bool(same.all())
        positions += len(answer)
        same_positions += int(same.sum())
        worst = max(worst, float((ref - got).abs().max()))
    count = len(prompts.ids)
    return {
        "prompts": count,
        "prompts_agreeing": agreeing,
        "agreement_pct": round(100.0 * agreeing / count, 2) if count else None,
        "token_agreement_pct": round(100.0 * same_positions / positions, 2) if positions else None,
        "max_logit_diff": worst,
    }


def rounded_copy(model, round_matrix):
    """A copy of `model` whose weights are replaced by `round_matrix(weights)` (what the file stores): its
    parameters and the buffers saved with them (a detector's frozen batch-norm statistics), each tied tensor
    once."""
    import torch

    twin = copy.deepcopy(model)
    seen: set[int] = set()
    with torch.no_grad():
        for tensor in twin.state_dict(keep_vars=True).values():
            if not tensor.is_floating_point() or id(tensor) in seen:
                continue
            seen.add(id(tensor))
            tensor.copy_(torch.from_numpy(round_matrix(tensor.detach().float().numpy())).to(tensor.dtype))
    return twin


def llama_cpp_check(path, prompts: Prompts, reference_tokens: list[list[int]], reference_model) -> dict[str, Any]:
    """The same greedy tokens through llama.cpp itself (llama-cpp-python), when it is installed."""
    try:
        from llama_cpp import Llama
    except ImportError:
        return {"exercised": False, "reason": "llama-cpp-python is not installed"}
    import numpy as np

    context = max(len(ids) for ids in prompts.ids) + GREEDY_TOKENS + 8
    llm = Llama(model_path=str(path), n_ctx=context, logits_all=True, verbose=False, seed=0)
    agreeing, worst = 0, 0.0
    for ids, expected in zip(prompts.ids, reference_tokens, strict=True):
        llm.reset()
        llm.eval(ids)
        first = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        got = []
        for _ in range(GREEDY_TOKENS):
            got.append(int(np.argmax(llm.scores[llm.n_tokens - 1])))
            llm.eval([got[-1]])
        agreeing += got == expected
        ref = logits(reference_model, ids)[-1].numpy()
        worst = max(worst, float(np.abs(first[: ref.shape[0]] - ref).max()))
    count = len(prompts.ids)
    return {
        "exercised": True,
        "prompts": count,
        "prompts_agreeing": agreeing,
        "agreement_pct": round(100.0 * agreeing / count, 2) if count else None,
        "max_logit_diff_first_token": worst,
    }
