"""A run's plan read back from its record (`RunPlan.record()`, run.json's `plan`), as it was decided.

Whoever uses a finished run (inference, export) reads what its plan decided here, typed, and decides none
of it again; nothing is filled in for what an older record lacks.
"""

from __future__ import annotations

from typing import Any

from autotrain.training.adapter import AdapterPlan
from autotrain.training.plan import OptimizerPlan, RunPlan
from autotrain.training.precision import Precision

# Fields the record gained after its first form, and what their absence means in a record written before
# (the migration, stated once). Every other field must be there.
ADDED_LATER: dict[str, Any] = {
    # before the LoRA variants, the plan recorded no adapter: the run trained plain LoRA or a full fine-tune
    # as its saved config says, and nothing that uses a finished run reads the adapter from the plan
    "adapter": None,
    # before `batch_size: auto`, the batch was recorded only among the TrainingArguments
    "batch_size": "training_arguments.per_device_train_batch_size",
    "gradient_accumulation": "training_arguments.gradient_accumulation_steps",
    # before `training_args.cross_entropy`, every trainer computed its loss its own way (the model's logits)
    "cross_entropy": "",
}


class RecordError(ValueError):
    """A recorded plan that does not read back as a plan: what it lacks, or holds as the wrong type."""


class _Record:
    """Fields of a recorded plan by their dotted path, each checked for its type; what is missing or wrong
    is collected, to be said at once."""

    KINDS = {str: "a string", int: "a whole number", bool: "true or false", dict: "a mapping", list: "a list"}

    def __init__(self, data: object):
        self.data, self.missing, self.wrong = data, [], []

    def get(self, dotted: str, kind: type) -> Any:
        node = self.data
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                self.missing.append(f"`{dotted}`")
                return kind()
            node = node[part]
        if not isinstance(node, kind) or (kind is int and isinstance(node, bool)):
            self.wrong.append(f"`{dotted}` is {_shown(node)}, not {self.KINDS[kind]}")
            return kind()
        return node

    def check(self) -> None:
        said = ["has " + ", ".join(f"no {name}" for name in self.missing)] if self.missing else []
        if said or self.wrong:
            raise RecordError("the plan " + "; ".join(said + self.wrong))


def _shown(value: Any) -> str:
    import json

    return json.dumps(value, default=str)[:80]  # a value as the record writes it


def plan_from_record(record: object) -> RunPlan:
    """The plan a run recorded (`RunPlan.record()`: run.json's `plan`), read back as it was decided.

    Nothing is filled in: each field the record lacks (a run recorded by an older autotrain) or holds as the
    wrong type is named in one RecordError. What the record holds otherwise: the number of machines is its
    world size over the processes per machine; `problems` are none (a plan with problems never ran: the
    preflight refuses it); the TrainingArguments have no `output_dir` (the run's folder); a bundled
    optimizer's class is the one the optimizer table names, its kwargs as JSON holds them (a tuple a list).
    """
    found = _Record(record)
    precision = Precision(found.get("mixed_precision.resolved", str), found.get("device", str))
    per_machine, world = found.get("processes_per_machine", int), found.get("world_size", int)
    plan = RunPlan(
        precision=precision,
        asked_precision=found.get("mixed_precision.asked", str),
        processes_per_machine=per_machine,
        num_machines=world // per_machine if per_machine else 0,
        effective_batch_size=found.get("effective_batch_size", int),
        optimizer=_recorded_optimizer(found),
        training_args=found.get("training_arguments", dict),
        length_grouped=found.get("length_grouped_batches", bool),
        padding_free=found.get("padding_free", str),
        load_dtype=found.get("load_dtype", str),
        attn_implementation=found.get("attn_implementation", str),
        cross_entropy=_recorded_cross_entropy(found, record),
        notes=tuple(found.get("notes", list)),
        dtypes=found.get("dtypes", dict),
        refined=_refinements(found),
        adapter=_recorded_adapter(found, record),
        batch_size=_recorded_int(found, record, "batch_size"),
        gradient_accumulation=_recorded_int(found, record, "gradient_accumulation"),
        batch_choice=_recorded_choice(found, record),
        data=_recorded_data(found, record),
    )
    found.check()
    return plan


def _refinements(found: _Record) -> tuple[tuple[str, Any, Any, str], ...]:
    items, keys = found.get("refined_after_loading", list), ("field", "planned", "used", "why")
    if not all(isinstance(item, dict) and all(key in item for key in keys) for item in items):
        found.wrong.append(f"`refined_after_loading` is {_shown(items)}, not a list of {', '.join(keys)}")
        return ()
    return tuple(tuple(item[key] for key in keys) for item in items)


def _recorded_optimizer(found: _Record) -> OptimizerPlan:
    from autotrain.optimizers.table import OPTIMIZERS

    name = found.get("optimizer.name", str)
    if name not in OPTIMIZERS:
        if "`optimizer.name`" not in found.missing:
            found.wrong.append(f"`optimizer.name` is {_shown(name)}, an optimizer this autotrain does not know")
        return OptimizerPlan(name)
    if OPTIMIZERS[name].bundled:
        return OptimizerPlan(name, kwargs=found.get("optimizer.kwargs", dict))
    return OptimizerPlan(name, hf_settings=found.get("optimizer.training_arguments", dict))


def _recorded_adapter(found: _Record, record: object) -> AdapterPlan | None:
    if isinstance(record, dict) and "adapter" not in record:
        return ADDED_LATER["adapter"]
    if isinstance(record, dict) and record["adapter"] is None:
        return None
    rule = found.get("adapter.scale_rule", str)
    init = found.get("adapter.init_lora_weights", object)
    ratio = found.get("adapter.loraplus_lr_ratio", object)
    if not isinstance(init, (bool, str)) and "`adapter.init_lora_weights`" not in found.missing:
        found.wrong.append(f"`adapter.init_lora_weights` is {_shown(init)}, not true, false or a method's name")
    if ratio is not None and (not isinstance(ratio, (int, float)) or isinstance(ratio, bool)):
        if "`adapter.loraplus_lr_ratio`" not in found.missing:
            found.wrong.append(f"`adapter.loraplus_lr_ratio` is {_shown(ratio)}, not a number or null")
        ratio = None
    return AdapterPlan(
        method=found.get("adapter.method", str),
        r=found.get("adapter.r", int),
        alpha=found.get("adapter.alpha", int),
        rslora="sqrt" in rule,
        init=init if isinstance(init, (bool, str)) else True,
        loraplus_lr_ratio=float(ratio) if ratio is not None else None,
    )


def _recorded_int(found: _Record, record: object, name: str) -> int:
    """A field the record gained later (ADDED_LATER): read where an older record kept it."""
    if isinstance(record, dict) and name not in record:
        return found.get(ADDED_LATER[name], int)
    return found.get(name, int)


def _recorded_cross_entropy(found: _Record, record: object) -> str:
    """How the next-token loss was computed; a record from before the choice existed: its trainer's own way."""
    if isinstance(record, dict) and "cross_entropy" not in record:
        return ADDED_LATER["cross_entropy"]
    return found.get("cross_entropy", str)


def _recorded_choice(found: _Record, record: object) -> dict[str, Any]:
    """How `batch_size: auto` was decided; a record of a fixed batch holds none."""
    if not isinstance(record, dict) or "batch_size_auto" not in record:
        return {}
    return found.get("batch_size_auto", dict)


def _recorded_data(found: _Record, record: object) -> dict[str, Any]:
    """The sources of data autotrain prepared, and their shares; a record of other data holds none."""
    if not isinstance(record, dict) or "data" not in record:
        return {}
    return found.get("data", dict)
