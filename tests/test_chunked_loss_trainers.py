"""`training_args.cross_entropy` from the config to the trainers: the plan records it, the rules and the preflight
refuse what cannot run, AutoTrain Advanced's `liger_kernel` maps onto it, and the SFT, CLM and ORPO trainers
compute the same loss, gradients and metrics with it as with the plain path."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import pytest
import torch

from autotrain.config.load import load_data
from autotrain.config.yaml_source import Locator
from autotrain.errors import ConfigError
from autotrain.training.plan import resolve_plan
from autotrain.training.precision import Precision

pytestmark = pytest.mark.usefixtures("one_thread")
ASSETS = Path(__file__).parent / "assets"
TINY = str(ASSETS / "tiny-llama")
DATA = {
    "sft": {"path": str(ASSETS / "data" / "chat.jsonl"), "chat_template": "chatml"},
    "clm": {"path": str(ASSETS / "data" / "text.jsonl")},
    "orpo": {
        "path": str(ASSETS / "data" / "preferences.jsonl"),
        "column_mapping": {"prompt": "question", "chosen": "good", "rejected": "bad"},
    },
}


def _raw(tmp_path: Path, trainer: str = "sft", **training) -> dict:
    return {
        "task": "llm",
        "trainer": trainer,
        "base_model": TINY,
        "project_name": str(tmp_path / "run"),
        "data": DATA.get(trainer, DATA["orpo"]),
        "training_args": {"max_steps": 2, "batch_size": 4, "max_length": 32, "mixed_precision": "no", **training},
    }


def _config(tmp_path: Path, trainer: str = "sft", **training):
    return load_data(_raw(tmp_path, trainer, **training), Locator("config.yml"), environ={}).config


def _rel(a, b) -> float:
    a, b = torch.as_tensor(a).detach().double(), torch.as_tensor(b).detach().double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


# --- config, plan, preflight ----------------------------------------------------------------------------------


def test_the_field_defaults_to_chunked_and_the_plan_records_what_runs(tmp_path):
    assert _config(tmp_path).training_args.cross_entropy == "chunked"
    for trainer in ("sft", "clm", "orpo"):
        assert resolve_plan(_config(tmp_path, trainer), device="cpu").record()["cross_entropy"] == "chunked"
    full = resolve_plan(_config(tmp_path, cross_entropy="full"), device="cpu")
    assert full.cross_entropy == "full" and not full.notes
    assert resolve_plan(_config(tmp_path, "dpo"), device="cpu").cross_entropy == ""  # TRL's own fused head


def test_sharded_strategies_compute_the_full_logits_with_a_note(tmp_path):
    raw = _raw(tmp_path)
    raw["distributed"] = {"num_processes": 2, "strategy": "fsdp"}
    plan = resolve_plan(load_data(raw, Locator("config.yml"), environ={}).config, device="cpu")
    assert plan.cross_entropy == "full"
    assert any("distributed.strategy: fsdp shards" in note for note in plan.notes)


@pytest.mark.parametrize(
    "trainer, value, message",
    [
        ("dpo", "full", "`training_args.cross_entropy` applies to sft/orpo/clm, not `trainer: dpo`"),
        ("orpo", "liger", "`cross_entropy: liger` computes the loss of sft/clm; `trainer: orpo` takes chunked or full"),
        ("sft", "cut", "training_args.cross_entropy"),
    ],
)
def test_what_a_trainer_cannot_take_is_refused(tmp_path, trainer, value, message):
    with pytest.raises(ConfigError) as raised:
        _config(tmp_path, trainer, cross_entropy=value)
    assert message in str(raised.value)


@pytest.fixture
def hidden_kernels(monkeypatch):
    """liger-kernel and cut-cross-entropy not installed, whatever this machine has."""
    find = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name in ("liger_kernel", "cut_cross_entropy") else find(name, *a),
    )


@pytest.mark.slow
@pytest.mark.no_cuda
def test_a_kernel_loss_without_its_package_or_cuda_is_one_line_each_and_exit_2(tmp_path, cli, hidden_kernels):
    path = tmp_path / "run.yml"
    path.write_text(__import__("yaml").safe_dump(_raw(tmp_path, cross_entropy="liger")))
    result = cli("llm", "--config", path, "--dry-run")
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if "cross_entropy: liger" in line]
    assert any("needs a CUDA GPU; none is visible" in line for line in lines)
    assert any("needs the liger-kernel package: pip install liger-kernel" in line for line in lines)
    assert "Traceback" not in result.output and "loss: cross_entropy liger" in result.stdout


def test_a_kernel_loss_needs_cuda_and_its_package(tmp_path, hidden_kernels, monkeypatch):
    from autotrain.run import preflight

    cfg = _config(tmp_path, cross_entropy="cut_cross_entropy")
    on_cpu = resolve_plan(cfg, device="cpu")
    assert preflight._loss_problems(on_cpu, "no GPU here") == [
        "training_args.cross_entropy: cut_cross_entropy runs CUDA kernels and needs a CUDA GPU; none is visible "
        "(no GPU here; or set cross_entropy: chunked)",
        "training_args.cross_entropy: cut_cross_entropy needs the cut-cross-entropy package: pip install "
        "cut-cross-entropy (or set cross_entropy: chunked)",
    ]
    plan = dataclasses.replace(on_cpu, precision=Precision("bf16", "cuda"))
    assert preflight._loss_problems(plan, "") == [
        "training_args.cross_entropy: cut_cross_entropy needs the cut-cross-entropy package: pip install "
        "cut-cross-entropy (or set cross_entropy: chunked)"
    ]
    monkeypatch.setattr(preflight, "_missing", lambda module: False)
    assert preflight._loss_problems(plan, "") == []


@pytest.mark.parametrize("gpu, expected", [(True, "liger"), (False, "chunked")])
def test_advanced_liger_kernel_maps_onto_cross_entropy(monkeypatch, gpu, expected):
    from autotrain.config import advanced

    monkeypatch.setattr(advanced, "nvidia_gpu_visible", lambda: gpu)
    data = {"task": "llm-sft", "base_model": "m", "project_name": "p", "params": {"liger_kernel": True}}
    native, _, problems, notices = advanced.translate(data)
    assert not problems and native["training_args"]["cross_entropy"] == expected
    [said] = [text for path, text in notices if path == ("params", "liger_kernel")]
    assert f"cross_entropy: {expected}" in said and ("none is visible" in said) is not gpu
    dpo = advanced.translate({**data, "task": "llm-dpo"})
    assert "cross_entropy" not in dpo[0].get("training_args", {})
    assert (("params", "liger_kernel"), "ignored: Liger kernels are not used") in dpo[3]


def test_orpo_without_trls_fused_head_computes_the_full_logits_and_says_why(tmp_path, monkeypatch, capsys):
    """A TRL older than the fused LM head (before 1.16): ORPO's chunked loss becomes the full logits, in the plan
    and the trainer, with one note naming the release that has it."""
    from autotrain.trainers.llm import orpo

    monkeypatch.setattr(orpo, "fused_head_available", lambda: False)
    cfg = _config(tmp_path, "orpo")
    plan = resolve_plan(cfg, device="cpu")
    assert plan.cross_entropy == "chunked"
    built, plan = orpo.build_trainer(cfg, plan, callbacks=[])
    assert plan.cross_entropy == built.cross_entropy == "full"
    note = capsys.readouterr().err
    assert "no fused LM head" in note and "TRL 1.16+" in note and "ORPO computes the full logits" in note


# --- the trainers: the same loss, gradients and metrics as the plain path ---------------------------------------


def _built(tmp_path: Path, trainer: str, **arguments):
    """A builder's trainer on the tiny model, with `arguments` added to the planned TrainingArguments."""
    from importlib import import_module

    cfg = _config(tmp_path, trainer)
    plan = resolve_plan(cfg, device="cpu")
    plan = dataclasses.replace(plan, training_args={**plan.training_args, **arguments})
    built, plan = import_module(f"autotrain.trainers.llm.{trainer}").build_trainer(cfg, plan, callbacks=[])
    assert plan.cross_entropy == built.cross_entropy == "chunked"
    return built, next(iter(built.get_train_dataloader()))


def _loss_and_grads(trainer, batch, method, **kwargs):
    trainer.cross_entropy = method
    model = trainer.model.train()
    model.zero_grad(set_to_none=True)
    loss = trainer.compute_loss(model, dict(batch), **kwargs)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _same(trainer, batch, **kwargs) -> None:
    full, full_grads = _loss_and_grads(trainer, batch, "full", **kwargs)
    chunked, chunked_grads = _loss_and_grads(trainer, batch, "chunked", **kwargs)
    assert _rel(chunked, full) <= 1e-6
    assert chunked_grads.keys() == full_grads.keys() and chunked_grads
    for name, grad in chunked_grads.items():
        assert _rel(grad, full_grads[name]) <= 1e-5, name


def test_sft_with_label_smoothing_and_accumulation_normalisation(tmp_path):
    """Row-packed batches (the default), answers only, `label_smoothing_factor` and the count of labelled tokens
    over the accumulated batches that the Trainer hands over (`num_items_in_batch`); and the logged statistics."""
    trainer, batch = _built(tmp_path, "sft", label_smoothing_factor=0.1)
    assert trainer.label_smoother is not None and "position_ids" in batch and "attention_mask" not in batch
    _same(trainer, batch, num_items_in_batch=torch.tensor(3 * int((batch["labels"][:, 1:] != -100).sum())))
    logged = {}
    for method in ("full", "chunked"):
        trainer.token_counts.stats[True] = [0, 0.0, 0]
        _loss_and_grads(trainer, batch, method)
        logged[method] = trainer.token_counts.logs(True, trainer.accelerator)
    assert {"entropy", "mean_token_accuracy", "num_tokens", "trained_tokens"} <= logged["chunked"].keys()
    assert _rel(logged["chunked"]["entropy"], logged["full"]["entropy"]) <= 1e-5
    assert logged["chunked"]["mean_token_accuracy"] == logged["full"]["mean_token_accuracy"]


def test_clm_trains_and_evaluates_without_the_logits(tmp_path):
    trainer, batch = _built(tmp_path, "clm")
    _same(trainer, batch, num_items_in_batch=torch.tensor(int((batch["labels"][:, 1:] != -100).sum())))
    trainer.model.eval()
    losses = {}
    for method in ("full", "chunked"):
        trainer.cross_entropy = method
        losses[method] = trainer.prediction_step(trainer.model, dict(batch), prediction_loss_only=True)
    assert losses["chunked"][1:] == (None, None)
    assert _rel(losses["chunked"][0], losses["full"][0]) <= 1e-6


def _no_fused_head() -> bool:
    from autotrain.trainers.llm.orpo import fused_head_available

    return not fused_head_available()


@pytest.mark.skipif(_no_fused_head(), reason="this TRL has no fused LM head (trl.trainer.add_fused_lm_head, 1.16+)")
def test_orpo_loss_and_metrics_from_the_fused_head_equal_the_logits(tmp_path):
    trainer, batch = _built(tmp_path, "orpo")
    model = trainer.model.train()
    results = {}
    for method in ("full", "chunked"):
        trainer.cross_entropy = method
        model.zero_grad(set_to_none=True)
        loss, metrics = trainer.get_batch_loss_metrics(model, batch)
        loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results[method] = loss.detach(), metrics, grads
    (full, full_metrics, full_grads), (chunked, chunked_metrics, chunked_grads) = results["full"], results["chunked"]
    assert _rel(chunked, full) <= 1e-5
    assert chunked_metrics.keys() == full_metrics.keys()
    for key, value in chunked_metrics.items():
        assert value == pytest.approx(full_metrics[key], rel=1e-4, abs=1e-6), key
    assert all(_rel(grad, full_grads[name]) <= 1e-4 for name, grad in chunked_grads.items())
