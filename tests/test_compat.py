"""autotrain/compat/: each private name of another library that the package still needs, checked on the
installed release. A rename or a change of meaning fails here, by name, rather than in a training run.

Each compat module says the releases it was checked on (`CHECKED_ON`: the floor in pyproject.toml and the
newest checked); a release outside them fails `test_the_installed_release_was_checked`, so that an upgrade
is looked at here first: run this file on it, then widen `CHECKED_ON`. `.ci/floors` runs it at the floors
and at the newest releases.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pytest
import torch
from packaging.version import Version
from test_dependencies import floors

from autotrain.compat import torch as compat_torch
from autotrain.compat import transformers as compat_transformers

ASSETS = Path(__file__).parent / "assets"
MODULES = {"torch": compat_torch, "transformers": compat_transformers}


def _series(version: str) -> tuple[int, int]:
    return Version(version).release[:2]


@pytest.mark.parametrize("package", list(MODULES))
def test_the_installed_release_was_checked(package):
    module = MODULES[package]
    oldest, newest = module.CHECKED_ON
    assert Version(oldest) == floors()[package], (
        f"pyproject's floor for {package} is {floors()[package]}; autotrain/compat/{package}.py was checked from "
        f"{oldest}: check it on the new floor and update CHECKED_ON"
    )
    installed = metadata.version(package)
    assert _series(oldest) <= _series(installed) <= _series(newest), (
        f"{package} {installed} is outside the releases autotrain/compat/{package}.py was checked on "
        f"({oldest} to {newest}): run tests/test_compat.py on it and widen CHECKED_ON"
    )


# --- torch ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_foreach_copy_copies_each_pair_casting_to_the_target(dtype):
    sources = [torch.randn(3, 4), torch.randn(5)]
    targets = [torch.zeros(3, 4, dtype=dtype), torch.zeros(5, dtype=dtype)]
    compat_torch.foreach_copy_(targets, sources)
    for target, source in zip(targets, sources, strict=True):
        assert target.dtype == dtype and torch.equal(target, source.to(dtype))


def test_foreach_add_adds_in_place():
    tensors = [torch.zeros(()), torch.full((2,), 3.0)]
    before = [t.data_ptr() for t in tensors]
    compat_torch.foreach_add_(tensors, 1)
    assert [t.tolist() for t in tensors] == [1.0, [4.0, 4.0]]
    assert [t.data_ptr() for t in tensors] == before


def test_foreach_ops_are_one_call_for_all_tensors():
    """What the module is for: one multi-tensor op for the list (one kernel on CUDA; the CPU runs it as a
    loop inside the op), not one op per tensor."""
    tensors = [torch.zeros(4) for _ in range(6)]
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        compat_torch.foreach_add_(tensors, 1)
        compat_torch.foreach_copy_(tensors, [torch.ones(4) for _ in range(6)])
    names = [event.name for event in profile.events()]
    assert names.count("aten::_foreach_add_") == 1 and names.count("aten::_foreach_copy_") == 1, names


def _twice(x):
    return x * 2


def _thrice(x):
    return x * 3


def _eager_compiled(fn):
    return torch.compile(fn, fullgraph=True, dynamic=False, backend="eager")  # (no C++ build)


def test_precompiled_is_compiled_ahead_of_time_and_skips_guards_from_the_checked_release(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    x = torch.arange(6.0).view(2, 3)
    compiled = _eager_compiled(_twice)
    function = compat_torch.precompiled(compiled, (x,), "twice")
    if torch.__version__ < compat_torch.AOT_COMPILE_FROM:
        assert function is compiled and not (tmp_path / "autotrain").exists()  # compiled at its first call
        return
    assert function is not compiled and callable(function.save_compiled_function)  # torch's AOT function
    assert torch.equal(function(x), x * 2)
    # No guards: a layout it was not compiled for runs the same graph (the caller keys graphs by layout), where
    # a guarded call would recompile or raise.
    assert torch.equal(function(x.double()), x.double() * 2)


def test_precompiled_loads_what_an_earlier_process_saved_and_compiles_over_what_it_cannot_load(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    x, saved = torch.arange(4.0), tmp_path / "autotrain" / "k.pt"
    compat_torch.precompiled(_eager_compiled(_twice), (x,), "k")
    if torch.__version__ < compat_torch.AOT_COMPILE_FROM:
        assert not saved.exists()  # torch.compile's function: nothing of autotrain's to save
        return
    assert saved.is_file()
    # Loaded by name, not compiled: another function under the same name gives the saved one's result.
    assert torch.equal(compat_torch.precompiled(_eager_compiled(_thrice), (x,), "k")(x), x * 2)
    saved.write_bytes(b"cut short")
    assert torch.equal(compat_torch.precompiled(_eager_compiled(_thrice), (x,), "k")(x), x * 3)
    assert saved.read_bytes() != b"cut short"  # saved over


def test_precompiled_says_so_where_it_cannot_save_and_gives_the_function(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    (tmp_path / "autotrain").write_text("a file where the folder goes")
    function = compat_torch.precompiled(_eager_compiled(_twice), (torch.ones(3),), "k")
    assert torch.equal(function(torch.ones(3)), torch.full((3,), 2.0))
    if torch.__version__ >= compat_torch.AOT_COMPILE_FROM:
        assert "could not cache a compiled graph" in capsys.readouterr().err


def test_precompiled_leaves_the_function_to_dynamo_when_inductor_caches_are_off():
    from torch._inductor import config

    compiled = _eager_compiled(_twice)
    with config.patch(force_disable_caches=True):  # ahead-of-time compiling refuses it
        assert compat_torch.precompiled(compiled, (torch.ones(2),), "k") is compiled


def test_a_dispatch_mode_sees_every_op_and_its_outputs():
    seen = []

    class Watch(compat_torch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            seen.append((str(func), tuple(out.shape) if isinstance(out, torch.Tensor) else None))
            return out

    with Watch():
        torch.ones(2, 3, device="meta").sum(0)
    assert ("aten.sum.dim_IntList", (3,)) in seen, seen


# --- transformers -----------------------------------------------------------------------------------------


def test_save_checkpoint_writes_what_the_loop_writes(tmp_path):
    """The checkpoint written outside the loop holds what `train(resume_from_checkpoint=...)` reads."""
    from datasets import Dataset
    from transformers import Trainer, TrainingArguments

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Linear(2, 1)

        def forward(self, x, labels):
            return {"loss": ((self.w(x).squeeze(-1) - labels) ** 2).mean()}

    rows = Dataset.from_dict({"x": [[1.0, 2.0]] * 4, "labels": [1.0] * 4})
    args = TrainingArguments(str(tmp_path), max_steps=1, report_to=[], use_cpu=True, save_strategy="no")
    trainer = Trainer(model=Tiny(), args=args, train_dataset=rows)
    trainer.train()
    compat_transformers.save_checkpoint(trainer)
    saved = {p.name for p in (tmp_path / "checkpoint-1").iterdir()}
    assert {"optimizer.pt", "scheduler.pt", "trainer_state.json"} <= saved, saved
    assert any(name.startswith("rng_state") for name in saved), saved


def test_no_split_modules_names_the_decoder_layers():
    from transformers import LlamaForCausalLM, PreTrainedModel, Qwen2ForCausalLM

    assert compat_transformers.no_split_modules(LlamaForCausalLM) == ["LlamaDecoderLayer"]
    assert compat_transformers.no_split_modules(Qwen2ForCausalLM) == ["Qwen2DecoderLayer"]
    assert compat_transformers.no_split_modules(PreTrainedModel) == []  # a class that names none


def test_the_mask_is_skipped_inside_the_block_only():
    import inspect

    from transformers import masking_utils

    real = masking_utils._ignore_bidirectional_mask_sdpa
    # sdpa_mask asks it (padding mask, key length, local attention size) whether the mask can be left out
    assert len(inspect.signature(real).parameters) == 3
    assert "_ignore_bidirectional_mask_sdpa(" in inspect.getsource(masking_utils.sdpa_mask)
    with compat_transformers.bidirectional_mask_skipped():
        assert masking_utils._ignore_bidirectional_mask_sdpa(None, 8, None) is True
    assert masking_utils._ignore_bidirectional_mask_sdpa is real
