"""CAME's grouped step around the maths: operations per step that follow the groups, not the params;
checkpoints of the per-parameter layout; skipped non-finite gradients; odd parameters; no host sync."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

from autotrain.optimizers import CAME, CAME8Bit, CAME8BitFusedAdam

pytestmark = pytest.mark.usefixtures("one_thread")  # small tensors: see conftest

SMALL_8BIT = dict(block_size=256, min_8bit_size=1024)
FIXTURE = Path(__file__).parent / "assets" / "came_state_v1.pt"
VIEWS = {"aten::view", "aten::reshape", "aten::select", "aten::slice", "aten::unbind", "aten::as_strided"}
VIEWS |= {"aten::expand", "aten::unsqueeze", "aten::detach", "aten::empty", "aten::empty_like", "aten::alias"}


def _set_grads(params: list[torch.Tensor], step: int) -> None:
    gen = torch.Generator().manual_seed(1000 + step)
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen).to(p.dtype)


def _model_shapes(layers: int) -> list[tuple[int, ...]]:
    """A small decoder's shapes (SmolLM2's layout at a 40th of its width): 6 distinct shapes."""
    layer = [(16, 16), (8, 16), (8, 16), (16, 16), (40, 16), (40, 16), (16, 40), (16,), (16,)]
    return [(128, 16), *(layer * layers), (16,)]


def _ops_per_step(opt: torch.optim.Optimizer) -> tuple[int, set[str]]:
    """ATen operations the step itself calls, views and allocations aside (the benchmark's rule)."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        opt.step()
    step = next(e for e in prof.events() if e.name.startswith("Optimizer.step#"))
    names = [e.name for e in step.cpu_children if e.name.startswith("aten::") and e.name not in VIEWS]
    return len(names), {e.name for e in prof.events()}


def test_operations_per_step_do_not_grow_with_layers():
    """CAME8Bit with small 8-bit blocks: factored groups with codes and with an fp32 m, and 1-D groups.
    Large groups step in chunks of an eighth of all params (or half the largest one), so deep enough
    that the layers outweigh the embedding, doubling the depth keeps the number of chunks."""
    counts = []
    for layers in (8, 16):
        params = [nn.Parameter(torch.randn(s)) for s in _model_shapes(layers)]
        opt = CAME8Bit(params, lr=1e-3, weight_decay=0.1, compile=False, block_size=256, min_8bit_size=600)
        _set_grads(params, 0)
        opt.step()
        count, names = _ops_per_step(opt)
        counts.append(count)
        # No host synchronisation: a step can be captured in a CUDA graph.
        assert not names & {"aten::item", "aten::_local_scalar_dense"}
    assert counts[0] == counts[1]
    assert counts[0] <= 100 * (6 + 8)  # a fixed number per chunk (eager: the maths' operations, unfused)


def test_chunks_bound_what_a_step_gathers():
    from autotrain.optimizers.came_groups import chunks_of

    assert chunks_of(60, 10, 10**9) == [(0, 60)]
    runs = chunks_of(60, 10, 130)  # 13 params a chunk at most: 5 chunks of 12
    assert runs == [(i * 12, i * 12 + 12) for i in range(5)]
    runs = chunks_of(7, 10, 30)  # near-equal runs: two lengths at most
    assert [b - a for a, b in runs] == [3, 2, 2] and runs[-1][1] == 7
    assert chunks_of(3, 100, 10) == [(0, 1), (1, 2), (2, 3)]  # one param each when a param is larger
    # SmolLM2's 60 gate/up matrices in the CPU's chunks: 30 equal runs of 2, one compiled shape (not 26 of
    # 3 or 2); and never a run above the budget where params do not divide it (7 x 100 in 250: runs of 1).
    assert {b - a for a, b in chunks_of(60, 1536 * 576, 2**21)} == {2}
    assert all((b - a) * 100 <= 250 for a, b in chunks_of(7, 100, 250))


def _fixture_params(saved: dict) -> list[nn.Parameter]:
    return [nn.Parameter(t.clone()) for t in saved["params"]]


def _fixture_groups(params: list[nn.Parameter]) -> list[dict]:
    return [{"params": params[:3], "weight_decay": 0.1}, {"params": params[3:], "weight_decay": 0.0}]


MAKERS = {"CAME": lambda g: CAME(g, lr=1e-2), "CAME8Bit": lambda g: CAME8Bit(g, lr=1e-2, **SMALL_8BIT)}


@pytest.mark.parametrize("name", list(MAKERS))
def test_a_checkpoint_of_the_per_parameter_step_still_loads(name):
    """tests/assets/came_state_v1.pt: state saved by the step that went one parameter at a time, and the
    weights it reached 3 steps later. The grouped step resumes from it and lands within rounding (fp32)
    or a few 8-bit codes (which round at other boundaries) of there."""
    saved = torch.load(FIXTURE, weights_only=True)[name]
    params = _fixture_params(saved)
    opt = MAKERS[name](_fixture_groups(params))
    opt.load_state_dict(saved["optim"])
    for step in range(3, 6):
        _set_grads(params, step)
        opt.step()
    for p, expected in zip(params, saved["after"], strict=True):
        tolerance = 1e-5 if name == "CAME" else 1e-3
        assert ((p - expected).norm() / expected.norm()).item() <= tolerance
    state = opt.state_dict()["state"][0]
    assert state["step"] == 6 and ("exp_avg_codes" in state) == (name == "CAME8Bit")


@pytest.mark.parametrize("writer, reader", [("CAME8Bit", "CAME"), ("CAME", "CAME8Bit")])
def test_state_of_the_other_variant_is_refused_clearly(writer, reader):
    saved = torch.load(FIXTURE, weights_only=True)[writer]
    opt = MAKERS[reader](_fixture_groups(_fixture_params(saved)))
    with pytest.raises(ValueError, match=f"written by {writer} .*cannot be loaded into {reader}"):
        opt.load_state_dict(saved["optim"])
    assert len(opt.state) == 0  # nothing half-loaded


def test_other_block_sizes_are_refused_clearly():
    saved = torch.load(FIXTURE, weights_only=True)["CAME8Bit"]
    opt = CAME8Bit(_fixture_groups(_fixture_params(saved)), lr=1e-2, block_size=128, min_8bit_size=1024)
    with pytest.raises(ValueError, match="blocks of 240, not 80"):
        opt.load_state_dict(saved["optim"])


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 2e19])
@pytest.mark.parametrize("compile_", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_a_non_finite_gradient_skips_its_tensor_and_is_counted(bad, compile_):
    gen = torch.Generator().manual_seed(0)
    params = [nn.Parameter(torch.randn(s, generator=gen)) for s in [(64, 80), (64, 80), (64,), (64,)]]
    opt = CAME8Bit(params, lr=1e-2, weight_decay=0.1, compile=compile_, **SMALL_8BIT)
    _set_grads(params, 0)
    opt.step()
    before = [p.detach().clone() for p in params]
    states = [{k: v.clone() for k, v in opt.state[p].items() if k != "step" and k != "RMS"} for p in params]
    _set_grads(params, 1)
    params[0].grad[3, 7] = bad
    params[2].grad[5] = bad
    opt.step()
    for i in (0, 2):  # untouched, weights and state
        assert torch.equal(params[i], before[i])
        assert all(torch.equal(opt.state[params[i]][k], v) for k, v in states[i].items())
    for i in (1, 3):  # their group mates stepped
        assert not torch.equal(params[i], before[i]) and torch.isfinite(params[i]).all()
    assert opt.skipped_tensors == 2
    _set_grads(params, 2)
    opt.step()
    assert opt.skipped_tensors == 2 and all(torch.isfinite(p).all() for p in params)


def test_empty_and_channels_last_params_step():
    empty = [nn.Parameter(torch.empty(s)) for s in [(0, 5), (5, 0), (0,)]]
    conv = nn.Parameter(torch.randn(8, 4, 32, 32).to(memory_format=torch.channels_last))
    plain = nn.Parameter(conv.detach().contiguous().clone())
    for cls in (CAME, CAME8Bit):
        opts = [cls([*empty, conv], lr=1e-2, min_8bit_size=0) if cls is CAME8Bit else cls([*empty, conv], lr=1e-2)]
        opts.append(cls([plain], lr=1e-2, **({"min_8bit_size": 0} if cls is CAME8Bit else {})))
        for step in range(2):
            _set_grads([*empty, conv, plain], step)
            plain.grad.copy_(conv.grad)
            for opt in opts:
                opt.step()
        assert conv.is_contiguous(memory_format=torch.channels_last)
        torch.testing.assert_close(conv, plain, rtol=0, atol=0)


def test_state_dict_stays_per_parameter_and_survives_a_new_param_set():
    params = [nn.Parameter(torch.randn(64, 80)) for _ in range(3)]
    opt = CAME8BitFusedAdam(params, lr=1e-2, came=SMALL_8BIT, min_factored_size=1024)
    _set_grads(params, 0)
    opt.step()
    state = opt.state_dict()["state"]
    assert sorted(state) == [0, 1, 2] and all(s["exp_avg_codes"].shape == (22, 240) for s in state.values())
    params[1].grad = None  # a param without a gradient this step: the group is rebuilt without it
    params[0].grad = torch.randn(64, 80)
    params[2].grad = torch.randn(64, 80)
    frozen = params[1].detach().clone()
    opt.step()
    assert torch.equal(params[1], frozen)
    assert [opt.state[p]["step"] for p in params] == [2, 1, 2]


def test_the_run_guard_reports_skips_and_stops_after_repeated_ones():
    from types import SimpleNamespace

    from autotrain.training.guards import RepeatedSkips, skip_guard

    params = [nn.Parameter(torch.randn(64, 80)), nn.Parameter(torch.randn(64))]
    trainer = SimpleNamespace(optimizer=SimpleNamespace(optimizer=CAME8Bit(params, lr=1e-2, **SMALL_8BIT)))
    guard, state = skip_guard(trainer, limit=3), SimpleNamespace(global_step=0)
    for step in range(4):  # a skip, a clean step (the run goes on), then skips in a row
        _set_grads(params, step)
        params[1].grad[0] = float("nan") if step != 1 else 0.0
        trainer.optimizer.optimizer.step()
        state.global_step = step + 1
        guard.on_step_end(None, state, None)
    assert trainer.skipped_tensors == 3
    _set_grads(params, 4)
    params[0].grad[0, 0] = float("inf")
    trainer.optimizer.optimizer.step()
    with pytest.raises(RepeatedSkips, match="skipped parameters with non-finite gradients on 3 consecutive steps"):
        guard.on_step_end(None, state, None)


def test_the_plan_gives_auto_the_runs_length():
    from autotrain.training.plan import resolve_optimizer

    assert resolve_optimizer("came_8bit", {}, 1e-3, 50).kwargs["total_steps"] == 50
    assert "total_steps" not in resolve_optimizer("came_8bit", {}, 1e-3, None).kwargs  # length unknown (epochs)
    assert "total_steps" not in resolve_optimizer("came", {"compile": True}, 1e-3, 50).kwargs  # asked for
    hybrid = resolve_optimizer("came_8bit+fused_adam", {}, 1e-3, 50)
    assert hybrid.kwargs["came"]["total_steps"] == 50 and hybrid.record()["kwargs"]["came"]["total_steps"] == 50


def test_capturable_reads_a_tensor_learning_rate_on_the_device():
    gen = torch.Generator().manual_seed(0)
    params = [nn.Parameter(torch.randn(64, 80, generator=gen)) for _ in range(2)]
    floats = [nn.Parameter(p.detach().clone()) for p in params]
    lr = torch.tensor(1e-2)
    opts = CAME8Bit(params, lr=lr, capturable=True, **SMALL_8BIT), CAME8Bit(floats, lr=1e-2, **SMALL_8BIT)
    for step in range(3):
        lr.fill_(1e-2 * 0.5**step)  # what a captured step's schedule does: write the tensor, no step() call
        opts[1].param_groups[0]["lr"] = 1e-2 * 0.5**step
        for ps, opt in zip((params, floats), opts, strict=True):
            _set_grads(ps, step)
            opt.step()
    assert all(torch.equal(p, q) for p, q in zip(params, floats, strict=True))


@pytest.mark.parametrize("rows, cols", [(49152, 576), (576, 576), (192, 576), (257, 20), (24, 8), (4096, 64)])
def test_column_sums_in_blocks_of_rows_match_one_sum(rows, cols):
    """Column statistics are summed by blocks of rows, then the blocks (read in order, compiled): the same
    sums to fp32 rounding, blocks of at least 16 rows whose partial sums stay within 2**17 elements, and one
    plain sum where no such block divides the rows."""
    from autotrain.optimizers import came_math

    x = torch.randn(2, 1, rows, cols, generator=torch.Generator().manual_seed(0)).square()
    assert torch.allclose(came_math._col_sum(x), x.double().sum(-2).float(), rtol=1e-5)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        came_math._col_sum(x)
    sums = [e for e in prof.events() if e.name == "aten::sum"]
    block = next((k for k in range(16, rows // 2 + 1) if rows % k == 0 and rows * cols // k <= 1 << 17), None)
    if block is None:
        assert len(sums) == 1 and rows in (257, 24)  # a prime; too few rows for two blocks of 16
    else:
        assert len(sums) == 2 and list(sums[0].input_shapes[0]) == [2, 1, rows // block, block, cols]
