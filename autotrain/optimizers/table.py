"""Every optimizer autotrain knows, declared once. Importing this module imports no torch.

The config schema (the allowed names and the typed `optimizer_args`, in the JSON Schema too), the
cross-field rules, the capability checks before a run, the registry that builds the optimizer and the
Trainer hook-up all read `OPTIMIZERS`. Adding an optimizer is one entry here (and its class, for a
bundled one).
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from autotrain.optimizers import args


@dataclass(frozen=True)
class OptimizerSpec:
    name: str
    args: type[BaseModel]  # typed `optimizer_args`
    # Bundled: "module:Class", built by autotrain and handed to the Trainer as optimizer_cls_and_kwargs.
    # Otherwise: the TrainingArguments `optim` name, built by transformers.
    target: str
    bundled: bool
    factored: bool = False  # keeps factored (row/column) statistics of 2-D parameters
    cuda_only: bool = False
    package: str | None = None  # an extra package it needs, installed with `pip install <package>`
    as_optim_args: bool = False  # transformers takes its arguments as the `optim_args` string
    summary: str = ""

    def load_class(self) -> type:
        """The optimizer class of a bundled entry (imports torch)."""
        import importlib

        module, _, name = self.target.partition(":")
        return getattr(importlib.import_module(module), name)


_BUNDLED = "autotrain.optimizers."
OPTIMIZERS: dict[str, OptimizerSpec] = {
    spec.name: spec
    for spec in (
        OptimizerSpec("adamw_torch", args.AdamWTorchArgs, "adamw_torch", False, summary="torch AdamW"),
        OptimizerSpec(
            "adamw_torch_fused", args.AdamWTorchArgs, "adamw_torch_fused", False, summary="torch AdamW, fused kernel"
        ),
        OptimizerSpec(
            "adamw_8bit",
            args.AdamW8BitArgs,
            "adamw_bnb_8bit",
            False,
            cuda_only=True,
            package="bitsandbytes",
            summary="bitsandbytes 8-bit AdamW",
        ),
        OptimizerSpec("adafactor", args.AdafactorArgs, "adafactor", False, summary="transformers' Adafactor"),
        OptimizerSpec("sgd", args.SgdArgs, "sgd", False, as_optim_args=True, summary="torch SGD"),
        OptimizerSpec("came", args.CameArgs, _BUNDLED + "came:CAME", True, factored=True, summary="CAME"),
        OptimizerSpec(
            "came_8bit",
            args.Came8BitArgs,
            _BUNDLED + "came_8bit:CAME8Bit",
            True,
            factored=True,
            summary="CAME, first moment in block-wise 8 bits",
        ),
        OptimizerSpec(
            "fused_adam", args.FusedAdamArgs, _BUNDLED + "fused_adam:FusedAdam", True, summary="Apex-style FusedAdam"
        ),
        OptimizerSpec(
            "came_8bit+fused_adam",
            args.Came8BitFusedAdamArgs,
            _BUNDLED + "combined:CAME8BitFusedAdam",
            True,
            factored=True,
            summary="CAME8Bit on large matrices, FusedAdam on the rest",
        ),
    )
}
DEFAULT = "adamw_torch"
BUNDLED = tuple(name for name, spec in OPTIMIZERS.items() if spec.bundled)
