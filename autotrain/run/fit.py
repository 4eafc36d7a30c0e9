"""The memory estimate as the dry run prints it and run.json records it; what a finished run measured."""

from __future__ import annotations

import dataclasses
from typing import Any

from autotrain.training.plan import RunPlan


def memory_record(cfg, plan: RunPlan, token: str | None = None) -> dict[str, Any]:
    """The estimate for one device, what the device has, and the cheapest change when it does not fit.

    Never raises for a model whose config cannot be read (offline, no such repo): the record says why.
    """
    from autotrain.training import memory, model_shape
    from autotrain.training.quiet import quiet_libraries

    quiet_libraries()
    setup = memory.setup_of(cfg, plan)
    try:
        capped = model_shape.position_cap(cfg, token)  # the length the run trains at, as it says
        if capped is not None:
            setup = dataclasses.replace(setup, length=capped)
        shape = model_shape.shape_of(cfg, setup, token)
    except Exception as exc:  # noqa: BLE001 - any failure to read or build the config: no estimate
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return {"unavailable": f"cannot read the config.json of base_model `{cfg.base_model}`: {first}"}
    result = memory.estimate(shape, setup)
    record: dict[str, Any] = {
        "device": setup.device,
        **result.record(),
        "model": {"parameters": shape.params, "trained_parameters": shape.lora_params or shape.params},
    }
    if capped is not None:
        record["notes"] = [model_shape.capped_length_note(cfg.training_args.max_length, capped), *record["notes"]]
    available = memory.available_bytes(setup.device)
    if setup.device == "cpu":
        # the process itself (python, torch, the libraries) before any model: this one's size is a fair guess
        record["process_before_model"] = memory.current_rss()
    if available is not None:
        record["available"] = available
        budget = available - record.get("process_before_model", 0)
        if result.peak > budget:
            found = memory.suggestions(lambda s: model_shape.shape_of(cfg, s, token), setup, budget)
            record["fits"] = False
            record["suggestion"] = {"change": found[0][0], "bytes_per_device": found[0][1].peak} if found else None
        else:
            record["fits"] = True
    return record


def memory_lines(record: dict[str, Any]) -> list[str]:
    from autotrain.training.memory import gib

    if "unavailable" in record:
        return ["memory estimate: " + record["unavailable"]]
    where = {"cpu": "CPU memory (this process)", "cuda": "per GPU"}.get(record["device"], record["device"])
    lines = [f"memory estimate: {gib(record['bytes_per_device'])} {where}, peak during {record['peak_during']}"]
    lines += [f"  {name}: {gib(value)}" for name, value in record["parts"].items()]
    lines += [f"  note: {note}" for note in record["notes"]]
    if "process_before_model" in record:
        lines.append(f"  (plus the process before the model loads: about {gib(record['process_before_model'])})")
    if "available" in record:
        has = f"{gib(record['available'])} available"
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
    from autotrain.training.memory import measured_peak

    measured = measured_peak(device)
    if not measured or "bytes_per_device" not in record:
        return record
    value = measured.get("max_memory_allocated", measured.get("peak_above_baseline"))
    return {**record, "measured": measured, "estimate_over_measured": round(record["bytes_per_device"] / value, 3)}
