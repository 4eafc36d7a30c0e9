"""Optimizer names -> what the transformers Trainer needs to build them, read from `table.OPTIMIZERS`.

Bundled optimizers reach the Trainer through `optimizer_cls_and_kwargs` so its decay / no-decay param
grouping still applies; the others map onto `TrainingArguments(optim=...)`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from autotrain.optimizers.table import OPTIMIZERS, OptimizerSpec


def _spec(name: str) -> OptimizerSpec:
    if name not in OPTIMIZERS:
        raise ValueError(f"Unknown optimizer {name!r}; known: {', '.join(OPTIMIZERS)}")
    return OPTIMIZERS[name]


def _validated(spec: OptimizerSpec, optimizer_args: BaseModel | dict[str, Any] | None) -> dict[str, Any]:
    """The arguments as keyword arguments: a validated config holds them typed already (`spec.args`)."""
    if isinstance(optimizer_args, spec.args):
        return optimizer_args.model_dump()
    return spec.args.model_validate(optimizer_args or {}).model_dump()


def optimizer_cls_and_kwargs(name: str, optimizer_args: dict[str, Any]) -> tuple[type, dict[str, Any]]:
    """Class and constructor kwargs of a bundled optimizer, for `Trainer(optimizer_cls_and_kwargs=)`.

    `optimizer_args` is validated against the table's argument model (pydantic `ValidationError` on
    unknown keys or bad values). The Trainer calls `cls(param_groups, **kwargs)` with groups carrying
    `params` and `weight_decay`; it does not add `lr` on this path (transformers 5.x), so the caller adds
    `kwargs["lr"]`.
    """
    spec = _spec(name)
    if not spec.bundled:
        raise ValueError(f"{name!r} is not a bundled optimizer; use hf_optimizer_settings()")
    return spec.load_class(), _validated(spec, optimizer_args)


def hf_optimizer_settings(name: str, optimizer_args: dict[str, Any]) -> dict[str, Any]:
    """TrainingArguments kwargs (`optim`, `adam_beta1`, ..., `optim_args`) for a name transformers builds.

    Settings transformers would not pass on (`amsgrad`, Adafactor's flags) already fail validation
    against the table's argument model.
    """
    spec = _spec(name)
    if spec.bundled:
        raise ValueError(f"{name!r} is bundled; use optimizer_cls_and_kwargs()")
    given = _validated(spec, optimizer_args)
    settings: dict[str, Any] = {"optim": spec.target}
    if "target_modules" in given:  # GaLore / APOLLO: which layers get low-rank projections
        settings["optim_target_modules"] = given.pop("target_modules")
    if spec.as_optim_args:
        if given:
            settings["optim_args"] = ",".join(f"{key}={value}" for key, value in given.items())
        return settings
    if "betas" in given:  # the Adam / Lion families read TrainingArguments' adam_* fields
        settings.update(adam_beta1=given["betas"][0], adam_beta2=given["betas"][1])
    if "eps" in given and "betas" in given:
        settings["adam_epsilon"] = given["eps"]
    return settings
