"""A merged export of a task other than the LLM's, written into the staging folder: the model's own files
copied from the run (a full fine-tune is already a `from_pretrained` folder), or an adapter merged into its
base model and saved. Nothing of the run's training is taken along: no checkpoints, logs, optimizer state,
trainer state, metrics files or run manifest; the model card (written by the report) and the plots it shows
are.

At f16/bf16 every floating tensor of the weights files is rounded to that type (safetensors in and out:
nothing is unpickled) and `config.json` records the type, as `save_pretrained` would."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from autotrain.errors import UserInputError
from autotrain.export.output import REPORT

# Files a finished run holds beside its model that are the run's, not the model's.
RUN_FILES = {"run.json", "trainer_state.json", "all_results.json", "train_results.json", "eval_results.json", REPORT}
# What model, tokenizer, processor and sentence-transformers folders are made of: weights, JSON configs,
# vocabularies (vocab.txt, merges.txt), sentencepiece models, chat templates.
MODEL_SUFFIXES = (".safetensors", ".json", ".txt", ".model", ".jinja", ".tiktoken")
DTYPES = {"f16": "float16", "bf16": "bfloat16"}


def model_files(folder: Path, remote_code: bool = False) -> list[Path]:
    """The model's files in `folder`, relative to it: top-level weights, configs and tokenizer/processor files,
    the module folders a sentence-transformers model lists in modules.json, and the model's own code where
    the run trusted remote code."""
    suffixes = (*MODEL_SUFFIXES, ".py") if remote_code else MODEL_SUFFIXES
    found = [
        Path(p.name)
        for p in sorted(folder.iterdir())
        if p.is_file() and not p.name.startswith(".") and p.suffix in suffixes and p.name not in RUN_FILES
    ]
    for module in _module_folders(folder):
        found += sorted(p.relative_to(folder) for p in module.rglob("*") if p.is_file())
    return found


def _module_folders(folder: Path) -> list[Path]:
    """sentence-transformers' module folders (1_Pooling, 2_Dense, ...): those modules.json names inside
    `folder` (the first module, the transformer, lives in the folder itself)."""
    listing = folder / "modules.json"
    if not listing.is_file():
        return []
    try:
        modules = json.loads(listing.read_text(encoding="utf-8"))
        paths = [m.get("path", "") for m in modules] if isinstance(modules, list) else []
    except (OSError, ValueError, AttributeError):
        raise UserInputError(f"`{listing}` is not a sentence-transformers module list") from None
    root, found = folder.resolve(), []
    for path in paths:
        if not isinstance(path, str) or not path:
            continue
        module = (folder / path).resolve()
        if module == root or not module.is_relative_to(root) or not module.is_dir():
            raise UserInputError(f"`{listing}` names the module folder `{path}`, which is not a folder inside the run")
        found.append(folder / path)
    return found


def copy_model(source: Path, stage: Path, quant: str, remote_code: bool = False) -> list[Path]:
    """Copy the model's files from `source` into `stage` (weights rounded to `quant`); returns the weights
    files written."""
    files = model_files(source, remote_code)
    weights = [f for f in files if f.suffix == ".safetensors"]
    if not weights:
        raise UserInputError(f"`{source}` holds no safetensors weights to export")
    for module in _module_folders(source):  # an empty one (Normalize) is a module all the same
        (stage / module.relative_to(source)).mkdir(parents=True, exist_ok=True)
    written = 0
    for relative in files:
        target = stage / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if relative.suffix == ".safetensors" and quant in DTYPES:
            written += _rounded_weights(source / relative, target, quant)
        else:
            shutil.copyfile(source / relative, target)
    if quant in DTYPES:
        _record_dtype(stage / "config.json", DTYPES[quant], written)
    return [stage / w for w in weights]


def _rounded_weights(source: Path, target: Path, quant: str) -> int:
    """Write `source`'s tensors rounded to `quant` into `target`; returns the bytes of the tensors."""
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file

    dtype = getattr(torch, DTYPES[quant])
    with safe_open(str(source), framework="pt") as handle:
        metadata = handle.metadata()
        tensors = {}
        for name in handle.keys():  # noqa: SIM118 - a safetensors handle is not a dict
            tensor = handle.get_tensor(name)
            tensors[name] = tensor.to(dtype) if tensor.is_floating_point() else tensor
    save_file(tensors, str(target), metadata=metadata)
    return sum(t.numel() * t.element_size() for t in tensors.values())


def _record_dtype(config: Path, dtype: str, size: int) -> None:
    """What the weights now are, in the model's config (as `save_pretrained` writes it), and their size in a
    sharded model's index."""
    data = _json(config)
    if data is not None and "model_type" in data:
        data["dtype"] = dtype
        if "torch_dtype" in data:
            data["torch_dtype"] = dtype
        config.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    for index in config.parent.glob("*.safetensors.index.json"):
        data = _json(index)
        if data is not None and isinstance(data.get("metadata"), dict):
            data["metadata"]["total_size"] = size
            index.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _json(path: Path) -> dict | None:
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        return None  # not ours to repair: copied as it was
    return data if isinstance(data, dict) else None


def save_merged(model, processor, quant: str, stage: Path) -> list[Path]:
    """The model (adapters merged in memory) saved with `save_pretrained` at `quant`, its processor beside it."""
    import torch

    dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[quant]
    weights = {name: tensor.to(dtype) for name, tensor in model.state_dict().items()}
    model.config.dtype = dtype  # what config.json records; the model in memory stays fp32
    try:
        model.save_pretrained(str(stage), state_dict=weights)
    finally:
        model.config.dtype = torch.float32
    processor.save_pretrained(str(stage))
    return sorted(stage.glob("*.safetensors"))


def copy_plots(run: Path, stage: Path) -> None:
    """The run's plots, which the model card shows (plots/loss.png, plots/metrics.png)."""
    plots = run / "plots"
    if plots.is_dir():
        for image in sorted(plots.glob("*.png")):
            (stage / "plots").mkdir(exist_ok=True)
            shutil.copyfile(image, stage / "plots" / image.name)
