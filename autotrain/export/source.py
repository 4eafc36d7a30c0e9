"""The finished run an export starts from. Checked first without torch (a folder that holds no finished run
is refused in a fraction of a second), then loaded as one plain fp32 model on the CPU: a full fine-tune as
saved, a LoRA run's adapter merged into its base model (the `merged/` folder when training wrote one), a
QLoRA run's adapter merged into its base loaded unquantized."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotrain.config.base import TaskConfig
from autotrain.errors import ConfigError, UserInputError
from autotrain.training.verify import load_saved


@dataclass
class Source:
    folder: Path
    config: TaskConfig
    model: Any  # fp32, eval mode, CPU, adapters merged
    processor: Any  # tokenizer (text, llm) or image processor
    kind: str  # full | lora | qlora | classifier
    weights: Path  # the folder the weights came from (run, run/merged, or base model + adapter)


def check_run(folder: Path, running_ok: bool = False) -> TaskConfig:
    """The validated config of the finished run in `folder`; anything else is bad input (one line)."""
    if not folder.is_dir():
        raise UserInputError(f"`{folder}` is not a folder; give the project folder of a finished run")
    saved = folder / "autotrain.yaml"
    has_model = any((folder / name).is_file() for name in ("config.json", "adapter_config.json"))
    status = _status(folder)
    if not saved.is_file() or not has_model or (status not in (None, "completed") and not running_ok):
        said = f" (status: {status})" if status else ""
        raise UserInputError(
            f"`{folder}` holds no finished run{said}: export needs the project folder of a completed run"
        )
    from autotrain.config.load import load_config

    try:
        return load_config(saved).config
    except ConfigError as exc:
        raise UserInputError(f"{saved}: not a valid autotrain config: {exc.issues[0].format()}") from None


def _status(folder: Path) -> str | None:
    try:
        return json.loads((folder / "run.json").read_text(encoding="utf-8")).get("status")
    except (OSError, ValueError, AttributeError):
        return None


def load_source(folder: Path, cfg: TaskConfig) -> Source:
    import torch

    torch.manual_seed(0)
    if cfg.task == "llm":
        from autotrain.config.trainers import TRAINERS

        if not TRAINERS[cfg.trainer].generates:
            generating = ", ".join(name for name, spec in TRAINERS.items() if spec.generates)
            raise UserInputError(
                f"`{folder}` holds a `trainer: {cfg.trainer}` model (it scores texts, it does not generate); "
                f"export takes runs of: {generating}"
            )
        source = _load_llm(folder, cfg)
    else:
        source = _load_classifier(folder, cfg)
    source.model.eval()
    return source


def _load_llm(folder: Path, cfg) -> Source:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    remote = {"trust_remote_code": cfg.trust_remote_code}
    merged = folder / "merged"
    weights = merged if (merged / "config.json").is_file() else folder
    tokenizer = load_saved(AutoTokenizer, weights, "tokenizer", **remote)
    if (weights / "config.json").is_file():
        model = load_saved(AutoModelForCausalLM, weights, "model", dtype=torch.float32, **remote)
        kind = "full" if weights == folder else ("qlora" if cfg.peft.quantization else "lora")
        return Source(folder, cfg, model, tokenizer, kind, weights)
    from peft import PeftModel

    from autotrain.trainers.common import load_pretrained

    # A QLoRA adapter goes onto its base loaded unquantized: the merged weights a GGUF or a merged folder holds.
    base = load_pretrained(AutoModelForCausalLM, cfg, "weights", cfg.hub.token, dtype=torch.float32)
    from autotrain.training.verify import weights_problem

    if weights_problem(folder):
        raise UserInputError(f"cannot load the LoRA adapter saved in `{folder}`: {weights_problem(folder)}")
    try:
        model = PeftModel.from_pretrained(base, str(folder)).merge_and_unload()
    except (OSError, ValueError) as exc:
        raise UserInputError(f"cannot load the LoRA adapter saved in `{folder}`: {str(exc).splitlines()[0]}") from None
    kind = "qlora" if cfg.peft.quantization else "lora"
    return Source(folder, cfg, model, tokenizer, kind, folder)


def _load_classifier(folder: Path, cfg) -> Source:
    import torch
    import transformers

    if cfg.task == "text-classification":
        model_cls, processor_cls = transformers.AutoModelForSequenceClassification, transformers.AutoTokenizer
    else:
        model_cls, processor_cls = transformers.AutoModelForImageClassification, transformers.AutoImageProcessor
    remote = {"trust_remote_code": cfg.trust_remote_code}
    processor = load_saved(processor_cls, folder, "processor", **remote)
    model = load_saved(model_cls, folder, "model", dtype=torch.float32, **remote)
    return Source(folder, cfg, model, processor, "classifier", folder)
