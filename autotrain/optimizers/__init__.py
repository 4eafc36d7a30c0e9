"""Optimizers bundled with autotrain (CAME, CAME8Bit, FusedAdam, CAME8BitFusedAdam), the table that
declares every optimizer name, and the registry that builds them.

`autotrain.optimizers.table` imports no torch (the config layer reads it); the classes load on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "CAME": "autotrain.optimizers.came",
    "CAME8Bit": "autotrain.optimizers.came_8bit",
    "CAME8BitFusedAdam": "autotrain.optimizers.combined",
    "FusedAdam": "autotrain.optimizers.fused_adam",
    "hf_optimizer_settings": "autotrain.optimizers.registry",
    "optimizer_cls_and_kwargs": "autotrain.optimizers.registry",
    "BUNDLED": "autotrain.optimizers.table",
    "OPTIMIZERS": "autotrain.optimizers.table",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'autotrain.optimizers' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
