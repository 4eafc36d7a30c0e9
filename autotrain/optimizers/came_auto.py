"""What ``compile=None`` (auto) does with CAME's compiled step: compile it on a worker thread while the first
steps run eagerly (``Background``), keep it where it is measured faster on devices where that is not settled
(``MEASURED_ON``: CUDA; ``Background.choose``), and in a run of several processes take the same step on every
rank (``Replicas``).
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from statistics import median

import torch
from torch import Tensor

from autotrain.optimizers import came_compile
from autotrain.optimizers.came_compile import (
    StepCompiler,
    fake_plan,
    fakes,
    inductor_settings,
    signature,
    with_inductor_settings,
)
from autotrain.optimizers.came_groups import Group, Scratch, chunk_args, chunk_maths, step_group


class Background:
    """A group's step compiled on a worker thread while the eager step runs it: the group's first step
    queues the compilation of each of its chunk layouts and steps eagerly; once all of them are compiled,
    the group takes the compiled step. The thread compiles from fake tensors of the same layouts and
    aliasing (``StepCompiler.prepare``): it never touches the real tensors, allocates none of their memory
    and runs no kernel. Training never waits for a compilation, and nothing is compiled twice. Pending
    compilations are dropped when the interpreter exits (the one running finishes first)."""

    def __init__(self, compiler: StepCompiler) -> None:
        self.compiler = compiler
        self.ready: set = set()
        self._pending: set = set()
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._registered = False

    def step_group(self, group: Group, hp: Tensor, skipped: Tensor, scratch: Scratch | None = None) -> None:
        """One step of ``group``: compiled (or whichever step ``choose`` kept) if all its chunk layouts are
        compiled, else eager (queueing the rest)."""
        if group.compiled and self.compiler.failure is None:  # checked once, not each step
            return self.choose(group, hp, skipped, scratch)
        device = group.params[0].device
        layouts = [chunk_args(group, start, end, hp, skipped, None)[0] for start, end in group.chunks]
        keys = [signature(args, device) for args in layouts]
        if self.compiler.failure is None and all(key in self.ready for key in keys):
            group.compiled = True
            return self.choose(group, hp, skipped, scratch)
        for key, args in zip(keys, layouts, strict=True):
            if key not in self.ready and key not in self._pending and self.compiler.failure is None:
                self._pending.add(key)
                self._queue.put((key, device, fake_plan(args, device), torch.get_num_threads(), inductor_settings()))
        return step_group(group, hp, skipped, None, scratch)

    def choose(self, group: Group, hp: Tensor, skipped: Tensor, scratch: Scratch | None = None) -> None:
        """One step of ``group``, whose layouts are all compiled: the compiled step, except on a device auto
        measures on (``MEASURED_ON``: CUDA, where whether the compiled step is faster has not been settled).
        There the group's next ``TRIAL_STEPS`` steps of each kind take turns, compiled and eager, each timed
        (``Timing``), and the group keeps the one with the lower median; its ``choice`` records both. Until
        the timings are in (a GPU's come a step or so later, read without waiting) and while a CUDA graph
        is being captured, the group takes the compiled step."""
        compiled = self.compiler
        device = group.params[0].device
        if group.choice is not None or device.type not in MEASURED_ON:
            run = compiled if group.choice is None or group.choice["kept"] == "compiled" else None
            return step_group(group, hp, skipped, run, scratch)
        if len(group.trial) == 2 * TRIAL_STEPS or _capturing(device):
            step_group(group, hp, skipped, compiled, scratch)
            return self._decide(group)
        turn = "compiled" if len(group.trial) % 2 == 0 else "eager"  # compiled first, then eager, in turn
        timing = Timing(device)
        step_group(group, hp, skipped, compiled if turn == "compiled" else None, scratch)
        group.trial.append((turn, timing.stop()))

    @staticmethod
    def _decide(group: Group) -> None:
        if len(group.trial) < 2 * TRIAL_STEPS:
            return
        seconds = [(turn, timing.seconds()) for turn, timing in group.trial]
        if any(s is None for _, s in seconds):  # a GPU's timings not in yet
            return
        ms = _medians(seconds)
        kept = "compiled" if ms["compiled_ms"] <= ms["eager_ms"] else "eager"
        group.choice = {"shape": list(group.local_shape), "params": len(group.params), **ms, "kept": kept}
        group.trial = []

    def start(self) -> None:
        """Begin compiling what was queued: called when a step ends, so the first step does not share the
        machine with the compiler."""
        if self._pending:  # after a failure, the worker only drops what is queued
            self._start()

    def idle(self, timeout: float | None = None) -> bool:
        """Wait until nothing is queued or compiling (at most ``timeout`` seconds); whether it is so."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._pending and (deadline is None or time.monotonic() < deadline):
            self.start()  # a worker that found the queue empty just before more was queued has ended
            time.sleep(0.01)
        return not self._pending

    def _start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        # Not a daemon where the interpreter can tell it to stop before joining it at exit (a daemon thread
        # killed inside the compiler at exit can crash the interpreter's shutdown).
        register = getattr(threading, "_register_atexit", None)
        self._thread = threading.Thread(target=self._work, name="came-compile", daemon=register is None)
        if register is not None and not self._registered:
            register(self._stop)
            self._registered = True
        self._thread.start()

    def _stop(self) -> None:
        self._stopping = True
        self._queue.put(None)

    def _work(self) -> None:
        """Compile what is queued, then end: whatever OpenMP team the thread started ends with it. A team
        left waiting (an earlier worker ran its kernels once) made OpenMP count more threads than cores and
        stop spinning between parallel regions, which slowed every later compiled step of the process
        (SmolLM2-135M's list: 0.19 -> 0.37 s). Work queued later starts a new thread (``start``)."""
        while not self._stopping:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item is None or self._stopping:
                return
            key, device, plan, threads, settings = item
            try:
                if self.compiler.failure is not None:
                    continue
                torch.set_num_threads(threads)  # part of a graph's key (the C++ kernels bake it in)
                with torch.no_grad(), with_inductor_settings(settings), _on(device):
                    chunk_maths(self.compiler.prepare, *fakes(plan))
                if self.compiler.failure is None:
                    self.ready.add(key)
            except Exception as exc:  # the eager step goes on
                self.compiler._fail(exc)
            finally:
                self._pending.discard(key)


# Which groups auto compiles, before anything is measured. Compiling a group's step costs seconds per group
# shape, whatever its size; each later step then saves time in proportion to the group's elements. So a
# group compiles where the run is long enough to pay that back: on the CPU, a group of ``n`` elements in a
# run of ``total_steps`` steps where n * total_steps >= CPU_PAYS_ELEMENT_STEPS (and n >= 2**20 always),
# from about 8 s of compiling per shape (cold, on 2 cores; 6 s a shape in a whole run, 12-20 s for a lone
# shape in a fresh process) and about 10 ns saved per element and step (SmolLM2-135M's groups: 6-25 ns),
# with a margin of 1.25 (benchmarks/compile_pays.py --groups; whole runs: its default figures).
# On CUDA, where neither figure has been measured, nothing compiles in runs of under CUDA_MIN_STEPS.
CPU_MIN_NUMEL = 1 << 20
CPU_PAYS_ELEMENT_STEPS = 1e9
CUDA_MIN_STEPS = 200


def compiles(device_type: str, numel: int, total_steps: int | None) -> bool:
    """Whether auto compiles a group of ``numel`` elements on ``device_type`` in a run of ``total_steps``
    steps (None: a run of unknown length)."""
    if device_type == "cuda":
        return total_steps is None or total_steps >= CUDA_MIN_STEPS
    if device_type != "cpu" or numel < CPU_MIN_NUMEL:
        return False
    return total_steps is None or numel * total_steps >= CPU_PAYS_ELEMENT_STEPS


TRIAL_STEPS = 3  # steps of each kind timed before auto keeps one (Background.choose, Replicas)
# Device types where auto times its compiled step against the eager one before keeping one: CUDA, where
# which is faster has not been settled; on the CPU the compiled step is, for the groups auto compiles there.
MEASURED_ON = {"cuda"}


class Replicas:
    """``compile=None`` in a run of several processes, where every rank must take the same step each time
    (a data-parallel replica taking the compiled step's roundings while another takes the eager one's
    would drift from it). Every group compiles before its first step, on the training thread
    (``came_compile.COMPILER``), on every rank. Where auto measures (``MEASURED_ON``), the optimizer's
    steps 2 to 7 take turns, compiled then eager, each group's step timed; at the end of step 7 the ranks
    add up their groups' median times in one all-reduce and every group of every rank keeps the step with
    the lower total (the eager one if compiling failed on any rank). Turns and decision follow the
    optimizer's step count, so every rank takes them at the same step; each group's ``choice`` records its
    own medians and what was kept."""

    def __init__(self) -> None:
        self.steps = 0  # optimizer steps that stepped a group through here
        self.stepped = False
        self.kept: str | None = None
        self.trials: dict[int, tuple[Group, list]] = {}

    def step_group(self, group: Group, hp: Tensor, skipped: Tensor, scratch: Scratch | None = None) -> None:
        device = group.params[0].device
        self.stepped = True
        runs = {"compiled": came_compile.COMPILER, "eager": None}
        timed = self.kept is None and device.type in MEASURED_ON and 1 <= self.steps <= 2 * TRIAL_STEPS
        if timed and not _capturing(device):
            turn = "compiled" if self.steps % 2 == 1 else "eager"
            timing = Timing(device)
            step_group(group, hp, skipped, runs[turn], scratch)
            self.trials.setdefault(id(group), (group, []))[1].append((turn, timing.stop()))
        else:
            step_group(group, hp, skipped, runs[self.kept or "compiled"], scratch)

    def step_done(self) -> None:
        """Called when the optimizer's step ends: counts it, and after the last timed one, decides."""
        if not self.stepped:
            return
        self.stepped = False
        self.steps += 1
        if self.steps == 1 + 2 * TRIAL_STEPS and self.kept is None and self.trials:
            self._agree()

    def _agree(self) -> None:
        totals = {"eager_ms": 0.0, "compiled_ms": 0.0}
        for group, trial in self.trials.values():
            seconds = [(turn, timing.seconds(wait=True)) for turn, timing in trial]
            if {turn for turn, _ in seconds} != {"eager", "compiled"}:
                continue  # a group (re)built during the turns
            ms = _medians(seconds)
            group.choice = {"shape": list(group.local_shape), "params": len(group.params), **ms}
            if group.failure is not None:
                group.choice["failure"] = group.failure
            for key in totals:
                totals[key] += ms[key]
        failed = came_compile.COMPILER.failure is not None or any(g.failure for g, _ in self.trials.values())
        vote = [totals["eager_ms"], totals["compiled_ms"], float(failed)]
        eager, compiled, failures = _all_sum(vote)
        self.kept = "compiled" if compiled <= eager and failures == 0 else "eager"
        for group, _ in self.trials.values():
            if group.choice is not None:
                group.choice["kept"] = self.kept
        self.trials = {}


def _medians(seconds: list[tuple[str, float]]) -> dict[str, float]:
    """The median milliseconds of each kind of step timed in ``seconds``: ``eager_ms``, ``compiled_ms``."""
    return {f"{kind}_ms": 1e3 * median(s for turn, s in seconds if turn == kind) for kind in ("eager", "compiled")}


def _all_sum(values: list[float]) -> list[float]:
    """``values`` summed over the ranks of the default process group (on the GPU where its backend is NCCL)."""
    dist = torch.distributed
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
    summed = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(summed)
    return summed.tolist()


class Timing:
    """How long one group's step took: on the CPU the host's time; on CUDA the longer of the host's
    (launching kernels) and the GPU's between two events (running them), read without waiting."""

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
    """A context in which ``device`` is this thread's current CUDA device: a new thread's is device 0
    whatever the training thread set, and what the compiler creates on the GPU belongs on the group's."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def _capturing(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


BACKGROUND = Background(came_compile.COMPILER)
