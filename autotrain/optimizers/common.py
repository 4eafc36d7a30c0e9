"""What the bundled optimizers share: ``step(closure)``'s loss, the dtypes that keep fp32 master weights,
and loading a state dict without casting fp32 (or integer) state to the params' dtype."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import chain
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer

HALF = (torch.float16, torch.bfloat16)  # params that keep fp32 master weights (``master_weights=True``)


def closure_loss(closure: Callable[[], float] | None) -> float | None:
    """The loss ``closure`` returns, evaluated with gradients on (``step`` runs under ``no_grad``), or None."""
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()


def saved_states(optimizer: Optimizer, state_dict: dict[str, Any]) -> Iterator[tuple[Tensor, dict[str, Any]]]:
    """Each param of ``optimizer`` with its state in ``state_dict`` (matched by position, as torch does)."""
    saved_ids = chain.from_iterable(g["params"] for g in state_dict["param_groups"])
    params = chain.from_iterable(g["params"] for g in optimizer.param_groups)
    for saved_id, param in zip(saved_ids, params, strict=False):
        yield param, state_dict["state"].get(saved_id, {})


def restore_saved_dtypes(optimizer: Optimizer, state_dict: dict[str, Any]) -> None:
    """Undo ``Optimizer.load_state_dict``'s cast of every floating state tensor to the param dtype: fp32
    statistics (and integer codes) kept for bf16/fp16 params must come back exactly as saved."""
    for param, saved in saved_states(optimizer, state_dict):
        for key, value in saved.items():
            if isinstance(value, Tensor):
                optimizer.state[param][key] = value.to(device=param.device)


def check_arg(ok: Any, what: str, value: Any) -> None:
    """torch.optim's check of a constructor argument: ``ValueError("Invalid <what>: <value>")`` unless ``ok``."""
    if not ok:
        raise ValueError(f"Invalid {what}: {value}")
