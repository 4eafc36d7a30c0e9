"""`autotrain evaluate RUN --benchmark TASKS`: lm-evaluation-harness on the trained model and its base model,
side by side; offline on a task of the repository (tests/assets/benchmark: a YAML and its data)."""

from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "assets" / "tiny-llama"
TASK = Path("tests") / "assets" / "benchmark" / "colors.yaml"  # its data file is named from the repository root


def assert_one_line(result, *fragments: str) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert all(fragment in lines[0] for fragment in fragments), lines[0]


def _config(folder: Path, **extra) -> dict:
    return {
        "task": "llm",
        "trainer": "sft",
        "base_model": str(TINY),
        "project_name": str(folder),
        "log": "none",
        "data": {"path": str(ROOT / "tests" / "assets" / "data" / "chat.jsonl")},
        "training_args": {"mixed_precision": "no", "max_length": 64},
        **extra,
    }


@pytest.fixture
def finished(tmp_path) -> Path:
    """A finished full fine-tune whose model is its base model, unchanged (no training needed to read it)."""
    folder = tmp_path / "run"
    shutil.copytree(TINY, folder)
    (folder / "autotrain.yaml").write_text(yaml.safe_dump(_config(folder)), encoding="utf-8")
    (folder / ".autotrain-run").write_text("", encoding="utf-8")  # the folder is a run's
    from autotrain.config.load import load_saved
    from autotrain.training.plan import resolve_plan

    plan = resolve_plan(load_saved(folder / "autotrain.yaml"), device="cpu").record()  # as run.json holds it
    (folder / "run.json").write_text(json.dumps({"status": "completed", "plan": plan}), encoding="utf-8")
    (folder / "README.md").write_text("# run\n\nThe full resolved config is in `autotrain.yaml`.\n", encoding="utf-8")
    return folder


@pytest.fixture
def at_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # lm-eval reads a task's data_files from the current folder


def test_a_missing_extra_is_one_line(cli, finished, monkeypatch):
    monkeypatch.setitem(sys.modules, "lm_eval", None)  # as if not installed: importing it fails
    result = cli("evaluate", finished, "--benchmark", "hellaswag")
    assert_one_line(result, "benchmarks need lm-evaluation-harness", "pip install 'autotrain[benchmark]'")


def test_a_missing_task_file_and_usage_mistakes_are_one_line(cli, finished, tmp_path):
    assert_one_line(cli("evaluate", finished, "--benchmark", tmp_path / "nope.yaml"), "nope.yaml` does not exist")
    both = cli("evaluate", finished, "--benchmark", "x", "--input", tmp_path / "rows.jsonl")
    assert_one_line(both, "give --input FILE or --benchmark TASKS, not both")
    assert_one_line(cli("evaluate", finished), "evaluate needs --input FILE (or --benchmark TASKS")
    assert_one_line(cli("evaluate", finished, "--benchmark", "x", "--limit", "2.5"), "--limit: a whole count")
    assert_one_line(cli("evaluate", finished, "--benchmark", " , "), "--benchmark: give task names")


@pytest.mark.slow  # lm-eval indexes its thousands of tasks (several seconds)
def test_an_unknown_task_is_one_line(cli, finished):
    result = cli("evaluate", finished, "--benchmark", "hellaswagg")
    assert_one_line(result, "benchmark task `hellaswagg` is not an lm-evaluation-harness task", "`hellaswag`?")


@pytest.mark.slow  # lm-eval on two models, twice
def test_the_local_task_on_a_model_and_its_base(cli, finished, at_root):
    """Offline: the repository's task on the base model and the 'trained' one (here the same weights): both
    columns, a zero difference, the table in benchmarks.json and the model card, the settings recorded."""
    result = cli("evaluate", finished, "--benchmark", TASK, "--limit", "8", "--batch-size", "4", "--json")
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)["rows"]
    assert (row["task"], row["metric"], row["examples"]) == ("colors", "acc", 8)
    assert row["base"] == row["trained"] and row["difference"] == 0.0 and row["difference_stderr"] == 0.0
    assert row["paired"] and row["base_stderr"] > 0 and (row["limit"], row["batch_size"]) == (8, 4)
    saved = json.loads((finished / "benchmarks.json").read_text())
    assert saved["rows"] == [row] and saved["last_asked"]["tasks"] == [str(TASK)]
    card = (finished / "README.md").read_text()
    assert "## Benchmarks" in card and "| colors | acc |" in card
    assert card.index("## Benchmarks") < card.index("The full resolved config is in")
    again = cli("evaluate", finished, "--benchmark", TASK, "--limit", "4")
    assert again.exit_code == 0, again.output
    card = (finished / "README.md").read_text()
    assert card.count("## Benchmarks") == 1 and "limit 4 per task" in card and "limit 8 per task" not in card


def _results(base: list[float], trained: list[float], value_key: str = "acc") -> tuple[dict, dict]:
    """Two lm-eval result dicts of one task whose metric is the mean of per-example scores."""

    def one(scores: list[float]) -> dict:
        mean = sum(scores) / len(scores)
        stderr = math.sqrt(sum((s - mean) ** 2 for s in scores) / (len(scores) - 1) / len(scores))
        return {
            "results": {"t": {"alias": "t", f"{value_key},none": mean, f"{value_key}_stderr,none": stderr}},
            "samples": {"t": [{"doc_id": i, "filter": "none", value_key: s} for i, s in enumerate(scores)]},
            "higher_is_better": {"t": {value_key: True}},
            "n-samples": {"t": {"effective": len(scores)}},
        }

    return one(base), one(trained)


def test_the_difference_is_paired_over_the_same_examples():
    from autotrain.inference.benchmark_report import compare

    base, trained = _results([0, 1, 0, 1, 0, 1], [1, 1, 0, 1, 1, 1])
    (row,) = compare(base, trained, {"limit": None})
    assert row["difference"] == pytest.approx(2 / 6)
    differences = [1, 0, 0, 0, 1, 0]  # per example: trained - base
    mean = 2 / 6
    paired = math.sqrt(sum((d - mean) ** 2 for d in differences) / 5 / 6)
    assert row["paired"] and row["difference_stderr"] == pytest.approx(paired)
    # a value that is not the mean of the per-example scores (a corpus-level metric): the errors combined
    trained["results"]["t"]["acc,none"] = 0.9
    (row,) = compare(base, trained, {})
    assert not row["paired"]
    assert row["difference_stderr"] == pytest.approx(math.hypot(row["base_stderr"], row["trained_stderr"]))


def test_a_later_evaluation_replaces_its_tasks_and_keeps_the_others(tmp_path):
    from autotrain.inference.benchmark_report import merge

    first = [{"task": "a", "metric": "acc"}, {"task": "b", "metric": "acc"}]
    merge(tmp_path, first, "base", {"tasks": ["a", "b"]})
    data = merge(tmp_path, [{"task": "b", "metric": "acc", "new": True}], "base", {"tasks": ["b"]})
    assert data["rows"] == [{"task": "a", "metric": "acc"}, {"task": "b", "metric": "acc", "new": True}]
    assert json.loads((tmp_path / "benchmarks.json").read_text()) == data


def test_the_config_section_is_checked():
    from autotrain.config.load import load_data
    from autotrain.config.yaml_source import Locator
    from autotrain.errors import ConfigError

    ok = load_data(_config(Path("r"), benchmark={"tasks": ["arc_easy"], "limit": 0.5}), Locator("c.yml"), {})
    assert ok.config.benchmark.limit == 0.5 and ok.config.benchmark.batch_size == 8
    for wrong in ({"tasks": []}, {"tasks": ["x"], "limit": 2.5}, {"tasks": ["x"], "batchsize": 2}):
        with pytest.raises(ConfigError):
            load_data(_config(Path("r"), benchmark=wrong), Locator("c.yml"), {})


@pytest.mark.slow  # trains the tiny model, then benchmarks it and its base model
def test_a_run_benchmarks_itself_when_the_config_asks(cli, tmp_path, at_root):
    """`benchmark:` in the config: the run trains, then evaluates the base model and the trained one; a
    `--resume` of the finished run does not evaluate them again."""
    folder = tmp_path / "run"
    config = _config(
        folder,
        peft={"enabled": True, "r": 8, "alpha": 16},
        benchmark={"tasks": [str(TASK)], "limit": 6, "batch_size": 4},
    )
    config["training_args"].update({"max_steps": 8, "batch_size": 8, "lr": 5e-3})
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    result = cli("llm", "--config", path)
    assert result.exit_code == 0, result.output
    (row,) = json.loads((folder / "benchmarks.json").read_text())["rows"]
    assert row["task"] == "colors" and row["examples"] == 6 and row["limit"] == 6
    assert "## Benchmarks" in (folder / "README.md").read_text()
    again = cli("llm", "--config", path, "--resume", "latest")
    assert again.exit_code == 0 and "already holds them" in again.stderr, again.output

    config["benchmark"]["tasks"] = ["not_a_task_anywhere"]
    path.write_text(yaml.safe_dump({**config, "project_name": str(tmp_path / "other")}), encoding="utf-8")
    refused = cli("llm", "--config", path)
    assert refused.exit_code == 2 and "benchmark task `not_a_task_anywhere`" in refused.stderr
    assert not (tmp_path / "other").exists()  # refused before training
