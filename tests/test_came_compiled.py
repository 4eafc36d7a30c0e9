"""CAME's compiled step: came_math's functions through ``torch.compile``, compared with the eager step against
the spread a 1e-7 perturbation of the weights causes; graphs keyed on layouts, never on hyper-parameter
values; the warm-up thread of ``compile: null``; a compile failure that gives the eager step and says so once."""

from __future__ import annotations

import math
import threading
from math import prod

import pytest
import torch
from torch import nn

from autotrain.optimizers import CAME, CAME8Bit, came_compile, came_math
from autotrain.optimizers.table import OPTIMIZERS

pytestmark = pytest.mark.usefixtures("one_thread")  # small tensors: see conftest

SMALL_8BIT = dict(block_size=256, min_8bit_size=1024)
# Two same-shaped matrices (one group), a matrix whose 256-blocks cut its 257-wide rows, a 4-D kernel
# factored per (3, 3) slice (always eager), and 1-D params: three compiled graphs.
SHAPES = [(64, 80), (64, 80), (20, 257), (4, 3, 3, 3), (64,), (64,)]


class Backend:
    """A ``torch.compile`` backend that runs the captured graph as it is (the eager step's operations, bit for
    bit, without inductor's C++ build of each graph) and records on which thread each graph compiled and ran.
    ``faults``: (step, when) pairs that make it fail at ``now == step``: "compile" (compiling raises),
    "before" (a call raises before it runs) or "after" (a call runs, writing what it writes, then raises)."""

    def __init__(self, faults: tuple = ()) -> None:
        self.faults, self.now, self.failed = set(faults), 0, 0
        self.compiled: list[str] = []
        self.calls: list[str] = []

    def _fault(self, when: str, error: type = RuntimeError) -> None:
        if (self.now, when) in self.faults:
            self.failed += 1
            raise error(f"injected: {when}")

    def __call__(self, graph: torch.fx.GraphModule, example_inputs: list) -> object:
        self._fault("compile")
        self.compiled.append(threading.current_thread().name)

        def call(*args):
            self._fault("before")
            self.calls.append(threading.current_thread().name)
            out = graph(*args)
            self._fault("after", torch.OutOfMemoryError)
            return out

        return call


def warm_up_done(timeout: float = 600) -> None:
    """Wait for the warm-up threads (``compile: null``) of this process to end."""
    for thread in threading.enumerate():
        if thread.name == came_compile.THREAD:
            thread.join(timeout)
            assert not thread.is_alive()


@pytest.fixture
def backend(monkeypatch) -> Backend:
    """Every ``torch.compile`` of the test through a fresh ``Backend`` (Dynamo's caches cleared first), called
    as torch.compile's function (compiled at its first call): ahead-of-time compiling takes only backends whose
    graphs serialise, which the recorder's do not."""
    torch.compiler.reset()
    recorder, compile_ = Backend(), torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **_: compile_(fn, fullgraph=True, dynamic=False, backend=recorder))
    monkeypatch.setattr(came_compile, "precompiled", lambda compiled, args, key: compiled)
    monkeypatch.setattr(came_compile, "GRAPHS", {})  # the recorder's graphs, this test's alone
    yield recorder
    torch.compiler.reset()


def _graphs() -> int:
    """Graphs this process holds, one per (function, layout): compiled, or loaded from inductor's cache folder."""
    return len(came_compile.GRAPHS)


def _params(dtype: torch.dtype = torch.float32) -> list[nn.Parameter]:
    gen = torch.Generator().manual_seed(0)
    return [nn.Parameter(torch.randn(s, generator=gen).to(dtype)) for s in SHAPES]


def _set_grads(params: list[torch.Tensor], step: int) -> None:
    gen = torch.Generator().manual_seed(1000 + step)
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen).to(p.dtype)


def _relative(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    """The difference of all weights over their norm. (The largest per-tensor ratio was dominated by the
    last layer's single bias once chaotic runs parted: 12.6 against the control's 1.2 while the global
    ratios were 0.60 and 0.68 and all three runs trained to similar losses.)"""
    flat_a = torch.cat([p.detach().float().flatten() for p in a])
    flat_b = torch.cat([q.detach().float().flatten() for q in b])
    return ((flat_a - flat_b).norm() / flat_b.norm()).item()


def _mlp(perturb: float = 0.0) -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1))
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.0 + perturb)
    return model


def trajectories(cls: type, checkpoints=(1, 10, 100), lr: float = 1e-2) -> dict[int, tuple[float, float]]:
    """Train one small MLP three times (eager; compiled; eager from weights scaled by 1 + 1e-7) on the same
    batches. At each checkpoint: (compiled vs eager, perturbed vs eager), the largest relative difference."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(256, 32, generator=gen)
    y = torch.sin(x[:, :4].sum(1, keepdim=True))
    kwargs = dict(lr=lr, weight_decay=0.1, **(SMALL_8BIT if cls is CAME8Bit else {}))
    runs = []
    for compile_, perturb in ((False, 0.0), (True, 0.0), (False, 1e-7)):
        model = _mlp(perturb)
        runs.append((model, cls(model.parameters(), compile=compile_, **kwargs)))
    found = {}
    for step in range(1, max(checkpoints) + 1):
        idx = torch.randint(0, len(x), (32,), generator=gen)
        for model, opt in runs:
            loss = nn.functional.mse_loss(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        if step in checkpoints:
            eager, compiled, control = (list(m.parameters()) for m, _ in runs)
            found[step] = (_relative(compiled, eager), _relative(control, eager))
    return found


@pytest.mark.slow
@pytest.mark.parametrize("cls", [CAME, CAME8Bit])
def test_compiled_and_eager_differ_no_more_than_a_tiny_perturbation_does(cls):
    """The compiled step sums in another order than the eager one: the runs then drift apart as two eager
    runs from weights 1e-7 apart do (CAME's training is chaotic), not more."""
    found = trajectories(cls)
    for step, (compiled, control) in found.items():
        assert compiled <= 10 * control + 1e-6, f"step {step}: compiled {compiled:.1e}, control {control:.1e}"
    assert found[100][1] > 1e-6  # the control moved away: the comparison proves something


@pytest.mark.slow
def test_compiled_step_matches_the_reference_on_random_gradients():
    """Gradients that do not depend on the weights: no chaos, so the compiled step stays within fp32
    rounding of the authors' code after 100 steps."""
    from came_pytorch import CAME as ReferenceCAME

    ours, ref = _params(), _params()
    opt = CAME(ours, lr=1e-2, weight_decay=0.1, compile=True)
    ref_opts = [ReferenceCAME([p], lr=1e-2, weight_decay=0.1) for p in ref]
    for step in range(100):
        _set_grads(ours, step)
        _set_grads(ref, step)
        opt.step()
        for ref_opt in ref_opts:
            ref_opt.step()
    assert _relative(ours, ref) <= 1e-5
    assert _relative(ours, _params()) > 0.1  # it did train


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_params_reuse_the_fp32_graphs(dtype):
    fp32, half = _params(), _params(dtype)
    opts = CAME8Bit(fp32, lr=1e-2, compile=True, **SMALL_8BIT), CAME8Bit(half, lr=1e-2, compile=True, **SMALL_8BIT)
    _set_grads(fp32, 0)
    opts[0].step()
    graphs = _graphs()
    for step in range(5):
        _set_grads(half, step)
        opts[1].step()
    assert graphs > 0 and _graphs() == graphs  # the fp32 graphs: stacked in fp32
    assert not opts[1].compile_choices  # (compiled: nothing failed)
    assert all(p.dtype == dtype and torch.isfinite(p).all() for p in half)
    assert opts[1].state[half[0]]["exp_avg_codes"].dtype == torch.int8


def test_no_recompilation_over_a_schedule_and_per_group_settings(backend):
    """30 steps of a cosine schedule with warmup, two groups (weight decay 0 and 0.1, their own betas and eps):
    one graph per group shape, compiled on the first step, never again (Dynamo would raise under
    ``fail_on_recompile``), every later step through them."""
    params = _params()
    groups = [
        {"params": params[:4], "weight_decay": 0.1},
        {"params": params[4:], "weight_decay": 0.0, "betas": (0.8, 0.99, 0.999), "eps": (1e-29, 1e-15)},
    ]
    opt = CAME8Bit(groups, lr=1e-2, compile=True, **SMALL_8BIT)

    def cosine(step: int) -> float:
        return (step + 1) / 10 if step < 10 else 0.5 * (1 + math.cos(math.pi * (step - 10) / 20))

    schedule = torch.optim.lr_scheduler.LambdaLR(opt, cosine)
    _set_grads(params, 0)
    opt.step()
    schedule.step()
    assert len(backend.compiled) == 3  # 64x80 (8-bit, rows), 20x257 (8-bit, blocks), the 1-D group
    calls = len(backend.calls)  # a call per chunk: the CPU steps each of these matrices alone
    with torch.compiler.set_stance("fail_on_recompile"):
        for step in range(1, 30):
            _set_grads(params, step)
            opt.step()
            schedule.step()
    assert len(backend.compiled) == 3 and len(backend.calls) == 30 * calls and opt.compile_choices == []


@pytest.mark.slow  # traces 11 graphs
def test_compiled_calls_per_step_do_not_grow_with_layers(backend):
    """Steps scale with groups, not parameters: a model twice as deep makes as many compiled calls a step (a
    chunk's graph each, a fixed number of kernels), once its layers outweigh its embedding."""
    from test_came_grouped import _model_shapes

    calls = []
    for layers in (8, 16):
        params = [nn.Parameter(torch.randn(s)) for s in _model_shapes(layers)]
        opt = CAME8Bit(params, lr=1e-3, compile=True, block_size=256, min_8bit_size=600)
        for step in range(2):
            before = len(backend.calls)
            _set_grads(params, step)
            opt.step()
        calls.append(len(backend.calls) - before)
    assert calls[0] == calls[1] <= 6 + 8 and opt.compile_choices == []


def test_a_failed_compilation_gives_the_eager_step_and_says_so_once(backend, capsys):
    """Compiling fails: every step is the eager one, bit for bit; one line on stderr, one record (what the
    run writes to run.json); another optimizer in the process still compiles."""
    backend.faults, backend.now = {(0, "compile")}, 0
    runs = [_params() for _ in range(3)]
    opts = [CAME8Bit(runs[0], lr=1e-2, compile=True, **SMALL_8BIT), CAME8Bit(runs[1], lr=1e-2, **SMALL_8BIT)]
    for step in range(3):
        for params, opt in zip(runs[:2], opts, strict=True):
            _set_grads(params, step)
            opt.step()
    assert all(torch.equal(p, q) for p, q in zip(runs[0], runs[1], strict=True))
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("autotrain:")]
    assert len(lines) == 1 and "CAME's compiled step failed for the group of 2 64x80 parameter(s)" in lines[0]
    assert "(RuntimeError: injected: compile)" in lines[0]
    [record] = opts[0].compile_choices
    assert record["shape"] == [64, 80] and record["kept"] == "eager" and "injected" in record["failure"]
    backend.now = 1  # no fault: the next optimizer compiles, its own compiler unaffected by the first's failure
    other = CAME8Bit(runs[2], lr=1e-2, compile=True, **SMALL_8BIT)
    _set_grads(runs[2], 0)
    other.step()
    assert other.compile_choices == [] and len(backend.compiled) == 3


def test_auto_compiles_on_a_thread_while_the_first_steps_run_eagerly(backend, monkeypatch):
    """compile=None (auto), here for every group: the first step is the eager one, and queues the groups'
    chunk layouts; a thread compiles them from scratch tensors of those layouts; the steps after take the
    compiled graphs, which the training thread never compiles (no recompile, the same weights as eager)."""
    monkeypatch.setattr(came_compile, "CPU_MIN_NUMEL", 0)
    auto_params, eager_params = _params(), _params()
    auto = CAME8Bit(auto_params, lr=1e-2, weight_decay=0.1, compile=None, **SMALL_8BIT)
    eager = CAME8Bit(eager_params, lr=1e-2, weight_decay=0.1, compile=False, **SMALL_8BIT)
    for step in range(4):
        for params, opt in ((auto_params, auto), (eager_params, eager)):
            _set_grads(params, step)
            opt.step()
        if step == 0:
            assert "MainThread" not in backend.calls  # the first step: eager
            warm_up_done()
            ready = len(backend.compiled)
            assert ready == 3
        assert all(torch.equal(p, q) for p, q in zip(auto_params, eager_params, strict=True))
    main = backend.calls.count("MainThread")  # steps 1-3 compiled, a call per chunk (no new graph)
    assert len(backend.compiled) == ready and main > 0 and main % 3 == 0
    assert set(backend.compiled) == {came_compile.THREAD}  # compiled on that thread, which has ended
    assert not [t for t in threading.enumerate() if t.name == came_compile.THREAD]


def test_a_failed_warm_up_leaves_the_eager_step(backend, monkeypatch, capsys):
    """compile=None where compiling fails on the thread: it stops, the steps stay the eager ones bit for bit,
    one line, one record."""
    monkeypatch.setattr(came_compile, "CPU_MIN_NUMEL", 0)
    backend.faults = {(0, "compile")}
    auto_params, eager_params = _params(), _params()
    auto = CAME8Bit(auto_params, lr=1e-2, compile=None, **SMALL_8BIT)
    eager = CAME8Bit(eager_params, lr=1e-2, compile=False, **SMALL_8BIT)
    for step in range(3):
        for params, opt in ((auto_params, auto), (eager_params, eager)):
            _set_grads(params, step)
            opt.step()
        warm_up_done()
    assert all(torch.equal(p, q) for p, q in zip(auto_params, eager_params, strict=True))
    assert backend.failed == 1 and backend.calls == []
    assert capsys.readouterr().err.count("CAME's compiled step failed") == 1 and len(auto.compile_choices) == 1


def test_auto_compiles_where_it_pays_back_before_the_first_step_with_several_processes(monkeypatch):
    """Compiling costs seconds per group shape; each step then saves in proportion to the group's size. So on
    the CPU auto compiles a group where elements x total_steps reaches CPU_PAYS_ELEMENT_STEPS (never under
    2**20 elements); on CUDA every group in runs of CUDA_MIN_STEPS or more, unless the step is to be captured
    (capturable). In one process it compiles on the warm-up thread; with several, before the first step."""
    pays, large = came_compile.CPU_PAYS_ELEMENT_STEPS, 28 * 2**20  # SmolLM2-135M's embedding
    mode = came_compile.mode
    assert mode(None, "cpu", large, None, False) == "background"
    assert mode(None, "cpu", 2**20 - 1, None, False) == "eager"
    assert mode(None, "cpu", large, int(pays // large) + 1, False) == "background"
    assert mode(None, "cpu", large, int(pays // large) - 1, False) == "eager"
    assert mode(None, "cpu", 2**20 - 1, 10**9, False) == "eager"  # too small to be worth a compilation ever
    assert mode(None, "cuda", 10, came_compile.CUDA_MIN_STEPS, False) == "background"
    assert mode(None, "cuda", 10**9, came_compile.CUDA_MIN_STEPS - 1, False) == "eager"
    assert mode(None, "cuda", 10, None, True) == "eager" and mode(True, "cuda", 10, None, True) == "compiled"
    assert mode(None, "meta", large, None, False) == "eager" and mode(True, "meta", 1, 1, False) == "compiled"
    assert mode(False, "cpu", large, None, False) == "eager"
    monkeypatch.setattr(came_compile, "replicated", lambda: True)
    assert mode(None, "cpu", large, None, False) == "compiled"
    with pytest.raises(ValueError, match="Invalid compile"):
        CAME(_params(), lr=1e-3, compile="yes")
    with pytest.raises(ValueError, match="Invalid total_steps value: 0"):
        CAME8Bit(_params(), lr=1e-3, total_steps=0)


def test_several_processes_compile_before_the_first_step(backend, monkeypatch):
    """With several processes auto does not switch when a thread happens to finish (sooner on one rank than
    another, whose replica would then take other roundings): every rank compiles before its first step."""
    monkeypatch.setattr(came_compile, "CPU_MIN_NUMEL", 0)
    monkeypatch.setattr(came_compile, "replicated", lambda: True)
    params = _params()
    opt = CAME8Bit(params, lr=1e-2, **SMALL_8BIT)
    _set_grads(params, 0)
    opt.step()
    assert backend.compiled == ["MainThread"] * 3 and backend.calls and set(backend.calls) == {"MainThread"}


def test_the_run_records_a_failure():
    """A completed run whose CAME took the eager step after its compiled one failed says so in one line and
    writes the record to run.json (``optimizer_compile``), through accelerate's optimizer wrapper; nothing
    for other optimizers or a run without a failure."""
    from types import SimpleNamespace

    from autotrain.run.train import _record_compile_choices

    record = {"shape": [48, 40], "params": 2, "kept": "eager", "failure": "RuntimeError: no compiler"}
    said, data = [], {}
    this = SimpleNamespace(say=said.append, manifest=SimpleNamespace(data=data))
    wrapped = SimpleNamespace(optimizer=SimpleNamespace(compile_choices=[record]))
    _record_compile_choices(this, SimpleNamespace(optimizer=wrapped))
    assert data["optimizer_compile"] == [record]
    assert said == [
        "optimizer: CAME's compiled step failed (RuntimeError: no compiler); it took the eager step "
        "(run.json: optimizer_compile)"
    ]
    said.clear(), data.clear()
    _record_compile_choices(this, SimpleNamespace(optimizer=torch.optim.SGD([nn.Parameter(torch.ones(1))], lr=1)))
    _record_compile_choices(this, SimpleNamespace(optimizer=CAME(_params(), lr=1e-3)))
    assert not said and not data


def test_3d_params_take_the_eager_step(backend):
    """A param factored within several slices (3-D+) is stepped eagerly even with compile=True (torch 2.8's
    compiler gets that step wrong); the others compile."""
    params, eager_params = _params(), _params()
    opt = CAME8Bit(params, lr=1e-2, compile=True, **SMALL_8BIT)
    eager = CAME8Bit(eager_params, lr=1e-2, compile=False, **SMALL_8BIT)
    for ps, o in ((params, opt), (eager_params, eager)):
        _set_grads(ps, 0)
        o.step()
    assert torch.equal(params[3], eager_params[3]) and len(backend.compiled) == 3
    assert opt.compile_choices == []


def test_compile_is_a_typed_optimizer_argument():
    from pydantic import ValidationError

    for name in ("came", "came_8bit"):
        assert OPTIMIZERS[name].args.model_validate({}).compile is None
        assert OPTIMIZERS[name].args.model_validate({"compile": False}).compile is False
        with pytest.raises(ValidationError):
            OPTIMIZERS[name].args.model_validate({"compile": "fast"})
    combined = OPTIMIZERS["came_8bit+fused_adam"].args.model_validate({"came": {"compile": True}})
    assert combined.came.compile is True


@pytest.mark.slow
def test_exiting_while_the_worker_compiles_is_clean(tmp_path):
    """A process that ends (a short run, an error) while the worker compiles exits with its own status:
    the queued compilations are dropped, the one running finishes, nothing hangs or crashes."""
    import subprocess
    import sys

    script = tmp_path / "short.py"
    script.write_text(
        "import torch\n"
        "from autotrain.optimizers import CAME8Bit, came_compile\n"
        "came_compile.CPU_MIN_NUMEL = 0\n"
        "params = [torch.nn.Parameter(torch.randn(s)) for s in [(64, 80), (20, 257), (64,)]]\n"
        "for p in params:\n"
        "    p.grad = torch.randn_like(p)\n"
        "CAME8Bit(params, lr=1e-3, block_size=256, min_8bit_size=1024).step()\n"
        "print('stepped', flush=True)\n",
        encoding="utf-8",
    )
    env = {**__import__("os").environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "stepped"
    assert "Traceback" not in done.stderr and "Fatal" not in done.stderr


def _chunk_state(shape: tuple[int, ...], block: int, seed: int = 0) -> tuple:
    """A chunk of ``shape`` (G, L, R, C) as came_math takes it: weights, gradients, statistics, codes in
    blocks (the padded tail zero, as the optimizer keeps it) and their scales."""
    gen = torch.Generator().manual_seed(seed)
    count, slices, rows, cols = shape
    p, g = torch.randn(shape, generator=gen) * 0.02, torch.randn(shape, generator=gen) * 1e-3
    sizes = ((count, slices, rows), (count, slices, cols))
    stats = [torch.rand(size, generator=gen) * 1e-6 + 1e-8 for size in sizes] * 2
    numel, blocks = slices * rows * cols, -(-slices * rows * cols // block)
    codes = torch.randint(-127, 128, (count, blocks * block), generator=gen, dtype=torch.int8)
    codes[:, numel:] = 0
    absmax = torch.rand(count, blocks, generator=gen) * 1e-3 + 1e-5
    state = (*stats, torch.zeros(count), torch.zeros((), dtype=torch.int64))
    return p, g, state, codes.view(count, blocks, block), absmax


def _compiled(fn, *args):
    """``fn(*args)`` compiled as the optimizer compiles it."""
    return came_compile.Compiler()({}, fn, *args)


@pytest.mark.slow  # compiles six graphs
@pytest.mark.parametrize(
    "shape, block",
    [((2, 1, 64, 80), 240), ((2, 1, 8, 512), 256), ((1, 3, 5, 16), 48)],
    ids=["blocks-of-3-rows-padded", "rows-of-2-blocks", "3-D-slices"],
)
def test_codes_laid_out_like_the_weights_give_the_blocks_result(shape, block):
    """Where 8-bit blocks hold whole rows (or rows whole blocks) the step reads and writes the codes laid out
    like the weights, in one call; elsewhere they stay blocks (the new moment made, then encoded). Both
    layouts give the same weights and codes: bit for bit eagerly, to rounding compiled."""
    if shape[1] > 1 and torch.__version__ < "2.9":
        pytest.skip("torch 2.8's compiler gets 3-D steps wrong: the optimizer steps them eagerly (tested above)")
    hp = torch.tensor(came_math.hyper_values(1e-3, (0.9, 0.999, 0.9999), (1e-30, 1e-16), 1.0, 0.1))
    dims = came_math.Dims(rows=shape[2], numel=prod(shape[1:]), block=block)
    results = {}
    for runner in (came_math.eager, _compiled):
        for layout in ("rows", "blocks"):
            p, g, state, codes, absmax = _chunk_state(shape, block)
            if layout == "rows":
                moment = (came_math.row_codes(codes, shape), absmax)
                assert moment[0].dim() in (4, 5) and moment[0].data_ptr() == codes.data_ptr()
                runner(came_math.factored_step, p, g, (*state, *moment), hp, dims)
            else:
                m_new, ok = runner(came_math.factored_update, p, g, (*state, codes, absmax), hp, dims)
                runner(came_math.write_moment, (codes, absmax), m_new, ok, dims)
            results[runner is came_math.eager, layout] = (p, codes, absmax)
    eager_rows, eager_blocks = results[True, "rows"], results[True, "blocks"]
    assert all(torch.equal(a, b) for a, b in zip(eager_rows, eager_blocks, strict=True))
    p_rows, codes_rows, scale_rows = results[False, "rows"]
    p_blocks, codes_blocks, scale_blocks = results[False, "blocks"]
    assert _relative([p_rows], [p_blocks]) <= 1e-6 and _relative([p_rows], [eager_rows[0]]) <= 1e-6
    assert torch.allclose(scale_rows, scale_blocks, rtol=1e-5)
    assert (codes_rows != codes_blocks).float().mean().item() <= 1e-3
    assert (codes_rows.view(shape[0], -1)[:, dims.numel :] == 0).all()  # the padded tail untouched
