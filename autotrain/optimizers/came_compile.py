"""How CAME's step functions are compiled: by inductor (C++ on the CPU, Triton on CUDA), once per (function,
input layouts, thread count), traced by ``make_fx`` on fake tensors. ``StepCompiler.prepare`` compiles from
fakes of a call's layouts (``fakes_of``) without running anything: the background compiler's way
(``came_policy``). Also what differs between torch versions: where inductor keeps its settings
(``inductor_settings``) and whether it compiles a 3-D param's step right (``slices_compile_right``).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from autotrain.optimizers import came_math

COMPILED_REGION = "CAME compiled step"  # the name of a call of a compiled graph in a profile
# Recompute the update and m in each loop that needs them rather than store them in a full-size buffer.
_RECOMPUTE = {"realize_reads_threshold": 64, "realize_opcount_threshold": 4096, "realize_acc_reads_threshold": 64}


class StepCompiler:
    """came_math's step functions compiled by inductor, shared by every optimizer of the process: traced by
    ``make_fx`` on fakes, not by Dynamo (straight-line tensor code: Dynamo's guards only cost time), and keyed
    here on what a graph is specialised to (``_flatten``, ``_aliases``). If compiling fails (no C++ compiler,
    no Triton), one line on stderr says so and nothing compiles again (``failure``); a call that fails
    raises, for ``came_groups`` to restore. ``seconds``: time spent compiling."""

    def __init__(self) -> None:
        self._compiled: dict[tuple, Callable] = {}
        self._lock = threading.Lock()
        self.failure: str | None = None
        self.seconds = 0.0

    def __call__(self, fn: Callable, *args: Any, site: dict | None = None) -> Any:
        """``fn(*args)`` through its graph, compiled on the first call with these layouts. ``site``: a dict kept
        by a call site whose inputs keep their layouts (a chunk's), where the graph is found after one lookup."""
        tensors: list[Tensor] = []
        threads = torch.get_num_threads()
        compiled = None if site is None else site.get((fn, threads))
        if compiled is not None:
            _tensors(args, tensors)
            return compiled(tensors)
        compiled = self._graph(fn, args, tensors, _storage)
        out = compiled(tensors)
        if site is not None:  # once a call went through
            site[(fn, threads)] = compiled
        return out

    def prepare(self, fn: Callable, *args: Any) -> Any:
        """Compile ``fn`` for ``args``, fake tensors (see ``Background``), without running it; returns
        ``fn``'s fake outputs, so that a function taking them can be prepared next."""
        from torch._guards import detect_fake_mode

        tensors: list[Tensor] = []
        self._graph(fn, args, tensors, _fake_storage)
        with detect_fake_mode(tensors):
            return fn(*args)

    def _graph(self, fn: Callable, args: tuple, tensors: list[Tensor], storage: Callable) -> Callable:
        """``fn``'s graph for ``args`` (their tensors appended to ``tensors``), compiled the first time."""
        key = (fn, _flatten(args, tensors), _aliases(tensors, storage), torch.get_num_threads())
        compiled = self._compiled.get(key)
        if compiled is None:
            if self.failure is not None:
                raise RuntimeError(f"compiling is unavailable ({self.failure})")
            start = time.perf_counter()
            try:
                compiled = _compile(fn, args, tensors)
            except Exception as exc:
                self._fail(exc)
                raise
            with self._lock:
                self._compiled[key] = compiled
                self.seconds += time.perf_counter() - start
        return compiled

    def _fail(self, exc: Exception) -> None:
        if self.failure is not None:
            return
        self.failure = describe(exc)
        print(
            f"autotrain: CAME's compiled step is unavailable ({self.failure}); using the eager step "
            "(same maths, slower)",
            file=sys.stderr,
        )

    @property
    def shapes(self) -> int:
        """How many (function, layouts) were compiled so far."""
        return len(self._compiled)


def describe(exc: BaseException) -> str:
    """``exc`` in one line: its type and the first line of its message."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"[:300]


def _compile(fn: Callable, args: tuple, tensors: list[Tensor]) -> Callable[[list[Tensor]], Any]:
    """``fn(*args)`` as an inductor graph of ``tensors`` (``args``' tensors, fake or real; other values are
    constants), traced on fakes: nothing runs."""
    import torch._inductor
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

    specs: list = []  # the structure of fn's result (nested tuples of tensors, or None)

    def flat(*inputs: Tensor) -> tuple:
        taken = iter(inputs)
        leaves, spec = tree_flatten(fn(*tree_map(lambda v: next(taken) if isinstance(v, Tensor) else v, args)))
        specs.append(spec)
        return tuple(leaves)

    if tensors and isinstance(tensors[0], FakeTensor):  # Background's: made in a mode with a shape environment
        fakes = tensors
    else:
        mode = FakeTensorMode(shape_env=ShapeEnv())  # a shape environment (static shapes): inductor caches the graph
        fakes = [mode.from_tensor(t, static_shapes=True) for t in tensors]
    graph = make_fx(flat, tracing_mode="fake")(*fakes)
    compiled = torch._inductor.compile(graph, fakes, options=_RECOMPUTE)
    spec = specs[0]

    def call(inputs: list[Tensor]) -> Any:
        if torch._C._autograd._profiler_enabled():  # a profile shows each call as one region
            with torch.profiler.record_function(COMPILED_REGION):
                return tree_unflatten(list(compiled(*inputs)), spec)
        return tree_unflatten(list(compiled(*inputs)), spec)

    call.writes_once = writes_once(compiled)  # type: ignore[attr-defined]
    return call


def writes_once(compiled: Callable) -> bool:
    """Whether a call of inductor's ``compiled`` graph can only fail before it writes: its generated code makes
    its buffers, then runs one C++ kernel (what the CPU backend makes of came_math's functions). Otherwise
    (Triton's several kernels, buffers made between them; code that cannot be read) it may fail between."""
    source = _source_code(compiled)
    if source is None or "def call(" not in source:
        return False
    body = [line.strip() for line in source.split("def call(", 1)[1].split("\n\n", 1)[0].splitlines()[1:]]
    work = [i for i, line in enumerate(body) if not _bookkeeping(line)]
    after = body[work[-1] + 1 :] if work else []
    return len(work) == 1 and body[work[0]].startswith("cpp_fused") and all(_drops(line) for line in after)


def _source_code(compiled: Any, depth: int = 4) -> str | None:
    """The code inductor generated for ``compiled``: on the callable (torch 2.13) or a few wrappers in (2.8)."""
    source = getattr(compiled, "source_code", None)
    if isinstance(source, str) or depth == 0:
        return source if isinstance(source, str) else None
    cells = []
    for cell in getattr(compiled, "__closure__", None) or ():
        with contextlib.suppress(ValueError):  # an empty cell
            cells.append(cell.cell_contents)
    for inner in (getattr(compiled, "_torchdynamo_orig_callable", None), *cells):
        found = _source_code(inner, depth - 1) if callable(inner) else None
        if found is not None:
            return found
    return None


def _bookkeeping(line: str) -> bool:
    """A line of a graph's ``call`` that checks an input, makes, reuses or views a buffer, or drops a reference."""
    if _drops(line) or line in ("", "args.clear()") or line.startswith(("assert_size_stride(", "assert_alignment(")):
        return True
    target, _, value = line.partition(" = ")
    reuse = value.split(";")[0].isidentifier() and value.partition("; ")[2].startswith("del ")
    return bool(value) and (value.startswith(("empty_strided_cpu(", "reinterpret_tensor(", "args")) or reuse)


def _drops(line: str) -> bool:
    return line.startswith(("del ", "return "))


# --- what a graph is keyed on ------------------------------------------------------------------------


def _flatten(value: Any, tensors: list[Tensor]) -> Any:
    """What a compiled graph of ``value`` is specialised to: each tensor's shape, strides, dtype and device
    (the tensor appended to ``tensors``), and every other value as it is."""
    if isinstance(value, Tensor):
        tensors.append(value)
        return (value.shape, value.stride(), value.dtype, value.device)
    if type(value) in (tuple, list):
        return (type(value), *(_flatten(v, tensors) for v in value))
    return value


def _tensors(value: Any, tensors: list[Tensor]) -> None:
    """The tensors of ``value`` appended to ``tensors``, in ``_flatten``'s order, unkeyed."""
    if isinstance(value, Tensor):
        tensors.append(value)
    elif type(value) in (tuple, list):
        for v in value:
            _tensors(v, tensors)


def _aliases(tensors: list[Tensor], storage: Callable[[Tensor, int], tuple]) -> tuple[int, ...]:
    """For each tensor, the first of ``tensors`` on the same ``storage``: a graph is traced for one aliasing."""
    first: dict[tuple, int] = {}
    return tuple(first.setdefault(storage(t, i), i) for i, t in enumerate(tensors))


def _storage(t: Tensor, i: int) -> tuple:
    """Which storage ``t`` (the ``i``-th tensor) is on; a meta tensor, with none, has one of its own."""
    return (t.device, t.untyped_storage().data_ptr() or ("none", i))


def _fake_storage(t: Tensor, i: int) -> tuple:
    """Which storage the fake tensor ``t`` is on (fakes have no data pointer: the storage object)."""
    return (t.device, t.untyped_storage()._cdata)


def signature(args: Any, device: torch.device) -> Any:
    """``StepCompiler``'s key of ``args`` whose meta tensors stand for tensors on ``device``."""
    tensors: list[Tensor] = []
    flat = _flatten(args, tensors)
    return flat, _aliases(tensors, _storage), tuple(device if t.device.type == "meta" else t.device for t in tensors)


def fakes_of(args: Any, device: torch.device) -> Any:
    """``args`` with fake tensors of the same layouts and aliasing (a meta tensor's on ``device``), which hold
    no memory: what the background compiles from. Made in a shape environment: inductor's cache needs one."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    from torch.utils._pytree import tree_map

    mode = FakeTensorMode(shape_env=ShapeEnv())

    def fake(value: Any) -> Any:
        if not isinstance(value, Tensor):
            return value
        if value.device.type != "meta":
            return mode.from_tensor(value, static_shapes=True)
        with mode:
            return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device=device)

    return tree_map(fake, args)


COMPILER = StepCompiler()


# --- what differs between torch versions ----------------------------------------------------------


def per_thread_settings() -> bool:
    """Whether inductor keeps its settings per thread (torch 2.13), not for the whole process (2.8): read from
    how it stores them, process-wide where that cannot be read (the safe side)."""
    from contextvars import ContextVar

    import torch._inductor.config

    entries = getattr(torch._inductor.config, "_config", None)
    entry = next(iter(entries.values()), None) if isinstance(entries, dict) else None
    return isinstance(getattr(entry, "user_override", None), ContextVar)


def inductor_settings() -> dict | None:
    """The calling thread's inductor settings, for the worker thread to compile with; None where inductor was
    never imported (nothing was set) or keeps them for the whole process (the worker sees them already)."""
    config = sys.modules.get("torch._inductor.config")
    return config.get_config_copy() if config is not None and per_thread_settings() else None


def with_inductor_settings(settings: dict | None):
    """A context in which this thread compiles with ``settings`` where they are per thread: those that differ
    from its own are patched (inductor refuses to patch one it hides, even to its value). Where they are
    process-wide nothing is patched: that would change every thread's."""
    if settings is None or not per_thread_settings():
        return contextlib.nullcontext()
    import torch._inductor.config

    here = torch._inductor.config.get_config_copy()
    changed = {name: value for name, value in settings.items() if name not in here or here[name] != value}
    return torch._inductor.config.patch(changed) if changed else contextlib.nullcontext()


_SLICES_RIGHT: dict[str, bool] = {}
SLICES_WRONG = "this torch's compiler computes the step of a param factored over several slices wrong"


def slices_compile_right(device: torch.device) -> bool:
    """Whether inductor compiles the step of a 3-D+ param (factored within each of several slices) right on
    ``device``'s type (torch 2.8's does not; its 2-D steps are right). Probed once per device type and
    process: a small such step, compiled, against the eager one."""
    if device.type not in _SLICES_RIGHT:
        _SLICES_RIGHT[device.type] = _probe(device)
    return _SLICES_RIGHT[device.type]


def _probe(device: torch.device) -> bool:
    def step(run: Callable) -> list[Tensor]:
        gen = torch.Generator().manual_seed(0)

        def rand(*size: int, scale: float, signed: bool = True) -> Tensor:
            values = torch.randn(size, generator=gen) if signed else torch.rand(size, generator=gen) + 0.01
            return (values * scale).to(device)

        p, g, m = (rand(1, 3, 5, 16, scale=s) for s in (0.02, 1e-3, 1e-4))  # three factored slices of 5 x 16
        stats = (rand(1, 3, 5, scale=1e-6, signed=False), rand(1, 3, 16, scale=1e-6, signed=False)) * 2
        zeros = (torch.zeros(1, device=device), torch.zeros((), dtype=torch.int64, device=device))
        state = (*[t.clone() for t in stats], *zeros, m)
        hp = torch.tensor(came_math.hyper_values(1e-3, (0.9, 0.999, 0.9999), (1e-30, 1e-16), 1.0, 0.1), device=device)
        run(came_math.factored_step, p, g, state, hp, came_math.Dims(rows=5, numel=240))
        return [p, *state[:5], m]

    def compiled(fn: Callable, *args: Any) -> Any:  # not through a StepCompiler: a failure here says nothing
        tensors: list[Tensor] = []
        _flatten(args, tensors)
        return _compile(fn, args, tensors)(tensors)

    try:
        with torch.no_grad():
            pairs = zip(step(compiled), step(came_math.eager), strict=True)
            return all(((a - b).norm() <= 1e-5 * b.norm()).item() for a, b in pairs)
    except Exception:  # compiling fails here as it would for the step: nothing to decide
        return False
