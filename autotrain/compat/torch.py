"""torch's private names that autotrain needs: its multi-tensor ("foreach") kernels, and the dispatch mode
through which the memory estimate follows which tensors a layer's backward creates.

torch has no public multi-tensor API; its own optimizers step each group of same-device, same-dtype
tensors with one `torch._foreach_*` kernel, where a loop over the tensors would launch one kernel per
tensor. FusedAdam refreshes its half-precision weights from their fp32 copies this way.

`TorchDispatchMode` (torch.utils._python_dispatch) is how a Python object sees every op torch runs, with
its outputs; torch documents it (the "extending torch with Python" notes) but exports it from a private module.

Checked on torch 2.8.0 (the floor) and 2.13.0 (tests/test_compat.py).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["CHECKED_ON", "TorchDispatchMode", "foreach_add_", "foreach_copy_"]

CHECKED_ON = ("2.8.0", "2.13.0")


def foreach_copy_(targets: list[Tensor], sources: list[Tensor]) -> None:
    """`target.copy_(source)` for each pair (casting to the target's dtype), in one kernel per device and
    dtype."""
    torch._foreach_copy_(targets, sources)


def foreach_add_(tensors: list[Tensor], value: float) -> None:
    """`tensor.add_(value)` for each tensor, in one kernel per device and dtype."""
    torch._foreach_add_(tensors, value)
