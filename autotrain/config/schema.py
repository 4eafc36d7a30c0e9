"""The JSON Schema of a task config, as editors see it (`autotrain schema TASK`, configs/schemas/).

Pydantic's schema plus what a plain `dict` field cannot say: `optimizer_args` is typed by the chosen
`optimizer`, one `if`/`then` per entry of the optimizer table, so editors complete and check it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from autotrain.optimizers.table import DEFAULT as DEFAULT_OPTIMIZER
from autotrain.optimizers.table import OPTIMIZERS


def task_json_schema(model: type[BaseModel], title: str) -> dict[str, Any]:
    schema = model.model_json_schema()
    defs = schema.setdefault("$defs", {})
    conditions = [_optimizer_condition(name, spec.args, defs) for name, spec in OPTIMIZERS.items()]
    for definition in defs.values():
        if "optimizer_args" in definition.get("properties", {}):
            definition["allOf"] = conditions
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = title
    return schema


def _optimizer_condition(name: str, args: type[BaseModel], defs: dict) -> dict[str, Any]:
    sub = args.model_json_schema(ref_template="#/$defs/{model}")
    defs.update(sub.pop("$defs", {}))
    defs.setdefault(args.__name__, sub)
    chosen: dict[str, Any] = {"required": ["optimizer"], "properties": {"optimizer": {"const": name}}}
    if name == DEFAULT_OPTIMIZER:  # also when `optimizer` is left out
        chosen = {"anyOf": [chosen, {"not": {"required": ["optimizer"]}}]}
    return {"if": chosen, "then": {"properties": {"optimizer_args": {"$ref": f"#/$defs/{args.__name__}"}}}}
