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
    # Optimizer state kept per trained parameter, in bytes, for fp32 parameters (the memory estimate reads it):
    # AdamW's two moments 8; factored optimizers (and Adafactor, without a first moment by default: 0): what
    # a matrix keeps besides its row/column statistics; SGD without momentum 0; low-rank ones (GaLore,
    # APOLLO) are counted as AdamW, an upper bound.
    state_bytes: float = 8.0
    state_quantized: bool = False  # 8/4-bit state: the same bytes whatever the parameters' dtype
    cuda_only: bool = False
    package: str | None = None  # an extra package it needs, installed with `pip install <package>`
    module: str | None = None  # the package's import name, when it differs from `package`
    as_optim_args: bool = False  # transformers takes its arguments as the `optim_args` string
    summary: str = ""
    # A combination of optimizers of this table: (its argument holding a part's arguments, that part's name)
    parts: tuple[tuple[str, str], ...] = ()

    @property
    def import_name(self) -> str | None:
        return self.module or self.package

    def part_kwargs(self, kwargs: dict) -> list[tuple[str, dict]]:
        """(optimizer name, its own keyword arguments) of each optimizer `kwargs` (this one's) configure:
        each part's, or this optimizer's own when it is no combination."""
        if not self.parts:
            return [(self.name, kwargs)]
        return [(part, kwargs.get(argument, {})) for argument, part in self.parts]

    def load_class(self) -> type:
        """The optimizer class of a bundled entry (imports torch)."""
        import importlib

        module, _, name = self.target.partition(":")
        return getattr(importlib.import_module(module), name)


_BUNDLED = "autotrain.optimizers."
_BNB = {"package": "bitsandbytes", "cuda_only": True}
_BYTE2 = {"state_bytes": 2.0, "state_quantized": True}  # 8-bit moments, two of them


def _hf(name: str, summary: str, args_model: type[BaseModel] = args.OptimArgs, **extra) -> OptimizerSpec:
    """An optimizer transformers builds from `TrainingArguments(optim=name)`; `optimizer_args` become its
    `optim_args` unless `args_model` names typed fields (betas, eps) that map onto TrainingArguments."""
    return OptimizerSpec(
        name, args_model, name, False, as_optim_args=issubclass(args_model, args.OptimArgs), summary=summary, **extra
    )


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
            state_bytes=2.0,
            state_quantized=True,
            package="bitsandbytes",
            summary="bitsandbytes 8-bit AdamW",
        ),
        OptimizerSpec(
            "adafactor",
            args.AdafactorArgs,
            "adafactor",
            False,
            state_bytes=0.0,
            summary="transformers' Adafactor",
        ),
        OptimizerSpec("sgd", args.SgdArgs, "sgd", False, as_optim_args=True, state_bytes=0.0, summary="torch SGD"),
        OptimizerSpec(
            "came", args.CameArgs, _BUNDLED + "came:CAME", True, factored=True, state_bytes=4.0, summary="CAME"
        ),
        OptimizerSpec(
            "came_8bit",
            args.Came8BitArgs,
            _BUNDLED + "came_8bit:CAME8Bit",
            True,
            factored=True,
            state_bytes=1.0,
            state_quantized=True,
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
            state_bytes=1.0,
            state_quantized=True,
            summary="CAME8Bit on large matrices, FusedAdam on the rest",
            parts=(("came", "came_8bit"), ("adam", "fused_adam")),
        ),
        # The rest of transformers' `OptimizerNames`, written out so that this table needs neither torch nor
        # transformers (tests/test_optimizers_registry.py compares it with the installed transformers).
        _hf("adagrad", "torch Adagrad", state_bytes=4.0),
        _hf("rmsprop", "torch RMSprop", state_bytes=4.0),
        _hf("adamw_torch_xla", "torch_xla's sync-free AdamW (TPU)", args.AdamW8BitArgs, package="torch_xla"),
        _hf("adamw_torch_npu_fused", "torch_npu's fused AdamW (Ascend NPU)", args.AdamW8BitArgs, package="torch_npu"),
        _hf("adamw_anyprecision", "torchdistx AnyPrecisionAdamW", package="torchdistx"),
        _hf("adamw_torch_4bit", "torchao 4-bit AdamW", package="torchao", state_bytes=1.0, state_quantized=True),
        _hf("adamw_torch_8bit", "torchao 8-bit AdamW", package="torchao", **_BYTE2),
        _hf("adamw_bnb_8bit", "bitsandbytes 8-bit AdamW", args.AdamW8BitArgs, **_BNB, **_BYTE2),
        _hf("paged_adamw_32bit", "bitsandbytes paged AdamW", args.AdamW8BitArgs, **_BNB),
        _hf("paged_adamw_8bit", "bitsandbytes paged 8-bit AdamW", args.AdamW8BitArgs, **_BNB, **_BYTE2),
        _hf("ademamix", "bitsandbytes AdEMAMix", **_BNB, state_bytes=12.0),
        _hf("ademamix_8bit", "bitsandbytes 8-bit AdEMAMix", **_BNB, state_bytes=3.0, state_quantized=True),
        _hf("paged_ademamix_32bit", "bitsandbytes paged AdEMAMix", **_BNB, state_bytes=12.0),
        _hf("paged_ademamix_8bit", "bitsandbytes paged 8-bit AdEMAMix", **_BNB, state_bytes=3.0, state_quantized=True),
        _hf("lion_32bit", "bitsandbytes Lion", args.LionArgs, **_BNB, state_bytes=4.0),
        _hf("lion_8bit", "bitsandbytes 8-bit Lion", args.LionArgs, **_BNB, state_bytes=1.0, state_quantized=True),
        _hf("paged_lion_32bit", "bitsandbytes paged Lion", args.LionArgs, **_BNB, state_bytes=4.0),
        _hf(
            "paged_lion_8bit",
            "bitsandbytes paged 8-bit Lion",
            args.LionArgs,
            **_BNB,
            state_bytes=1.0,
            state_quantized=True,
        ),
        _hf("rmsprop_bnb", "bitsandbytes RMSprop", **_BNB, state_bytes=4.0),
        _hf("rmsprop_bnb_8bit", "bitsandbytes 8-bit RMSprop", **_BNB, state_bytes=1.0, state_quantized=True),
        _hf("rmsprop_bnb_32bit", "bitsandbytes 32-bit RMSprop", **_BNB, state_bytes=4.0),
        *(
            _hf(name, f"GaLore {kind}", args.LowRankArgs, package="galore-torch", module="galore_torch")
            for name, kind in (
                ("galore_adamw", "AdamW"),
                ("galore_adamw_8bit", "8-bit AdamW"),
                ("galore_adafactor", "Adafactor"),
                ("galore_adamw_layerwise", "AdamW, layer-wise"),
                ("galore_adamw_8bit_layerwise", "8-bit AdamW, layer-wise"),
                ("galore_adafactor_layerwise", "Adafactor, layer-wise"),
            )
        ),
        _hf("apollo_adamw", "APOLLO AdamW", args.LowRankArgs, package="apollo-torch", module="apollo_torch"),
        _hf(
            "apollo_adamw_layerwise",
            "APOLLO AdamW, layer-wise",
            args.LowRankArgs,
            package="apollo-torch",
            module="apollo_torch",
        ),
        _hf("lomo", "LOMO", package="lomo-optim", module="lomo_optim", state_bytes=0.0),
        _hf("adalomo", "AdaLomo", package="lomo-optim", module="lomo_optim", factored=True, state_bytes=0.0),
        _hf("grokadamw", "GrokAdamW", package="grokadamw", state_bytes=12.0),
        _hf("schedule_free_radam", "schedule-free RAdam", package="schedulefree"),
        _hf("schedule_free_adamw", "schedule-free AdamW", package="schedulefree"),
        _hf("schedule_free_sgd", "schedule-free SGD", package="schedulefree", state_bytes=4.0),
        _hf("stable_adamw", "optimi StableAdamW", package="torch-optimi", module="optimi"),
    )
}
DEFAULT = "adamw_torch"
BUNDLED = tuple(name for name, spec in OPTIMIZERS.items() if spec.bundled)
