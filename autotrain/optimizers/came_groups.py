"""How CAME steps many parameters at once: same-shaped parameters form a group whose state is stacked,
and the group takes one call of ``came_math``'s step, compiled (inductor: C++ on the CPU, Triton on
CUDA) or eager, with a fixed number of operations whatever the number of parameters in it.

The state stays per parameter for everyone else: ``optimizer.state[p][key]`` is a view of row ``i`` of
the group's stacked tensor, so ``state_dict()``, checkpoints and FSDP2's distributed checkpoints see the
same per-parameter layout as before grouping. A group is (re)built from whatever per-parameter tensors
the state holds (fresh zeros, a loaded checkpoint) the first time it steps and whenever that changes.

A step gathers its params and gradients into stacked fp32 tensors (unless one fp32 tensor is stepped in
place), so a group steps in chunks of params: at most ``budget`` elements each, or one param where a
param is larger. That bounds the step's scratch memory to a few chunks of fp32 whatever the group's size.
``CAME`` sets the budget to the larger of half the largest param and an eighth of all the params it
steps, so on a GPU the number of chunks stays within the number of groups plus eight (and does not grow
with the model's depth); on the CPU it caps the budget further (``came.CPU_CHUNK``), for speed.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from math import prod
from statistics import median
from typing import Any

import torch
from torch import Tensor

from autotrain.optimizers import came_math
from autotrain.optimizers.sharding import Shards, is_sharded, local, shards_of

FACTORED_KEYS = ("exp_avg_sq_row", "exp_avg_sq_col", "exp_avg_res_row", "exp_avg_res_col")
PLAIN_KEYS = ("exp_avg_sq",)


@dataclass
class Group:
    """Same-shaped params of one param group, stepped together; ``state_keys`` are stacked in ``stacked``."""

    params: list[Tensor]
    state_keys: tuple[str, ...]
    shards: Shards
    stacked: dict[str, Tensor] = field(default_factory=dict)
    views: list[Tensor] = field(default_factory=list)  # state[p]["RMS"] of each param: the group's marker
    chunks: list[tuple[int, int]] = field(default_factory=list)  # [start, end) of the params stepped at once
    compiled: bool = False  # Background: its chunk layouts were all compiled (one seen later compiles on use)
    chunk_state: dict = field(default_factory=dict)  # (start, end) -> _state_views of that chunk
    trial: list = field(default_factory=list)  # Background, where it measures: ("compiled"/"eager", Timing)s
    choice: dict | None = None  # ... and what it measured and kept (see Background.choose)

    @property
    def factored(self) -> bool:
        return len(self.shards.shape) >= 2

    @property
    def local_shape(self) -> torch.Size:
        return local(self.params[0]).shape

    def dims(self) -> came_math.Dims:
        shape = self.shards.shape
        codes = self.stacked.get("exp_avg_codes")
        block = 0 if codes is None else codes.shape[-1]
        return came_math.Dims(rows=shape[-2] if self.factored else 1, numel=prod(shape), block=block)

    def still_valid(self, state: dict) -> bool:
        """Whether the params' state still holds this group's views (nothing replaced it since)."""
        return all(state[p].get("RMS") is view for p, view in zip(self.params, self.views, strict=True))


def chunks_of(count: int, numel: int, budget: int) -> list[tuple[int, int]]:
    """``count`` params of ``numel`` elements in near-equal runs of at most ``budget`` elements (at least
    one param each): equal runs where a number of runs up to twice the fewest possible divides ``count``
    (one compiled shape per group), else at most two run lengths (two compiled shapes)."""
    fewest = -(-count // max(1, budget // numel))  # runs of at most budget // numel params
    parts = next((n for n in range(fewest, min(2 * fewest, count) + 1) if count % n == 0), fewest)
    size, extra = divmod(count, parts)
    bounds, start = [], 0
    for i in range(parts):
        end = start + size + (1 if i < extra else 0)
        bounds.append((start, end))
        start = end
    return bounds


def build(params: list[Tensor], state: dict, moment_keys: tuple[str, ...], budget: int | None = None) -> Group:
    """Stack the per-parameter state of ``params`` (same local shape and kind) and leave views behind;
    ``budget``: the most elements stepped at once (None: all of them)."""
    shards = shards_of(params[0])
    keys = (FACTORED_KEYS if len(shards.shape) >= 2 else PLAIN_KEYS) + moment_keys + ("RMS",)
    numel = prod(shards.shape)
    group = Group(params, keys, shards, chunks=chunks_of(len(params), numel, budget or len(params) * numel))
    for key in keys:
        values = [state[p][key] for p in params]
        stacked = torch.stack([local(v) for v in values])
        group.stacked[key] = stacked
        for i, (p, value) in enumerate(zip(params, values, strict=True)):
            state[p][key] = _like(value, stacked[i])
    group.views = [state[p]["RMS"] for p in params]
    return group


def _like(original: Tensor, view: Tensor) -> Tensor:
    """``view`` as the state tensor ``original`` was: a DTensor with its layout, or plain."""
    if not is_sharded(original):
        return view
    from torch.distributed.tensor import DTensor

    return DTensor.from_local(
        view, original.device_mesh, original.placements, shape=original.shape, stride=original.stride()
    )


class Scratch:
    """fp32 buffers that a ``step()`` lends to each of its chunks in turn, for their stacked weights and
    gradients (one buffer each: the two never share a storage, so a chunk's compiled graph is the same
    whether its params are stacked or stepped in place, see ``StepCompiler``). A fresh block this large comes
    from the system (mmap) and goes back when freed, so each chunk allocating its own paid a page fault per
    4 KiB page, every step (SmolLM2-135M: about 0.9 GB of them); reused, only the largest chunk's are paid.
    They hold what one chunk needs at once, as the chunk's own tensors did, and live for one step. (The new
    8-bit moment is not put in them: a compiled graph writing into a buffer it is given computes the value
    and then copies it, a pass more than it saves.)"""

    def __init__(self) -> None:
        self._buffers: dict[tuple[torch.device, int], Tensor] = {}

    def take(self, sizes: list[int], device: torch.device) -> list[Tensor | None]:
        """An fp32 tensor of each of ``sizes`` elements (None for 0), each from a buffer of its own, grown
        when too small."""
        views = []
        for slot, size in enumerate(sizes):
            buffer = self._buffers.get((device, slot))
            if size and (buffer is None or buffer.numel() < size):
                self._buffers.pop((device, slot), None)  # freed before the larger one is made
                buffer = self._buffers[device, slot] = torch.empty(size, dtype=torch.float32, device=device)
            views.append(buffer[:size] if size else None)
        return views


def _in_place(tensors: list[Tensor]) -> bool:
    """Whether ``tensors`` are one fp32, contiguous tensor, which the step reads and writes where it is."""
    return len(tensors) == 1 and tensors[0].dtype == torch.float32 and tensors[0].is_contiguous()


def gather(tensors: list[Tensor], shape: tuple[int, ...], into: Tensor | None) -> tuple[Tensor, bool]:
    """``tensors`` stacked in fp32 as ``shape`` (G, ...) in ``into`` (their numel of fp32; None where they
    are one fp32, contiguous tensor, see ``_in_place``); True when the result is a view of that one tensor
    (the param is then updated in place; otherwise the caller copies the result back)."""
    if _in_place(tensors):
        return tensors[0].detach().view(shape), True
    assert into is not None, "a scratch buffer for the stack"
    return torch.stack(tensors, out=into.view(len(tensors), *tensors[0].shape)).view(shape), False


def step_group(group: Group, hp: Tensor, skipped: Tensor, run: Callable, scratch: Scratch | None = None) -> None:
    """One step of every param of ``group``: one call of ``run`` (``eager_chunk`` or ``compiled_chunk``)
    per chunk of stacked params; ``scratch``: the step's buffer (None: one for this group)."""
    scratch = scratch or Scratch()
    for start, end in group.chunks:
        _step_chunk(group, start, end, hp, skipped, run, scratch)


def _step_chunk(group: Group, start: int, end: int, hp: Tensor, skipped: Tensor, run: Callable, scratch: Scratch):
    args, locals_ = _chunk_args(group, start, end, hp, skipped, scratch)
    run(*args)
    if locals_ is not None:  # the params were gathered: copied back
        torch._foreach_copy_(locals_, list(args[0].view(len(locals_), *group.local_shape).unbind(0)))


def _chunk_args(group: Group, start: int, end: int, hp: Tensor, skipped: Tensor, scratch: Scratch | None):
    """``chunk_maths``'s arguments for params ``[start, end)`` of ``group``, and the params' local tensors
    where ``p`` is gathered from them (None where ``p`` is the param itself, updated in place).
    ``scratch`` None: only their layouts matter (see ``Background``): the stacked params and gradients are
    then meta-device tensors, nothing is gathered."""
    locals_ = [local(p) for p in group.params[start:end]]
    grads = [local(q.grad) for q in group.params[start:end]]
    lead = (len(locals_), *_step_shape(group.local_shape, group.factored))
    numel = prod(lead)
    eight_bit = group.factored and "exp_avg_codes" in group.state_keys
    sizes = [0 if _in_place(t) else numel for t in (locals_, grads)]
    if scratch is None:
        into_p, into_g = (torch.empty(size, device="meta") for size in sizes)
        p = locals_[0].detach().view(lead) if _in_place(locals_) else into_p.view(lead)
        g = grads[0].view(lead) if _in_place(grads) else into_g.view(lead)
        in_place = _in_place(locals_)
    else:
        into_p, into_g = scratch.take(sizes, locals_[0].device)
        p, in_place = gather(locals_, lead, into_p)
        g, _ = gather(grads, lead, into_g)
    views, moment, dims, reduce = _state_views(group, start, end, lead)
    state = (*views, skipped)
    return (p, g, state, moment, hp, dims, reduce, eight_bit), None if in_place else locals_


def _state_views(group: Group, start: int, end: int, lead: tuple[int, ...]) -> tuple:
    """The state of params ``[start, end)`` as came_math takes it (views of the group's stacked tensors,
    which live as long as the group: made once per chunk, not each step), its moment, dims and reducer."""
    cached = group.chunk_state.get((start, end))
    if cached is not None:
        return cached
    stacked = {key: value[start:end] for key, value in group.stacked.items()}
    if group.factored:
        stats = [stacked[k].view(lead[:3] if k.endswith("row") else (*lead[:2], lead[3])) for k in FACTORED_KEYS]
        moment = [stacked[k] for k in group.state_keys[4:-1]]
        if len(moment) == 1:
            moment = [moment[0].view(lead)]
        elif came_math.rows_align(lead[-1], moment[0].shape[-1]):
            moment = [came_math.row_codes(moment[0], lead), moment[1]]
        views = (*stats, stacked["RMS"])
    else:
        views, moment = (stacked["exp_avg_sq"].view(lead), stacked["exp_avg"].view(lead), stacked["RMS"]), []
    reduce = None if group.shards.group is None else _reducer(group.shards)
    cached = group.chunk_state[(start, end)] = (views, tuple(moment), group.dims(), reduce)
    return cached


def chunk_maths(run: Callable, p: Tensor, g: Tensor, state: tuple, moment: tuple, hp: Tensor, dims, reduce, eight_bit):
    """came_math's step of one chunk, each function through ``run`` (``eager`` or ``COMPILER``)."""
    if not moment:  # 1-D params
        run(came_math.plain_step, p, g, state, hp, dims, reduce)
    elif eight_bit and moment[0].dim() == 3:  # blocks across rows: the new moment is made once, then encoded
        m_new, ok = run(came_math.factored_update, p, g, (*state, *moment), hp, dims, reduce)
        run(came_math.write_moment, moment, m_new, ok, dims)
    else:
        run(came_math.factored_step, p, g, (*state, *moment), hp, dims, reduce)


def _step_shape(shape: torch.Size, factored: bool) -> tuple[int, ...]:
    """A param's local shape as came_math takes it: (L, R, C) factored within each leading slice, or (N,)."""
    if not factored:
        return (prod(shape),)
    return (prod(shape[:-2]), shape[-2], shape[-1])


def _reducer(shards: Shards) -> Callable:
    """Sums over the shards where a phase's results span them: the per-parameter totals always, the
    per-slice sums when a matrix's rows are split, the update's total when its slices are."""

    def reduce(kind: str, tensors: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        needed = kind == "totals" or (kind == "slices") == shards.splits_columns
        return tuple(shards.all_sum(*tensors)) if needed else tensors

    return reduce


# --- compiling, once per group shape, with an eager fallback ----------------------------------------


class StepCompiler:
    """came_math's step functions compiled by inductor (torch.compile's compiler: C++ on the CPU, Triton on
    CUDA), shared by every optimizer of the process.

    One graph per (function, input layouts, thread count): hyper-parameters are a tensor input, so no value
    recompiles. The graph is traced by ``make_fx`` on fake tensors of the inputs' layouts, not by Dynamo:
    the functions are straight-line tensor code, so Dynamo's bytecode analysis and guards only cost time,
    and this class keys the graphs on what they are specialised to itself (``_flatten``, ``_aliases``). Less
    Python runs around each call (SmolLM2-135M's 60 k/v matrices, one call each: 14.8 -> 12.6 ms a step), and
    with inductor's caches warm a graph loads in about 0.1 s instead of the 0.5 s Dynamo took to trace it
    again. A first call per layout is the compilation; its time adds to ``seconds``. If compiling fails (no
    C++ compiler, no Triton), one line on stderr says so and every later step runs eagerly.
    """

    def __init__(self) -> None:
        self._compiled: dict[tuple, Callable] = {}
        self._lock = threading.Lock()
        self.failure: str | None = None
        self.seconds = 0.0

    def __call__(self, fn: Callable, *args: Any) -> Any:
        if self.failure is not None:
            return fn(*args)
        tensors: list[Tensor] = []
        key = (fn, _flatten(args, tensors), _aliases(tensors), torch.get_num_threads())
        compiled = self._compiled.get(key)
        if compiled is not None:
            return compiled(tensors)
        start = time.perf_counter()
        try:
            compiled = _compile(fn, args, tensors)
            out = compiled(tensors)
        except Exception as exc:  # compiling failed: the eager step does the same
            self._fail(exc)
            return fn(*args)
        self._add(key, compiled, start)
        return out

    def prepare(self, fn: Callable, *args: Any) -> Any:
        """Compile ``fn`` for ``args``, fake tensors (see ``Background``), without running it; returns
        ``fn``'s fake outputs, so that a function taking them can be prepared next."""
        tensors: list[Tensor] = []
        key = (fn, _flatten(args, tensors), _aliases(tensors, _fake_storage), torch.get_num_threads())
        if self.failure is None and key not in self._compiled:
            start = time.perf_counter()
            self._add(key, _compile(fn, args, tensors), start)
        with _fake_mode(tensors):
            return fn(*args)

    def _add(self, key: tuple, compiled: Callable, start: float) -> None:
        with self._lock:
            self._compiled[key] = compiled
            self.seconds += time.perf_counter() - start

    def _fail(self, exc: Exception) -> None:
        if self.failure is not None:
            return
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        self.failure = f"{type(exc).__name__}: {reason}"[:300]
        print(
            f"autotrain: CAME's compiled step is unavailable ({self.failure}); using the eager step "
            "(same maths, slower)",
            file=sys.stderr,
        )

    @property
    def shapes(self) -> int:
        """How many (function, layouts) were compiled so far."""
        return len(self._compiled)


def _compile(fn: Callable, args: tuple, tensors: list[Tensor]) -> Callable[[list[Tensor]], Any]:
    """``fn(*args)`` as an inductor graph of ``tensors`` (``args``' tensors, in ``_flatten``'s order; the
    other values are constants of the graph; fake tensors, or real ones), traced on fake tensors: nothing is
    run or written."""
    import torch._inductor
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    returns: list[bool] = []

    def flat(*inputs: Tensor) -> tuple:
        out = fn(*_rebuild(args, iter(inputs)))
        returns.append(out is not None)
        return () if out is None else tuple(out)

    if tensors and isinstance(tensors[0], FakeTensor):  # Background's: made in a mode with a shape environment
        fakes = tensors
    else:
        mode = FakeTensorMode(shape_env=ShapeEnv())  # a shape environment (static shapes): inductor caches the graph
        fakes = [mode.from_tensor(t, static_shapes=True) for t in tensors]
    graph = make_fx(flat, tracing_mode="fake")(*fakes)
    compiled = torch._inductor.compile(graph, fakes, options=_RECOMPUTE)
    returns_values = returns[0]

    def call(inputs: list[Tensor]) -> Any:
        if torch._C._autograd._profiler_enabled():  # a profile shows each call as one region
            with torch.profiler.record_function(COMPILED_REGION):
                out = compiled(*inputs)
        else:
            out = compiled(*inputs)
        return tuple(out) if returns_values else None

    return call


COMPILED_REGION = "CAME compiled step"  # the name of a call of a compiled graph in a profile


def _flatten(value: Any, tensors: list[Tensor]) -> Any:
    """What a compiled graph of ``value`` is specialised to: each tensor's shape, strides, dtype and device
    (the tensor appended to ``tensors``), and every other value as it is."""
    if isinstance(value, Tensor):
        tensors.append(value)
        return (value.shape, value.stride(), value.dtype, value.device)
    if type(value) in (tuple, list):
        return (type(value), *(_flatten(v, tensors) for v in value))
    return value


def _rebuild(value: Any, tensors: Any) -> Any:
    """``value`` with its tensors taken in turn from the iterator ``tensors`` (``_flatten``'s order)."""
    if isinstance(value, Tensor):
        return next(tensors)
    if type(value) in (tuple, list):
        return type(value)(_rebuild(v, tensors) for v in value)
    return value


def _aliases(tensors: list[Tensor], storage: Callable[[Tensor, int], tuple] | None = None) -> tuple[int, ...]:
    """For each tensor, the first of ``tensors`` on the same ``storage`` (``_storage``): a graph is traced
    for one aliasing. (The step's inputs do not alias; this keeps a graph from being called on inputs that
    would. A meta tensor, with no storage, aliases nothing.)"""
    storage = storage or _storage
    first: dict[tuple, int] = {}
    return tuple(first.setdefault(storage(t, i), i) for i, t in enumerate(tensors))


def _storage(t: Tensor, i: int) -> tuple:
    """Which storage ``t`` (the ``i``-th tensor) is on; a meta tensor, with none, has one of its own."""
    return (t.device, t.untyped_storage().data_ptr() or ("none", i))


def _fake_storage(t: Tensor, i: int) -> tuple:
    """Which storage the fake tensor ``t`` is on (fakes have no data pointer: the storage object)."""
    return (t.device, t.untyped_storage()._cdata)


def _fake_mode(tensors: list[Tensor]):
    """The mode ``tensors`` (fakes) were made in, to run a function on them."""
    from torch._guards import detect_fake_mode

    return detect_fake_mode(tensors)


def _signature(args: Any, device: torch.device) -> Any:
    """``StepCompiler``'s key of ``args`` whose meta tensors stand for tensors on ``device`` (see
    ``Background``)."""
    tensors: list[Tensor] = []
    flat = _flatten(args, tensors)
    return flat, _aliases(tensors), tuple(device if t.device.type == "meta" else t.device for t in tensors)


# Recompute the update and m (a few element-wise ops on what is read anyway) in each loop that needs
# them, rather than storing them in a full-size fp32 buffer between loops.
_RECOMPUTE = {"realize_reads_threshold": 64, "realize_opcount_threshold": 4096, "realize_acc_reads_threshold": 64}
COMPILER = StepCompiler()


def eager(fn: Callable, *args: Any) -> Any:
    return fn(*args)


def eager_chunk(*args: Any) -> None:
    """A chunk's step, eager."""
    chunk_maths(eager, *args)


def compiled_chunk(*args: Any) -> None:
    """A chunk's step, compiled on its first call (which waits for the compilation)."""
    chunk_maths(COMPILER, *args)


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
        layouts = [_chunk_args(group, start, end, hp, skipped, None)[0] for start, end in group.chunks]
        keys = [_signature(args, device) for args in layouts]
        if self.compiler.failure is None and all(key in self.ready for key in keys):
            group.compiled = True
            return self.choose(group, hp, skipped, scratch)
        for key, args in zip(keys, layouts, strict=True):
            if key not in self.ready and key not in self._pending and self.compiler.failure is None:
                self._pending.add(key)
                self._queue.put((key, _fake_plan(args, device), torch.get_num_threads()))
        return step_group(group, hp, skipped, eager_chunk, scratch)

    def choose(self, group: Group, hp: Tensor, skipped: Tensor, scratch: Scratch | None = None) -> None:
        """One step of ``group``, whose layouts are all compiled: the compiled step, except on a device auto
        measures on (``MEASURED_ON``: CUDA, where whether the compiled step is faster has not been settled).
        There the group's next ``TRIAL_STEPS`` steps of each kind take turns, compiled and eager, each timed
        (``Timing``), and the group keeps the one with the lower median; its ``choice`` records both. Until
        the timings are in (a GPU's come a step or so later, read without waiting) and while a CUDA graph
        is being captured, the group takes the compiled step."""
        compiled = partial(chunk_maths, self.compiler)
        device = group.params[0].device
        if group.choice is not None or device.type not in MEASURED_ON:
            run = compiled if group.choice is None or group.choice["kept"] == "compiled" else eager_chunk
            return step_group(group, hp, skipped, run, scratch)
        if len(group.trial) == 2 * TRIAL_STEPS or _capturing(device):
            step_group(group, hp, skipped, compiled, scratch)
            return self._decide(group)
        turn = "compiled" if len(group.trial) % 2 == 0 else "eager"  # compiled first, then eager, in turn
        timing = Timing(device)
        step_group(group, hp, skipped, compiled if turn == "compiled" else eager_chunk, scratch)
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
            key, plan, threads = item
            try:
                if self.compiler.failure is not None:
                    continue
                torch.set_num_threads(threads)  # part of a graph's key (the C++ kernels bake it in)
                with torch.no_grad():
                    chunk_maths(self.compiler.prepare, *_fakes(plan))
                if self.compiler.failure is None:
                    self.ready.add(key)
            except Exception as exc:  # the eager step goes on
                self.compiler._fail(exc)
            finally:
                self._pending.discard(key)


TRIAL_STEPS = 3  # steps of each kind timed before auto keeps one (Background.choose, Replicas)
# Device types where auto times its compiled step against the eager one before keeping one: CUDA, where
# which is faster has not been settled; on the CPU the compiled step is, for the groups auto compiles there.
MEASURED_ON = {"cuda"}


class Replicas:
    """``compile=None`` in a run of several processes, where every rank must take the same step each time
    (a data-parallel replica taking the compiled step's roundings while another takes the eager one's
    would drift from it). Every group compiles before its first step, on the training thread (``COMPILER``),
    on every rank. Where auto measures (``MEASURED_ON``), the optimizer's steps 2 to 7 take turns, compiled
    then eager, each group's step timed; at the end of step 7 the ranks add up their groups' median times in
    one all-reduce and every group of every rank keeps the step with the lower total (the eager one if
    compiling failed on any rank). Turns and decision follow the optimizer's step count, so every rank
    takes them at the same step; each group's ``choice`` records its own medians and what was kept."""

    def __init__(self) -> None:
        self.steps = 0  # optimizer steps that stepped a group through here
        self.stepped = False
        self.kept: str | None = None
        self.trials: dict[int, tuple[Group, list]] = {}

    def step_group(self, group: Group, hp: Tensor, skipped: Tensor, scratch: Scratch | None = None) -> None:
        device = group.params[0].device
        self.stepped = True
        timed = self.kept is None and device.type in MEASURED_ON and 1 <= self.steps <= 2 * TRIAL_STEPS
        if timed and not _capturing(device):
            turn = "compiled" if self.steps % 2 == 1 else "eager"
            timing = Timing(device)
            step_group(group, hp, skipped, compiled_chunk if turn == "compiled" else eager_chunk, scratch)
            self.trials.setdefault(id(group), (group, []))[1].append((turn, timing.stop()))
        else:
            step_group(group, hp, skipped, eager_chunk if self.kept == "eager" else compiled_chunk, scratch)

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
            for key in totals:
                totals[key] += ms[key]
        vote = [totals["eager_ms"], totals["compiled_ms"], float(COMPILER.failure is not None)]
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


def _capturing(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def _fake_plan(args: Any, device: torch.device) -> Any:
    """``args`` with each tensor replaced by how to make a fake of it: (storage number, dtype, shape,
    stride, offset), and each storage's device (``device`` for a meta tensor, which has a storage of its
    own, as in ``_aliases``) and the bytes its tensors reach."""
    storages: dict[tuple, list] = {}

    def plan(value: Any) -> Any:
        if isinstance(value, Tensor):
            where = device if value.device.type == "meta" else value.device
            entry = storages.setdefault(_storage(value, len(storages)), [len(storages), where, 0])
            last = sum((n - 1) * s for n, s in zip(value.shape, value.stride(), strict=True))
            entry[2] = max(entry[2], (value.storage_offset() + last + 1) * value.element_size() if value.numel() else 0)
            return _TensorPlan(entry[0], value.dtype, tuple(value.shape), value.stride(), value.storage_offset())
        if type(value) in (tuple, list):
            return type(value)(plan(v) for v in value)
        return value

    planned = plan(args)
    return planned, [(device, nbytes) for _, device, nbytes in sorted(storages.values(), key=lambda e: e[0])]


@dataclass(frozen=True)
class _TensorPlan:
    storage: int
    dtype: torch.dtype
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int


def _fakes(plan: Any) -> Any:
    """Fake tensors as ``_fake_plan`` describes, sharing storages as the originals did (made in a mode with
    a shape environment of static shapes, which inductor's cache needs)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    planned, storages = plan
    with FakeTensorMode(shape_env=ShapeEnv()):
        made = [(torch.empty(max(n, 1), dtype=torch.uint8, device=d).untyped_storage(), d) for d, n in storages]

        def make(value: Any) -> Any:
            if isinstance(value, _TensorPlan):
                storage, device = made[value.storage]
                out = torch.empty(0, dtype=value.dtype, device=device)
                return out.set_(storage, value.offset, value.shape, value.stride)
            if type(value) in (tuple, list):
                return type(value)(make(v) for v in value)
            return value

        return make(planned)


BACKGROUND = Background(COMPILER)
