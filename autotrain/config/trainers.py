"""Every LLM trainer autotrain knows, declared once. Importing this module imports neither torch nor pydantic.

The config schema (the `trainer:` choices, which `training_args` each trainer takes, the column names),
the cross-field rules, data loading, the templates, the CLI's help and errors, inference, the AutoTrain
Advanced translation and the app (through `/api/schema`) all read `TRAINERS`. Adding a trainer is one
entry here and its builder module (`builder`, imported by autotrain.trainers only when a run builds it).
"""

from __future__ import annotations

from dataclasses import dataclass

# How a trainer's rows look once `column_mapping` has renamed them (autotrain/data/llm.py shapes each):
#   chat:       plain `text`, or chat `messages` that the chat template renders
#   blocks:     raw `text`, concatenated and cut into max_length blocks (no chat template)
#   preference: a `prompt` (user turn) and answers to it (assistant turns); plain text or message lists
#   prompts:    prompts only (as user turns under a chat template); the model writes the completions
DATA_FORMATS = ("chat", "blocks", "preference", "prompts")
# `training_args.cross_entropy`: how the trainers that read it compute their next-token loss (autotrain.training.
# lm_loss); the last two are CUDA kernels from other packages, for the trainers with `kernel_losses`.
CROSS_ENTROPY = ("chunked", "full", "liger", "cut_cross_entropy")
KERNEL_LOSSES = ("liger", "cut_cross_entropy")


@dataclass(frozen=True)
class TrainerSpec:
    name: str
    help: str  # one line: what it trains on what
    columns: tuple[tuple[str, ...], ...]  # alternatives: each group is one complete set of columns
    data_format: str  # one of DATA_FORMATS
    template: str  # the shipped config, relative to configs/
    builder: str  # "module:function" in autotrain.trainers returning (trainer, plan); imported by that layer
    optional_columns: tuple[str, ...] = ()
    fields: tuple[str, ...] = ()  # the trainer-specific `training_args` it reads (the others refuse them)
    positive: tuple[str, ...] = ()  # fields of `fields` that must be above 0 when set (0 turns its loss off)
    min_batch_size: int = 1  # per device: a loss that compares the samples of a batch needs more than one
    generates: bool = True  # a causal LM that chat / predict / evaluate can run (not a scorer)
    advanced: tuple[str, ...] = ()  # its AutoTrain Advanced `params.trainer` names; task `llm-<first>`
    # What the memory estimate needs to know (autotrain/training/memory.py):
    sequences_per_row: int = 1  # sequences one row puts through the model (chosen and rejected: 2)
    reference_model: bool = False  # a frozen copy of the model beside it (without LoRA)
    chunked_head: bool = False  # TRL computes log-probabilities from the last hidden states in chunks
    kernel_losses: bool = False  # `cross_entropy` may name a CUDA kernel (KERNEL_LOSSES) for its loss
    # autotrain prepares its data itself (autotrain.data.prepared): cached once for every process, streamed
    # (`data.streaming`), mixed from several sources (`data.sources`)
    prepared: bool = False

    @property
    def all_columns(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c for group in self.columns for c in group)) + self.optional_columns


_BUILDERS = "autotrain.trainers.llm."
_PREFERENCE = (("prompt", "chosen", "rejected"),)

TRAINERS: dict[str, TrainerSpec] = {
    spec.name: spec
    for spec in (
        TrainerSpec(
            "sft",
            "supervised fine-tuning on plain text, chat messages, or prompts with their completions",
            (("text",), ("messages",), ("prompt", "completion")),
            "chat",
            "llm/sft.yml",
            _BUILDERS + "sft:build_trainer",
            fields=("packing", "train_on_inputs", "padding_free", "length_grouping", "cross_entropy"),
            advanced=("sft",),  # its loss: `cross_entropy`'s (autotrain.trainers.llm.sft_trainer), not TRL's head
            kernel_losses=True,
            prepared=True,
        ),
        TrainerSpec(
            "orpo",
            "odds-ratio preference optimisation on chosen/rejected pairs, no reference model",
            _PREFERENCE,
            "preference",
            "llm/llama3-orpo.yml",
            _BUILDERS + "orpo:build_trainer",
            fields=("max_prompt_length", "max_completion_length", "beta", "cross_entropy"),
            positive=("beta",),
            advanced=("orpo",),
            sequences_per_row=2,
        ),
        TrainerSpec(
            "dpo",
            "direct preference optimisation on chosen/rejected pairs against a frozen reference",
            _PREFERENCE,
            "preference",
            "llm/dpo.yml",
            _BUILDERS + "dpo:build_trainer",
            fields=("max_prompt_length", "beta"),
            positive=("beta",),
            advanced=("dpo",),
            sequences_per_row=2,
            reference_model=True,
            chunked_head=True,
        ),
        TrainerSpec(
            "reward",
            "a reward model: one score per text, chosen above rejected",
            (("chosen", "rejected"),),
            "preference",
            "llm/reward.yml",
            _BUILDERS + "reward:build_trainer",
            optional_columns=("prompt",),
            generates=False,
            advanced=("reward",),
            sequences_per_row=2,
        ),
        TrainerSpec(
            "grpo",
            "group relative policy optimisation: sampled completions scored by reward functions",
            (("prompt",),),
            "prompts",
            "llm/grpo.yml",
            _BUILDERS + "grpo:build_trainer",
            optional_columns=("answer",),
            fields=(
                "max_prompt_length",
                "max_completion_length",
                "beta",
                "num_generations",
                "temperature",
                "top_p",
                "top_k",
                "rewards",
                "reward_weights",
            ),
            advanced=("grpo",),
            chunked_head=True,
        ),
        TrainerSpec(
            "kto",
            "Kahneman-Tversky optimisation on unpaired answers, each labelled desirable or not",
            (("prompt", "completion", "label"),),
            "preference",
            "llm/kto.yml",
            _BUILDERS + "kto:build_trainer",
            fields=("max_prompt_length", "beta"),
            positive=("beta",),
            min_batch_size=2,  # its KL estimate pairs each completion with another prompt of the batch
            sequences_per_row=2,  # each completion and the mismatched one its KL term reads
            reference_model=True,
        ),
        TrainerSpec(
            "clm",
            "plain causal-LM training on raw text (continued pre-training)",
            (("text",),),
            "blocks",
            "llm/clm.yml",
            _BUILDERS + "clm:build_trainer",
            fields=("cross_entropy",),
            advanced=("generic", "default"),
            kernel_losses=True,
            prepared=True,
        ),
    )
}
DEFAULT = "sft"


def users(field: str) -> tuple[str, ...]:
    """The trainers that read the trainer-specific `training_args` field `field`."""
    return tuple(name for name, spec in TRAINERS.items() if field in spec.fields)


def used_by(field: str) -> str:
    """`a / b / c`: the trainers of `field`, for descriptions and messages."""
    return " / ".join(users(field))


def trainer_fields() -> tuple[str, ...]:
    """Every trainer-specific `training_args` field, in the order the table first names them."""
    return tuple(dict.fromkeys(f for spec in TRAINERS.values() for f in spec.fields))


def columns_help() -> str:
    """`sft: text | messages; orpo: prompt, chosen, rejected; ...` for the `column_mapping` description."""
    return "; ".join(
        f"{name}: " + " | ".join(", ".join(group) for group in spec.columns) for name, spec in TRAINERS.items()
    )
