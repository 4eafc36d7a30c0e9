"""The LoRA adapter a run trains, as its plan records it (no torch): the method (LoRA or DoRA), its scale, how it
starts, the rate of LoRA+'s B matrices, and what the saved adapter is.

PiSSA and OLoRA start the adapter from a decomposition of each base weight and leave the base with the residual,
so the adapter they train only means something on that residual. When the run is saved, peft's documented
conversion (`save_pretrained(path_initial_model_for_weight_conversion=...)`) subtracts the initial adapter from
the trained one: the result is a plain LoRA adapter of rank 2r on the unchanged base model, which every loader
(chat, predict, export, peft itself) takes as any other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from autotrain.config.rules import RESIDUAL_INITS

INITIAL_ADAPTER = "initial_adapter"  # the folder, in the project folder, holding the adapter as it started


def init_lora_weights(peft) -> bool | str:
    """peft's `init_lora_weights` for a validated `peft:` section."""
    if peft.init == "default":
        return True
    if peft.init == "pissa" and peft.pissa_niter is not None:
        return f"pissa_niter_{peft.pissa_niter}"
    return peft.init


@dataclass(frozen=True)
class AdapterPlan:
    method: str  # "LoRA" or "DoRA"
    r: int
    alpha: int
    rslora: bool  # scale alpha / sqrt(r) instead of alpha / r
    init: bool | str  # peft's init_lora_weights
    loraplus_lr_ratio: float | None  # the B matrices' rate over `lr` (LoRA+), None: one rate

    @property
    def scale(self) -> float:
        return self.alpha / (math.sqrt(self.r) if self.rslora else self.r)

    @property
    def converts(self) -> bool:
        """The adapter starts from the base weights (PiSSA, OLoRA) and is saved converted to plain LoRA."""
        return isinstance(self.init, str) and self.init.startswith(RESIDUAL_INITS)

    def record(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "r": self.r,
            "alpha": self.alpha,
            "scale": round(self.scale, 6),
            "scale_rule": "alpha / sqrt(r) (rsLoRA)" if self.rslora else "alpha / r",
            "init_lora_weights": self.init,
            "loraplus_lr_ratio": self.loraplus_lr_ratio,
            "saved_as": self.saved_as(),
        }

    def saved_as(self) -> str:
        if self.converts:
            return f"plain LoRA adapter of rank {2 * self.r} on the unchanged base model (converted from {self.init})"
        return f"{self.method} adapter of rank {self.r}"

    def summary(self) -> str:
        """One line for the model card."""
        rule = "alpha / sqrt(r), rsLoRA" if self.rslora else "alpha / r"
        parts = [f"{self.method}, r {self.r}, alpha {self.alpha} (scale {self.scale:.4g} = {rule})"]
        if self.init is not True:
            parts.append(f"init {self.init}")
        if self.loraplus_lr_ratio is not None:
            parts.append(f"LoRA+: B matrices at lr x {self.loraplus_lr_ratio:g}")
        if self.converts:
            parts.append(f"saved as a {self.saved_as()}")
        return "; ".join(parts)


def resolve_adapter(cfg) -> AdapterPlan | None:
    """The adapter of a config with `peft:` enabled; None for a full fine-tune."""
    if not getattr(cfg, "uses_peft", False):
        return None
    peft = cfg.peft
    return AdapterPlan(
        method="DoRA" if peft.use_dora else "LoRA",
        r=peft.r,
        alpha=peft.alpha,
        rslora=peft.use_rslora,
        init=init_lora_weights(peft),
        loraplus_lr_ratio=peft.loraplus_lr_ratio,
    )


def save_initial_adapter(trainer) -> None:
    """Keep the adapter as PiSSA / OLoRA started it (before any step), in the project folder: the final save
    subtracts it from the trained one (`save_converted_adapter`). A resumed run rebuilds the same start (the
    decomposition of the same weights, under the same seed) and writes it again."""
    from pathlib import Path

    if trainer.is_world_process_zero():
        trainer.model.save_pretrained(str(Path(trainer.args.output_dir) / INITIAL_ADAPTER))


def save_converted_adapter(model, folder) -> None:
    """Save `model`'s trained PiSSA / OLoRA adapter in `folder` as a plain LoRA adapter of rank 2r on the
    unchanged base model (peft's conversion against the initial adapter), then drop the initial adapter."""
    import shutil
    from pathlib import Path

    initial = Path(folder) / INITIAL_ADAPTER
    model.save_pretrained(str(folder), path_initial_model_for_weight_conversion=str(initial))
    shutil.rmtree(initial, ignore_errors=True)
