"""Load a finished run from its project folder: the resolved config it saved (`autotrain.yaml`), the model
(the LoRA adapter on its base model, the merged model in `merged/`, or the full model) and the tokenizer or
image processor saved with it. Cheap checks first: a folder without a finished run fails before any import
of torch."""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotrain.config.base import TaskConfig
from autotrain.errors import ConfigError, UserInputError
from autotrain.training.plan import RunPlan
from autotrain.training.verify import load_failure, load_saved

DEVICES = ("auto", "cpu", "cuda", "mps")


@dataclass
class FinishedRun:
    folder: Path
    config: TaskConfig
    model: Any  # eval mode, on `device`
    processor: Any  # the tokenizer (text, llm) or the image processor (images)
    device: str
    max_tokens: int  # tokens per input: text classifiers truncate to it, LLM prompts keep their last ones

    @property
    def task(self) -> str:
        return self.config.task

    @property
    def labels(self) -> list[str]:
        """Classifiers: label names in id order, as training saved them in the model config."""
        id2label = self.model.config.id2label
        return [str(id2label[i]) for i in range(len(id2label))]


def read_config(folder: Path) -> TaskConfig:
    """The validated config of the finished run in `folder`; a folder without one is bad input."""
    if not folder.exists():
        raise UserInputError(f"`{folder}` does not exist; give the project folder of a finished run")
    if not folder.is_dir():
        raise UserInputError(f"`{folder}` is a file; give the project folder of a finished run")
    saved = folder / "autotrain.yaml"
    if not saved.is_file() or not _has_model(folder):
        raise UserInputError(_not_finished(folder))
    from autotrain.config.load import load_saved

    try:
        return load_saved(saved)
    except ConfigError as exc:
        raise UserInputError(f"{saved}: not a valid autotrain config: {exc.issues[0].format()}") from None


def read_plan(folder: Path) -> RunPlan:
    """The plan the run in `folder` trained with (run.json), as it was decided: what its model loads in. A
    run without one, or with a record an older autotrain wrote, is bad input naming what is missing."""
    from autotrain.training.plan_record import RecordError, plan_from_record

    manifest = folder / "run.json"
    try:
        record = json.loads(manifest.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserInputError(
            f"`{folder}` has no run.json, which records how its model was trained and loads (its plan); "
            "give the project folder of a run autotrain trained"
        ) from None
    except (OSError, ValueError) as exc:
        raise UserInputError(f"`{manifest}`: not JSON ({exc})") from None
    try:
        return plan_from_record(record.get("plan") if isinstance(record, dict) else None)
    except RecordError as exc:
        raise UserInputError(
            f"`{manifest}`: {exc} (written by an older autotrain: train the run again with this one)"
        ) from None


def _has_model(folder: Path) -> bool:
    return any((folder / name).is_file() for name in ("config.json", "adapter_config.json"))


def _not_finished(folder: Path) -> str:
    from autotrain.training.folder import holds_run, run_record

    if not holds_run(folder):
        return f"`{folder}` holds no autotrain run; give the project folder (`project_name`) of a finished run"
    record = run_record(folder)  # a `running` record whose process is gone reads as `died`
    status = "did not finish"
    if isinstance(record.get("status"), str):
        how = f": {record['how']}" if record["status"] == "died" else ""
        status = f"did not finish (status: {record['status']}{how})"
    return (
        f"the run in `{folder}` {status}: it has no final model; continue it with `--resume` "
        "(or give the folder of a finished run)"
    )


def pick_device(requested: str = "auto") -> str:
    from autotrain.training.precision import detect_device

    available = detect_device()
    if requested == "auto":
        return available
    if requested not in DEVICES:
        raise UserInputError(f"--device: `{requested}` is not one of: {', '.join(DEVICES)}")
    if requested != "cpu" and requested != available:
        raise UserInputError(f"--device {requested}: no {requested} device is visible (this machine has: {available})")
    return requested


def load_run(folder: Path, device: str = "auto", cfg: TaskConfig | None = None) -> FinishedRun:
    """Config, model and processor of the finished run in `folder`, ready for inference on `device`
    (`cfg`: its config, when `read_config` has read it already)."""
    cfg = cfg if cfg is not None else read_config(folder)
    device = pick_device(device)
    model, processor = load_model(folder, cfg, device)
    return finished_run(folder, cfg, model, processor, device)


def load_model(folder: Path, cfg: TaskConfig, device: str) -> tuple[Any, Any]:
    """(model in eval mode, processor) of the model saved in `folder`, read as `cfg`'s task reads it: a run's
    project folder, or an exported copy of it (which has no autotrain.yaml of its own)."""
    from autotrain.inference.tasks import task_module

    handler = task_module(cfg.task)  # a task with an inference module of its own (the task table says)
    if handler is not None:
        model, processor = handler.load(folder, cfg, device)
        model.eval()
        return model, processor
    if cfg.task == "llm":
        model, processor = _load_llm(folder, cfg, device)
    else:
        model, processor = _load_classifier(folder, cfg)
    if not getattr(model, "is_loaded_in_4bit", False) and not getattr(model, "is_loaded_in_8bit", False):
        model.to(device)
    model.eval()
    return model, processor


def finished_run(folder: Path, cfg: TaskConfig, model, processor, device: str) -> FinishedRun:
    """A FinishedRun around a model already loaded (by `load_model`, or merged in memory by export)."""
    from autotrain.inference.tasks import task_module

    handler = task_module(cfg.task)
    tokens = handler.max_tokens(cfg, model, processor) if handler is not None else _max_tokens(cfg, model, processor)
    return FinishedRun(folder, cfg, model, processor, device, tokens)


def _max_tokens(cfg, model, processor) -> int:
    """`training_args.max_length`; for text classifiers capped as training capped it (images: 0, no tokens)."""
    if cfg.task == "image-classification":
        return 0
    if cfg.task == "text-classification":
        from autotrain.trainers.text_classification import max_tokens

        return max_tokens(cfg, processor, model.config)
    return cfg.training_args.max_length


def saved_model(folder: Path, cfg, model_cls, processor_cls, what: str = "tokenizer"):
    """(model, processor: the tokenizer, or the `what` it is) as the run saved them in `folder`. The model in
    fp32, as training evaluated it: small models, and results that match `eval_results.json`."""
    import torch

    processor = load_saved(processor_cls, folder, what, trust_remote_code=cfg.trust_remote_code)
    model = load_saved(model_cls, folder, "model", dtype=torch.float32, trust_remote_code=cfg.trust_remote_code)
    return model, processor


def _load_classifier(folder: Path, cfg):
    import transformers

    # Only the classes this task needs: importing the image-processing stack costs seconds.
    if cfg.task == "text-classification":
        return saved_model(folder, cfg, transformers.AutoModelForSequenceClassification, transformers.AutoTokenizer)
    image = transformers.AutoModelForImageClassification
    return saved_model(folder, cfg, image, transformers.AutoImageProcessor, "image processor")


def _llm_dtype(plan: RunPlan, device: str):
    """The dtype the run loaded its weights in (its plan), so inference computes as training did. Only what
    this device cannot run changes it: fp16 on a CPU (no fast kernels) loads in fp32, bf16 on a GPU without
    it in fp16."""
    import torch

    name = plan.load_dtype
    if name == "float16" and device == "cpu":
        name = "float32"
    elif name == "bfloat16" and device == "cuda" and not torch.cuda.is_bf16_supported():
        name = "float16"
    return getattr(torch, name)


def _check_llm(folder: Path, cfg, device: str) -> None:
    """A run whose model generates, on a device that can load it."""
    from autotrain.config.trainers import TRAINERS

    if not TRAINERS[cfg.trainer].generates:
        generating = ", ".join(name for name, spec in TRAINERS.items() if spec.generates)
        raise UserInputError(
            f"`{folder}` holds a `trainer: {cfg.trainer}` model: it scores texts and does not generate; "
            f"chat, predict and evaluate take runs of: {generating}"
        )
    quantization = cfg.peft.quantization if cfg.uses_peft else None
    if quantization and device != "cuda":
        raise UserInputError(
            f"the run in `{folder}` loads its base model in {quantization} (peft.quantization), which needs a "
            f"CUDA GPU; this machine has none ({device})"
        )


def _load_llm(folder: Path, cfg, device: str):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _check_llm(folder, cfg, device)
    merged = folder / "merged"
    source = merged if (merged / "config.json").is_file() else folder
    tokenizer = load_saved(AutoTokenizer, source, "tokenizer", trust_remote_code=cfg.trust_remote_code)
    plan = read_plan(folder)
    kwargs = {"dtype": _llm_dtype(plan, device), "trust_remote_code": cfg.trust_remote_code}
    if (source / "config.json").is_file():
        return load_saved(AutoModelForCausalLM, source, "model", **kwargs), tokenizer
    return _adapter_on_base(folder, cfg, plan, device, kwargs), tokenizer


def _adapter_on_base(folder: Path, cfg, plan: RunPlan, device: str, kwargs: dict):
    """The LoRA adapter on the base model it was trained on, merged in unless the base is quantized."""
    from peft import PeftModel

    from autotrain.training.verify import weights_problem

    base = _base_model(cfg, plan, device, kwargs)
    if weights_problem(folder):
        raise UserInputError(f"cannot load the LoRA adapter saved in `{folder}`: {weights_problem(folder)}")
    try:
        model = PeftModel.from_pretrained(base, str(folder))
    except (OSError, ValueError, pickle.UnpicklingError) as exc:
        raise UserInputError(f"cannot load the LoRA adapter saved in `{folder}`: {load_failure(exc)}") from None
    return model if cfg.peft.quantization else model.merge_and_unload()


def _base_model(cfg, plan: RunPlan, device: str, kwargs: dict):
    """`base_model` as the run loaded it before training: its dtype, and its quantization under QLoRA."""
    from transformers import AutoModelForCausalLM

    from autotrain.trainers.common import load_pretrained

    if cfg.uses_peft and cfg.peft.quantization:
        from autotrain.trainers.llm.model import quantization_config
        from autotrain.training.precision import Precision

        # The compute dtype training resolved (its plan), not a new decision.
        kwargs["quantization_config"] = quantization_config(cfg, Precision(plan.precision.mode, device))
    kwargs = {k: v for k, v in kwargs.items() if k != "trust_remote_code"}  # load_pretrained takes it from cfg
    return load_pretrained(AutoModelForCausalLM, cfg, "weights", None, **kwargs)


def load_base(folder: Path, device: str = "auto") -> FinishedRun:
    """The base model of the LLM run in `folder`, as the run loaded it, with the run's tokenizer: the model
    before training, to compare with the trained one under the same settings."""
    from transformers import AutoTokenizer

    cfg = read_config(folder)
    if cfg.task != "llm":
        raise UserInputError(f"`{folder}` holds a {cfg.task} run; benchmarks take LLM runs")
    device = pick_device(device)
    _check_llm(folder, cfg, device)
    merged = folder / "merged"
    source = merged if (merged / "config.json").is_file() else folder
    tokenizer = load_saved(AutoTokenizer, source, "tokenizer", trust_remote_code=cfg.trust_remote_code)
    plan = read_plan(folder)
    model = _base_model(cfg, plan, device, {"dtype": _llm_dtype(plan, device)})
    if not getattr(model, "is_loaded_in_4bit", False) and not getattr(model, "is_loaded_in_8bit", False):
        model.to(device)
    model.eval()
    return FinishedRun(folder, cfg, model, tokenizer, device, cfg.training_args.max_length)
