"""Pictures of every run (plots/loss.png, plots/metrics.png) and the live metrics log."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from autotrain.training.metrics_log import MetricsLog
from autotrain.training.plots import eval_metric_names, write_plots

REPO_ROOT = Path(__file__).resolve().parent.parent
PNG = b"\x89PNG\r\n\x1a\n"
HISTORY = [
    {"step": 1, "loss": 2.0, "learning_rate": 1e-3},
    {"step": 2, "loss": 1.5, "learning_rate": 9e-4},
    {"step": 2, "eval_loss": 1.6, "eval_accuracy": 0.5, "eval_f1": 0.4, "eval_runtime": 0.1},
    {"step": 4, "loss": 1.0, "learning_rate": 5e-4},
    {"step": 4, "eval_loss": 1.1, "eval_accuracy": 0.75, "eval_f1": 0.7, "eval_runtime": 0.1},
    {"step": 4, "train_loss": 1.4, "train_runtime": 3.0},
]


def test_plots_are_drawn_by_the_plain_install():
    """matplotlib is a core dependency, not an extra: `pip install -e .` alone gives a run its plots."""
    import tomllib

    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    assert any(d.split(">")[0].split("=")[0].strip() == "matplotlib" for d in project["dependencies"])
    assert not project["optional-dependencies"]["plots"]


def test_loss_plot_for_every_task_and_metrics_for_classifiers(tmp_path, capsys):
    assert [p.name for p in write_plots(tmp_path / "llm", HISTORY, "llm")] == ["loss.png"]
    written = write_plots(tmp_path / "cls", HISTORY, "text-classification")
    assert [p.name for p in written] == ["loss.png", "metrics.png"]
    assert all(p.read_bytes().startswith(PNG) and p.parent == tmp_path / "cls" / "plots" for p in written)
    assert eval_metric_names(HISTORY) == ["eval_accuracy", "eval_f1"]
    assert "plots skipped" not in capsys.readouterr().err


def test_nothing_logged_means_no_plot(tmp_path):
    assert write_plots(tmp_path, [{"step": 3, "train_runtime": 1.0}], "image-classification") == []


def test_an_environment_without_matplotlib_skips_the_plots_with_a_notice(tmp_path, monkeypatch, capsys):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")] or ["matplotlib"]:
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed, even after other tests imported it
    assert write_plots(tmp_path, HISTORY, "llm") == []
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "plots skipped" in err and "pip install matplotlib" in err


def test_the_metrics_log_appends_one_json_line_per_log(tmp_path):
    state = SimpleNamespace(global_step=0, max_steps=10, is_world_process_zero=True)
    log = MetricsLog(tmp_path, SimpleNamespace(tokens_seen=0))
    log.on_train_begin(None, state, None)
    state.global_step = 5
    log.trainer.tokens_seen = 500
    log.on_log(None, state, None, logs={"loss": 1.25, "learning_rate": 1e-3, "grad_norm": float("nan")})
    log.on_log(None, SimpleNamespace(is_world_process_zero=False), None, logs={"loss": 9.0})  # other ranks: nothing
    lines = (tmp_path / "logs" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert record["step"] == 5 and record["max_steps"] == 10 and record["loss"] == 1.25
    assert record["grad_norm"] is None and record["tokens_per_second"] > 0 and record["eta_seconds"] >= 0
    assert record["time"] > 0


def test_the_model_card_shows_the_plots(tmp_path):
    from autotrain.config.load import load_config
    from autotrain.run.outputs import write_model_card

    config = tmp_path / "c.yml"
    config.write_text(f"task: llm\nbase_model: m\nproject_name: {tmp_path / 'run'}\ndata: {{path: d.jsonl}}\n")
    folder = tmp_path / "run"
    folder.mkdir()
    write_model_card(load_config(config), folder, {}, [folder / "plots" / "loss.png"])
    assert "![loss](plots/loss.png)" in (folder / "README.md").read_text()


def test_a_classifier_quick_start_leaves_both_plots(tmp_path):
    config = REPO_ROOT / "configs" / "text-classification" / "quickstart.yml"
    command = [sys.executable, "-m", "autotrain.cli.main", "--config", str(config)]
    command += ["--set", f"project_name={tmp_path / 'run'}"]
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    run = tmp_path / "run"
    assert (run / "plots" / "loss.png").read_bytes().startswith(PNG)
    assert (run / "plots" / "metrics.png").read_bytes().startswith(PNG)
    card = (run / "README.md").read_text()
    assert "![loss](plots/loss.png)" in card and "![metrics](plots/metrics.png)" in card
    records = [json.loads(line) for line in (run / "logs" / "metrics.jsonl").read_text().splitlines()]
    assert any("eval_accuracy" in r for r in records) and any("loss" in r for r in records)
