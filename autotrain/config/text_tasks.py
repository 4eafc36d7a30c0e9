"""The configs of the text tasks beyond classification: text-regression, token-classification, extractive-qa,
seq2seq and sentence-transformers (their entries in autotrain/config/tasks.py name these classes).

Each holds out `data.valid_size` of train for evaluation when no `valid_split` is named, as classifiers do,
so every run reports its task's metrics; `early_stopping.metric` takes those metrics by name.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

from pydantic import Field

from autotrain.config.base import EvaluatedArgs, TaskConfig, task_training_args
from autotrain.config.classification import ClassificationData, data_field, label_names
from autotrain.config.llm import PeftConfig
from autotrain.config.rules import rule
from autotrain.config.tasks import SENTENCE_TRAINERS, TASKS
from autotrain.fields import Int

Issue = tuple[tuple, str]


class _TextArgs(EvaluatedArgs):
    max_length: Int = Field(512, ge=8, le=16_777_216, description="Tokens per input (longer inputs are truncated).")


# --- text-regression -----------------------------------------------------------------------------------


RegressionTrainingArgs = task_training_args("Regression", _TextArgs, "text-regression")


class TextRegressionConfig(TaskConfig):
    task: Literal["text-regression"] = Field(description="What to train.")
    data: ClassificationData = data_field("text, target (a number per row)")
    training_args: RegressionTrainingArgs = Field(default_factory=RegressionTrainingArgs, description="Training.")


# --- token-classification --------------------------------------------------------------------------------


class TokenData(ClassificationData):
    labels: list[str] | None = label_names(
        2,
        "The tags in id order; a tag of the data outside them is an error. null: the training split's tags (a "
        "ClassLabel's names, else sorted, `O` first).",
    )


TokenTrainingArgs = task_training_args(
    "Token",
    _TextArgs,
    "token-classification",
    "Metric watched (seqeval's entity-level precision, recall, F1; token accuracy).",
)


class TokenClassificationConfig(TaskConfig):
    task: Literal["token-classification"] = Field(description="What to train.")
    data: TokenData = data_field("tokens (a list of words per row), tags (a tag per word: names or ids)")
    training_args: TokenTrainingArgs = Field(default_factory=TokenTrainingArgs, description="Training settings.")


# --- extractive-qa ---------------------------------------------------------------------------------------


class _QAArgs(_TextArgs):
    max_length: Int = Field(
        384, ge=16, le=16_777_216, description="Tokens per window of question + context (longer contexts: windows)."
    )
    doc_stride: Int = Field(
        128, ge=1, le=16_777_216, description="Tokens shared by consecutive windows of a long context."
    )
    max_answer_length: Int = Field(30, ge=1, le=100_000, description="Longest answer, in tokens, a prediction gives.")
    n_best: Int = Field(20, ge=1, le=1000, description="Start and end candidates per window weighed for the answer.")


QATrainingArgs = task_training_args("QA", _QAArgs, "extractive-qa", "Metric watched (SQuAD exact match, F1).")


class ExtractiveQAConfig(TaskConfig):
    task: Literal["extractive-qa"] = Field(description="What to train.")
    data: ClassificationData = data_field(
        "context, question, answers (SQuAD style: {text: [...], answer_start: [...]}, character offsets)"
    )
    training_args: QATrainingArgs = Field(default_factory=QATrainingArgs, description="Training settings.")


@rule("training_args.doc_stride", "training_args.max_length", task="extractive-qa")
def _stride_inside_window(cfg) -> Iterator[Issue]:
    args = cfg.training_args
    if args.doc_stride >= args.max_length // 2:
        yield (
            ("training_args", "doc_stride"),
            f"`training_args.doc_stride` ({args.doc_stride}) must be below half of `training_args.max_length` "
            f"({args.max_length}): each window moves on by max_length minus the question minus doc_stride tokens",
        )


# --- seq2seq ---------------------------------------------------------------------------------------------


class Seq2SeqData(ClassificationData):
    prefix: str = Field(
        "", max_length=10_000, description="Text put before every input, e.g. `summarize: ` for T5 checkpoints."
    )


class _Seq2SeqArgs(_TextArgs):
    max_target_length: Int = Field(128, ge=1, le=16_777_216, description="Tokens per target (and per generation).")
    num_beams: Int = Field(1, ge=1, le=64, description="Beams when generating at evaluation and predict (1: greedy).")


Seq2SeqTrainingArgs = task_training_args(
    "Seq2Seq", _Seq2SeqArgs, "seq2seq", "Metric watched (ROUGE F-measures from rouge-score, BLEU from sacrebleu)."
)


class Seq2SeqConfig(TaskConfig):
    task: Literal["seq2seq"] = Field(description="What to train.")
    data: Seq2SeqData = data_field("text (the input), target (the output text)")
    peft: PeftConfig | None = Field(None, description="LoRA; absent or `enabled: false` = full fine-tune.")
    training_args: Seq2SeqTrainingArgs = Field(default_factory=Seq2SeqTrainingArgs, description="Training settings.")

    @property
    def uses_peft(self) -> bool:
        return self.peft is not None and self.peft.enabled


# --- sentence-transformers -------------------------------------------------------------------------------

# trainer -> (its columns, the losses it may train with (first: the default), what its evaluator reports)
SENTENCE_LOSSES = {
    "pair": ("mnrl",),
    "qa": ("mnrl",),
    "pair_score": ("cosent", "cosine"),
    "pair_class": ("softmax",),
    "triplet": ("mnrl", "triplet"),
}
SENTENCE_COLUMNS = {
    "pair": ("sentence1", "sentence2"),
    "qa": ("sentence1", "sentence2"),
    "pair_score": ("sentence1", "sentence2", "target"),
    "pair_class": ("sentence1", "sentence2", "target"),
    "triplet": ("sentence1", "sentence2", "sentence3"),
}
SENTENCE_METRICS = {
    "pair": ("cosine_accuracy@1", "cosine_mrr@10", "cosine_ndcg@10"),
    "qa": ("cosine_accuracy@1", "cosine_mrr@10", "cosine_ndcg@10"),
    "pair_score": ("spearman_cosine", "pearson_cosine"),
    "pair_class": ("cosine_accuracy", "cosine_f1", "accuracy"),  # two classes: cosine; more: the softmax head
    "triplet": ("cosine_accuracy",),
}
SentenceTrainer = Literal[SENTENCE_TRAINERS]
SentenceLoss = Literal["mnrl", "cosent", "cosine", "softmax", "triplet"]


class _SentenceArgs(_TextArgs):
    max_length: Int = Field(256, ge=8, le=16_777_216, description="Tokens per sentence (longer ones are truncated).")
    loss: SentenceLoss | None = Field(
        None,
        description="sentence-transformers loss: mnrl (MultipleNegativesRankingLoss: pair, qa, triplet), cosent "
        "(CoSENTLoss) or cosine (CosineSimilarityLoss: pair_score), softmax (SoftmaxLoss: pair_class), triplet "
        "(TripletLoss). null: the trainer's first.",
    )


SentenceTrainingArgs = task_training_args(
    "Sentence",
    _SentenceArgs,
    "sentence-transformers",
    "Metric watched, by trainer: "
    + "; ".join(f"{name}: {', '.join(metrics)}" for name, metrics in SENTENCE_METRICS.items()),
)


class SentenceTransformersConfig(TaskConfig):
    task: Literal["sentence-transformers"] = Field(description="What to train.")
    trainer: SentenceTrainer = Field(
        SENTENCE_TRAINERS[0],
        description="What the rows hold: "
        + "; ".join(f"{name}: {', '.join(columns)}" for name, columns in SENTENCE_COLUMNS.items())
        + " (target: a score in [0, 1] for pair_score, a class label for pair_class).",
    )
    data: ClassificationData = data_field("sentence1, sentence2, sentence3, target (by trainer)")
    training_args: SentenceTrainingArgs = Field(default_factory=SentenceTrainingArgs, description="Training settings.")


@rule("trainer", "training_args.loss", "training_args.early_stopping", task="sentence-transformers")
def _sentence_loss_and_metric(cfg) -> Iterator[Issue]:
    trainer, args = cfg.trainer, cfg.training_args
    losses = SENTENCE_LOSSES[trainer]
    if args.loss is not None and args.loss not in losses:
        yield (
            ("training_args", "loss"),
            f"`training_args.loss: {args.loss}` does not fit `trainer: {trainer}`; it takes: {', '.join(losses)}",
        )
    stop = args.early_stopping
    if stop is not None and stop.metric != "eval_loss" and stop.metric not in SENTENCE_METRICS[trainer]:
        yield (
            ("training_args", "early_stopping", "metric"),
            f"`{stop.metric}` is not reported for `trainer: {trainer}`; it reports: eval_loss, "
            + ", ".join(SENTENCE_METRICS[trainer]),
        )


@rule("trainer", "data.column_mapping", task="sentence-transformers")
def _sentence_columns(cfg) -> Iterator[Issue]:
    allowed = SENTENCE_COLUMNS[cfg.trainer]
    for key in cfg.data.column_mapping:
        if key not in allowed and key in TASKS["sentence-transformers"].all_columns:
            yield (
                ("data", "column_mapping", key),
                f"`trainer: {cfg.trainer}` reads {', '.join(allowed)}, not `{key}`",
            )


@rule("trainer", "training_args.loss", "training_args.batch_size", task="sentence-transformers")
def _in_batch_negatives(cfg) -> Iterator[Issue]:
    args = cfg.training_args
    loss = args.loss or SENTENCE_LOSSES[cfg.trainer][0]
    auto = args.batch_size == "auto"
    if loss == "mnrl" and (args.samples_per_step if auto else args.batch_size) < 2:
        which = "target_batch_size" if auto else "batch_size"
        yield (
            ("training_args", which),
            f"`trainer: {cfg.trainer}` trains with MultipleNegativesRankingLoss, whose negatives are the other rows "
            f"of a batch: `training_args.{which}` must be at least 2",
        )
