"""The memory estimate as the dry run prints it and run.json records it, the plan with `batch_size: auto`
decided by it, and what a finished run measured."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from autotrain.config.tasks import TASKS
from autotrain.errors import UserInputError
from autotrain.run.process import BATCH_ENV, launched
from autotrain.training.plan import BatchChoice, RunPlan, resolve_plan


def planned(cfg, token: str | None = None, resumed: Path | None = None) -> RunPlan:
    """`resolve_plan`, with `training_args.batch_size: auto` decided by the memory estimate: once, by the
    process the user started (its ranks take the same), and kept by a resume of the run in `resumed` (the
    checkpoint's position in the data counts batches of that size)."""
    plan = resolve_plan(cfg)
    if cfg.training_args.batch_size != "auto":
        return plan
    inherited = os.environ.get(BATCH_ENV) if launched() else None
    if inherited:
        given = json.loads(inherited)
        return resolve_plan(cfg, batch=BatchChoice(given["batch_size"], given["gradient_accumulation"], given["why"]))
    recorded = _recorded_batch(resumed) if resumed is not None else None
    return resolve_plan(cfg, batch=recorded or decide_batch(cfg, plan, token))


def _recorded_batch(folder: Path) -> BatchChoice | None:
    """The batch `auto` chose for the run in `folder` (its run.json), or None."""
    from autotrain.training.folder import run_record

    plan = run_record(folder).get("plan") or {}
    why = plan.get("batch_size_auto")
    if not why or not isinstance(plan.get("batch_size"), int):
        return None
    kept = {**why, "kept_from": "the run resumed"}
    return BatchChoice(plan["batch_size"], plan.get("gradient_accumulation", 1), kept)


def batch_env(plan: RunPlan) -> dict[str, str]:
    """The environment that hands the parent's `auto` batch to the ranks it launches."""
    if not plan.batch_choice:
        return {}
    chosen = {"batch_size": plan.batch_size, "gradient_accumulation": plan.gradient_accumulation}
    return {BATCH_ENV: json.dumps({**chosen, "why": plan.batch_choice})}


def decide_batch(cfg, plan: RunPlan, token: str | None = None) -> BatchChoice:
    from autotrain.training import memory, model_shape
    from autotrain.training.batch_size import choose_batch

    setup = _with_runtime(cfg, memory.setup_of(cfg, plan), token)
    try:
        shape = model_shape.shape_of(cfg, setup, token)
    except Exception as exc:  # noqa: BLE001 - any failure to read or build the config
        raise UserInputError(
            f"training_args.batch_size: auto needs the memory estimate, and the config.json of base_model "
            f"`{cfg.base_model}` cannot be read: {_first_line(exc)}; give batch_size as a number"
        ) from None
    budget, source = budget_of(cfg, setup.device)
    if budget is None:
        raise UserInputError(
            "training_args.batch_size: auto cannot tell how much memory this device has; give "
            "training_args.memory_budget (e.g. 12GB) or batch_size as a number"
        )

    def need(batch: int, accumulation: int) -> int:
        tried = dataclasses.replace(setup, batch_size=batch, gradient_accumulation=accumulation)
        return memory.estimate(shape, tried).peak

    return choose_batch(cfg.training_args.samples_per_step, smallest_batch(cfg), need, budget, setup.device, source)


def smallest_batch(cfg) -> int:
    """The fewest samples per batch the config's loss takes (KTO pairs samples; in-batch negatives)."""
    from autotrain.config.trainers import TRAINERS

    if cfg.task == "llm":
        return TRAINERS[cfg.trainer].min_batch_size
    if cfg.task == "sentence-transformers" and getattr(cfg.training_args, "loss", None) in (None, "mnrl"):
        return 2
    return 1


def budget_of(cfg, device: str) -> tuple[int | None, str]:
    """(bytes one device may use, where that figure comes from): `memory_budget`, or what the device has
    (CPU: the available RAM plus what this process holds, which the run's own baseline stands for)."""
    from autotrain.training import memory

    if cfg.training_args.memory_budget is not None:
        return cfg.training_args.memory_budget, "memory_budget"
    available = memory.available_bytes(device)
    if available is None:
        return None, ""
    if device == "cpu":
        return available + memory.current_anon(), "available RAM"
    return available, "free GPU memory"


def _with_runtime(cfg, setup, token: str | None):
    """On the CPU the estimate is of the whole process: the runtime's baseline measured on this machine and
    the config's tokenizer (autotrain.run.runtime)."""
    if setup.device != "cpu":
        return setup
    from autotrain.run.runtime import runtime_baseline, tokenizer_bytes

    found = runtime_baseline()
    if "bytes" not in found:
        return dataclasses.replace(setup, low=(*setup.low, f"CPU: the runtime's own memory: {found['unavailable']}"))
    tokenizer = tokenizer_bytes(cfg, token)
    low = setup.low
    if tokenizer is None and cfg.task in ("llm", "vlm"):
        low += ("CPU: the tokenizer is not on this machine yet: its memory is not counted",)
    size = _data_size(cfg)
    text = TASKS[cfg.task].auto_model not in ("AutoModelForImageClassification", "AutoModelForObjectDetection")
    if text and (size is None or size > LARGE_DATA):
        said = f"the data ({size / 2**20:.0f} MiB)" if size else "the data (not on this machine: size unknown)"
        low += (
            f"CPU: {said} is tokenized in this process before training; what that leaves resident grows with "
            "it and is counted only for small data (tiny-llama: +75 MiB at 16 MB of text, measured)",
        )
    return dataclasses.replace(setup, runtime=int(found["bytes"]) + (tokenizer or 0), low=low)


# What the runtime probe's own rows stand for (autotrain.run.runtime: 64 rows of 5000 characters, 320 kB):
# data up to this size leaves about what the probe's does.
LARGE_DATA = 8 * 2**20


def _data_size(cfg) -> int | None:
    """Bytes of the config's local data (a file, or the files of a folder); None for a hub dataset."""
    path = Path(os.path.expanduser(str(getattr(cfg.data, "path", "") or "")))
    if path.is_file():
        return path.stat().st_size
    if path.is_dir():
        return sum(file.stat().st_size for file in path.rglob("*") if file.is_file())
    return None


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def memory_record(cfg, plan: RunPlan, token: str | None = None) -> dict[str, Any]:
    """The estimate for one device, what the device has, and the cheapest change when it does not fit.

    Never raises for a model whose config cannot be read (offline, no such repo): the record says why.
    """
    from autotrain.training import memory, model_shape
    from autotrain.training.quiet import quiet_libraries

    quiet_libraries()
    setup = _with_runtime(cfg, memory.setup_of(cfg, plan), token)
    try:
        capped = model_shape.position_cap(cfg, token)  # the length the run trains at, as it says
        if capped is not None:
            setup = dataclasses.replace(setup, length=capped)
        shape = model_shape.shape_of(cfg, setup, token)
    except Exception as exc:  # noqa: BLE001 - any failure to read or build the config: no estimate
        return {"unavailable": f"cannot read the config.json of base_model `{cfg.base_model}`: {_first_line(exc)}"}
    result = memory.estimate(shape, setup)
    record: dict[str, Any] = {
        "device": setup.device,
        **result.record(),
        "model": {"parameters": shape.params, "trained_parameters": shape.lora_params or shape.params},
    }
    if capped is not None:
        record["notes"] = [model_shape.capped_length_note(cfg.training_args.max_length, capped), *record["notes"]]
    if plan.batch_choice:
        chosen = {"batch_size": plan.batch_size, "gradient_accumulation": plan.gradient_accumulation}
        record["batch_size_auto"] = {**chosen, **plan.batch_choice}
    budget, source = budget_of(cfg, setup.device)
    if budget is not None:
        record["available"], record["budget_from"] = budget, source
        if result.peak > budget:
            found = memory.suggestions(lambda s: model_shape.shape_of(cfg, s, token), setup, budget)
            record["fits"] = False
            record["suggestion"] = {"change": found[0][0], "bytes_per_device": found[0][1].peak} if found else None
        else:
            record["fits"] = True
    return record


COVERS = {
    "cpu": "the process's resident memory (its peak RSS): the runtime's own baseline plus the training tensors",
    "cuda": "tensors on the GPU (what torch.cuda.max_memory_allocated measures); not the CUDA context",
}


def memory_lines(record: dict[str, Any]) -> list[str]:
    from autotrain.training.batch_size import describe
    from autotrain.training.memory import gib

    if "unavailable" in record:
        return ["memory estimate: " + record["unavailable"]]
    where = {"cpu": "CPU memory (this process)", "cuda": "per GPU"}.get(record["device"], record["device"])
    lines = [f"memory estimate: {gib(record['bytes_per_device'])} {where}, peak during {record['peak_during']}"]
    lines.append(f"  covers: {COVERS.get(record['device'], 'the tensors on the device')}")
    lines += [f"  {name}: {gib(value)}" for name, value in record["parts"].items()]
    lines += [f"  note: {note}" for note in record["notes"]]
    lines += [f"  could be low: {why}" for why in record.get("could_be_low", [])]
    choice = record.get("batch_size_auto")
    if choice:
        lines += ["  " + line for line in describe(choice["batch_size"], choice["gradient_accumulation"], choice, gib)]
    if "available" in record:
        has = f"{gib(record['available'])} {record.get('budget_from', 'available')}"
        if record["fits"]:
            lines.append(f"  fits: {has}")
        else:
            lines.append(f"  warning: does not fit: {has}")
            found = record.get("suggestion")
            if found:
                lines.append(f"  cheapest change that fits: {found['change']} -> {gib(found['bytes_per_device'])}")
            else:
                lines.append("  no single change of batch, checkpointing, optimizer, LoRA or 4-bit loading fits")
    return lines


def add_measured(record: dict[str, Any], device: str) -> dict[str, Any]:
    """`record` with the peak the run reached beside the estimate (and their ratio)."""
    from autotrain.training.memory import measured_peak, measured_value

    measured = measured_peak(device)
    if not measured or "bytes_per_device" not in record or not measured_value(measured):
        return record
    ratio = round(record["bytes_per_device"] / measured_value(measured), 3)
    return {**record, "measured": measured, "estimate_over_measured": ratio}
