"""Sentence embeddings: a sentence-transformers model (base_model as one, or any encoder with mean pooling
added) trained by sentence-transformers' own trainer, loss and evaluators, as AutoTrain Advanced's five
trainers ask:

- pair, qa: sentence1 with the sentence2 that goes with it; MultipleNegativesRankingLoss (the other rows of
  a batch are the negatives, so batches hold no duplicates); retrieval metrics (accuracy@k, MRR@10,
  NDCG@10) of each sentence1 finding its sentence2 among all the validation ones;
- pair_score: two sentences and a similarity score; CoSENTLoss (or CosineSimilarityLoss); Spearman and
  Pearson correlation of their cosine similarity with the score;
- pair_class: two sentences and a class; SoftmaxLoss (a classifier on (u, v, |u - v|)); with two classes
  the accuracy and F1 of a cosine-similarity threshold, with more the softmax head's accuracy;
- triplet: anchor, positive, negative; MultipleNegativesRankingLoss (or TripletLoss); how often the anchor
  is closer to its positive than to its negative.
"""

from __future__ import annotations

from autotrain.config.text_tasks import SENTENCE_LOSSES
from autotrain.data.sentences import load_sentence_splits
from autotrain.errors import UserInputError, eprint
from autotrain.trainers.task_common import rows_preview, task_trainer
from autotrain.training.plan import RunPlan


def load_model(cfg, token: str | None = None, source: str | None = None):
    """A SentenceTransformer from base_model (a plain encoder gets mean pooling); bad input if it cannot load."""
    from sentence_transformers import SentenceTransformer

    source = source or cfg.base_model
    try:
        model = SentenceTransformer(
            source,
            device="cpu",  # the Trainer moves it to the planned device
            revision=cfg.revision,
            token=token,
            trust_remote_code=cfg.trust_remote_code,
        )
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserInputError(f"cannot load base_model `{source}` as a sentence-transformers model: {first}") from None
    return model


def sequence_length(model, asked: int) -> int:
    """`max_length`, capped by what the encoder's position embeddings take."""
    limit = getattr(getattr(model[0], "auto_model", None), "config", None)
    positions = getattr(limit, "max_position_embeddings", None)
    length = min(asked, positions) if positions else asked
    if length < asked:
        from autotrain.training.model_shape import capped_length_note

        eprint(f"note: {capped_length_note(asked, length)}")
    return length


def build_loss(cfg, model, classes: int):
    from sentence_transformers.sentence_transformer import losses

    name = cfg.training_args.loss or SENTENCE_LOSSES[cfg.trainer][0]
    if name == "mnrl":
        return losses.MultipleNegativesRankingLoss(model)
    if name == "cosent":
        return losses.CoSENTLoss(model)
    if name == "cosine":
        return losses.CosineSimilarityLoss(model)
    if name == "triplet":
        return losses.TripletLoss(model)
    return losses.SoftmaxLoss(model, model.get_sentence_embedding_dimension(), classes)


def build_evaluator(trainer: str, dataset, loss=None, classes: int = 2):
    """sentence-transformers' evaluator for `trainer` on `dataset` (metric names: SENTENCE_METRICS)."""
    from sentence_transformers.sentence_transformer import evaluation

    first, second = list(dataset["sentence1"]), list(dataset["sentence2"])
    if trainer == "pair_score":
        return evaluation.EmbeddingSimilarityEvaluator(first, second, list(dataset["score"]), write_csv=False)
    if trainer == "triplet":
        return evaluation.TripletEvaluator(first, second, list(dataset["sentence3"]), write_csv=False)
    if trainer == "pair_class":
        labels = list(dataset["label"])
        if classes <= 2 or loss is None:  # class 1: similar, as sentence-transformers reads binary labels
            return evaluation.BinaryClassificationEvaluator(first, second, labels, write_csv=False)
        return softmax_accuracy(first, second, labels, loss)
    corpus = {f"d{i}": text for i, text in enumerate(dict.fromkeys(second))}
    ids = {text: key for key, text in corpus.items()}
    queries = {f"q{i}": text for i, text in enumerate(first)}
    relevant: dict[str, set[str]] = {f"q{i}": {ids[text]} for i, text in enumerate(second)}
    return evaluation.InformationRetrievalEvaluator(queries, corpus, relevant, write_csv=False)


def softmax_accuracy(first: list[str], second: list[str], labels: list[int], loss):
    """pair_class with more than two classes: the accuracy of SoftmaxLoss's own classifier, as an evaluator."""
    import torch
    from sentence_transformers.sentence_transformer.evaluation import SentenceEvaluator

    class SoftmaxAccuracy(SentenceEvaluator):
        def __init__(self):
            super().__init__()
            self.primary_metric = "accuracy"

        def __call__(self, model, output_path=None, epoch: int = -1, steps: int = -1) -> dict[str, float]:
            u = model.encode(first, convert_to_tensor=True)
            v = model.encode(second, convert_to_tensor=True)
            weight = loss.classifier.weight
            with torch.inference_mode():
                logits = loss.classifier(torch.cat([u, v, (u - v).abs()], dim=1).to(weight.device, weight.dtype))
            hits = (logits.argmax(dim=1).cpu() == torch.tensor(labels)).float().mean()
            return {"accuracy": float(hits)}

    return SoftmaxAccuracy()


def build_trainer(cfg, plan: RunPlan, callbacks: list, token: str | None = None):
    from sentence_transformers.sentence_transformer import (
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from sentence_transformers.sentence_transformer.training_args import BatchSamplers
    from transformers import set_seed

    set_seed(cfg.training_args.seed)
    splits = load_sentence_splits(cfg, token)
    model = load_model(cfg, token)
    model.max_seq_length = sequence_length(model, cfg.training_args.max_length)
    loss = build_loss(cfg, model, len(splits.classes or ()))
    mnrl = type(loss).__name__ == "MultipleNegativesRankingLoss"
    sampler = BatchSamplers.NO_DUPLICATES if mnrl else BatchSamplers.BATCH_SAMPLER  # a duplicate is no negative
    sentences = {
        "trainer_cls": SentenceTransformerTrainer,
        "args_cls": SentenceTransformerTrainingArguments,
        "args": {"batch_sampler": sampler},
        "loss": loss,
        "evaluator": build_evaluator(cfg.trainer, splits.valid, loss, len(splits.classes or ())),
    }
    return task_trainer(cfg, plan, callbacks, model, splits.train, splits.valid, **sentences)


def preview(cfg, count: int, token: str | None = None) -> dict:
    """The first rows as the loss reads them (columns in its order)."""
    splits = load_sentence_splits(cfg, token)
    summary = {"columns": splits.train.column_names}
    if splits.classes:
        summary["classes"] = ", ".join(f"{i}: {c}" for i, c in enumerate(splits.classes))
    return rows_preview(splits, count, dict, summary)
