"""The finished run an export starts from. Checked first without torch (a folder that holds no finished run
is refused in a fraction of a second), then loaded as one plain fp32 model on the CPU: a full fine-tune as
saved, a LoRA run's adapter merged into its base model (the `merged/` folder when training wrote one), a
QLoRA run's adapter merged into its base loaded unquantized. Tasks other than the LLM's are loaded as
`autotrain predict` loads them (autotrain.inference), so the parity check compares what predict gives."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotrain.config.base import TaskConfig
from autotrain.errors import ConfigError, UserInputError
from autotrain.training.folder import run_record
from autotrain.training.verify import load_saved


@dataclass
class Source:
    folder: Path
    config: TaskConfig
    model: Any  # fp32, eval mode, CPU, adapters merged
    processor: Any  # tokenizer (text, llm), image processor or processor (vlm)
    kind: str  # full | lora | qlora
    weights: Path  # the folder the weights came from (run, run/merged, or base model + adapter)

    @property
    def is_folder(self) -> bool:
        """The weights are a complete model folder (a full fine-tune, or a LoRA run's `merged/`)."""
        return (self.weights / "config.json").is_file()


def check_run(folder: Path, running_ok: bool = False) -> TaskConfig:
    """The validated config of the finished run in `folder`; anything else is bad input (one line)."""
    if not folder.is_dir():
        raise UserInputError(f"`{folder}` is not a folder; give the project folder of a finished run")
    saved = folder / "autotrain.yaml"
    has_model = any((folder / name).is_file() for name in ("config.json", "adapter_config.json"))
    record = run_record(folder)  # a `running` record whose process is gone reads as `died`
    status = record.get("status")
    if not saved.is_file() or not has_model or (status not in (None, "completed") and not running_ok):
        said = f" (status: {status}{': ' + record['how'] if status == 'died' else ''})" if status else ""
        raise UserInputError(
            f"`{folder}` holds no finished run{said}: export needs the project folder of a completed run"
        )
    from autotrain.config.load import load_saved

    try:
        return load_saved(saved)
    except ConfigError as exc:
        raise UserInputError(f"{saved}: not a valid autotrain config: {exc.issues[0].format()}") from None


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
        source = _load_task(folder, cfg)
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


def _load_task(folder: Path, cfg) -> Source:
    """Any task but the LLM's, through its inference loader on the CPU in fp32: adapters merged in."""
    from autotrain.inference.load import load_model

    peft = cfg.peft if getattr(cfg, "uses_peft", False) else None
    model, processor = load_model(folder, loadable(cfg), "cpu")
    merged = folder / "merged"
    weights = merged if peft is not None and (merged / "config.json").is_file() else folder
    kind = "full" if peft is None else ("qlora" if peft.quantization else "lora")
    return Source(folder, cfg, model, processor, kind, weights)


def loadable(cfg):
    """`cfg` as the export reads its run: a QLoRA run's base model loaded unquantized, in fp32 on the CPU (the
    adapter is merged into those weights, as for LLMs), not refused for want of a GPU."""
    peft = getattr(cfg, "peft", None)
    if peft is None or not peft.quantization:
        return cfg
    return cfg.model_copy(update={"peft": peft.model_copy(update={"quantization": None})})
