"""KTO: Kahneman-Tversky optimisation on unpaired data: a `prompt`, one `completion` and a `label` saying
whether that completion is desirable (TRL KTOTrainer). No chosen/rejected pairs are needed.

The reference is frozen, as for DPO: with LoRA the base model with the adapter switched off (TRL does this
when `ref_model` is None and the model is a PEFT model), without LoRA a second copy of `base_model`.
"""

from __future__ import annotations

from autotrain.config.llm import LLMConfig
from autotrain.errors import UserInputError
from autotrain.trainers.llm.base import prepare, prompt_trainer
from autotrain.trainers.llm.model import build_model
from autotrain.training.plan import RunPlan


def check_labels(dataset, name: str) -> None:
    """Labels are booleans (or 0 / 1): TRL counts and masks with them as such, so a word would be misread."""
    wrong = [value for value in dict.fromkeys(dataset["label"]) if value not in (True, False)]
    if wrong:
        shown = ", ".join(repr(value) for value in wrong[:3])
        raise UserInputError(f"{name}: column `label` must hold true/false (or 1/0) for each completion; got {shown}")
    if len(set(dataset["label"])) < 2:
        from autotrain.errors import eprint

        eprint(f"note: {name}: every `label` is {dataset['label'][0]}; KTO learns most from both kinds of answer")


def build_trainer(cfg: LLMConfig, plan: RunPlan, callbacks: list, token: str | None = None):
    from trl import KTOConfig, KTOTrainer

    ready = prepare(cfg, plan, token)
    check_labels(ready.train, f"{cfg.data.path} [{cfg.data.train_split}]")  # before any weights load
    if ready.valid is not None:
        check_labels(ready.valid, f"{cfg.data.path} [{cfg.data.valid_split}]")
    args = cfg.training_args
    extra = {"max_length": args.max_length}
    if args.beta is not None:
        extra["beta"] = args.beta
    ref_model = None
    if not cfg.uses_peft:
        ref_model = build_model(cfg, plan, token)
        ref_model.requires_grad_(False).eval()
    return prompt_trainer(KTOTrainer, KTOConfig, cfg, plan, ready, callbacks, token, ref_model=ref_model, args=extra)
