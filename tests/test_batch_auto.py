"""`training_args.batch_size: auto` and `memory_budget`: typed and checked config fields, the largest batch the
estimate fits with the samples per step kept, said by the dry run and recorded by the run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from autotrain.training.batch_size import MARGIN, candidates, choose_batch

ROOT = Path(__file__).resolve().parent
TINY = ROOT / "assets" / "tiny-llama"


def write(tmp_path: Path, **training) -> Path:
    data = tmp_path / "data.jsonl"
    text = " ".join(["the quick brown fox jumps over the lazy dog"] * 80)
    data.write_text("".join(json.dumps({"text": text}) + "\n" for _ in range(32)), encoding="utf-8")
    config = {
        "task": "llm",
        "trainer": "sft",
        "base_model": str(TINY),
        "project_name": str(tmp_path / "run"),
        "data": {"path": str(data), "chat_template": "none"},
        "training_args": {"max_length": 256, "mixed_precision": "no", "padding_free": False, **training},
    }
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


# --- the choice -------------------------------------------------------------------------------------------


def test_the_candidates_divide_the_target_largest_first_and_respect_the_smallest_batch():
    assert candidates(12) == [12, 6, 4, 3, 2, 1]
    assert candidates(8, smallest=2) == [8, 4, 2]
    assert candidates(7) == [7, 1]
    assert candidates(3, smallest=4) == [3]  # the target itself at least


def test_the_largest_batch_within_the_budget_less_the_margin_is_chosen():
    def need(batch, accumulation):  # 1 GB, plus 100 MB a sample, plus 10 MB when gradients are kept
        return 10**9 + batch * 10**8 + (10**7 if accumulation > 1 else 0)

    budget = 2 * 10**9
    choice = choose_batch(16, 1, need, budget, "cpu", "memory_budget")
    allowed = budget * (1 - MARGIN["cpu"])
    assert (choice.batch_size, choice.gradient_accumulation) == (8, 2)
    assert need(8, 2) <= allowed < need(16, 1)
    why = choice.why
    assert why["estimate"] == need(8, 2) and why["fits"] and why["allowed"] == int(allowed)
    assert why["next_larger"] == {"batch_size": 16, "estimate": need(16, 1)}
    assert why["budget_from"] == "memory_budget" and why["target_batch_size"] == 16
    biggest = choose_batch(16, 1, need, 10**11, "cuda", "free GPU memory")
    assert (biggest.batch_size, biggest.gradient_accumulation, biggest.why["next_larger"]) == (16, 1, None)
    none_fits = choose_batch(16, 2, need, 10**9, "cpu", "available RAM")
    assert (none_fits.batch_size, none_fits.gradient_accumulation) == (2, 8) and not none_fits.why["fits"]


# --- the config -------------------------------------------------------------------------------------------


def test_batch_size_auto_and_memory_budget_are_typed(tmp_path):
    from autotrain.config.load import load_config

    cfg = load_config(write(tmp_path, batch_size="auto", target_batch_size=12, memory_budget="1.5GiB")).config
    args = cfg.training_args
    assert args.batch_size == "auto" and args.samples_per_step == 12 and args.memory_budget == int(1.5 * 2**30)
    assert load_config(write(tmp_path, memory_budget="12GB")).config.training_args.memory_budget == 12 * 10**9
    assert load_config(write(tmp_path, memory_budget=2**30)).config.training_args.memory_budget == 2**30
    default = load_config(write(tmp_path, batch_size="auto")).config.training_args
    assert default.samples_per_step == 8  # batch_size's own default


@pytest.mark.parametrize(
    "training, where, said",
    [
        (
            {"batch_size": "autos"},
            "training_args.batch_size",
            "expected a number of samples, or `auto` (got `autos`)",
        ),
        ({"memory_budget": "12G"}, "training_args.memory_budget", "expected a size such as `12GB`, `12GiB`"),
        ({"memory_budget": "lots"}, "training_args.memory_budget", "or a number of bytes (got `lots`)"),
        ({"memory_budget": 1000}, "training_args.memory_budget", "greater than or equal to 1048576"),
        (
            {"target_batch_size": 16},
            "training_args.target_batch_size",
            "read only with `training_args.batch_size: auto`",
        ),
        (
            {"batch_size": "auto", "gradient_accumulation": 4},
            "training_args.gradient_accumulation",
            "the run sets gradient_accumulation",
        ),
    ],
)
def test_mistakes_are_one_located_line_each(tmp_path, cli, training, where, said):
    path = write(tmp_path, **training)
    result = cli("validate", path)
    assert result.exit_code == 2, result.output
    line = next(line for line in result.output.splitlines() if where in line)
    assert line.startswith(f"{path}:") and said in line, result.output  # file:line:col: field: message


def test_a_trainer_that_compares_samples_needs_a_target_of_that_many(tmp_path, cli):
    path = write(tmp_path, batch_size="auto", target_batch_size=1)
    config = yaml.safe_load(path.read_text())
    config["trainer"] = "kto"
    config["data"]["column_mapping"] = {"prompt": "p", "completion": "c", "label": "l"}
    path.write_text(yaml.safe_dump(config))
    result = cli("validate", path)
    assert result.exit_code == 2 and "needs `training_args.target_batch_size` of at least 2" in result.output


def test_auto_find_batch_size_of_autotrain_advanced_keeps_its_samples_per_step():
    from autotrain.config.advanced import translate

    params = {"batch_size": 4, "gradient_accumulation": 2, "auto_find_batch_size": True}
    native, renamed, problems, notices = translate(
        {"task": "llm-sft", "base_model": "m", "project_name": "p", "params": params}
    )
    assert not problems
    assert native["training_args"] == {"batch_size": "auto", "target_batch_size": 8}
    assert renamed[("training_args", "batch_size")] == ("params", "auto_find_batch_size")
    assert any("keeping 4 x 2 = 8 samples per optimizer step" in text for _, text in notices)
    off = translate(
        {"task": "llm-sft", "base_model": "m", "project_name": "p", "params": {**params, "auto_find_batch_size": False}}
    )
    assert off[0]["training_args"] == {"batch_size": 4, "gradient_accumulation": 2}


# --- the plan, the dry run, the run -----------------------------------------------------------------------


@pytest.mark.slow
def test_the_dry_run_says_which_batch_auto_chose_and_why(tmp_path, cli):
    path = write(tmp_path, batch_size="auto", target_batch_size=16, memory_budget="40GiB")
    result = cli("llm", "--config", path, "--dry-run")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "effective batch size: 16 = batch_size 16 x gradient_accumulation 1 x processes 1 (batch_size: auto" in out
    assert "  batch_size auto: 16 x gradient_accumulation 1 = target_batch_size 16 samples per step; estimate " in out
    assert "of the 38.00 GiB allowed (memory_budget 40.00 GiB less a 5% margin)" in out
    assert "no larger batch divides the target" in out


def test_a_small_budget_takes_a_smaller_batch_with_more_accumulation(tmp_path, cli):
    from autotrain.config.load import load_config
    from autotrain.run.fit import planned
    from autotrain.training import memory, model_shape
    from autotrain.training.plan import BatchChoice, resolve_plan

    path = write(tmp_path, batch_size="auto", target_batch_size=16, memory_budget="40GiB")
    cfg = load_config(path).config
    sizes = {}
    for batch in (16, 8):  # what the estimate says for 16 and for 8 (with twice the accumulation)
        plan = resolve_plan(cfg, batch=BatchChoice(batch, 16 // batch))
        setup = memory.setup_of(cfg, plan)
        from autotrain.run.fit import _with_runtime

        setup = _with_runtime(cfg, setup, None)
        sizes[batch] = memory.estimate(model_shape.shape_of(cfg, setup), setup).peak
    budget = int((sizes[16] + sizes[8]) / 2 / 0.95)  # 16 does not fit once the margin is taken, 8 does
    path = write(tmp_path, batch_size="auto", target_batch_size=16, memory_budget=budget)
    plan = planned(load_config(path).config)
    assert (plan.batch_size, plan.gradient_accumulation, plan.effective_batch_size) == (8, 2, 16)
    larger = plan.batch_choice["next_larger"]  # the tokenizer's share is measured each time: within bytes
    assert larger["batch_size"] == 16 and larger["estimate"] == pytest.approx(sizes[16], rel=1e-3)
    assert plan.training_args["per_device_train_batch_size"] == 8
    assert plan.training_args["gradient_accumulation_steps"] == 2
    record = plan.record()
    assert record["batch_size"] == 8 and record["batch_size_auto"]["budget"] == budget


def test_a_launched_rank_takes_the_batch_its_parent_chose(tmp_path, monkeypatch):
    from autotrain.config.load import load_config
    from autotrain.run.fit import batch_env, planned
    from autotrain.run.process import LAUNCHED_ENV
    from autotrain.training.plan import BatchChoice, resolve_plan

    cfg = load_config(write(tmp_path, batch_size="auto", target_batch_size=16, memory_budget="40GiB")).config
    parent = resolve_plan(cfg, batch=BatchChoice(4, 4, {"target_batch_size": 16, "budget": 1}))
    for name, value in batch_env(parent).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv(LAUNCHED_ENV, "1")
    rank = planned(cfg)
    assert (rank.batch_size, rank.gradient_accumulation) == (4, 4) and rank.batch_choice == parent.batch_choice
    monkeypatch.delenv(LAUNCHED_ENV)  # a process the user started decides for itself
    assert planned(cfg).batch_size == 16


def test_a_resumed_run_keeps_the_batch_it_chose(tmp_path):
    from autotrain.config.load import load_config
    from autotrain.run.fit import planned

    cfg = load_config(write(tmp_path, batch_size="auto", target_batch_size=16, memory_budget="40GiB")).config
    folder = tmp_path / "run"
    folder.mkdir()
    why = {"target_batch_size": 16, "budget": 2**30, "estimate": 1}
    plan = {"batch_size": 2, "gradient_accumulation": 8, "batch_size_auto": why}
    (folder / "run.json").write_text(json.dumps({"status": "interrupted", "plan": plan}))
    resumed = planned(cfg, resumed=folder)
    assert (resumed.batch_size, resumed.gradient_accumulation) == (2, 8)
    assert resumed.batch_choice["kept_from"] == "the run resumed"
    assert planned(cfg).batch_size == 16  # a new run decides afresh


@pytest.mark.slow
def test_the_run_trains_the_chosen_batch_and_records_why(tmp_path, cli):
    path = write(tmp_path, batch_size="auto", target_batch_size=4, memory_budget="40GiB", max_steps=1)
    result = cli("llm", "--config", path)
    assert result.exit_code == 0, result.output
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    choice = run["memory"]["batch_size_auto"]
    assert choice["batch_size"] == 4 and choice["gradient_accumulation"] == 1 and choice["budget"] == 40 * 2**30
    state = json.loads((tmp_path / "run" / "trainer_state.json").read_text())
    assert state["train_batch_size"] == 4
    assert os.path.isfile(tmp_path / "run" / "autotrain.yaml")
