"""How CAME's step functions are compiled: by inductor (torch.compile's compiler: C++ on the CPU, Triton on
CUDA), once per (function, input layouts, thread count), traced by ``make_fx`` on fake tensors, with an eager
fallback where compiling fails. ``StepCompiler.prepare`` compiles from fakes made to a call's layouts
(``fake_plan``, ``fakes``) without running anything: the background compiler's way (``came_auto``).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor


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
    C++ compiler, no Triton), one line on stderr says so and every later step runs eagerly; a call that
    fails raises, and its caller takes the eager step from the state before it (``came_groups``).
    """

    def __init__(self) -> None:
        self._compiled: dict[tuple, Callable] = {}
        self._lock = threading.Lock()
        self.failure: str | None = None
        self.seconds = 0.0

    def __call__(self, fn: Callable, *args: Any, site: dict | None = None) -> Any:
        """``fn(*args)`` through its graph, compiled on the first call with these layouts. ``site``: a dict
        that one call site keeps, where every input keeps its layout and aliasing from call to call (a
        chunk's, see ``came_groups``): the site's graph of ``fn`` is then looked up by the full key once,
        and kept there for its later calls (the key took about a third of the Python a compiled step ran).

        Raises whatever compiling or the call raised: the caller restores what the call wrote and takes the
        eager step (``came_groups``). A failure to compile also ends compiling in this process
        (``failure``, one line on stderr)."""
        tensors: list[Tensor] = []
        threads = torch.get_num_threads()
        compiled = None if site is None else site.get((fn, threads))
        if compiled is not None:
            _tensors(args, tensors)
            return compiled(tensors)
        key = (fn, _flatten(args, tensors), _aliases(tensors), threads)
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
            self._add(key, compiled, start)
        out = compiled(tensors)
        if site is not None:
            site[(fn, threads)] = compiled
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
    """``fn(*args)`` as an inductor graph of ``tensors`` (``args``' tensors, in ``_flatten``'s order; the
    other values are constants of the graph; fake tensors, or real ones), traced on fake tensors: nothing is
    run or written."""
    import torch._inductor
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    from torch.utils._pytree import tree_flatten, tree_unflatten

    specs: list = []  # the structure of fn's result (nested tuples of tensors, or None)

    def flat(*inputs: Tensor) -> tuple:
        leaves, spec = tree_flatten(fn(*_rebuild(args, iter(inputs))))
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
                out = compiled(*inputs)
        else:
            out = compiled(*inputs)
        return tree_unflatten(list(out), spec)

    call.writes_once = writes_once(compiled)  # type: ignore[attr-defined]
    return call


def writes_once(compiled: Callable) -> bool:
    """Whether a call of inductor's ``compiled`` graph can only fail before it writes anything: its generated
    code (where torch shows it) makes its buffers, then runs one C++ kernel function, then only drops
    references (what inductor's C++ backend makes of came_math's functions). Otherwise (Triton's several
    kernels, with buffers made between them; code that cannot be read) a call may fail between two writes."""
    source = getattr(compiled, "source_code", None)
    if not isinstance(source, str) or "def call(" not in source:
        return False
    body = [line.strip() for line in source.split("def call(", 1)[1].split("\n\n", 1)[0].splitlines()[1:]]
    work = [i for i, line in enumerate(body) if not _bookkeeping(line)]
    after = body[work[-1] + 1 :] if work else []
    return len(work) == 1 and body[work[0]].startswith("cpp_fused") and all(_drops(line) for line in after)


def _bookkeeping(line: str) -> bool:
    """A line of a graph's ``call`` that neither writes a tensor nor runs a kernel: it checks an input, makes,
    reuses or views a buffer, or drops a reference."""
    if _drops(line) or line in ("", "args.clear()") or line.startswith(("assert_size_stride(", "assert_alignment(")):
        return True
    target, _, value = line.partition(" = ")
    reuse = value.split(";")[0].isidentifier() and value.partition("; ")[2].startswith("del ")
    return bool(value) and (value.startswith(("empty_strided_cpu(", "reinterpret_tensor(", "args")) or reuse)


def _drops(line: str) -> bool:
    return line.startswith(("del ", "return "))


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


def _tensors(value: Any, tensors: list[Tensor]) -> None:
    """The tensors of ``value`` appended to ``tensors``, in ``_flatten``'s order."""
    if isinstance(value, Tensor):
        tensors.append(value)
    elif type(value) in (tuple, list):
        for v in value:
            _tensors(v, tensors)


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


def signature(args: Any, device: torch.device) -> Any:
    """``StepCompiler``'s key of ``args`` whose meta tensors stand for tensors on ``device`` (see
    ``Background``)."""
    tensors: list[Tensor] = []
    flat = _flatten(args, tensors)
    return flat, _aliases(tensors), tuple(device if t.device.type == "meta" else t.device for t in tensors)


# Recompute the update and m (a few element-wise ops on what is read anyway) in each loop that needs
# them, rather than storing them in a full-size fp32 buffer between loops.
_RECOMPUTE = {"realize_reads_threshold": 64, "realize_opcount_threshold": 4096, "realize_acc_reads_threshold": 64}
COMPILER = StepCompiler()


def inductor_settings() -> dict | None:
    """The calling thread's inductor settings (inductor keeps them per thread: one set on the training thread
    is not seen on another), for a compilation elsewhere to use; None where inductor was never imported
    (nothing was set)."""
    config = sys.modules.get("torch._inductor.config")
    return None if config is None else config.get_config_copy()


def with_inductor_settings(settings: dict | None):
    """A context in which this thread compiles with ``settings`` (``inductor_settings``). Only the settings
    that differ from this thread's are patched: inductor refuses to patch a setting it hides, even to the
    value it already has."""
    if settings is None:
        return contextlib.nullcontext()
    import torch._inductor.config

    here = torch._inductor.config.get_config_copy()
    changed = {name: value for name, value in settings.items() if name not in here or here[name] != value}
    return torch._inductor.config.patch(changed) if changed else contextlib.nullcontext()


def fake_plan(args: Any, device: torch.device) -> Any:
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


def fakes(plan: Any) -> Any:
    """Fake tensors as ``fake_plan`` describes, sharing storages as the originals did (made in a mode with
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
