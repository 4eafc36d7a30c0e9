"""Sequence to sequence (summarisation, translation): an encoder-decoder LM (AutoModelForSeq2SeqLM) trained
with transformers' Seq2SeqTrainer, optionally as a LoRA adapter (PEFT, `peft:`).

Each evaluation generates the validation targets (`num_beams`, up to `max_target_length` tokens) and scores
them against the references: ROUGE-1/2/L/Lsum F-measures from Google's rouge-score (stemmed, as the
summarisation papers report them) and corpus BLEU from sacrebleu, both in percent.
"""

from __future__ import annotations

from autotrain.data.seq2seq import load_seq2seq_splits
from autotrain.trainers.common import build_tokenizer
from autotrain.trainers.task_common import lora_model, rows_preview, task_trainer
from autotrain.training.plan import RunPlan

ROUGE = ("rouge1", "rouge2", "rougeL", "rougeLsum")


def generation_scores(predicted: list[str], references: list[str]) -> dict[str, float]:
    """ROUGE F-measures (rouge-score) and corpus BLEU (sacrebleu), in percent."""
    import sacrebleu
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(list(ROUGE), use_stemmer=True)
    totals = dict.fromkeys(ROUGE, 0.0)
    for prediction, reference in zip(predicted, references, strict=True):
        for name, score in scorer.score(reference, prediction).items():
            totals[name] += score.fmeasure
    count = max(len(references), 1)
    scores = {name: 100 * total / count for name, total in totals.items()}
    scores["bleu"] = float(sacrebleu.corpus_bleu(predicted, [references]).score)
    return scores


def encoder(tokenizer, prefix: str, length: int, target_length: int):
    """batch -> input ids of `prefix + text` (cut to `length`) and, when the batch has targets, their labels."""

    def encode(batch: dict) -> dict:
        encoded = tokenizer([prefix + text for text in batch["text"]], max_length=length, truncation=True)
        if "target" in batch:
            encoded["labels"] = tokenizer(text_target=batch["target"], max_length=target_length, truncation=True)[
                "input_ids"
            ]
        return encoded

    return encode


def build_model(cfg, plan: RunPlan, token: str | None = None):
    """The model in fp32, with a LoRA adapter (and 4/8-bit loading) when `peft:` asks for them."""
    import torch
    from transformers import AutoModelForSeq2SeqLM

    return lora_model(AutoModelForSeq2SeqLM, cfg, plan, token, "SEQ_2_SEQ_LM", dtype=torch.float32)


def build_trainer(cfg, plan: RunPlan, callbacks: list, token: str | None = None):
    import numpy as np
    from transformers import DataCollatorForSeq2Seq, Seq2SeqTrainer, Seq2SeqTrainingArguments, set_seed

    from autotrain.trainers.text_classification import max_tokens

    set_seed(cfg.training_args.seed)
    args = cfg.training_args
    tokenizer = build_tokenizer(cfg, token)
    splits = load_seq2seq_splits(cfg, token)
    model = build_model(cfg, plan, token)
    encode = encoder(tokenizer, cfg.data.prefix, max_tokens(cfg, tokenizer, model.config), args.max_target_length)
    train, valid = (
        s.map(encode, batched=True, remove_columns=["text", "target"]) for s in (splits.train, splits.valid)
    )
    references = list(splits.valid["target"])

    def compute_metrics(eval_pred):
        generated = np.where(eval_pred.predictions != -100, eval_pred.predictions, tokenizer.pad_token_id)
        predicted = [t.strip() for t in tokenizer.batch_decode(generated, skip_special_tokens=True)]
        return generation_scores(predicted, references)

    generating = {  # the validation targets are generated at each evaluation, then scored
        "trainer_cls": Seq2SeqTrainer,
        "args_cls": Seq2SeqTrainingArguments,
        "args": {
            "predict_with_generate": True,
            "generation_max_length": args.max_target_length,
            "generation_num_beams": args.num_beams,
        },
        "compute_metrics": compute_metrics,
    }
    collator = DataCollatorForSeq2Seq(tokenizer, model=model)
    return task_trainer(cfg, plan, callbacks, model, train, valid, tokenizer, collator, **generating)


def preview(cfg, count: int, token: str | None = None) -> dict:
    """The first inputs (with the prefix) and their targets."""
    splits = load_seq2seq_splits(cfg, token)
    return rows_preview(splits, count, lambda row: {"input": cfg.data.prefix + row["text"], "target": row["target"]})
