"""torch's private names that autotrain needs: its multi-tensor ("foreach") kernels, the dispatch mode
through which the memory estimate follows which tensors a layer's backward creates, and the releases whose
ahead-of-time compile CAME's compiled step takes.

torch has no public multi-tensor API; its own optimizers step each group of same-device, same-dtype
tensors with one `torch._foreach_*` kernel, where a loop over the tensors would launch one kernel per
tensor. FusedAdam refreshes its half-precision weights from their fp32 copies this way.

`TorchDispatchMode` (torch.utils._python_dispatch) is how a Python object sees every op torch runs, with
its outputs; torch documents it (the "extending torch with Python" notes) but exports it from a private module.

`precompiled`: torch's ahead-of-time compile of a `torch.compile` function (`.aot_compile`, documented and
experimental), whose calls skip Dynamo's frame evaluation and guards; it is taken from torch 2.13 (the first
release checked) and refuses inductor's caches disabled, which a private config says.

Checked on torch 2.8.0 (the floor) and 2.13.0 (tests/test_compat.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["AOT_COMPILE_FROM", "CHECKED_ON", "TorchDispatchMode", "foreach_add_", "foreach_copy_", "precompiled"]

CHECKED_ON = ("2.8.0", "2.13.0")
AOT_COMPILE_FROM = (2, 13)  # the first release whose ahead-of-time compile was checked


def foreach_copy_(targets: list[Tensor], sources: list[Tensor]) -> None:
    """`target.copy_(source)` for each pair (casting to the target's dtype), in one kernel per device and
    dtype."""
    torch._foreach_copy_(targets, sources)


def foreach_add_(tensors: list[Tensor], value: float) -> None:
    """`tensor.add_(value)` for each tensor, in one kernel per device and dtype."""
    torch._foreach_add_(tensors, value)


def precompiled(compiled: Callable, args: tuple[Any, ...]) -> Callable:
    """``compiled`` (``torch.compile(fn, fullgraph=True, dynamic=False)``) compiled now for ``args``, as a function
    whose calls skip Dynamo's frame evaluation and guards (about 60 µs a call in a CAME step): the caller must
    call it only with ``args``' layouts, which it keys its graphs by. Before torch 2.13, or with inductor's
    caches disabled (which ahead-of-time compiling refuses), ``compiled`` itself, which compiles at its first
    call."""
    if torch.__version__ < AOT_COMPILE_FROM or torch._inductor.config.force_disable_caches:
        return compiled
    function = compiled.aot_compile((args, {}))
    function.disable_guard_check()
    return function
