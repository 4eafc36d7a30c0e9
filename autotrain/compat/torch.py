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
release checked), refuses inductor's caches disabled (a private config says so) and is saved in inductor's
cache folder (a private function names it).

Checked on torch 2.8.0 (the floor) and 2.13.0 (tests/test_compat.py).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
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


def precompiled(compiled: Callable, args: tuple[Any, ...], key: str) -> Callable:
    """``compiled`` (``torch.compile(fn, fullgraph=True, dynamic=False)``) compiled now for ``args``, as a function
    whose calls skip Dynamo's frame evaluation and guards (about 60 µs a call in a CAME step): the caller must
    call it only with ``args``' layouts, which it keys its graphs by. ``key`` (what the graph depends on, hashed
    by the caller) names it in inductor's cache folder, ``autotrain/<key>.pt``: a later process loads it from
    there in milliseconds, where compiling it again would take seconds (the ahead-of-time compile's own cache
    entries are named for the process that made them, so none is found again). Before torch 2.13, or with
    inductor's caches disabled (which ahead-of-time compiling refuses), ``compiled`` itself, which compiles
    at its first call."""
    if torch.__version__ < AOT_COMPILE_FROM:
        return compiled
    from torch._inductor import config
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    if config.force_disable_caches:
        return compiled
    path = Path(cache_dir()) / "autotrain" / f"{key}.pt"
    function = _load(path)
    if function is None:
        function = compiled.aot_compile((args, {}))
        _save(function, path)
    function.disable_guard_check()
    return function


def _load(path: Path) -> Callable | None:
    """The function saved at ``path``; None where there is none or this torch cannot load it (cut short, made by
    another build): a cache miss, compiled again and saved over."""
    try:
        with path.open("rb") as file:
            return torch.compiler.load_compiled_function(file)
    except FileNotFoundError:
        return None
    except Exception:  # a cache entry it cannot use is a miss
        return None


def _save(function: Any, path: Path) -> None:
    """Save ``function`` at ``path`` (written whole or not at all); where it cannot be (a read-only cache, a graph
    torch cannot serialise), the next process compiles it again, which one line says."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        function.save_compiled_function(str(path))
    except Exception as exc:  # the compiled function is good; only the next process's load is lost
        print(f"autotrain: could not cache a compiled graph at {path} ({type(exc).__name__}: {exc}"[:300] + ")",
              file=sys.stderr)  # fmt: skip
