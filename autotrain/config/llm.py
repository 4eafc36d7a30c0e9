"""The `task: llm` config: one causal LM fine-tuned by one of the trainers of `autotrain.config.trainers`."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Literal

from pydantic import Field

from autotrain.config.base import DataConfig, ProcessCount, StrictModel, TaskConfig, TrainingArgs
from autotrain.config.benchmark import BenchmarkConfig
from autotrain.config.export import ExportConfig
from autotrain.config.rules import Issue, rule
from autotrain.config.suggest import did_you_mean
from autotrain.config.trainers import CROSS_ENTROPY, TRAINERS, used_by
from autotrain.config.trainers import DEFAULT as DEFAULT_TRAINER
from autotrain.fields import Bool, Float, Int

LLMTrainer = Literal[tuple(TRAINERS)]  # every name in the trainer table
KERNEL_TRAINERS = " / ".join(name for name, spec in TRAINERS.items() if spec.kernel_losses)


def _for(field: str, what: str) -> str:
    """A trainer-specific field's description, led by the trainers that read it (from the table)."""
    return f"{used_by(field)}: {what}"


ChatTemplate = Literal["tokenizer", "chatml", "zephyr", "none"]
PREPARED = tuple(name for name, spec in TRAINERS.items() if spec.prepared)  # streaming, mixtures: their data


class DataSource(StrictModel):
    """One source of a mixture (`data.sources`)."""

    path: str = Field(description="Hub dataset id, a local file (.jsonl .json .csv .parquet) or a folder.")
    split: str = Field("train", description="Its split (or file stem inside a folder) used for training.")
    valid_split: str | None = Field(
        None, description="Its split used for evaluation; the sources' validation splits are evaluated together."
    )
    column_mapping: dict[str, str] = Field(
        default_factory=dict, description="Task columns -> this source's columns (empty: `data.column_mapping`)."
    )
    chat_template: ChatTemplate | None = Field(
        None, description="This source's chat format (null: data.chat_template)."
    )
    weight: Float | None = Field(
        None,
        ge=0,
        le=1_000_000,
        description="Relative share of each epoch's rows, against the other sources' weights (null: 1, or the "
        "`fraction` given).",
    )
    fraction: Float | None = Field(
        None,
        gt=0,
        le=1,
        description="Share of each epoch's rows, from 0 to 1; the sources given a weight share what the "
        "fractions leave.",
    )


class LLMData(DataConfig):
    path: str | None = Field(
        None,
        description="Hub dataset id, a local file (.jsonl .json .csv .parquet) or a folder; or list several "
        "sources in `sources` instead.",
    )
    chat_template: ChatTemplate = Field(
        "tokenizer", description="Chat format: the tokenizer's own, chatml, zephyr, or none (plain text)."
    )
    sources: list[DataSource] | None = Field(
        None,
        min_length=1,
        max_length=256,
        description=f"{' / '.join(PREPARED)}: several sources mixed into one training set, each with its own path, "
        "split, column mapping and chat template, and a `weight` or a `fraction` of each epoch's rows "
        "(instead of `path`, `train_split` and `valid_split`).",
    )
    streaming: Bool = Field(
        False,
        description=f"{' / '.join(PREPARED)}: read, tokenize (and pack) the rows as training consumes them, for data "
        "larger than memory or disk; needs training_args.max_steps. Nothing is cached.",
    )
    num_proc: ProcessCount = Field(
        "auto",
        description="Processes that prepare the data (templating, tokenizing, packing), 1-1024; `auto` = one "
        "per usable CPU.",
    )

    def split_sources(self) -> list[DataSource]:
        """The sources, each with its own settings filled in from the data section's: `sources`, or `path`
        with `train_split` / `valid_split` as one source."""
        if not self.sources:
            return [
                DataSource(
                    path=self.path or "",
                    split=self.train_split,
                    valid_split=self.valid_split,
                    column_mapping=self.column_mapping,
                    chat_template=self.chat_template,
                )
            ]
        return [
            source.model_copy(
                update={
                    "column_mapping": source.column_mapping or self.column_mapping,
                    "chat_template": source.chat_template or self.chat_template,
                }
            )
            for source in self.sources
        ]

    def shares(self) -> list[float]:
        """Each source's share of an epoch's rows (they add up to 1; one source: [1.0])."""
        sources = self.split_sources()
        fractions = sum(s.fraction or 0.0 for s in sources)
        weights = [(1.0 if s.weight is None else s.weight) if s.fraction is None else 0.0 for s in sources]
        left = max(0.0, 1.0 - fractions)
        total = sum(weights)
        return [
            s.fraction if s.fraction is not None else (left * w / total if total else 0.0)
            for s, w in zip(sources, weights, strict=True)
        ]

    def paths(self) -> list[tuple[str, str]]:
        if not self.sources:
            return super().paths()
        return [(f"data.sources.{i}.path", source.path) for i, source in enumerate(self.sources)]

    @property
    def has_valid(self) -> bool:
        return any(source.valid_split for source in self.split_sources())


class PeftConfig(StrictModel):
    enabled: Bool = Field(True, description="Train a LoRA adapter; false = full fine-tune.")
    r: Int = Field(16, ge=1, le=4096, description="LoRA rank.")
    alpha: Int = Field(32, ge=1, le=65536, description="LoRA alpha (scale = alpha / r).")
    dropout: Float = Field(0.05, ge=0, lt=1, description="LoRA dropout.")
    target_modules: str | list[str] = Field(
        "all-linear", description="`all-linear` or a list of module names (q_proj, v_proj, ...)."
    )
    quantization: Literal["int4", "int8"] | None = Field(
        None, description="Load the base model in 4 or 8 bit (bitsandbytes, CUDA only): QLoRA."
    )
    merge_adapter: Bool = Field(False, description="Also save the base model with the adapter merged in.")
    use_dora: Bool = Field(
        False,
        description="DoRA (peft `use_dora`): each adapted weight is split into a magnitude (one trained value per "
        "output) and a direction that LoRA adapts. Often closer to a full fine-tune at low rank; each step costs "
        "more (the adapted weight's norm is computed in every forward). Merges like LoRA.",
    )
    use_rslora: Bool = Field(
        False,
        description="rsLoRA (peft `use_rslora`): scale the adapter by alpha / sqrt(r) instead of alpha / r, "
        "so that a high rank still learns (with alpha / r the update shrinks as r grows).",
    )
    init: Literal["default", "gaussian", "pissa", "olora"] = Field(
        "default",
        description="How the adapter starts (peft `init_lora_weights`). default: A random, B zero (the model "
        "starts as the base); gaussian: A from a Gaussian scaled by the rank; pissa: A and B from the top r "
        "singular vectors of each weight, which keeps only the rest (PiSSA); olora: from a QR decomposition of "
        "each weight (OLoRA). pissa and olora move part of each base weight into the adapter; the saved adapter "
        "is converted to a plain LoRA adapter of rank 2r on the unchanged base model.",
    )
    pissa_niter: Int | None = Field(
        None,
        ge=1,
        le=1024,
        description="`init: pissa` only: null computes the exact SVD of every adapted weight (minutes on a 7B "
        "model); N takes a fast randomized SVD with N subspace iterations (peft `pissa_niter_N`; 4 to 16 is "
        "usual, seconds on a 7B model).",
    )
    loraplus_lr_ratio: Float | None = Field(
        None,
        ge=1,
        le=10_000,
        description="LoRA+: the B matrices (and DoRA's magnitudes) learn at `lr` x this ratio, the A matrices "
        "at `lr` (peft `create_loraplus_optimizer`; 16 is the paper's usual value, with `lr` often halved). "
        "Works with every optimizer but those that group parameters themselves (GaLore, APOLLO, LOMO). "
        "null: one rate for all.",
    )


class LLMTrainingArgs(TrainingArgs):
    max_length: Int = Field(
        1024, ge=8, le=16_777_216, description="Tokens per sample (raw-text training: the block size)."
    )
    max_prompt_length: Int | None = Field(
        None,
        ge=1,
        le=16_777_216,
        description=_for("max_prompt_length", "prompt tokens kept (truncated from the left)."),
    )
    max_completion_length: Int | None = Field(
        None,
        ge=1,
        le=16_777_216,
        description=_for(
            "max_completion_length",
            "completion tokens kept, or generated per completion by a trainer that samples (null: 512).",
        ),
    )
    beta: Float | None = Field(
        None,
        ge=0,
        le=1000,
        description=_for(
            "beta",
            "preference / KL strength: the odds-ratio weight (lambda), the preference beta, or the KL "
            "coefficient of a trainer that samples (trainer default when null).",
        ),
    )
    num_generations: Int | None = Field(
        None,
        ge=2,
        le=1024,
        description=_for(
            "num_generations",
            "completions sampled per prompt, scored against each other (null: 8). "
            "batch_size x gradient_accumulation must be a multiple of it.",
        ),
    )
    temperature: Float | None = Field(
        None, gt=0, le=100, description=_for("temperature", "sampling temperature (null: 1.0).")
    )
    top_p: Float | None = Field(None, gt=0, le=1, description=_for("top_p", "nucleus sampling (null: 1.0, off)."))
    top_k: Int | None = Field(None, ge=0, le=1_000_000, description=_for("top_k", "top-k sampling (null or 0: off)."))
    rewards: list[str] | None = Field(
        None,
        min_length=1,
        max_length=64,
        description=_for(
            "rewards",
            "reward functions, summed: built-in `answer_match` (the completion's final number equals the "
            "`answer` column's, GSM8K style), `exact_match` (the completion equals `answer`), or your own as "
            "`module:function` or `path/to/file.py:function` (called with prompts, completions and the data's "
            "other columns; returns one float per completion). null: answer_match.",
        ),
    )
    reward_weights: list[Float] | None = Field(
        None, min_length=1, max_length=64, description=_for("reward_weights", "one weight per reward (null: all 1).")
    )
    packing: Bool = Field(False, description=_for("packing", "pack several samples into each max_length block."))
    padding_free: Bool = Field(
        True,
        description=_for(
            "padding_free",
            "no padding: each batch's samples are laid end to end in rows as long as its longest sample, kept "
            "apart by their position ids (with flash_attention_2 on CUDA, in one row). The batches are the same "
            "samples as padded ones and the loss is the same; only the padding is gone. A model that would attend "
            "across the samples (checked when training starts) keeps padded batches. Ignored with packing.",
        ),
    )
    length_grouping: Bool = Field(
        False,
        description=_for(
            "length_grouping",
            "batch samples of similar length together, as many batches per epoch as batch_size gives, about as "
            "many tokens in each, in random order. Less padding, but the batches are no longer random: on short "
            "fine-tunes it costs a few percent of held-out loss (see docs/configs.md). Ignored with packing.",
        ),
    )
    cross_entropy: Literal[CROSS_ENTROPY] = Field(
        "chunked",
        description=_for(
            "cross_entropy",
            "how the next-token loss is computed. chunked: from the last hidden states and the output head, a "
            "bounded chunk of tokens at a time, gradients computed with the loss, so the batch's whole logits "
            "tensor is never held (gigabytes at a large vocabulary; the loss and gradients equal full's); full: "
            "the model's own logits and loss; liger / cut_cross_entropy: Liger's fused linear cross-entropy or "
            f"Apple's Cut Cross-Entropy ({KERNEL_TRAINERS}; CUDA and the package). A model that post-processes its "
            "logits (soft-capping, a logit scale) computes them in full, with a note. See docs/cross-entropy.md.",
        ),
    )
    train_on_inputs: Bool = Field(
        False,
        description=_for(
            "train_on_inputs",
            "also train on the inputs: the system, user and tool turns and the chat template's markers of "
            "`messages`, the prompt of prompt/completion rows. false: the loss falls on the answers only (every "
            "assistant turn with its end-of-turn marker, or the completion), as axolotl's `train_on_inputs: "
            "false` and LLaMA-Factory's `train_on_prompt: false`. Plain `text` is always trained whole.",
        ),
    )


class LLMConfig(TaskConfig):
    task: Literal["llm"] = Field(description="What to train.")
    trainer: LLMTrainer = Field(
        DEFAULT_TRAINER,
        description="; ".join(f"{name}: {spec.help}" for name, spec in TRAINERS.items()),
    )
    attn_implementation: Literal["sdpa", "eager", "flash_attention_2"] = Field("sdpa", description="Attention kernel.")
    data: LLMData = Field(description="Training data.")
    peft: PeftConfig | None = Field(None, description="LoRA; absent or `enabled: false` = full fine-tune.")
    training_args: LLMTrainingArgs = Field(default_factory=LLMTrainingArgs, description="Training settings.")
    gguf_file: str | None = Field(
        None,
        description="A .gguf file in base_model (a local folder or hub repo) to start from, de-quantized; "
        "or name the .gguf file itself as base_model. Needs `pip install gguf`.",
    )
    export: ExportConfig | None = Field(
        None, description="Export when training ends, as `autotrain export` does (merged, GGUF or Ollama)."
    )
    benchmark: BenchmarkConfig | None = Field(
        None,
        description="Benchmarks when training ends, on the trained and the base model, as `autotrain evaluate "
        "RUN --benchmark` runs them (results in benchmarks.json and the model card).",
    )

    @property
    def uses_peft(self) -> bool:
        return self.peft is not None and self.peft.enabled

    @property
    def gguf(self) -> tuple[str, str] | None:
        """(folder or hub repo, file name) when the weights come from a GGUF file, else None."""
        if self.gguf_file is not None:
            return self.base_model, self.gguf_file
        if self.base_model.lower().endswith(".gguf"):
            folder, name = os.path.split(os.path.expanduser(self.base_model))
            return folder or ".", name
        return None


# --- the data's rules (run with every other rule: autotrain.config.rules) ---------------------------------


@rule("data", "trainer", "training_args", task="llm")
def _data_sources(cfg) -> Iterator[Issue]:
    data = cfg.data
    if data.sources is None:
        if not data.path:
            yield ("data", "path"), "`data.path` is needed (or several sources in `data.sources`)"
        return
    if cfg.trainer not in PREPARED:
        yield ("data", "sources"), f"`data.sources` applies to {' / '.join(PREPARED)}, not `trainer: {cfg.trainer}`"
    for key in ("path", "train_split", "valid_split"):
        if key in data.model_fields_set:
            yield (
                ("data", key),
                f"`data.{key}` and `data.sources` exclude each other: give each source its own `path`, `split` "
                "and `valid_split`",
            )
    if len(data.sources) > 1 and cfg.training_args.length_grouping and _groups(cfg):
        yield (
            ("training_args", "length_grouping"),
            "`training_args.length_grouping` cannot be offered with several `data.sources` (each epoch draws its "
            "rows again); turn one off",
        )
    yield from _shares(data.sources)
    for i, source in enumerate(data.sources):
        allowed = TRAINERS[cfg.trainer].all_columns
        for key in source.column_mapping:
            if key not in allowed:
                yield (
                    ("data", "sources", i, "column_mapping", key),
                    f"`{key}` is not a column for `trainer: {cfg.trainer}`{did_you_mean(key, allowed)}; "
                    f"expected: {', '.join(allowed)}",
                )


def _groups(cfg) -> bool:
    """The trainer reads `length_grouping` (the trainer table says which do)."""
    return "length_grouping" in TRAINERS[cfg.trainer].fields


def _shares(sources: list[DataSource]) -> Iterator[Issue]:
    """A weight or a fraction per source, fractions within 1, something left to draw."""
    for i, source in enumerate(sources):
        if source.weight is not None and source.fraction is not None:
            yield ("data", "sources", i), "give a source a `weight` or a `fraction`, not both"
    fractions = sum(s.fraction for s in sources if s.fraction is not None)
    weighted = [1.0 if s.weight is None else s.weight for s in sources if s.fraction is None]
    where = ("data", "sources")
    if fractions > 1 + 1e-9:
        yield where, f"the sources' fractions add up to {fractions:g}: more than the whole epoch (1)"
    elif not weighted and abs(fractions - 1) > 1e-6:
        yield (
            where,
            (
                f"the sources' fractions add up to {fractions:g}; when every source gives a fraction they must add "
                "up to 1 (or give a source a `weight`: the weighted sources share what the fractions leave)"
            ),
        )
    elif weighted and not any(weighted):
        yield where, "every source's weight is 0: nothing would be drawn; give at least one a weight above 0"
    elif weighted and fractions >= 1 - 1e-9:
        yield where, "the fractions take the whole epoch: the sources given a weight would never be drawn"


@rule("data.streaming", "trainer", "training_args", task="llm")
def _streaming(cfg) -> Iterator[Issue]:
    if not cfg.data.streaming:
        return
    if cfg.trainer not in PREPARED:
        yield ("data", "streaming"), f"`data.streaming` applies to {' / '.join(PREPARED)}, not `trainer: {cfg.trainer}`"
    if cfg.training_args.max_steps is None:
        yield (
            ("training_args", "max_steps"),
            "`data.streaming: true` needs `training_args.max_steps`: a stream has no length to count epochs by",
        )
    if cfg.training_args.length_grouping and _groups(cfg):
        yield (
            ("training_args", "length_grouping"),
            "`training_args.length_grouping` cannot be offered with `data.streaming: true` (it sorts the whole data "
            "by length before training); turn one off",
        )
