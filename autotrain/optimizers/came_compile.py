"""CAME's compiled step: came_math's functions through ``torch.compile(fullgraph=True, dynamic=False)``, one
graph per (function, input layout) in the process (``GRAPHS``), compiled ahead of time where torch can
(``compat.torch.precompiled``: a call then skips Dynamo's frame evaluation and guards, the graph being keyed by
its layout here). Each optimizer's ``Compiler`` holds its failure and its warm-up thread: nothing but the graphs
is shared between optimizers. Hyper-parameters are a tensor input, so a schedule or per-group settings never
recompile. Which groups ``compile: null`` (auto) compiles: ``compiles``.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import inspect
import sys
import threading
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from autotrain.compat.torch import precompiled

# Recompute the update and m in each loop that needs them rather than store them in a full-size buffer.
OPTIONS = {"realize_reads_threshold": 64, "realize_opcount_threshold": 4096, "realize_acc_reads_threshold": 64}
# Auto compiles a group where its compilation (seconds per shape, whatever its size) pays back within the
# run: on the CPU where elements x total_steps >= CPU_PAYS_ELEMENT_STEPS (never under CPU_MIN_NUMEL); on
# CUDA, where neither figure has been measured, every group in runs of CUDA_MIN_STEPS or more.
CPU_MIN_NUMEL = 1 << 20
CPU_PAYS_ELEMENT_STEPS = 1e9
CUDA_MIN_STEPS = 200
THREAD = "came-compile"  # the warm-up thread's name (join it to wait until it is done)


def compiles(device_type: str, numel: int, total_steps: int | None) -> bool:
    """Whether auto compiles a group of ``numel`` elements in a run of ``total_steps`` (None: unknown)."""
    if device_type == "cuda":
        return total_steps is None or total_steps >= CUDA_MIN_STEPS
    if device_type != "cpu" or numel < CPU_MIN_NUMEL:
        return False
    return total_steps is None or numel * total_steps >= CPU_PAYS_ELEMENT_STEPS


def mode(compile: bool | None, device_type: str, numel: int, total_steps: int | None, capturable: bool) -> str:
    """How a group of ``numel`` elements steps: "eager", "compiled" (from its first step), or "background"
    (auto in one process: eager until the warm-up thread has compiled it). Auto compiles where ``compiles``
    says, before the first step with several processes (replicas must take the same steps), and leaves a
    capturable CUDA step eager (a switch would not reach a captured graph)."""
    if compile is not None:
        return "compiled" if compile else "eager"
    if (device_type == "cuda" and capturable) or not compiles(device_type, numel, total_steps):
        return "eager"
    return "compiled" if replicated() else "background"


def replicated() -> bool:
    """Whether this process is one of several of a distributed run (whose replicas must take the same step)."""
    dist = torch.distributed
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def layout(value: Any) -> Any:
    """What a graph of ``value`` is specialised to (what Dynamo's guards check, which an ahead-of-time graph's
    calls skip): each tensor's type, shape, strides, dtype, device and whether it requires grad, every other
    value as it is."""
    if isinstance(value, Tensor):
        return (type(value), tuple(value.shape), value.stride(), value.dtype, value.device, value.requires_grad)
    if type(value) in (tuple, list):
        return tuple(layout(v) for v in value)
    return value


def tensors_of(value: Any) -> list[Tensor]:
    """The tensors in ``value`` (nested tuples and lists)."""
    if isinstance(value, Tensor):
        return [value]
    if type(value) in (tuple, list):
        return [t for v in value for t in tensors_of(v)]
    return []


# (function, layout) -> its graph, compiled once in the process and called by each optimizer that meets the
# layout (a graph is a pure function of its inputs; a failure is recorded by the optimizer that met it). Each is
# compiled from a copy of the function with a code object of its own: where a graph is not compiled ahead of
# time, Dynamo keeps its graphs per code object and stops compiling one after 8 layouts, which a model exceeds.
GRAPHS: dict[tuple, Callable] = {}


def saved_as(fn: Callable, fn_layout: Any, args: tuple) -> str:
    """The name a graph of ``fn`` for ``fn_layout`` is saved under: a hash of what it depends on (the source of
    ``fn``'s module, which holds every function it calls, the layout, inductor's options, torch's version, the
    thread count its C++ is built for, the CPU's instruction set and each CUDA device's capability)."""
    cuda = sorted({t.device for t in tensors_of(args) if t.device.type == "cuda"}, key=str)
    facts = (fn.__qualname__, fn_layout, OPTIONS, str(torch.__version__), torch.get_num_threads(),
             torch.backends.cpu.get_cpu_capability(), [torch.cuda.get_device_capability(d) for d in cuda])  # fmt: skip
    return hashlib.sha256(_source(fn.__module__) + repr(facts).encode()).hexdigest()[:40]


@functools.cache
def _source(module: str) -> bytes:
    path = inspect.getsourcefile(sys.modules[module])
    return Path(path).read_bytes() if path else b""


class Compiler:
    """One optimizer's way to the compiled graphs (``GRAPHS``: ``torch.compile`` of came_math's functions, one
    per (function, layout)), its ``failure`` (the record of the first one: every later step is eager), and its
    warm-up thread: ``warmed`` queues a chunk's layout, which the thread compiles by a step on scratch tensors
    while the eager step runs (see ``CAME``'s ``compile``)."""

    def __init__(self) -> None:
        self.failure: dict[str, Any] | None = None
        self._ready: set = set()  # layouts the thread has compiled
        self._queue: list[tuple] = []
        self._thread: threading.Thread | None = None

    def __call__(self, site: dict, fn: Callable, *args: Any) -> Any:
        """``fn(*args)`` through its graph; ``site``: a dict kept by a call site whose layouts do not change."""
        graph = site.get(fn)
        if graph is None:
            graph = site[fn] = self._graph(fn, args)
        return graph(*args)

    def _graph(self, fn: Callable, args: tuple) -> Callable:
        key = (fn, layout(args))
        graph = GRAPHS.get(key)
        if graph is None:
            copy = types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__)
            compiled = torch.compile(copy, fullgraph=True, dynamic=False, options=OPTIONS)
            graph = GRAPHS.setdefault(key, precompiled(compiled, args, saved_as(fn, key[1], args)))
        return graph

    def fail(self, exc: BaseException, shape: tuple[int, ...], params: int) -> None:
        """Record the first failure (one line on stderr): every later step of this optimizer is eager."""
        if self.failure is not None:
            return
        # What failed, not torch.compile's wrapping of it (``raise ... from`` the error, or ``from None``).
        while (inner := exc.__cause__ or (exc.__context__ if exc.__suppress_context__ else None)) is not None:
            exc = inner
        text = str(exc).strip()
        reason = f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"[:300]
        self.failure = {"shape": list(shape), "params": params, "kept": "eager", "failure": reason}
        print(
            f"autotrain: CAME's compiled step failed for the group of {params} {'x'.join(map(str, shape))} "
            f"parameter(s) ({reason}); this optimizer takes the eager step from the state before it (same "
            "maths, slower)",
            file=sys.stderr,
        )

    def warmed(self, key: Any, scratch_args: Callable[[], tuple], step: Callable, group: tuple) -> bool:
        """Whether the layout ``key`` is compiled; if not, it is queued: ``step(run, *scratch_args())`` on the
        thread compiles it (started by ``start``). ``group``: (shape, params), for a failure's record."""
        if key in self._ready:
            return True
        if all(key != queued[0] for queued in self._queue):
            self._queue.append((key, scratch_args, step, group))
        return False

    def start(self) -> None:
        """Compile what was queued on a thread of its own, which ends when the queue is empty (its OpenMP team
        with it: one left waiting slowed every later compiled step) or when the main thread has ended."""
        if self._queue and (self._thread is None or not self._thread.is_alive()):
            context = contextvars.copy_context()  # the caller's inductor settings, where they are per thread
            work = (self._work, torch.get_num_threads())
            self._thread = threading.Thread(target=context.run, args=work, name=THREAD)
            self._thread.start()

    def _work(self, threads: int) -> None:
        torch.set_num_threads(threads)  # a C++ kernel is built for the thread count it is compiled with
        while self._queue and self.failure is None and threading.main_thread().is_alive():
            key, scratch_args, step, group = self._queue[0]
            args = scratch_args()
            try:
                with torch.no_grad(), _on(tensors_of(args)[0].device):
                    step(lambda fn, *phase: self._graph(fn, phase)(*phase), *args)
                self._ready.add(key)
            except Exception as exc:  # recorded; the eager step goes on
                self.fail(exc, *group)
            del args
            self._queue.pop(0)
        self._queue.clear()


def _on(device: torch.device):
    """``device`` as this thread's current CUDA device (a new thread's is device 0)."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()
