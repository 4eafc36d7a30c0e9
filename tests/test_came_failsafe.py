"""A compiled CAME step that fails, at whatever point, leaves the group to take the eager step from the state as
it was before that step: weights and state equal a clean eager step's, bit for bit; one line names the group
and the reason; the run's record says so; nothing is applied twice or half."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from autotrain.optimizers import CAME, CAME8Bit, came_compile, came_groups, came_math

pytestmark = pytest.mark.usefixtures("one_thread")

SMALL_8BIT = dict(block_size=256, min_8bit_size=1024)
# One group of two 8-bit matrices (one compiled call each step), a matrix whose 256-blocks cut its 257-wide
# rows (two calls: the update, then the moment's codes), a 4-D kernel with an fp32 moment, 1-D params.
SHAPES = [(64, 80), (64, 80), (20, 257), (4, 3, 3, 3), (64,), (64,)]


def _params() -> list[nn.Parameter]:
    gen = torch.Generator().manual_seed(0)
    return [nn.Parameter(torch.randn(s, generator=gen)) for s in SHAPES]


def _set_grads(params: list[torch.Tensor], step: int) -> None:
    gen = torch.Generator().manual_seed(1000 + step)
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen)


def _same(a: CAME, b: CAME, params_a, params_b) -> bool:
    """Weights and every state tensor equal, bit for bit."""
    if not all(torch.equal(p, q) for p, q in zip(params_a, params_b, strict=True)):
        return False
    state_a, state_b = a.state_dict()["state"], b.state_dict()["state"]
    return state_a.keys() == state_b.keys() and all(
        torch.equal(state_a[i][k], state_b[i][k]) if isinstance(state_a[i][k], torch.Tensor) else state_a[i][k] == v
        for i in state_a
        for k, v in state_b[i].items()
    )


class Faults:
    """Makes a compiled graph's calls fail as ``plan`` says: ``(step, fn name or None, when)``, ``when`` one of
    "compile" (compiling raises), "before" (the call raises before anything runs) and "after" (the graph runs,
    writing what it writes in place, and then raises, as a failure after its kernels wrote would)."""

    def __init__(self, monkeypatch, plan: tuple[int, str | None, str]) -> None:
        self.step, self.name, self.when = plan
        self.now = 0
        self.failed = 0
        # Whether this torch compiles 3-D steps right, found before the faults (a probe under them would fail).
        monkeypatch.setattr(
            came_compile, "_SLICES_RIGHT", {"cpu": came_compile.slices_compile_right(torch.device("cpu"))}
        )
        compile_ = came_compile._compile

        def faulty_compile(fn, args, tensors):
            if self._hits(fn, "compile"):
                raise RuntimeError("injected: no C++ compiler")
            call = compile_(fn, args, tensors)

            def faulty_call(inputs):
                if self._hits(fn, "before"):
                    raise RuntimeError("injected: launcher failed to load")
                out = call(inputs)
                if self._hits(fn, "after"):
                    raise torch.OutOfMemoryError("injected: out of memory after its kernels wrote")
                return out

            return faulty_call

        monkeypatch.setattr(came_compile, "_compile", faulty_compile)

    def _hits(self, fn, when: str) -> bool:
        hit = self.now == self.step and self.when == when and (self.name is None or fn.__name__ == self.name)
        self.failed += hit
        return hit


@pytest.fixture
def traced_only(monkeypatch):
    """Inductor's compile replaced by the traced graph itself (as in test_came_compiled): the compiler's
    bookkeeping, without a C++ build per graph. The traced graph runs the eager step's operations."""
    import torch._inductor

    monkeypatch.setattr(came_compile, "COMPILER", came_compile.StepCompiler())
    monkeypatch.setattr(torch._inductor, "compile", lambda graph, example_inputs, options=None: graph)
    monkeypatch.setattr(came_compile, "_SLICES_RIGHT", {"cpu": True})  # the traced graphs run the eager ops


POINTS = {
    "compiling fails": (1, "factored_step", "compile"),
    "a first call fails before its kernels": (1, None, "before"),
    "a first call fails after its kernels wrote": (1, None, "after"),
    "the second call of a chunk fails after the first wrote": (1, "write_moment", "before"),
    "a later call fails after its kernels wrote": (3, None, "after"),
    "a later call of one graph fails": (4, "factored_step", "after"),
}


@pytest.mark.parametrize(
    "cls, point",
    [(CAME8Bit, point) for point in POINTS]
    + [(CAME, point) for point in POINTS if "wrote" in point and "second" not in point],
)
def test_a_failed_compiled_step_is_the_eager_step_from_the_state_before_it(
    monkeypatch, capsys, traced_only, point, cls
):
    """The failing group's chunk is restored and takes the eager step; it stays eager after; the other groups
    keep the compiled step. The reference is the same optimizer whose failing groups are made eager from that
    step on by hand (compiled before it): weights and state equal it bit for bit, every step."""
    faults = Faults(monkeypatch, POINTS[point])
    kwargs = dict(lr=1e-2, weight_decay=0.1, **(SMALL_8BIT if cls is CAME8Bit else {}))
    params, reference = _params(), _params()
    opt, ref = cls(params, compile=True, **kwargs), cls(reference, compile=True, **kwargs)
    failed: set = set()
    step_group = ref._steps.step_group

    def reference_step_group(group, *args):  # the groups that failed in opt's step, eager from that step on
        if tuple(group.local_shape) in failed:
            group.failure = "by hand"
        return step_group(group, *args)

    ref._steps.step_group = reference_step_group
    for step in range(1, 6):
        for ps in (params, reference):
            _set_grads(ps, step)
        faults.now = step
        opt.step()
        faults.now = 0
        failed |= {tuple(g.local_shape) for _, groups in opt._groups.values() for g in groups if g.failure}
        ref.step()
        assert _same(opt, ref, params, reference), f"step {step}"
    assert faults.failed and failed
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("autotrain:")]
    choices = opt.compile_choices
    assert {tuple(c["shape"]) for c in choices} == failed and all(c["kept"] == "eager" for c in choices)
    if faults.when == "compile":  # the compiler is done for: said once, recorded per group
        assert len(lines) == 1 and "compiled step is unavailable (RuntimeError: injected" in lines[0]
    else:
        assert len(lines) == len(failed) and all("CAME's compiled step failed for the group of" in x for x in lines)
        assert all("injected" in c["failure"] for c in choices)
    assert _relative_moved(params) > 0.01  # it trained


def _relative_moved(params) -> float:
    start = _params()
    return max(((p - q).norm() / q.norm()).item() for p, q in zip(params, start, strict=True))


def test_a_first_step_that_fails_everywhere_equals_a_clean_eager_step(monkeypatch, traced_only):
    """Every compiled call of the first step fails after writing: the step equals compile=False's exactly."""
    Faults(monkeypatch, (1, None, "after")).now = 1
    params, eager_params = _params(), _params()
    opt = CAME8Bit(params, lr=1e-2, compile=True, **SMALL_8BIT)
    eager = CAME8Bit(eager_params, lr=1e-2, compile=False, **SMALL_8BIT)
    for ps, o in ((params, opt), (eager_params, eager)):
        _set_grads(ps, 1)
        o.step()
    assert _same(opt, eager, params, eager_params)
    assert len(opt.compile_choices) == 4  # every group: 2x(64, 80), (20, 257), the 4-D kernel, 2x(64,)


def test_a_shards_failed_phase_runs_eagerly_and_its_all_reduces_once(monkeypatch, traced_only):
    """A shard's step has all-reduces between its phases, which every rank must make once and in turn: a
    phase that fails after writing is restored and run eagerly, the step goes on, and the all-reduces are
    those of an eager step, in the same order (here summed over one rank)."""
    Faults(monkeypatch, (1, "factored_apply", "after")).now = 1
    results, reduced = {}, {}
    for kind in ("eager", "guarded"):
        torch.set_grad_enabled(False)
        params = [nn.Parameter(torch.randn(32, 48, generator=torch.Generator().manual_seed(0))) for _ in range(2)]
        _set_grads(params, 1)
        opt = CAME8Bit(params, lr=1e-2, compile=False, **SMALL_8BIT)
        opt._active(opt.param_groups[0])
        [group] = opt._shape_groups(0, params)
        scratch = came_groups.Scratch()
        hp = opt._hyper_tensor(0, opt.param_groups[0], torch.device("cpu"))
        args, locals_ = came_groups.chunk_args(group, 0, 2, hp, torch.zeros((), dtype=torch.int64), scratch)
        reduced[kind] = []
        args = (*args[:6], lambda what, tensors, kind=kind: reduced[kind].append(what) or tensors, *args[7:])
        if kind == "eager":
            came_groups.eager_chunk(*args)
        else:
            assert came_groups._compiled_or_restored(group, args, locals_, came_compile.COMPILER, scratch, {})
            assert group.failure is not None and "injected" in group.failure
        torch._foreach_copy_(locals_, list(args[0].view(2, 32, 48).unbind(0)))
        results[kind] = [p.detach().clone() for p in params] + [t.clone() for t in group.stacked.values()]
        torch.set_grad_enabled(True)
    assert reduced["guarded"] == reduced["eager"] == ["slices", "totals", "update", "slices", "totals"]
    assert all(torch.equal(a, b) for a, b in zip(results["eager"], results["guarded"], strict=True))


def test_kept_state_is_restored_only_among_a_phases_arguments():
    scratch = came_groups.Scratch()
    a, b, codes = torch.ones(3), torch.full((2, 2), 2.0), torch.ones(4, dtype=torch.int8)
    kept = scratch.keep([a, b, codes])
    a.add_(1), b.add_(1), codes.add_(1)
    kept.restore(among=(b, (codes, 1.0)))
    assert torch.equal(a, torch.full((3,), 2.0)) and torch.equal(b, torch.full((2, 2), 2.0))
    assert torch.equal(codes, torch.ones(4, dtype=torch.int8))
    kept.restore()
    assert torch.equal(a, torch.ones(3))


@pytest.mark.slow  # inductor's C++ build of each graph: tens of seconds on a cold cache
@pytest.mark.parametrize("when", ["before", "after"])
def test_real_compiled_graphs_that_fail_give_the_eager_step(monkeypatch, when):
    """With inductor's own graphs: every call of the first step fails (before running, or after writing):
    that step is compile=False's, bit for bit; a later failure (step 3) after two compiled steps gives the
    compiled steps, then the eager one from the state they left."""
    for fail_at in (1, 3):
        monkeypatch.setattr(came_compile, "COMPILER", came_compile.StepCompiler())  # graphs of this run's faults
        faults = Faults(monkeypatch, (fail_at, None, when))
        params, reference = _params(), _params()
        opt = CAME8Bit(params, lr=1e-2, compile=True, **SMALL_8BIT)
        ref = CAME8Bit(reference, lr=1e-2, compile=fail_at > 1, **SMALL_8BIT)
        for step in range(1, 5):
            faults.now = step
            ref.compile = ref.compile and step < fail_at
            for ps, o in ((params, opt), (reference, ref)):
                _set_grads(ps, step)
                o.step()
            assert _same(opt, ref, params, reference), f"fail at {fail_at}, step {step}"
        assert len(opt.compile_choices) == 4 and all(c["kept"] == "eager" for c in opt.compile_choices)


def test_math_phases_write_each_state_tensor_once():
    """What the phase-level restore relies on: a phase writes only tensors no earlier phase of the step wrote
    (so restoring a failed phase's arguments to the state before the step undoes that phase alone)."""
    written: list[set[int]] = []

    def run(fn, *args):
        tensors: list[torch.Tensor] = []
        came_compile._tensors(args, tensors)
        before = [t.clone() for t in tensors]
        out = fn(*args)
        written.append({id(t) for t, b in zip(tensors, before, strict=True) if not torch.equal(t, b)})
        return out

    group_args = _chunk(torch.Generator().manual_seed(0))
    came_math.factored_step(*group_args, reduce=lambda kind, t: t, run=run)
    assert all(not (a & b) for i, a in enumerate(written) for b in written[i + 1 :])


def _chunk(gen):
    p, g = torch.randn(2, 1, 8, 12, generator=gen), torch.randn(2, 1, 8, 12, generator=gen)
    stats = [torch.rand(2, 1, 8, generator=gen), torch.rand(2, 1, 12, generator=gen)] * 2
    stats = [s.clone() for s in stats]
    state = (*stats, torch.zeros(2), torch.zeros((), dtype=torch.int64), torch.zeros_like(p))
    hp = torch.tensor(came_math.hyper_values(1e-2, (0.9, 0.999, 0.9999), (1e-30, 1e-16), 1.0, 0.1))
    return p, g, state, hp, came_math.Dims(rows=8, numel=96)


@pytest.mark.slow  # inductor's C++ build of each graph
def test_cpu_graphs_fail_before_they_write_so_later_steps_keep_nothing(monkeypatch):
    """Inductor's CPU code for a step function makes its buffers, then runs one kernel: a call fails before it
    writes, or not at all. So once a chunk's one graph has run, its later steps keep no copies (the CPU pays
    nothing for the guard); a chunk of two graphs (8-bit blocks that cut its rows) keeps them every step."""
    monkeypatch.setattr(came_compile, "COMPILER", came_compile.StepCompiler())
    kept: list[int] = []
    keep = came_groups.Scratch.keep
    monkeypatch.setattr(
        came_groups.Scratch, "keep", lambda self, tensors: kept.append(len(tensors)) or keep(self, tensors)
    )
    params = _params()
    opt = CAME8Bit(params, lr=1e-2, compile=True, **SMALL_8BIT)
    per_step = []
    for step in range(1, 4):
        _set_grads(params, step)
        kept.clear()
        opt.step()
        per_step.append(len(kept))
    # Two chunks of (64, 80), one of each other shape (the 4-D one eager where this torch's compiler gets such
    # steps wrong); then only the (20, 257) chunk.
    three_d = 1 if came_compile.slices_compile_right(torch.device("cpu")) else 0
    assert per_step == [4 + three_d, 1, 1]
    sites = [site for _, groups in opt._groups.values() for g in groups for site in g.sites.values()]
    assert sum(len(site) for site in sites) == 5 + three_d and all(g.writes_once for s in sites for g in s.values())


def test_a_graph_writes_once_where_its_code_runs_one_kernel_after_its_buffers():
    def graph(body: str):
        return type("Compiled", (), {"source_code": f"x = 1\n    def call(self, args):\n{body}\n\nrunner = 1\n"})()

    cpu = """        arg0_1, arg1_1 = args
        args.clear()
        assert_size_stride(arg0_1, (1, 20), (20, 1), 'input')
        buf0 = empty_strided_cpu((1, ), (1, ), torch.float32)
        buf1 = buf0; del buf0  # reuse
        buf2 = reinterpret_tensor(buf1, (1, ), (1, ), 0); del buf1  # reuse
        cpp_fused_add_copy__0(arg0_1, arg1_1, buf2)
        del arg0_1
        return (buf0, )"""
    assert came_compile.writes_once(graph(cpu))
    two_kernels = cpu.replace("        del arg0_1", "        cpp_fused_mul_1(arg0_1)\n        del arg0_1")
    late_buffer = cpu.replace("        del arg0_1", "        buf1 = empty_strided_cpu((1, ), (1, ), torch.float32)")
    triton = cpu.replace("cpp_fused_add_copy__0(", "triton_poi_fused_0.run(")
    for other in (two_kernels, late_buffer, triton):
        assert not came_compile.writes_once(graph(other))
    assert not came_compile.writes_once(lambda *inputs: None)  # no code to read
