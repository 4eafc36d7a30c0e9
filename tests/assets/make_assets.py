"""Build the tiny model, tokenizer and data files the quick start and tests use.

Deterministic: running it again rewrites identical files. Nothing is downloaded.

    python tests/assets/make_assets.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
COLORS = ["red", "blue", "green", "yellow", "black", "white", "orange", "purple"]
THINGS = ["apple", "sky", "leaf", "sun", "night", "snow", "carrot", "grape", "cherry", "sea", "grass", "coal"]
COLOR_OF = {
    "apple": "red",
    "sky": "blue",
    "leaf": "green",
    "sun": "yellow",
    "night": "black",
    "snow": "white",
    "carrot": "orange",
    "grape": "purple",
    "cherry": "red",
    "sea": "blue",
    "grass": "green",
    "coal": "black",
}
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>'"
    " + '\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def sentences(rng: random.Random, n: int) -> list[str]:
    out = []
    for _ in range(n):
        thing = rng.choice(THINGS)
        out.append(f"the {thing} is {COLOR_OF[thing]}. a {COLOR_OF[thing]} {thing} is a happy {thing}.")
    return out


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def make_data(rng: random.Random) -> list[str]:
    data = HERE / "data"
    data.mkdir(exist_ok=True)
    text = sentences(rng, 256)
    write_jsonl(data / "text.jsonl", [{"text": t} for t in text])
    chat, prefs = [], []
    for _ in range(128):
        thing = rng.choice(THINGS)
        wrong = rng.choice([c for c in COLORS if c != COLOR_OF[thing]])
        question = f"what color is the {thing}?"
        chat.append(
            {
                "messages": [
                    {"role": "user", "content": question},
                    {"role": "assistant", "content": f"the {thing} is {COLOR_OF[thing]}."},
                ]
            }
        )
        prefs.append(
            {
                "question": question,
                "good": f"the {thing} is {COLOR_OF[thing]}.",
                "bad": f"the {thing} is {wrong}.",
            }
        )
    write_jsonl(data / "chat.jsonl", chat)
    write_jsonl(data / "preferences.jsonl", prefs)
    return text + [m["content"] for row in chat for m in row["messages"]]


def make_tokenizer(corpus: list[str], out: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|pad|>", "<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=specials,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|begin_of_text|>",
        eos_token="<|end_of_text|>",
        pad_token="<|pad|>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
    )
    fast.chat_template = CHATML
    fast.save_pretrained(out)
    return fast


def make_model(tokenizer, out: Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    LlamaForCausalLM(config).save_pretrained(out)


def main() -> None:
    rng = random.Random(0)
    corpus = make_data(rng)
    out = HERE / "tiny-llama"
    tokenizer = make_tokenizer(corpus, out)
    make_model(tokenizer, out)
    print(f"wrote {out} and {HERE / 'data'}")


if __name__ == "__main__":
    main()
