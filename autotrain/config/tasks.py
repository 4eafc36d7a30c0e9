"""Every task autotrain trains, declared once. Importing this module imports neither torch nor pydantic.

The commands (`autotrain TASK --config F`, `init`, `schema`), the config loader (which schema validates a
`task:`), the cross-field rules, AutoTrain Advanced's translation, the run (which builder trains it, what
its evaluation watches), the memory estimate, inference and the app (through `/api/schema`) all read
`TASKS`. Adding a task is one entry here, its schema (`schema`), its builder (`builder`), its inference
module (`inference`), a template under `configs/` and their tests.

The LLM task's trainers have a table of their own (`autotrain.config.trainers`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class TaskSpec:
    name: str  # the `task:` value and the command's name
    help: str  # one line: what it trains (the command's help)
    schema: str  # "module:Class" of its pydantic config in autotrain.config, imported when a config names it
    templates: tuple[str, ...]  # shipped configs relative to configs/; the first is `autotrain init TASK`'s
    columns: tuple[str, ...] = ()  # the `column_mapping` keys it reads (LLM: by trainer, from the trainer table)
    optional_columns: tuple[str, ...] = ()
    # "module:function" in autotrain.trainers returning (trainer, plan); "" = the LLM trainer table's builders
    builder: str = ""
    # a module of autotrain.inference with `read_rows`, `load`, `predict` and `evaluate` ("" = built in)
    inference: str = ""
    family: str = ""  # tasks whose cross-field rules are shared (autotrain/config/rules.py): "" = its own name
    trainers: tuple[str, ...] = ()  # the `trainer:` choices of a task that has several (first: the default)
    # AutoTrain Advanced: its task names for this one (each with the trainer it means, or None), its
    # column-mapping names (-> this task's columns), and the `params:` of its own this task takes
    advanced: tuple[tuple[str, str | None], ...] = ()
    advanced_columns: tuple[tuple[str, str], ...] = ()
    advanced_params: tuple[str, ...] = ()
    # what it needs beyond the plain install: `pip install 'autotrain[extra]'` brings `packages` (import names)
    extra: str = ""
    packages: tuple[str, ...] = ()
    auto_model: str = ""  # the transformers Auto class the memory estimate builds from base_model's config
    metrics: tuple[str, ...] = ()  # what each evaluation reports (early stopping may watch any, or eval_loss)
    lower_is_better: tuple[str, ...] = ()  # of `metrics`: the ones that improve by going down
    splits_validation: bool = True  # without `valid_split`, holds `valid_size` of train out for evaluation

    @property
    def all_columns(self) -> tuple[str, ...]:
        return self.columns + self.optional_columns

    @property
    def rules(self) -> str:
        return self.family or self.name


_CLASSIFICATION_METRICS = ("accuracy", "f1", "precision", "recall")
_REGRESSION_METRICS = {"metrics": ("mse", "mae", "r2", "pearson", "spearman"), "lower_is_better": ("mse", "mae")}
# AutoTrain Advanced's column names of a task whose rows are a text or an image with a target
_TEXT_TARGET = (("text_column", "text"), ("target_column", "target"))
_IMAGE_TARGET = (("image_column", "image"), ("target_column", "target"))
# AutoTrain Advanced's LoRA params: every task that trains an adapter takes them
ADVANCED_LORA = ("peft", "lora_r", "lora_alpha", "lora_dropout", "target_modules", "quantization", "merge_adapter")


def _names(*names: str) -> tuple[tuple[str, None], ...]:
    """AutoTrain Advanced's names of a task that has one trainer."""
    return tuple((name, None) for name in names)


_TEXT = "autotrain.config.text_tasks:"
# AutoTrain Advanced's sentence-transformers trainers (the first is its default): what the rows hold
#   pair: sentence1 and a sentence2 that goes with it (in-batch negatives); qa: the same, a query and its answer
#   pair_class: two sentences and a class label; pair_score: two sentences and a similarity score
#   triplet: an anchor, a positive and a negative
SENTENCE_TRAINERS = ("pair_score", "pair", "pair_class", "triplet", "qa")
_VISION = "autotrain.config.vision_tasks:"
# AutoTrain Advanced's vision-language trainers (`vlm:vqa`, `vlm:captioning`): image + question -> answer,
# image -> caption
VLM_TRAINERS = ("vqa", "captioning")

TASKS: dict[str, TaskSpec] = {
    spec.name: spec
    for spec in (
        TaskSpec(
            "llm",
            "Fine-tune a causal language model",
            "autotrain.config.llm:LLMConfig",
            (),  # one per trainer: the trainer table's `template`
            family="llm",
            splits_validation=False,
            auto_model="AutoModelForCausalLM",
        ),
        TaskSpec(
            "text-classification",
            "Train a text classifier (AutoModelForSequenceClassification)",
            "autotrain.config.classification:TextClassificationConfig",
            ("text-classification/imdb.yml",),
            ("text", "target"),
            builder="autotrain.trainers.text_classification:build_trainer",
            family="classification",
            advanced=_names(
                "text_classification",
                "text-classification",
                "text_binary_classification",
                "text_multi_class_classification",
            ),
            advanced_columns=_TEXT_TARGET,
            auto_model="AutoModelForSequenceClassification",
            metrics=_CLASSIFICATION_METRICS,
        ),
        TaskSpec(
            "image-classification",
            "Train an image classifier (AutoModelForImageClassification)",
            "autotrain.config.classification:ImageClassificationConfig",
            ("image-classification/beans.yml",),
            ("image", "target"),
            builder="autotrain.trainers.image_classification:build_trainer",
            family="classification",
            advanced=_names(
                "image_classification",
                "image-classification",
                "image_binary_classification",
                "image_multi_class_classification",
            ),
            advanced_columns=_IMAGE_TARGET,
            auto_model="AutoModelForImageClassification",
            metrics=_CLASSIFICATION_METRICS,
        ),
        TaskSpec(
            "text-regression",
            "Train a text regressor: one number per text (a one-output AutoModelForSequenceClassification)",
            _TEXT + "TextRegressionConfig",
            ("text-regression/review-scores.yml",),
            ("text", "target"),
            builder="autotrain.trainers.text_regression:build_trainer",
            inference="autotrain.inference.regression",
            advanced=_names("text_regression", "text_single_column_regression"),
            advanced_columns=_TEXT_TARGET,
            extra="text-regression",
            packages=("scipy",),
            auto_model="AutoModelForSequenceClassification",
            **_REGRESSION_METRICS,
        ),
        TaskSpec(
            "token-classification",
            "Train a token classifier: a tag per word, such as named entities (AutoModelForTokenClassification)",
            _TEXT + "TokenClassificationConfig",
            ("token-classification/conll2003.yml",),
            ("tokens", "tags"),
            builder="autotrain.trainers.token_classification:build_trainer",
            inference="autotrain.inference.tokens",
            advanced=_names("token_classification", "text_token_classification"),
            advanced_columns=(("tokens_column", "tokens"), ("tags_column", "tags")),
            extra="token-classification",
            packages=("seqeval",),
            auto_model="AutoModelForTokenClassification",
            metrics=("precision", "recall", "f1", "accuracy"),
        ),
        TaskSpec(
            "extractive-qa",
            "Train extractive question answering: the answer's span in its context (AutoModelForQuestionAnswering)",
            _TEXT + "ExtractiveQAConfig",
            ("extractive-qa/squad.yml",),
            ("context", "question", "answers"),
            builder="autotrain.trainers.extractive_qa:build_trainer",
            inference="autotrain.inference.qa",
            advanced=_names("extractive-qa", "extractive_question_answering", "text_extractive_question_answering"),
            advanced_columns=(
                ("text_column", "context"),
                ("question_column", "question"),
                ("answer_column", "answers"),
            ),
            advanced_params=("max_doc_stride",),
            extra="extractive-qa",
            packages=("torchmetrics",),
            auto_model="AutoModelForQuestionAnswering",
            metrics=("exact_match", "f1"),
        ),
        TaskSpec(
            "seq2seq",
            "Train a sequence-to-sequence model: summarisation, translation (AutoModelForSeq2SeqLM)",
            _TEXT + "Seq2SeqConfig",
            ("seq2seq/samsum.yml",),
            ("text", "target"),
            builder="autotrain.trainers.seq2seq:build_trainer",
            inference="autotrain.inference.seq2seq",
            advanced=_names("seq2seq"),
            advanced_columns=_TEXT_TARGET,
            advanced_params=("max_target_length", *ADVANCED_LORA),
            extra="seq2seq",
            packages=("rouge_score", "sacrebleu"),
            auto_model="AutoModelForSeq2SeqLM",
            metrics=("rouge1", "rouge2", "rougeL", "rougeLsum", "bleu"),
        ),
        TaskSpec(
            "sentence-transformers",
            "Train a sentence-embedding model on pairs, scored or labelled pairs, or triplets (sentence-transformers)",
            _TEXT + "SentenceTransformersConfig",
            ("sentence-transformers/all-nli-pairs.yml",),
            ("sentence1", "sentence2"),
            optional_columns=("sentence3", "target"),
            builder="autotrain.trainers.sentence_transformers:build_trainer",
            inference="autotrain.inference.embeddings",
            trainers=SENTENCE_TRAINERS,
            advanced=tuple(
                (f"{prefix}:{trainer}", trainer)
                for prefix in ("sentence-transformers", "st")
                for trainer in SENTENCE_TRAINERS
            ),
            advanced_columns=(
                ("sentence1_column", "sentence1"),
                ("sentence2_column", "sentence2"),
                ("sentence3_column", "sentence3"),
                ("target_column", "target"),
            ),
            advanced_params=("trainer",),
            extra="sentence-transformers",
            packages=("sentence_transformers",),
            auto_model="AutoModel",
            # what its evaluators report, by trainer (autotrain.config.text_tasks.SENTENCE_METRICS)
            metrics=(
                "spearman_cosine",
                "pearson_cosine",
                "cosine_accuracy",
                "cosine_f1",
                "accuracy",
                "cosine_accuracy@1",
                "cosine_mrr@10",
                "cosine_ndcg@10",
            ),
        ),
        TaskSpec(
            "image-regression",
            "Train an image regressor: one number per image (a one-output AutoModelForImageClassification)",
            _VISION + "ImageRegressionConfig",
            ("image-regression/image-quality.yml",),
            ("image", "target"),
            builder="autotrain.trainers.image_regression:build_trainer",
            inference="autotrain.inference.image_regression",
            advanced=_names("image_regression", "image-regression", "image_single_column_regression", "image_scoring"),
            advanced_columns=_IMAGE_TARGET,
            extra="image-regression",
            packages=("scipy",),
            auto_model="AutoModelForImageClassification",
            **_REGRESSION_METRICS,
        ),
        TaskSpec(
            "object-detection",
            "Train an object detector: labelled boxes per image (AutoModelForObjectDetection: DETR, YOLOS, RT-DETR)",
            _VISION + "ObjectDetectionConfig",
            ("object-detection/cppe5.yml",),
            ("image", "objects"),
            builder="autotrain.trainers.object_detection:build_trainer",
            inference="autotrain.inference.detection",
            advanced=_names("object_detection", "object-detection", "image_object_detection"),
            advanced_columns=(("image_column", "image"), ("objects_column", "objects")),
            advanced_params=("image_square_size",),
            extra="object-detection",
            packages=("albumentations", "pycocotools", "scipy"),
            auto_model="AutoModelForObjectDetection",
            metrics=("map", "map_50", "map_75", "mar_1", "mar_10", "mar_100"),
        ),
        TaskSpec(
            "vlm",
            "Fine-tune a vision-language model: image + text -> text (AutoModelForImageTextToText)",
            _VISION + "VLMConfig",
            ("vlm/vqav2-paligemma.yml", "vlm/captions-smolvlm.yml"),
            ("image", "answer"),
            optional_columns=("prompt",),
            builder="autotrain.trainers.vlm:build_trainer",
            inference="autotrain.inference.vlm",
            trainers=VLM_TRAINERS,
            advanced=tuple((f"vlm:{trainer}", trainer) for trainer in VLM_TRAINERS),
            advanced_columns=(
                ("image_column", "image"),
                ("text_column", "answer"),
                ("prompt_text_column", "prompt"),
            ),
            advanced_params=("trainer", *ADVANCED_LORA, "disable_gradient_checkpointing"),
            extra="vlm",
            packages=("torchmetrics",),
            auto_model="AutoModelForImageTextToText",
            metrics=("exact_match", "f1"),
        ),
    )
}


def task_names() -> tuple[str, ...]:
    return tuple(TASKS)


def advanced_tasks() -> dict[str, tuple[str, str | None]]:
    """AutoTrain Advanced's task names of every non-LLM task -> (task, trainer or None)."""
    return {advanced: (spec.name, trainer) for spec in TASKS.values() for advanced, trainer in spec.advanced}


def missing_extra(task: str) -> str | None:
    """What the task needs that is not installed, as one line naming the extra to install (None: nothing)."""
    import importlib.util

    spec = TASKS[task]
    missing = [name for name in spec.packages if importlib.util.find_spec(name) is None]
    if not missing:
        return None
    from autotrain.hints import install_hint

    return f"task `{task}` needs {', '.join(missing)}: {install_hint(extra=spec.extra)}"


def schema_of(task: str):
    """The pydantic config class of `task` (imported on first use: each schema costs its import)."""
    from importlib import import_module

    module, _, name = TASKS[task].schema.partition(":")
    if not module.startswith("autotrain.config."):  # schemas live in this layer (tests/test_architecture.py)
        raise ValueError(f"task `{task}`: schema {TASKS[task].schema!r} is not in autotrain.config")
    return getattr(import_module(module), name)


class TaskModels(Mapping):
    """`task -> config class` for every task of the table, each class imported when it is first looked up."""

    def __init__(self):
        self._loaded: dict[str, type] = {}

    def __getitem__(self, task: str):
        if task not in TASKS:
            raise KeyError(task)
        if task not in self._loaded:
            self._loaded[task] = schema_of(task)
        return self._loaded[task]

    def __contains__(self, task: object) -> bool:
        return task in TASKS

    def __iter__(self):
        return iter(TASKS)

    def __len__(self) -> int:
        return len(TASKS)
