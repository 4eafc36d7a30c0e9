"""Which step each group of CAME's same-shaped params takes (``which_step``, run for an optimizer by
``Steps``): eager, compiled, compiled on a worker thread while the eager step runs (``Background``), or with
several ranks compiled before the first step (``Replicas``). Where auto measures (CUDA), the compiled and
eager steps then take timed turns and the faster is kept. Figures behind the thresholds: docs/came.md.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from statistics import median
from typing import Any

import torch
from torch import Tensor

from autotrain.optimizers import came_compile
from autotrain.optimizers.came_compile import fakes_of, inductor_settings, signature, with_inductor_settings
from autotrain.optimizers.came_groups import Group, Scratch, chunk_args, chunk_maths, step_group

# Auto compiles a group where its compilation (seconds per shape, whatever its size) pays back within the
# run: on the CPU where elements x total_steps >= CPU_PAYS_ELEMENT_STEPS (never under CPU_MIN_NUMEL); on
# CUDA, where neither figure has been measured, every group in runs of CUDA_MIN_STEPS or more.
CPU_MIN_NUMEL = 1 << 20
CPU_PAYS_ELEMENT_STEPS = 1e9
CUDA_MIN_STEPS = 200
TRIAL_STEPS = 3  # steps of each kind timed before auto keeps one
MEASURED_ON = {"cuda"}  # where auto times its compiled step against the eager one (not settled there)


def compiles(device_type: str, numel: int, total_steps: int | None) -> bool:
    """Whether auto compiles a group of ``numel`` elements in a run of ``total_steps`` (None: unknown)."""
    if device_type == "cuda":
        return total_steps is None or total_steps >= CUDA_MIN_STEPS
    if device_type != "cpu" or numel < CPU_MIN_NUMEL:
        return False
    return total_steps is None or numel * total_steps >= CPU_PAYS_ELEMENT_STEPS


def replicated() -> bool:
    """Whether this process is one of several of a distributed run."""
    dist = torch.distributed
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def which_step(group: Group, compile: bool | None, capturable: bool, total_steps: int | None, ranks: bool) -> str:
    """ "eager", "compiled" (``compile=True``), or where auto compiles ``group``, "background" (one process) or
    "replicas" (several ``ranks``: they must take the same step, whose roundings would drift apart); the same
    on every rank (global sizes). Auto leaves eager the shards of one process (the worker cannot run their
    all-reduces) and a capturable CUDA step (a switch would not reach a captured graph)."""
    if compile is not None:
        return "compiled" if compile else "eager"
    device = group.params[0].device.type
    if (group.shards.group is not None and not ranks) or (device == "cuda" and capturable):
        return "eager"
    if not compiles(device, sum(p.numel() for p in group.params), total_steps):
        return "eager"
    return "replicas" if ranks else "background"


class Steps:
    """``which_step`` for the groups of ``optimizer`` (its settings read each step), and the ranks' vote."""

    def __init__(self, optimizer: Any) -> None:
        self.optimizer = optimizer
        self.replicas = Replicas()

    def which(self, group: Group) -> str:
        opt = self.optimizer
        return which_step(group, opt.compile, opt.capturable, opt.total_steps, replicated())

    def step_group(self, group: Group, hp: Tensor, skipped: Tensor, scratch: Scratch) -> None:
        kind = self.which(group)
        if kind == "background":
            BACKGROUND.step_group(group, hp, skipped, scratch)
        elif kind == "replicas":
            self.replicas.step_group(group, hp, skipped, scratch)
        else:
            step_group(group, hp, skipped, came_compile.COMPILER if kind == "compiled" else None, scratch)

    def step_done(self) -> None:
        """When ``step()`` ends: the worker starts on what was queued; with several ranks the step is counted
        (the vote follows the count, the same on every rank whatever its own groups)."""
        BACKGROUND.start()
        if self.optimizer.compile is None and replicated():
            types = {p.device.type for g in self.optimizer.param_groups for p in g["params"]}
            self.replicas.step_done(measured=bool(types & MEASURED_ON))


class Background:
    """Groups compiled on a worker thread, from fakes of their chunks' layouts (no real tensor, no kernel), while
    their eager step runs; then the compiled step (or whichever ``choose`` keeps). Dropped at exit."""

    def __init__(self, compiler: came_compile.StepCompiler) -> None:
        self.compiler = compiler
        self.ready: set = set()
        self._pending: set = set()
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._stopping = False
        # The worker is no daemon (one killed inside the compiler can crash the interpreter's shutdown): at exit,
        # before the interpreter joins it, it is told to drop what is queued.
        threading._register_atexit(self._stop)  # type: ignore[attr-defined]

    def step_group(self, group: Group, hp: Tensor, skipped: Tensor, scratch: Scratch | None = None) -> None:
        if not group.compiled and self.compiler.failure is None:  # once compiled, not checked again
            device = group.params[0].device
            layouts = [chunk_args(group, *chunk, hp, skipped, None)[0] for chunk in group.chunks]
            keys = [signature(args, device) for args in layouts]
            group.compiled = all(key in self.ready for key in keys)
            for key, args in zip(keys, layouts, strict=True):
                if key not in self.ready and key not in self._pending:
                    self._pending.add(key)
                    fakes = fakes_of(args, device)  # no real tensor reaches the worker
                    self._queue.put((key, device, fakes, torch.get_num_threads(), inductor_settings()))
        if group.compiled and self.compiler.failure is None:
            return self.choose(group, hp, skipped, scratch)
        return step_group(group, hp, skipped, None, scratch)

    def choose(self, group: Group, hp: Tensor, skipped: Tensor, scratch: Scratch | None = None) -> None:
        """The compiled step; where auto measures, after ``TRIAL_STEPS`` timed turns of each kind, the one with
        the lower median (``choice``)."""
        device = group.params[0].device
        if group.choice is not None or device.type not in MEASURED_ON:
            kept = group.choice is None or group.choice["kept"] == "compiled"
            return step_group(group, hp, skipped, self.compiler if kept else None, scratch)
        if len(group.trial) == 2 * TRIAL_STEPS or _capturing(device):
            step_group(group, hp, skipped, self.compiler, scratch)
            seconds = [(turn, timing.seconds()) for turn, timing in group.trial]
            if len(seconds) == 2 * TRIAL_STEPS and all(s is not None for _, s in seconds):  # a GPU's are in
                ms = _measured(group, seconds)
                group.choice = {**ms, "kept": "compiled" if ms["compiled_ms"] <= ms["eager_ms"] else "eager"}
                group.trial = []
            return None
        return _turn(group, len(group.trial) % 2 == 0, self.compiler, hp, skipped, scratch)

    def start(self) -> None:
        """Compile what was queued (when a step ends: the first step never shares the machine)."""
        if self._pending and (self._thread is None or not self._thread.is_alive()):
            self._thread = threading.Thread(target=self._work, name="came-compile")
            self._thread.start()

    def idle(self, timeout: float | None = None) -> bool:
        """Wait until nothing is queued or compiling (at most ``timeout`` seconds); whether it is so."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._pending and (deadline is None or time.monotonic() < deadline):
            self.start()  # a worker that found the queue empty just before more was queued has ended
            time.sleep(0.01)
        return not self._pending

    def _stop(self) -> None:
        self._stopping = True

    def _work(self) -> None:
        """Compile what is queued, then end, and the thread's OpenMP team with it (one left waiting slowed every
        later compiled step)."""
        while not self._stopping:
            try:
                key, device, fakes, threads, settings = self._queue.get_nowait()
            except queue.Empty:
                return
            try:
                if self.compiler.failure is None:
                    torch.set_num_threads(threads)  # part of a graph's key (the C++ kernels bake it in)
                    with torch.no_grad(), with_inductor_settings(settings), _on(device):
                        chunk_maths(self.compiler.prepare, *fakes)
                    self.ready.add(key)
            except Exception as exc:  # the eager step goes on
                self.compiler._fail(exc)
            finally:
                self._pending.discard(key)


class Replicas:
    """Auto with several ranks: every group compiles before its first step. Where auto measures, steps 2 to 7
    take timed turns; after step 7 every rank adds its medians and failures to one all-reduce, and all keep the
    faster step (eager if anything failed). ``steps`` counts ``step()`` calls: the same everywhere."""

    def __init__(self) -> None:
        self.steps = 0
        self.kept: str | None = None
        self.timed: dict[int, Group] = {}

    def step_group(self, group: Group, hp: Tensor, skipped: Tensor, scratch: Scratch | None = None) -> None:
        device = group.params[0].device
        compiler = came_compile.COMPILER
        timed = self.kept is None and device.type in MEASURED_ON and 1 <= self.steps <= 2 * TRIAL_STEPS
        if timed and not _capturing(device):
            self.timed[id(group)] = group
            _turn(group, self.steps % 2 == 1, compiler, hp, skipped, scratch)
        else:
            step_group(group, hp, skipped, None if self.kept == "eager" else compiler, scratch)

    def step_done(self, measured: bool) -> None:
        self.steps += 1
        if self.steps == 1 + 2 * TRIAL_STEPS and self.kept is None and measured:
            self._agree()

    def _agree(self) -> None:
        totals = {"eager_ms": 0.0, "compiled_ms": 0.0}
        for group in self.timed.values():
            seconds = [(turn, timing.seconds(wait=True)) for turn, timing in group.trial]
            group.trial = []
            if {turn for turn, _ in seconds} != {"eager", "compiled"}:
                continue  # a group (re)built during the turns
            group.choice = {**_measured(group, seconds), **({"failure": group.failure} if group.failure else {})}
            for key in totals:
                totals[key] += group.choice[key]
        failed = came_compile.COMPILER.failure is not None or any(g.failure for g in self.timed.values())
        eager, compiled, failures = _all_sum([totals["eager_ms"], totals["compiled_ms"], float(failed)])
        self.kept = "compiled" if compiled <= eager and failures == 0 else "eager"
        for group in self.timed.values():
            if group.choice is not None:
                group.choice["kept"] = "eager" if group.failure else self.kept
        self.timed = {}


def _turn(group: Group, compiled: bool, compiler: Any, hp: Tensor, skipped: Tensor, scratch: Scratch | None) -> None:
    """One step of ``group``, compiled or eager, timed into ``group.trial``."""
    timing = Timing(group.params[0].device)
    step_group(group, hp, skipped, compiler if compiled else None, scratch)
    group.trial.append(("compiled" if compiled else "eager", timing.stop()))


def _measured(group: Group, seconds: list[tuple[str, float]]) -> dict[str, Any]:
    """``group``'s record: its local shape, params, and the median ms of each kind of step in ``seconds``."""
    ms = {f"{kind}_ms": 1e3 * median(s for turn, s in seconds if turn == kind) for kind in ("eager", "compiled")}
    return {"shape": list(group.local_shape), "params": len(group.params), **ms}


def _all_sum(values: list[float]) -> list[float]:
    """``values`` summed over the ranks of the default process group (on the GPU where its backend is NCCL)."""
    dist = torch.distributed
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
    summed = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(summed)
    return summed.tolist()


class Timing:
    """How long one group's step took: the host's time, or on CUDA the longer of it and the GPU's (read later)."""

    def __init__(self, device: torch.device) -> None:
        self.events = None
        if device.type == "cuda":
            self.events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            self.events[0].record()
        self.host = time.perf_counter()

    def stop(self) -> Timing:
        self.host = time.perf_counter() - self.host
        if self.events is not None:
            self.events[1].record()
        return self

    def seconds(self, wait: bool = False) -> float | None:
        """The step's time, or None while the GPU has not run it (``wait``: wait for it)."""
        if self.events is None:
            return self.host
        if wait:
            self.events[1].synchronize()
        elif not self.events[1].query():
            return None
        return max(self.host, self.events[0].elapsed_time(self.events[1]) / 1e3)


def _on(device: torch.device):
    """``device`` as this thread's current CUDA device (a new thread's is device 0)."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def _capturing(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


BACKGROUND = Background(came_compile.COMPILER)
