"""Optimizer names from the config -> what the transformers Trainer needs to build them.

Bundled optimizers reach the Trainer through ``Trainer(optimizer_cls_and_kwargs=...)`` so its
decay / no-decay param grouping still applies; the others map onto ``TrainingArguments(optim=...)``.
"""

from __future__ import annotations

from typing import Any

from autotrain.config.optimizers import BUNDLED_OPTIMIZERS, OPTIMIZER_ARGS
from autotrain.optimizers.came import CAME
from autotrain.optimizers.came_8bit import CAME8Bit
from autotrain.optimizers.combined import CAME8BitFusedAdam
from autotrain.optimizers.fused_adam import FusedAdam

BUNDLED: dict[str, type] = {
    "came": CAME,
    "came_8bit": CAME8Bit,
    "fused_adam": FusedAdam,
    "came_8bit+fused_adam": CAME8BitFusedAdam,
}
assert tuple(BUNDLED) == BUNDLED_OPTIMIZERS

_HF_OPTIM = {
    "adamw_torch": "adamw_torch",
    "adamw_torch_fused": "adamw_torch_fused",
    "adamw_8bit": "adamw_bnb_8bit",
    "adafactor": "adafactor",
    "sgd": "sgd",
}


def _validated(name: str, optimizer_args: dict[str, Any] | None) -> dict[str, Any]:
    if name not in OPTIMIZER_ARGS:
        raise ValueError(f"Unknown optimizer {name!r}; known: {', '.join(OPTIMIZER_ARGS)}")
    return OPTIMIZER_ARGS[name].model_validate(optimizer_args or {}).model_dump()


def optimizer_cls_and_kwargs(name: str, optimizer_args: dict[str, Any]) -> tuple[type, dict[str, Any]]:
    """Class and constructor kwargs of a bundled optimizer, for ``Trainer(optimizer_cls_and_kwargs=)``.

    ``optimizer_args`` is validated against ``OPTIMIZER_ARGS[name]`` (pydantic ``ValidationError``
    on unknown keys or bad values). The Trainer calls ``cls(param_groups, **kwargs)`` with groups
    carrying ``params`` and ``weight_decay``; it does not add ``lr`` on this path (transformers
    5.x), so the caller adds ``kwargs["lr"] = training_args.learning_rate``.
    """
    if name not in BUNDLED:
        raise ValueError(
            f"{name!r} is not a bundled optimizer ({', '.join(BUNDLED)}); "
            "use hf_optimizer_settings() to configure it through TrainingArguments"
        )
    return BUNDLED[name], _validated(name, optimizer_args)


def hf_optim_name(name: str) -> str | None:
    """The ``TrainingArguments.optim`` value for a non-bundled name, None for bundled ones."""
    if name in BUNDLED:
        return None
    if name not in _HF_OPTIM:
        raise ValueError(f"Unknown optimizer {name!r}; known: {', '.join(OPTIMIZER_ARGS)}")
    return _HF_OPTIM[name]


def hf_optimizer_settings(name: str, optimizer_args: dict[str, Any]) -> dict[str, Any]:
    """``TrainingArguments`` kwargs (``optim``, ``adam_beta1``, ..., ``optim_args``) for a non-bundled name.

    Settings transformers would not pass on (``amsgrad``, Adafactor's flags) already fail
    validation against ``OPTIMIZER_ARGS[name]``.
    """
    optim = hf_optim_name(name)
    if optim is None:
        raise ValueError(f"{name!r} is bundled; use optimizer_cls_and_kwargs()")
    args = _validated(name, optimizer_args)
    settings: dict[str, Any] = {"optim": optim}
    if name in ("adamw_torch", "adamw_torch_fused", "adamw_8bit"):
        settings.update(adam_beta1=args["betas"][0], adam_beta2=args["betas"][1], adam_epsilon=args["eps"])
    elif name == "sgd":
        settings["optim_args"] = ",".join(f"{key}={value}" for key, value in args.items())
    return settings
