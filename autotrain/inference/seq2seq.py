"""A finished seq2seq run: generate each input's output (the run's `num_beams` and `max_target_length`);
evaluate ROUGE and BLEU against reference targets."""

from __future__ import annotations

import pickle
from pathlib import Path

from autotrain.errors import UserInputError
from autotrain.inference.inputs import Rows


def read_rows(cfg, path: Path, labels: bool) -> Rows:
    from autotrain.data.seq2seq import load_seq2seq_rows

    dataset, name = load_seq2seq_rows(cfg, str(path), labels)
    return Rows("text", list(dataset["text"]), list(dataset["target"]) if labels else None, name)


def load(folder: Path, cfg, device: str):
    """The full model, `merged/`, or the LoRA adapter merged into its base model."""
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from autotrain.training.verify import load_saved

    remote = cfg.trust_remote_code
    merged = folder / "merged"
    source = merged if (merged / "config.json").is_file() else folder
    tokenizer = load_saved(AutoTokenizer, source, "tokenizer", trust_remote_code=remote)
    if (source / "config.json").is_file():
        model = load_saved(AutoModelForSeq2SeqLM, source, "model", dtype=torch.float32, trust_remote_code=remote)
        return model.to(device), tokenizer
    from peft import PeftModel

    from autotrain.trainers.common import load_pretrained

    if cfg.peft.quantization and device != "cuda":
        raise UserInputError(f"the run in `{folder}` loads its base model in {cfg.peft.quantization}: needs CUDA")
    base = load_pretrained(AutoModelForSeq2SeqLM, cfg, "weights", None, dtype=torch.float32)
    try:
        model = PeftModel.from_pretrained(base, str(folder)).merge_and_unload()
    except (OSError, ValueError, pickle.UnpicklingError) as exc:
        raise UserInputError(f"cannot load the LoRA adapter saved in `{folder}`: {exc}") from None
    return model.to(device), tokenizer


def max_tokens(cfg, model, processor) -> int:
    from autotrain.trainers.text_classification import max_tokens as capped

    return capped(cfg, processor, model.config)


def generated(run, texts: list[str], batch_size: int, advance=lambda n: None) -> list[str]:
    import torch

    # max_length counts the decoder start token, as the Seq2SeqTrainer evaluation generates (generation_max_length)
    args, tokenizer = run.config.training_args, run.processor
    prefix = run.config.data.prefix
    out = []
    for start in range(0, len(texts), batch_size):
        batch = [prefix + text for text in texts[start : start + batch_size]]
        encoded = tokenizer(batch, max_length=run.max_tokens, truncation=True, padding=True, return_tensors="pt")
        with torch.inference_mode():
            ids = run.model.generate(
                **encoded.to(run.device), max_length=args.max_target_length, num_beams=args.num_beams
            )
        out += [t.strip() for t in tokenizer.batch_decode(ids, skip_special_tokens=True)]
        advance(len(batch))
    return out


def predict(run, values: list, batch_size: int, advance) -> list[dict]:
    return [{"generated": text} for text in generated(run, values, batch_size, advance)]


def evaluate(run, rows: Rows, batch_size: int, advance) -> dict:
    from autotrain.trainers.seq2seq import generation_scores

    predicted = generated(run, rows.values, batch_size, advance)
    return {"rows": len(rows), **generation_scores(predicted, rows.labels)}
