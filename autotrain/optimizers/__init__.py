"""Optimizers bundled with autotrain, and the name registry the trainers use."""

from autotrain.optimizers.came import CAME
from autotrain.optimizers.came_8bit import CAME8Bit
from autotrain.optimizers.combined import CAME8BitFusedAdam
from autotrain.optimizers.fused_adam import FusedAdam
from autotrain.optimizers.registry import (
    BUNDLED,
    hf_optim_name,
    hf_optimizer_settings,
    optimizer_cls_and_kwargs,
)

__all__ = [
    "BUNDLED",
    "CAME",
    "CAME8Bit",
    "CAME8BitFusedAdam",
    "FusedAdam",
    "hf_optim_name",
    "hf_optimizer_settings",
    "optimizer_cls_and_kwargs",
]
