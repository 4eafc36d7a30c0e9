"""Bundled optimizers: CAME against the authors' code, 8-bit state, FusedAdam against torch, resume."""

from __future__ import annotations

import copy
import io

import pytest
import torch
from came_pytorch import CAME as ReferenceCAME
from torch import nn

from autotrain.optimizers import CAME, CAME8Bit, CAME8BitFusedAdam, FusedAdam
from autotrain.optimizers.came_math import decode, encode

pytestmark = pytest.mark.usefixtures("one_thread")  # small tensors: see conftest

SMALL_8BIT = dict(block_size=256, min_8bit_size=1024)  # quantize small test matrices too

FACTORIES = {
    "came": lambda groups: CAME(groups, lr=1e-2, weight_decay=0.1),
    "came_compiled": lambda groups: CAME(groups, lr=1e-2, weight_decay=0.1, compile=True),
    "came_8bit": lambda groups: CAME8Bit(groups, lr=1e-2, weight_decay=0.1, **SMALL_8BIT),
    "came_8bit_compiled": lambda groups: CAME8Bit(groups, lr=1e-2, weight_decay=0.1, compile=True, **SMALL_8BIT),
    "fused_adam": lambda groups: FusedAdam(groups, lr=1e-2, weight_decay=0.1),
    "fused_adam_master": lambda groups: FusedAdam(groups, lr=1e-2, master_weights=True),
    "came_8bit+fused_adam": lambda groups: CAME8BitFusedAdam(
        groups, lr=1e-2, weight_decay=0.1, came=SMALL_8BIT, min_factored_size=1024
    ),
}


def _params(dtype: torch.dtype = torch.float32, seed: int = 0) -> list[nn.Parameter]:
    """A matrix that gets quantized, a small matrix, a 4-D kernel and a bias."""
    gen = torch.Generator().manual_seed(seed)
    shapes = [(64, 80), (8, 64), (4, 3, 3, 3), (64,)]
    return [nn.Parameter(torch.randn(s, generator=gen).to(dtype)) for s in shapes]


def _groups(params: list[nn.Parameter]) -> list[dict]:
    # The layout the transformers Trainer passes: decay and no-decay groups.
    return [{"params": params[:3], "weight_decay": 0.1}, {"params": params[3:], "weight_decay": 0.0}]


def _set_grads(params: list[torch.Tensor], step: int) -> None:
    gen = torch.Generator().manual_seed(1000 + step)
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen).to(p.dtype)


def _run(opt: torch.optim.Optimizer, params: list[torch.Tensor], steps: range) -> None:
    for step in steps:
        _set_grads(params, step)
        opt.step()


# --- CAME ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(64, 48), (100,), (3, 4, 16, 8)])
def test_came_matches_reference_implementation(shape):
    init = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    ours, ref = nn.Parameter(init.clone()), nn.Parameter(init.clone())
    opt = CAME([ours], lr=1e-2, weight_decay=0.1)
    ref_opt = ReferenceCAME([ref], lr=1e-2, weight_decay=0.1)
    for step in range(100):
        _set_grads([ours], step)
        ref.grad = ours.grad.clone()
        opt.step()
        ref_opt.step()
    rel_err = ((ours - ref).norm() / ref.norm()).item()
    assert rel_err <= 1e-5
    # state["RMS"]: the weights' RMS after the step; the reference records it before its update, so its
    # value is ours one step later: that of its weights now.
    assert torch.allclose(opt.state[ours]["RMS"], ref.detach().pow(2).mean().sqrt(), rtol=1e-5)
    assert not torch.allclose(ref_opt.state[ref]["RMS"], ref.detach().pow(2).mean().sqrt(), rtol=1e-5)


def test_came_8bit_without_quantization_equals_came():
    a, b = _params(), _params()
    came = CAME(_groups(a), lr=1e-2)
    came_8bit = CAME8Bit(_groups(b), lr=1e-2, min_8bit_size=10**9)
    _run(came, a, range(20))
    _run(came_8bit, b, range(20))
    for pa, pb in zip(a, b, strict=True):
        assert torch.equal(pa, pb)
    assert not any("exp_avg_codes" in s for s in came_8bit.state.values())


def _train_mlp(opt_cls: type, seed: int, steps: int = 300) -> float:
    gen = torch.Generator().manual_seed(seed)
    teacher = torch.randn(32, 8, generator=gen)
    x = torch.randn(2048, 32, generator=gen)
    y = torch.tanh(x @ teacher).sum(1, keepdim=True)
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(32, 512), nn.Tanh(), nn.Linear(512, 1))  # 16384-element weight
    opt = opt_cls(model.parameters(), lr=1e-3)
    warmup = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 30))
    for _ in range(steps):
        idx = torch.randint(0, len(x), (64,), generator=gen)
        loss = nn.functional.mse_loss(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        warmup.step()
        assert torch.isfinite(loss)
    assert all(torch.isfinite(p).all() for p in model.parameters())
    with torch.no_grad():
        return nn.functional.mse_loss(model(x), y).item()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_came_8bit_trains_as_well_as_came(seed):
    came_loss = _train_mlp(CAME, seed)
    came_8bit_loss = _train_mlp(CAME8Bit, seed)
    assert abs(came_8bit_loss - came_loss) <= 0.02 * came_loss


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("cls", [CAME, CAME8Bit])
def test_came_half_precision_params(cls, dtype):
    half = _params(dtype)
    fp32 = [nn.Parameter(p.detach().float()) for p in half]
    opt = cls(half, lr=1e-2, **(SMALL_8BIT if cls is CAME8Bit else {}))
    fp32_opt = cls(fp32, lr=1e-2, **(SMALL_8BIT if cls is CAME8Bit else {}))
    for step in range(5):
        _set_grads(half, step)
        for p, q in zip(fp32, half, strict=True):
            p.grad = q.grad.float()
        opt.step()
        fp32_opt.step()
    for p, q in zip(half, fp32, strict=True):
        assert p.dtype == dtype and torch.isfinite(p).all()
        torch.testing.assert_close(p.float(), q.detach(), rtol=1e-2, atol=1e-2)
    state = opt.state[half[0]]
    assert all(t.dtype in (torch.float32, torch.int8) for t in state.values() if isinstance(t, torch.Tensor))


@pytest.mark.parametrize("name", ["fused_adam", "came", "came_8bit"])
def test_bf16_weights_learn_updates_below_half_their_ulp(name):
    """lr 1e-5 on weights near 1 (bf16's ulp there is 2**-7): each update is far below half an ulp. The bf16
    params' fp32 master weights follow the fp32 run; without them (master_weights=False) the weights do not
    move at all. The state stays fp32 (or 8-bit)."""
    make = {
        "fused_adam": lambda ps, **kw: FusedAdam(ps, lr=1e-5, **kw),
        "came": lambda ps, **kw: CAME(ps, lr=1e-5, compile=False, **kw),
        "came_8bit": lambda ps, **kw: CAME8Bit(ps, lr=1e-5, compile=False, **SMALL_8BIT, **kw),
    }[name]
    gen = torch.Generator().manual_seed(0)
    start = [
        (1.0 + 0.1 * torch.randn(s, generator=gen)).bfloat16().float() for s in ((64, 80), (64, 80), (20, 257), (64,))
    ]
    fp32, master, plain = (
        [nn.Parameter(t.to(dtype, copy=True)) for t in start] for dtype in (torch.float32,) + (torch.bfloat16,) * 2
    )
    runs = [(fp32, make(fp32)), (master, make(master)), (plain, make(plain, master_weights=False))]
    for _ in range(20):
        grads = [torch.randn(p.shape, generator=gen).bfloat16().float() for p in fp32]  # as bf16 would have them
        for params, opt in runs:
            for p, g in zip(params, grads, strict=True):
                p.grad = g.to(p.dtype)
            opt.step()
    opt = runs[1][1]
    for p, q, r, t in zip(fp32, master, plain, start, strict=True):
        kept = opt.state[q]["master_param"]
        torch.testing.assert_close(kept, p.detach(), rtol=0, atol=1e-7)  # the fp32 run, to rounding
        assert torch.equal(q, kept.bfloat16())
        assert not torch.equal(p, t) and torch.equal(r, t.bfloat16())  # plain bf16 stalled
    tensors = [v for state in opt.state.values() for v in state.values() if isinstance(v, torch.Tensor)]
    assert {t.dtype for t in tensors} <= {torch.float32, torch.int8, torch.int64}


# --- 8-bit quantization --------------------------------------------------------------------------


def _roundtrip(blocks: torch.Tensor) -> torch.Tensor:
    absmax = blocks.abs().amax(-1).clamp(min=1e-30)
    return decode(encode(blocks, absmax), absmax)


def test_zero_and_constant_blocks_roundtrip():
    blocks = torch.stack([torch.zeros(256), torch.full((256,), 0.37), torch.full((256,), -2.5e-3), torch.randn(256)])
    blocks[3, ::7] = 0.0
    decoded = _roundtrip(blocks)
    assert torch.isfinite(decoded).all()
    torch.testing.assert_close(decoded[:3], blocks[:3], rtol=1e-6, atol=0)
    assert (decoded[3][blocks[3] == 0] == 0).all()


def test_small_values_survive_better_than_linear_absmax():
    gen = torch.Generator().manual_seed(0)
    blocks = torch.randn(64, 2048, generator=gen) * torch.rand(64, 2048, generator=gen) ** 4
    blocks[:, 0] = 1.0  # one outlier per block, as in real moments
    small = (blocks.abs() > 1e-3) & (blocks.abs() < 1e-2)
    ours = ((_roundtrip(blocks) - blocks).abs() / blocks.abs())[small].median()
    scale = blocks.abs().amax(1, keepdim=True) / 127
    linear = (((blocks / scale).round() * scale - blocks).abs() / blocks.abs())[small].median()
    assert ours < linear / 3


def test_8bit_state_layout():
    big, bias, small = (
        nn.Parameter(torch.randn(100, 200)),
        nn.Parameter(torch.randn(20000)),
        nn.Parameter(torch.randn(10, 10)),
    )
    opt = CAME8Bit([big, bias, small], lr=1e-3, block_size=2048, min_8bit_size=16384)
    _run(opt, [big, bias, small], range(2))
    state = opt.state[big]
    assert state["exp_avg_codes"].dtype == torch.int8
    assert state["exp_avg_codes"].shape == (10, 2000)  # blocks of 10 whole 200-wide rows
    assert state["exp_avg_absmax"].dtype == torch.float32 and state["exp_avg_absmax"].shape == (10,)
    assert "exp_avg" not in state
    for never_quantized in (bias, small):  # 1-D (even large) and below min_8bit_size
        assert "exp_avg_codes" not in opt.state[never_quantized]
        assert opt.state[never_quantized]["exp_avg"].dtype == torch.float32
    conv = nn.Parameter(torch.randn(8, 16, 16, 16))  # factored over the last two dims: quantized too
    conv_opt = CAME8Bit([conv], lr=1e-3)
    _run(conv_opt, [conv], range(2))
    assert conv_opt.state[conv]["exp_avg_codes"].shape == (16, 2048)
    assert torch.isfinite(conv).all()
    nbytes = sum(t.nbytes for t in state.values() if isinstance(t, torch.Tensor))
    assert nbytes / big.numel() < 1.2  # padding and row/col stats weigh more on a small matrix


def test_blocks_follow_the_rows_where_they_can():
    from autotrain.optimizers.came_8bit import row_aligned_block

    assert row_aligned_block(4096, 2048) == 2048  # two whole blocks per row
    assert row_aligned_block(5632, 2048) == 1408  # a Llama MLP width: four whole blocks per row
    assert row_aligned_block(576, 2048) == 1728  # SmolLM2's width: three whole rows per block
    assert row_aligned_block(2053, 2048) == 2048  # a prime width: no such block, blocks cut rows
    assert row_aligned_block(7, 1) == 1
    for cols in range(1, 5000, 37):
        block = row_aligned_block(cols, 512)
        assert 256 <= block <= 512 or cols > 512
        assert block % cols == 0 or cols % block == 0 or block == 512


def test_8bit_rejects_sparse_gradients():
    emb = nn.Embedding(10, 4, sparse=True)
    emb(torch.tensor([1, 2])).sum().backward()
    with pytest.raises(RuntimeError, match="sparse"):
        CAME8Bit(emb.parameters(), lr=1e-3).step()


# --- save / load ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", list(FACTORIES))
def test_resume_matches_uninterrupted_run(name, dtype):
    params = _params(dtype)
    opt = FACTORIES[name](_groups(params))
    _run(opt, params, range(3))
    buffer = io.BytesIO()
    torch.save({"model": [p.detach().clone() for p in params], "optim": opt.state_dict()}, buffer)
    _run(opt, params, range(3, 6))

    buffer.seek(0)
    saved = torch.load(buffer)
    resumed = [nn.Parameter(t) for t in saved["model"]]
    resumed_opt = FACTORIES[name](_groups(resumed))
    resumed_opt.load_state_dict(saved["optim"])
    for key, value in resumed_opt.state[resumed[0]].items():
        if isinstance(value, torch.Tensor):
            assert value.dtype == opt.state[params[0]][key].dtype, key
    if "8bit" in name:
        state = resumed_opt.state[resumed[0]]
        assert state["exp_avg_codes"].dtype == torch.int8
        assert state["exp_avg_absmax"].dtype == torch.float32
    _run(resumed_opt, resumed, range(3, 6))
    for p, q in zip(params, resumed, strict=True):
        assert torch.equal(p, q)


# --- FusedAdam -----------------------------------------------------------------------------------


def _reference_adam(params, steps, lr, betas, eps, weight_decay, adam_w_mode, bias_correction):
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    for t in range(1, steps + 1):
        _set_grads(params, t - 1)
        for p, m_, v_ in zip(params, m, v, strict=True):
            g = p.grad if adam_w_mode else p.grad + weight_decay * p
            m_.mul_(betas[0]).add_(g, alpha=1 - betas[0])
            v_.mul_(betas[1]).addcmul_(g, g, value=1 - betas[1])
            bc1, bc2 = (1 - betas[0] ** t, 1 - betas[1] ** t) if bias_correction else (1.0, 1.0)
            with torch.no_grad():
                if adam_w_mode:
                    p.mul_(1 - lr * weight_decay)
                p.sub_(lr / bc1 * m_ / ((v_ / bc2).sqrt() + eps))


@pytest.mark.parametrize("bias_correction", [True, False])
@pytest.mark.parametrize("adam_w_mode", [True, False])
def test_fused_adam_matches_reference(adam_w_mode, bias_correction):
    kwargs = dict(lr=1e-2, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1)
    ours, ref = _params(), _params()
    opt = FusedAdam(ours, adam_w_mode=adam_w_mode, bias_correction=bias_correction, **kwargs)
    _run(opt, ours, range(20))
    if bias_correction:  # torch's own Adam/AdamW as the oracle
        torch_cls = torch.optim.AdamW if adam_w_mode else torch.optim.Adam
        _run(torch_cls(ref, foreach=False, **kwargs), ref, range(20))
    else:
        _reference_adam(ref, 20, **kwargs, adam_w_mode=adam_w_mode, bias_correction=False)
    for p, q in zip(ours, ref, strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-6)


@pytest.mark.parametrize("adam_w_mode", [True, False])
def test_fused_adam_runs_torchs_fused_kernel_once_per_bucket(adam_w_mode):
    """Through torch's public functional Adam(W), the kernel `AdamW(fused=True)` runs: one call for the
    fp32 params (master weights included), one for the bf16 ones kept without."""
    params = _params() + _params(torch.bfloat16)
    opt = FusedAdam(
        [{"params": params[:6]}, {"params": params[6:]}], adam_w_mode=adam_w_mode, master_weights=False, lr=1e-2
    )
    _set_grads(params, 0)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        opt.step()
    names = [event.name for event in profile.events()]
    kernel = "aten::_fused_adamw_" if adam_w_mode else "aten::_fused_adam_"
    assert names.count(kernel) == 3, names  # group 1: fp32 and bf16 buckets; group 2: bf16


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_fused_adam_half_precision_matches_torch_fused(dtype):
    ours, ref = _params(dtype), _params(dtype)
    # Apex's default: moments in the params' dtype, as torch's own fused AdamW keeps them.
    _run(FusedAdam(ours, lr=1e-2, weight_decay=0.1, master_weights=False), ours, range(10))
    _run(torch.optim.AdamW(ref, lr=1e-2, weight_decay=0.1, fused=True), ref, range(10))
    for p, q, init in zip(ours, ref, _params(dtype), strict=True):
        assert p.dtype == dtype and torch.equal(p, q) and not torch.equal(p, init)


def test_fused_adam_master_weights_track_fp32():
    plain, master = _params(torch.bfloat16), _params(torch.bfloat16)
    fp32 = [nn.Parameter(p.detach().float()) for p in plain]  # same start, full precision
    kwargs = dict(lr=1e-4, weight_decay=0.0)
    fp32_opt = FusedAdam(fp32, **kwargs)
    for step in range(20):  # fp32 trajectory on the same bf16 gradients
        _set_grads(plain, step)
        for p, q in zip(fp32, plain, strict=True):
            p.grad = q.grad.float()
        fp32_opt.step()
    _run(FusedAdam(plain, master_weights=False, **kwargs), plain, range(20))
    opt = FusedAdam(master, **kwargs)  # master weights: the default
    _run(opt, master, range(20))

    state = opt.state[master[0]]
    assert state["master_param"].dtype == torch.float32 and state["exp_avg"].dtype == torch.float32
    torch.testing.assert_close(state["master_param"], fp32[0].detach(), rtol=0, atol=1e-6)
    assert torch.equal(master[0], state["master_param"].bfloat16())
    # Against the fp32 trajectory rounded to bf16: small updates vanish in plain bf16 params.
    err_plain = sum((p - q.bfloat16()).float().norm() for p, q in zip(plain, fp32, strict=True))
    err_master = sum((p - q.bfloat16()).float().norm() for p, q in zip(master, fp32, strict=True))
    assert err_master < err_plain / 10


def test_fused_adam_rejects_amsgrad_and_sparse():
    with pytest.raises(ValueError, match="amsgrad"):
        FusedAdam(_params(), amsgrad=True)
    emb = nn.Embedding(10, 4, sparse=True)
    emb(torch.tensor([1, 2])).sum().backward()
    with pytest.raises(RuntimeError, match="sparse"):
        FusedAdam(emb.parameters()).step()


def test_copies_keep_constructor_flags():
    params = _params()
    fused = FusedAdam(params, adam_w_mode=False, set_grad_none=False)
    came_8bit = CAME8Bit(params, lr=1e-3, **SMALL_8BIT)
    for opt, keys in (
        (fused, ("adam_w_mode", "set_grad_none")),
        (came_8bit, ("block_size", "min_8bit_size")),
    ):
        _run(opt, params, range(1))
        clone = copy.deepcopy(opt)
        assert all(getattr(clone, key) == getattr(opt, key) for key in keys)
        clone.step()


@pytest.mark.parametrize("set_grad_none", [True, False])
def test_fused_adam_set_grad_none(set_grad_none):
    params = _params()
    opt = FusedAdam(params, set_grad_none=set_grad_none)
    _set_grads(params, 0)
    opt.zero_grad()
    if set_grad_none:
        assert all(p.grad is None for p in params)
    else:
        assert all(p.grad is not None and not p.grad.any() for p in params)


# --- common behaviour ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(FACTORIES))
def test_param_groups_with_different_lr(name):
    params = _params()
    initial = [p.detach().clone() for p in params]
    opt = FACTORIES[name]([{"params": params[:2], "lr": 0.0}, {"params": params[2:], "lr": 1e-2}])
    _run(opt, params, range(3))
    assert all(torch.equal(p, q) for p, q in zip(params[:2], initial[:2], strict=True))
    assert not any(torch.equal(p, q) for p, q in zip(params[2:], initial[2:], strict=True))


@pytest.mark.parametrize("name", list(FACTORIES))
def test_step_with_closure_returns_loss(name):
    params = _params()
    opt = FACTORIES[name](params)

    def closure():
        opt.zero_grad()
        loss = sum((p.float() ** 2).sum() for p in params)
        loss.backward()
        return loss

    loss = opt.step(closure)
    assert torch.isfinite(loss) and loss.item() > 0
    assert all(p.grad is not None for p in params)


@pytest.mark.parametrize("cls", [CAME, CAME8Bit, FusedAdam, CAME8BitFusedAdam])
@pytest.mark.parametrize("bad", [dict(lr=-1.0), dict(betas="out of range")])
def test_bad_hyper_parameters(cls, bad):
    if "betas" in bad:
        if cls is CAME8BitFusedAdam:
            bad = dict(adam=dict(betas=(0.9, 1.5)))
        else:
            bad = dict(betas=(0.9, 1.5) if cls is FusedAdam else (0.9, 0.999, -0.1))
    kwargs = {"lr": 1e-3, **bad}
    with pytest.raises(ValueError, match="Invalid"):
        cls(_params(), **kwargs)


# --- CAME8Bit + FusedAdam ------------------------------------------------------------------------


def test_combined_routes_params_and_acts_as_one_optimizer():
    params = _params()
    opt = FACTORIES["came_8bit+fused_adam"](_groups(params))
    assert isinstance(opt, torch.optim.Optimizer)
    assert [p for g in opt.came.param_groups for p in g["params"]] == [params[0]]
    assert [p for g in opt.adam.param_groups for p in g["params"]] == params[1:]
    assert opt.param_groups == opt.came.param_groups + opt.adam.param_groups

    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 0.5 ** (step + 1))
    _run(opt, params, range(1))
    scheduler.step()
    assert {g["lr"] for o in (opt.came, opt.adam) for g in o.param_groups} == {1e-2 * 0.25}
    assert set(opt.state) == set(params) and "exp_avg_codes" in opt.state[params[0]]

    state = opt.state_dict()
    assert sorted(state["state"]) == list(range(len(params)))
    late = nn.Parameter(torch.zeros(3))
    opt.add_param_group({"params": [late]})
    assert opt.param_groups[-1]["params"] == [late] and opt.state[late] == {}
    with pytest.raises(KeyError):
        opt.state[nn.Parameter(torch.zeros(3))]
    opt.zero_grad()
    assert all(p.grad is None for p in params)
