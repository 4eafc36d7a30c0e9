"""A compiled CAME step that fails, at whatever point, never leaves a silently wrong run. Where a chunk's graphs
compile, load and first run (its first compiled step), a failure (compiling, a call that fails before it runs,
one that fails after its kernels wrote) restores what that call wrote and gives the eager step from the state
before it: weights and state equal ``compile: false``'s, bit for bit; one line says why; the run's record
holds it. A call that fails after its chunk's graphs ran before cannot be undone: the step raises, naming the
reason. The graphs here run the captured operations as they are (``Backend``), bit for bit the eager step's, so
equality with ``compile: false`` at every step is the test."""

from __future__ import annotations

import pytest
import torch
from test_came_compiled import Backend
from torch import nn

from autotrain.optimizers import CAME, CAME8Bit, came_compile, came_math

pytestmark = pytest.mark.usefixtures("one_thread")

SMALL_8BIT = dict(block_size=256, min_8bit_size=1024)
# One group of two 8-bit matrices, a matrix whose 256-blocks cut its 257-wide rows, a 4-D kernel (eager),
# 1-D params.
SHAPES = [(64, 80), (64, 80), (20, 257), (4, 3, 3, 3), (64,), (64,)]


def _params() -> list[nn.Parameter]:
    gen = torch.Generator().manual_seed(0)
    return [nn.Parameter(torch.randn(s, generator=gen)) for s in SHAPES]


def _set_grads(params: list[torch.Tensor], step: int, skip: int | None = None) -> None:
    gen = torch.Generator().manual_seed(1000 + step)
    for i, p in enumerate(params):
        p.grad = None if i == skip else torch.randn(p.shape, generator=gen)


def _same(a: CAME, b: CAME, params_a, params_b) -> bool:
    """Weights and every state tensor equal, bit for bit."""
    if not all(torch.equal(p, q) for p, q in zip(params_a, params_b, strict=True)):
        return False
    state_a, state_b = a.state_dict()["state"], b.state_dict()["state"]
    return state_a.keys() == state_b.keys() and all(
        torch.equal(state_a[i][k], v) if isinstance(v, torch.Tensor) else state_a[i][k] == v
        for i in state_b
        for k, v in state_b[i].items()
    )


@pytest.fixture
def faulty(monkeypatch) -> Backend:
    torch.compiler.reset()
    backend, compile_ = Backend(), torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **_: compile_(fn, fullgraph=True, dynamic=False, backend=backend))
    monkeypatch.setattr(came_compile, "precompiled", lambda compiled, args, key: compiled)  # (see test_came_compiled)
    monkeypatch.setattr(came_compile, "GRAPHS", {})  # the recorder's graphs, this test's alone
    yield backend
    torch.compiler.reset()


# (step, when): a chunk's first compiled step is step 1, or step 3 where a param without a gradient at step 3
# regroups its params (new chunks, new layouts: compiled then).
FIRST_STEPS = {
    "compiling fails": {(1, "compile")},
    "a first call fails before it runs": {(1, "before")},
    "a first call fails after its kernels wrote": {(1, "after")},
    "a regrouped chunk's first call fails after it wrote": {(3, "after")},
}


@pytest.mark.parametrize(
    "cls, point", [(CAME8Bit, point) for point in FIRST_STEPS] + [(CAME, "a first call fails after its kernels wrote")]
)
def test_a_failed_first_compiled_step_is_the_eager_step(faulty, capsys, cls, point):
    """Every step equals compile=False's, before, at and after the failure; one line, one record."""
    faulty.faults = FIRST_STEPS[point]
    kwargs = dict(lr=1e-2, weight_decay=0.1, **(SMALL_8BIT if cls is CAME8Bit else {}))
    params, reference = _params(), _params()
    opt, ref = cls(params, compile=True, **kwargs), cls(reference, compile=False, **kwargs)
    for step in range(1, 6):
        for ps in (params, reference):
            _set_grads(ps, step, skip=1 if step == 3 else None)
        faulty.now = step
        opt.step()
        ref.step()
        assert _same(opt, ref, params, reference), f"step {step}"
    assert faulty.failed == 1
    assert bool(faulty.calls) == (point != "compiling fails" and "before" not in point)  # what ran compiled
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("autotrain:")]
    [record] = opt.compile_choices
    assert len(lines) == 1 and "CAME's compiled step failed for the group of" in lines[0]
    assert "injected" in record["failure"] and record["kept"] == "eager" and record["failure"] in lines[0]
    assert max(((p - q).norm() / q.norm()).item() for p, q in zip(params, _params(), strict=True)) > 0.01


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_later_failure_stops_the_step_with_its_reason(faulty, when):
    """Step 3 fails where the chunks' graphs ran at steps 1 and 2: whether its kernels wrote cannot be known,
    so the step raises (the run stops with the reason) rather than go on from a state it cannot vouch for;
    the failure is recorded, and a step after it (a caller that goes on) is eager."""
    faulty.faults = {(3, when)}
    params = _params()
    opt = CAME8Bit(params, lr=1e-2, compile=True, **SMALL_8BIT)
    for step in (1, 2, 3):
        _set_grads(params, step)
        faulty.now = step
        if step < 3:
            opt.step()
    with pytest.raises(RuntimeError, match=r"compiled step failed after it had run \(.*injected: .*\); the optimizer"):
        opt.step()
    [record] = opt.compile_choices
    assert f"injected: {when}" in record["failure"]
    calls = len(faulty.calls)
    opt.step()
    assert len(faulty.calls) == calls


@pytest.mark.slow  # inductor's C++ build of each graph: tens of seconds on a cold cache
@pytest.mark.parametrize("when", ["compile", "before", "after"])
def test_real_compiled_graphs_that_fail_first_give_the_eager_step(monkeypatch, when):
    """With inductor's own graphs (wrapped to fail): every call of the first step fails (compiling, before
    running, after writing): the run is compile=False's, bit for bit."""
    faults = Backend({(1, when)})
    precompiled = came_compile.precompiled

    def faulty_precompiled(compiled, args, key):
        faults._fault("compile")  # (a real compile fails here, before anything runs)
        graph = precompiled(compiled, args, key)

        def call(*args):
            faults._fault("before")
            out = graph(*args)
            faults._fault("after", torch.OutOfMemoryError)
            return out

        return call

    monkeypatch.setattr(came_compile, "precompiled", faulty_precompiled)
    monkeypatch.setattr(came_compile, "GRAPHS", {})  # compiled afresh, through faulty_precompiled
    params, reference = _params(), _params()
    opt = CAME8Bit(params, lr=1e-2, compile=True, **SMALL_8BIT)
    ref = CAME8Bit(reference, lr=1e-2, compile=False, **SMALL_8BIT)
    for step in range(1, 5):
        faults.now = step
        for ps, o in ((params, opt), (reference, ref)):
            _set_grads(ps, step)
            o.step()
        assert _same(opt, ref, params, reference), f"step {step}"
    assert faults.failed == 1 and len(opt.compile_choices) == 1


def _sharded_phases_rank(rank: int, world: int, out, fail_call: int) -> dict:
    """One rank of two under FSDP2: a compile=True run whose ``fail_call``-th compiled call of step 1 (a phase
    of a shard's step, all-reduces between them) fails after writing, beside a compile=False run."""
    from fsdp_training import build, full_params, train

    backend, compile_ = Backend({(1, "after")}), torch.compile
    torch.compile = lambda fn, **_: compile_(fn, fullgraph=True, dynamic=False, backend=backend)
    came_compile.precompiled = lambda compiled, args, key: compiled  # (see test_came_compiled)
    counted = backend._fault

    def nth_call(when, error=RuntimeError):  # only the fail_call-th call's "after" of step 1
        if when != "after" or len(backend.calls) == fail_call + 1:
            counted(when, error)

    backend._fault = nth_call
    runs = {}
    for compile_run in (False, True):
        model, opt = build("came_8bit", sharded=True, compile=compile_run, block_size=12)
        for step in range(4):
            backend.now = step + 1
            train(model, opt, range(step, step + 1), rank, world)
        runs[compile_run] = (full_params(model), opt.compile_choices)
    return {"eager": runs[False][0], "faulty": runs[True][0], "record": runs[True][1], "failed": backend.failed}


@pytest.mark.slow
@pytest.mark.parametrize("fail_call", [0, 3])
def test_a_shards_failed_phase_runs_eagerly_and_its_all_reduces_once(tmp_path, fail_call):
    """A shard's step has all-reduces between its phases, which every rank must make once and in turn: a phase
    that fails after writing is restored and run eagerly, the step goes on (no rank waits alone in a
    collective), and the run equals the eager one bit for bit on both ranks."""
    from fsdp_training import spawn

    ranks = spawn(_sharded_phases_rank, fail_call, out=tmp_path, timeout=600)
    for rank in ranks:
        assert rank["failed"] == 1 and len(rank["record"]) == 1
        assert all(torch.equal(rank["faulty"][k], v) for k, v in rank["eager"].items())


def test_math_phases_write_each_state_tensor_once():
    """What the phase-level restore relies on: a phase writes only tensors no earlier phase of the step wrote
    (so restoring a failed phase's arguments to the state before the step undoes that phase alone)."""
    written: list[set[int]] = []

    def run(fn, *args):
        tensors = came_compile.tensors_of(args)
        before = [t.clone() for t in tensors]
        out = fn(*args)
        written.append({id(t) for t, b in zip(tensors, before, strict=True) if not torch.equal(t, b)})
        return out

    gen = torch.Generator().manual_seed(0)
    p, g = torch.randn(2, 1, 8, 12, generator=gen), torch.randn(2, 1, 8, 12, generator=gen)
    stats = [s.clone() for s in [torch.rand(2, 1, 8, generator=gen), torch.rand(2, 1, 12, generator=gen)] * 2]
    state = (*stats, torch.zeros(2), torch.zeros((), dtype=torch.int64), torch.zeros_like(p))
    hp = torch.tensor(came_math.hyper_values(1e-2, (0.9, 0.999, 0.9999), (1e-30, 1e-16), 1.0, 0.1))
    came_math.factored_step(p, g, state, hp, came_math.Dims(rows=8, numel=96), reduce=lambda kind, t: t, run=run)
    assert len(written) == 6 and all(not (a & b) for i, a in enumerate(written) for b in written[i + 1 :])
