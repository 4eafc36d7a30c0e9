"""FusedAdam's Apex promises: `capturable=True` is refused (it would freeze lr in a CUDA graph), and a state
dict in Apex's layout (step per param group, fp32 moments) loads and steps."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from torch import nn

from autotrain.config.load import ConfigError, load_config
from autotrain.optimizers import FusedAdam

REPO_ROOT = Path(__file__).resolve().parents[1]


def _params(dtype: torch.dtype = torch.float32) -> list[nn.Parameter]:
    gen = torch.Generator().manual_seed(0)
    return [nn.Parameter(torch.randn(s, generator=gen).to(dtype)) for s in ((16, 8), (8,))]


def _run(opt: torch.optim.Optimizer, params: list[torch.Tensor], steps: range) -> None:
    for step in steps:
        gen = torch.Generator().manual_seed(100 + step)
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen).to(p.dtype)
        opt.step()


def test_capturable_is_refused_with_the_reason():
    with pytest.raises(ValueError, match=r"capturable=True.*captured CUDA graph would keep the first"):
        FusedAdam(_params(), capturable=True)
    FusedAdam(_params(), capturable=False)  # Apex's default stays accepted


def test_capturable_is_a_config_error():
    overrides = ["training_args.optimizer=fused_adam", "training_args.optimizer_args.capturable=true"]
    with pytest.raises(ConfigError) as caught:
        load_config(REPO_ROOT / "configs/llm/sft.yml", overrides, environ={})
    [issue] = caught.value.issues
    assert "capturable=true is not supported by FusedAdam" in issue.format()


def _apex_layout(state_dict: dict, step: int) -> dict:
    """What Apex's FusedAdam saves: `step` once per group (an int), fp32 moments, nothing else per param."""
    apex = copy.deepcopy(state_dict)
    for group in apex["param_groups"]:
        group["step"] = step
    apex["state"] = {
        i: {"exp_avg": s["exp_avg"].float(), "exp_avg_sq": s["exp_avg_sq"].float()} for i, s in apex["state"].items()
    }
    return apex


@pytest.mark.parametrize("bias_correction", [True, False])
def test_apex_layout_state_dict_loads_and_steps(bias_correction):
    params = _params()
    opt = FusedAdam(params, lr=1e-2, weight_decay=0.1, bias_correction=bias_correction)
    _run(opt, params, range(3))
    apex = _apex_layout(opt.state_dict(), step=3)
    saved = [p.detach().clone() for p in params]
    _run(opt, params, range(3, 6))

    resumed = [nn.Parameter(t) for t in saved]
    resumed_opt = FusedAdam(resumed, lr=1e-2, weight_decay=0.1, bias_correction=bias_correction)
    resumed_opt.load_state_dict(apex)
    assert "step" not in resumed_opt.param_groups[0]
    assert all(resumed_opt.state[p]["step"].item() == 3.0 for p in resumed)
    _run(resumed_opt, resumed, range(3, 6))
    for p, q in zip(params, resumed, strict=True):
        assert torch.equal(p, q)  # the bias corrections picked up at step 4, as without the detour
    assert all(resumed_opt.state[p]["step"].item() == 6.0 for p in resumed)


@pytest.mark.parametrize("master_weights", [False, True])
def test_apex_layout_with_fp32_moments_steps_bf16_params(master_weights):
    """Apex keeps moments in fp32; without master weights this optimizer keeps them in the param dtype."""
    params = _params(torch.bfloat16)
    source = FusedAdam(_params(), lr=1e-2)
    _run(source, source.param_groups[0]["params"], range(2))
    apex = _apex_layout(source.state_dict(), step=2)
    apex["param_groups"][0]["step"] = torch.tensor(2.0)  # newer Apex keeps a tensor
    opt = FusedAdam(params, lr=1e-2, master_weights=master_weights)
    opt.load_state_dict(apex)
    before = [p.detach().clone() for p in params]
    _run(opt, params, range(2, 4))
    moments = torch.float32 if master_weights else torch.bfloat16
    for p, b in zip(params, before, strict=True):
        state = opt.state[p]
        assert state["exp_avg"].dtype == moments and state["exp_avg_sq"].dtype == moments
        assert p.dtype == torch.bfloat16 and torch.isfinite(p).all() and not torch.equal(p, b)
        assert ("master_param" in state) == master_weights
