"""CAME's compiled step (torch.compile of the fused passes): the eager step's results, compiled once per
shape, and an eager fallback that says so once when compiling fails."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch._dynamo.utils import counters

from autotrain.optimizers import CAME, CAME8Bit, came_fused
from autotrain.optimizers.table import OPTIMIZERS

pytestmark = pytest.mark.usefixtures("one_thread")  # small tensors: see conftest

SMALL_8BIT = dict(block_size=256, min_8bit_size=1024)
# With block_size 256 each block of the 64x80 and 50x70 matrices holds three whole rows (blocks of 240
# and 210, the last one padded); each 512-long row of the 32x512 one is two whole blocks (a block's scale
# found by division); the 257-wide rows of the 20x257 one have no such block, so 256-blocks cut them
# (found by comparisons); the 4-D kernel is factored per (3, 3) slice and small enough to keep an fp32 m.
SHAPES = [(64, 80), (50, 70), (32, 512), (20, 257), (4, 3, 3, 3), (64,)]


def _params(dtype: torch.dtype = torch.float32) -> list[nn.Parameter]:
    gen = torch.Generator().manual_seed(0)
    return [nn.Parameter(torch.randn(s, generator=gen).to(dtype)) for s in SHAPES]


def _set_grads(params: list[torch.Tensor], step: int) -> None:
    gen = torch.Generator().manual_seed(1000 + step)
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen).to(p.dtype)


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def test_compiled_came_matches_eager_after_100_steps():
    compiled, eager = _params(), _params()
    opts = CAME(compiled, lr=1e-2, weight_decay=0.1, compile=True), CAME(eager, lr=1e-2, weight_decay=0.1)
    for step in range(100):
        for params, opt in zip((compiled, eager), opts, strict=True):
            _set_grads(params, step)
            opt.step()
    assert max(_relative(p, q) for p, q in zip(compiled, eager, strict=True)) <= 1e-6
    assert _relative(compiled[0], _params()[0]) > 0.1  # it did train
    torch.testing.assert_close(opts[0].state[compiled[0]]["RMS"], opts[1].state[eager[0]]["RMS"], rtol=1e-5, atol=0)


def _8bit_state(opt: torch.optim.Optimizer, p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return opt.state[p]["exp_avg_codes"], opt.state[p]["exp_avg_absmax"]


@pytest.mark.parametrize("lr", [1e-2, 1e-3])
def test_compiled_came_8bit_writes_the_eager_codes(lr):
    """100 free-running steps (nothing copied between the runs): on the CPU the compiled passes write the
    eager step's codes and scales exactly, and params within 1e-6. The sums that set m are exact in both
    paths and the element-wise operations the same, in the same order; with fp32 sums in each path's own
    order, an occasional code flipped at a rounding boundary and the runs drifted apart (9e-5 relative
    after 100 steps at lr 1e-2)."""
    compiled, eager = _params(), _params()
    kwargs = dict(lr=lr, weight_decay=0.1, **SMALL_8BIT)
    opts = CAME8Bit(compiled, compile=True, **kwargs), CAME8Bit(eager, compile=False, **kwargs)
    for step in range(100):
        for params, opt in zip((compiled, eager), opts, strict=True):
            _set_grads(params, step)
            opt.step()
        for p, q in zip(compiled[:4], eager[:4], strict=True):
            for mine, theirs in zip(_8bit_state(opts[0], p), _8bit_state(opts[1], q), strict=True):
                assert torch.equal(mine, theirs), f"step {step}: {(mine != theirs).sum()} differ"
    assert max(_relative(p, q) for p, q in zip(compiled, eager, strict=True)) <= 1e-6
    assert _relative(compiled[0], _params()[0]) > (0.1 if lr == 1e-2 else 0.01)  # it did train


@pytest.mark.slow
def test_compiled_came_8bit_matches_eager_on_large_matrices_with_two_threads():
    """Matrices past the eager sums' fp64 slices (2^18 elements), rows that hold whole blocks and blocks
    that hold whole rows, summed by two threads in each path's own order."""
    shapes = [(1024, 1024), (576, 1536), (1536, 576)]
    gen = torch.Generator().manual_seed(0)
    compiled = [nn.Parameter(torch.randn(s, generator=gen)) for s in shapes]
    eager = [nn.Parameter(p.detach().clone()) for p in compiled]
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        opts = CAME8Bit(compiled, lr=1e-2, compile=True), CAME8Bit(eager, lr=1e-2, compile=False)
        for step in range(30):
            for params, opt in zip((compiled, eager), opts, strict=True):
                _set_grads(params, step)
                opt.step()
    finally:
        torch.set_num_threads(threads)
    for p, q in zip(compiled, eager, strict=True):
        assert torch.equal(_8bit_state(opts[0], p)[0], _8bit_state(opts[1], q)[0])
        assert _relative(p, q) <= 1e-6


def test_eager_sums_in_slices_equal_the_compiled_formula():
    x = torch.randn(3, 704, 500, generator=torch.Generator().manual_seed(0))  # 1.06M: eager sums take slices
    assert x.numel() > came_fused._EAGER_SUM_CHUNK
    halves = x[..., :250] + x[..., 250:]  # gcd(500, 16) = 4: two halvings
    halves = halves[..., :125] + halves[..., 125:]
    for keepdim in (False, True):
        expected = halves.double().sum(-1, keepdim=keepdim).float()
        assert torch.equal(came_fused.row_sums(x, keepdim=keepdim), expected)
    torch.testing.assert_close(came_fused.row_sums(x), x.double().sum(-1).float(), rtol=1e-6, atol=1e-5)
    chunk = came_fused.row_chunk(704, x.device)
    assert chunk == 16
    groups = x.view(3, 44, 16, 500)
    tree = [groups[:, :, i] for i in range(16)]
    while len(tree) > 1:
        tree = [a + b for a, b in zip(tree[::2], tree[1::2], strict=True)]
    assert torch.equal(came_fused.col_sums(x, chunk), tree[0].double().sum(1).float())
    torch.testing.assert_close(came_fused.col_sums(x, chunk), x.double().sum(1).float(), rtol=1e-6, atol=1e-5)


def test_the_eager_square_root_is_correctly_rounded():
    """ATen's float sqrt on the CPU is an ulp off for some inputs; the quantizer's is not."""
    from autotrain.optimizers.came_8bit import sqrt_

    x = torch.rand(1 << 19, generator=torch.Generator().manual_seed(0)) * 16129
    exact = x.double().sqrt().float()
    assert torch.equal(sqrt_(x.clone()), exact)
    x = torch.tensor([4290.24951171875] * 64)  # its root is a hundredth of an ulp on 65.5's side of the midpoint
    assert (sqrt_(x.clone()) == 65.5).all()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_compiled_step_on_half_precision_params(dtype):
    compiled, eager = _params(dtype), _params(dtype)
    opts = CAME8Bit(compiled, lr=1e-2, compile=True, **SMALL_8BIT), CAME8Bit(eager, lr=1e-2, **SMALL_8BIT)
    for step in range(5):
        for params, opt in zip((compiled, eager), opts, strict=True):
            _set_grads(params, step)
            opt.step()
    for p, q in zip(compiled, eager, strict=True):
        assert p.dtype == dtype
        torch.testing.assert_close(p, q, rtol=1e-2, atol=1e-2)
    assert opts[0].state[compiled[0]]["exp_avg_codes"].dtype == torch.int8


def test_a_second_step_does_not_recompile():
    params = _params()
    opt = CAME8Bit(params, lr=1e-2, compile=True, **SMALL_8BIT)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 0.9**step)
    _set_grads(params, 0)
    opt.step()  # compiles each pass once per shape (or finds it compiled earlier in this process)
    compiler = came_fused.COMPILER
    graphs, shapes, seconds = counters["stats"]["unique_graphs"], compiler.shapes, compiler.seconds
    for step in range(1, 4):  # a new learning rate each step: a tensor in the compiled code, no recompile
        schedule.step()
        _set_grads(params, step)
        opt.step()
    assert counters["stats"]["unique_graphs"] == graphs
    assert (compiler.shapes, compiler.seconds) == (shapes, seconds)
    assert compiler.shapes >= 6 and compiler.failure is None  # 3 passes x 2+ shapes


def test_auto_compiles_large_matrices_only():
    big, small, bias = (nn.Parameter(torch.empty(s)) for s in ((1024, 1024), (512, 512), (1 << 21,)))
    auto, off, on = (CAME8Bit([big, small, bias], lr=1e-3, compile=c) for c in (None, False, True))
    assert [auto._compiles(p) for p in (big, small, bias)] == [True, False, False]
    assert not any(off._compiles(p) for p in (big, small, bias))
    assert [on._compiles(p) for p in (big, small, bias)] == [True, True, False]  # 1-D params stay eager
    with pytest.raises(ValueError, match="Invalid compile"):
        CAME([big], lr=1e-3, compile="yes")


def test_auto_leaves_matrices_off_the_cpu_eager():
    """On a GPU the compiled passes launch more kernels than the eager step (measured slower on an H200),
    so auto keeps a large matrix there eager; compile=True still compiles it."""
    big = nn.Parameter(torch.empty((1024, 1024), device="meta"))
    assert not CAME8Bit([big], lr=1e-3)._compiles(big)
    assert CAME8Bit([big], lr=1e-3, compile=True)._compiles(big)


def test_failed_compilation_falls_back_to_eager_with_one_notice(monkeypatch, capsys):
    def broken_compile(fn, **kwargs):
        def fail(*args, **kw):
            raise RuntimeError("no C++ compiler found\nmore details")

        return fail

    monkeypatch.setattr(came_fused, "COMPILER", came_fused.StepCompiler())
    monkeypatch.setattr(torch, "compile", broken_compile)
    runs = [_params() for _ in range(3)]
    opts = [CAME8Bit(runs[0], lr=1e-2, compile=True, **SMALL_8BIT), CAME(runs[1], lr=1e-2, compile=True)]
    eager_opt = CAME8Bit(runs[2], lr=1e-2, **SMALL_8BIT)
    for step in range(3):
        for params, opt in zip(runs, [*opts, eager_opt], strict=True):
            _set_grads(params, step)
            opt.step()
    notices = [line for line in capsys.readouterr().err.splitlines() if "compiled step is unavailable" in line]
    assert notices == [
        "autotrain: CAME's compiled step is unavailable (RuntimeError: no C++ compiler found); "
        "using the eager step (same results, slower)"
    ]
    assert not opts[0]._compiles(runs[0][0])
    assert max(_relative(p, q) for p, q in zip(runs[0], runs[2], strict=True)) <= 1e-6


def test_compile_is_a_typed_optimizer_argument():
    from pydantic import ValidationError

    for name in ("came", "came_8bit"):
        assert OPTIMIZERS[name].args.model_validate({}).compile is None
        assert OPTIMIZERS[name].args.model_validate({"compile": False}).compile is False
        with pytest.raises(ValidationError):
            OPTIMIZERS[name].args.model_validate({"compile": "fast"})
    combined = OPTIMIZERS["came_8bit+fused_adam"].args.model_validate({"came": {"compile": True}})
    assert combined.came.compile is True


def test_whole_block_runs_match_the_general_lookup():
    """Rows that are whole blocks take the division path; it picks the same values as the comparisons."""
    rows, cols, block = 6, 512, 128
    starts, _ = came_fused.block_runs(rows, cols, block, torch.device("cpu"))
    assert came_fused.aligned_runs(cols, block) and not came_fused.aligned_runs(80, block)
    values = torch.randn(rows, starts.shape[1] - 1)
    shape = torch.Size((1, rows, cols))
    torch.testing.assert_close(came_fused._by_run(values, block, shape), came_fused._by_run(values, starts, shape))
    m = torch.randn(shape)
    torch.testing.assert_close(came_fused._run_amax(m, block), came_fused._run_amax(m, starts))
