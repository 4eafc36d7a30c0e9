"""Typed constructor arguments of each optimizer (pydantic only, no torch); `table.py` pairs them with names.

`lr` and `weight_decay` are not optimizer arguments: they come from `training_args`, so a key of
that name here is rejected as unknown like any other.
"""

from __future__ import annotations

import math
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from autotrain.fields import Bool, Float, Int

Beta = Annotated[Float, Field(ge=0.0, lt=1.0)]
PositiveFloat = Annotated[Float, Field(gt=0.0, le=1.0)]


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, defer_build=True)


class CameArgs(_Args):
    eps: tuple[PositiveFloat, PositiveFloat] = Field(
        (1e-30, 1e-16), description="(eps1, eps2): regularise the squared gradient and the instability."
    )
    clip_threshold: Float = Field(1.0, gt=0.0, le=1e6, description="RMS threshold of the update.")
    betas: tuple[Beta, Beta, Beta] = Field(
        (0.9, 0.999, 0.9999),
        description="EMA coefficients of the update, squared gradient and instability, each in [0, 1).",
    )
    compile: Bool | None = Field(
        None,
        description=(
            "Compile the step of each group of same-shaped params with torch.compile (C++ on CPU, Triton on "
            "CUDA), once per chunk layout: null (auto) compiles where that pays back within the run's max_steps, "
            "on a thread while the first steps run eagerly (training never waits for it; with several "
            "processes, before the first step): on the CPU groups of 2**20 elements or more, larger ones in "
            "short runs (elements x max_steps >= 1e9); on CUDA every group in runs of 200 steps or more; true "
            "compiles every group before its first step; false never compiles. 3-D+ params always step "
            "eagerly. Where compiling fails, that step is the eager one from the state before it and the "
            "optimizer keeps the eager step (one notice on stderr; run.json: optimizer_compile)."
        ),
    )
    master_weights: Bool = Field(
        True,
        description="Keep fp32 master weights of fp16/bf16 params (4 bytes per parameter): without them a bf16 "
        "weight loses every update below half its ulp (lr 1e-5 on a weight of 0.01).",
    )


class Came8BitArgs(CameArgs):
    block_size: Int = Field(
        2048,
        ge=1,
        le=2**24,
        description="Most elements per 8-bit quantization block (one fp32 scale each). Each matrix gets a block "
        "of at least half this that its rows divide or that holds whole rows, where one exists.",
    )
    min_8bit_size: Int = Field(
        16384, ge=0, le=2**48, description="Matrices with fewer elements keep their first moment in fp32."
    )


class FusedAdamArgs(_Args):
    bias_correction: Bool = Field(True, description="Correct the moments' zero-initialisation bias.")
    betas: tuple[Beta, Beta] = Field((0.9, 0.999), description="(beta1, beta2), each in [0, 1).")
    eps: Float = Field(1e-8, ge=0.0, le=1.0, description="Added to the denominator for stability.")
    adam_w_mode: Bool = Field(True, description="Decoupled weight decay (AdamW); False applies it as L2 (Adam).")
    amsgrad: Bool = Field(False, description="Not supported; must stay false.")
    set_grad_none: Bool = Field(True, description="zero_grad() sets gradients to None instead of zeroing them.")
    capturable: Bool = Field(
        False,
        description="Must stay false: FusedAdam reads lr as a Python float each step, which CUDA graph capture "
        "would freeze (use adamw_torch_fused for capture-safe steps).",
    )
    master_weights: Bool = Field(
        True,
        description="Keep fp32 master copies (and fp32 moments) of fp16/bf16 params (4 + 8 bytes per parameter); "
        "false keeps the moments in the params' dtype, where a bf16 weight loses every update below half its ulp.",
    )

    @model_validator(mode="after")
    def _no_unsupported_flags(self) -> FusedAdamArgs:
        if self.amsgrad:
            raise ValueError("amsgrad is not supported by FusedAdam")
        if self.capturable:
            raise ValueError(
                "capturable=true is not supported by FusedAdam: it reads lr as a Python float each step, so "
                "a captured CUDA graph would keep the first learning rate; leave it false"
            )
        return self


class Came8BitFusedAdamArgs(_Args):
    came: Came8BitArgs = Field(default_factory=Came8BitArgs, description="Arguments of the CAME8Bit part.")
    adam: FusedAdamArgs = Field(default_factory=FusedAdamArgs, description="Arguments of the FusedAdam part.")
    min_factored_size: Int = Field(
        16384,
        ge=0,
        le=2**48,
        description="Fewest elements for a matrix to take the CAME8Bit path (the rest use FusedAdam).",
    )


class AdamWTorchArgs(_Args):
    betas: tuple[Beta, Beta] = Field((0.9, 0.999), description="(beta1, beta2), each in [0, 1).")
    eps: Float = Field(1e-8, ge=0.0, le=1.0, description="Added to the denominator for stability.")
    amsgrad: Bool = Field(
        False, description="Must stay false: transformers' adamw_torch / adamw_torch_fused do not pass it on."
    )

    @model_validator(mode="after")
    def _no_amsgrad(self) -> AdamWTorchArgs:
        if self.amsgrad:
            raise ValueError(
                "amsgrad=true is not supported: transformers builds adamw_torch / adamw_torch_fused "
                "without it (its optim_args are ignored there)"
            )
        return self


class AdamW8BitArgs(_Args):
    betas: tuple[Beta, Beta] = Field((0.9, 0.999), description="(beta1, beta2), each in [0, 1).")
    eps: Float = Field(1e-8, ge=0.0, le=1.0, description="Added to the denominator for stability.")


class AdafactorArgs(_Args):
    """transformers' `adafactor` fixes these settings (and ignores optim_args), so only they pass."""

    scale_parameter: Bool = Field(False, description="Scale the learning rate by the parameter RMS (fixed false).")
    relative_step: Bool = Field(False, description="Time-dependent learning rate instead of `lr` (fixed false).")
    warmup_init: Bool = Field(False, description="Warm the relative step up from 0 (fixed false).")
    eps: tuple[PositiveFloat, PositiveFloat] | None = Field(
        None, description="(eps1, eps2); transformers always uses its default (1e-30, 1e-3), so leave unset."
    )

    @model_validator(mode="after")
    def _only_what_transformers_passes(self) -> AdafactorArgs:
        changed = [name for name in ("scale_parameter", "relative_step", "warmup_init", "eps") if getattr(self, name)]
        if changed:
            raise ValueError(
                f"{', '.join(changed)} cannot be changed: transformers builds `adafactor` with "
                "scale_parameter=false, relative_step=false, warmup_init=false and default eps"
            )
        return self


class SgdArgs(_Args):
    momentum: Float = Field(0.0, ge=0.0, le=1.0, description="Momentum factor.")
    nesterov: Bool = Field(False, description="Nesterov momentum (needs momentum > 0 and dampening = 0).")
    dampening: Float = Field(0.0, ge=0.0, le=1.0, description="Dampening for momentum.")

    @model_validator(mode="after")
    def _nesterov_needs_momentum(self) -> SgdArgs:
        if self.nesterov and (self.momentum <= 0.0 or self.dampening != 0.0):
            raise ValueError("nesterov=true needs momentum > 0 and dampening = 0")
        return self


class OptimArgs(_Args):
    """Arguments of an optimizer transformers builds from its `optim_args` string (`key=value,...`).

    Which keys each one reads is transformers' business (GrokAdamW's `alpha_init`, AdEMAMix's `beta3`,
    ...), so any key is taken; values must be plain numbers, booleans or words, as that string can hold.
    """

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)

    @model_validator(mode="after")
    def _plain_values(self) -> OptimArgs:
        for key, value in (self.model_extra or {}).items():
            if not isinstance(value, (bool, int, float, str)):
                raise ValueError(f"`{key}`: expected a number, `true`/`false` or a word, got {type(value).__name__}")
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"`{key}`: expected a finite number")
            if any(c in f"{key}{value}" for c in ",= "):
                raise ValueError(f"`{key}`: neither key nor value may hold `,`, `=` or spaces")
        return self


class LowRankArgs(OptimArgs):
    """GaLore and APOLLO project the gradients of chosen linear layers (`target_modules`) to low rank."""

    target_modules: str | list[str] = Field(
        "all-linear",
        description="Linear layers whose gradients are projected: `all-linear`, a regex, or a list of names "
        "(transformers' `optim_target_modules`). Other keys (rank, update_proj_gap, scale, ...) pass as optim_args.",
    )


class LionArgs(_Args):
    betas: tuple[Beta, Beta] = Field((0.9, 0.999), description="(beta1, beta2), each in [0, 1).")
