"""Two CPU processes (gloo) through the CLI that stop early: a signal to the launcher or to one rank makes every
rank stop after the same step and write one complete checkpoint (exit 143); a rank that fails mid-training
stops the others within seconds, and the run says it failed (exit 1)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ASSETS = Path(__file__).parent / "assets"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the ranks through /proc"),
]

# Loaded by every process started with this folder on PYTHONPATH: rank 1 fails in its 4th step.
FAILING_RANK = """
import os
if os.environ.get("RANK") == "1" and os.environ.get("AUTOTRAIN_LAUNCHED") == "1":
    import transformers
    _step = transformers.Trainer.training_step
    def _failing_step(self, *args, **kwargs):
        if self.state.global_step >= 3:
            raise RuntimeError("rank 1 breaks down")
        return _step(self, *args, **kwargs)
    transformers.Trainer.training_step = _failing_step
"""


def start(tmp_path: Path, env: dict[str, str] | None = None, max_steps: int = 60, *extra: str) -> subprocess.Popen:
    config = {
        "task": "llm",
        "trainer": "sft",
        "base_model": str(ASSETS / "tiny-llama"),
        "project_name": str(tmp_path / "run"),
        "data": {"path": str(ASSETS / "data" / "text.jsonl")},
        "training_args": {
            "max_steps": max_steps,  # default: far more than it gets to, so the stop lands mid-run
            "batch_size": 2,
            "lr": 1e-3,
            "max_length": 48,
            "logging_steps": 1,
            "mixed_precision": "no",
            "save_steps": 1000,
        },
        "distributed": {"num_processes": 2},
    }
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(config))
    clean = {k: v for k, v in os.environ.items() if k not in ("AUTOTRAIN_LAUNCHED", "RANK", "WORLD_SIZE")}
    return subprocess.Popen(
        [sys.executable, "-m", "autotrain.cli.main", "llm", "--config", str(path), *extra],
        env={**clean, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # one process group: the launcher and its ranks, to kill on a timeout
    )


def rank_pid(launcher: int, rank: int) -> int:
    """The process of ``rank``: a child of the launcher with RANK=rank in its environment."""
    children = Path(f"/proc/{launcher}/task/{launcher}/children").read_text().split()
    for pid in children:
        if f"RANK={rank}".encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
            return int(pid)
    raise LookupError(f"no rank {rank} among {children}")


def signal_at_step(process: subprocess.Popen, step: int, target=None, timeout: float = 300) -> tuple[int, str]:
    """Send SIGTERM to ``target(launcher pid)`` (default: the launcher) once step ``step`` is logged."""
    lines = []
    deadline = time.monotonic() + timeout
    try:
        for line in process.stdout:
            lines.append(line)
            if line.startswith(f"step {step}/"):
                os.kill(target(process.pid) if target else process.pid, signal.SIGTERM)
                break
        process.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        raise
    return process.returncode, "".join(lines) + process.stdout.read()


def assert_one_checkpoint_of_every_rank(run: Path) -> None:
    checkpoints = sorted(run.glob("checkpoint-*"))
    assert len(checkpoints) == 1 and (checkpoints[0] / ".autotrain-complete").is_file()
    step = int(checkpoints[0].name.split("-")[1])
    assert json.loads((checkpoints[0] / "trainer_state.json").read_text())["global_step"] == step
    assert {p.name for p in checkpoints[0].glob("rng_state_*.pth")} == {"rng_state_0.pth", "rng_state_1.pth"}
    assert json.loads((run / "run.json").read_text())["exit_code"] == 143


def test_sigterm_to_the_launcher_saves_one_checkpoint_and_exits_143(tmp_path):
    code, out = signal_at_step(start(tmp_path), 3)
    assert code == 143, out
    assert "resume with" in out
    assert_one_checkpoint_of_every_rank(tmp_path / "run")


def test_sigterm_to_one_rank_stops_every_rank_after_the_same_step(tmp_path):
    # Before the ranks agreed at each step end, the other rank trained on alone and the run hung.
    code, out = signal_at_step(start(tmp_path), 3, target=lambda launcher: rank_pid(launcher, 1))
    assert code == 143, out
    assert "interrupted: rank" in out and "error:" not in out
    assert_one_checkpoint_of_every_rank(tmp_path / "run")


def test_a_rank_failing_mid_training_stops_the_others_and_fails_the_run(tmp_path):
    (tmp_path / "inject").mkdir()
    (tmp_path / "inject" / "sitecustomize.py").write_text(FAILING_RANK)
    pythonpath = os.pathsep.join([str(tmp_path / "inject"), *filter(None, [os.environ.get("PYTHONPATH")])])
    process = start(tmp_path, env={"PYTHONPATH": pythonpath})
    failed_at = None
    try:
        for line in process.stdout:
            if "rank 1 breaks down" in line and failed_at is None:
                failed_at = time.monotonic()
        process.wait(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        raise
    assert failed_at is not None, "rank 1 did not fail"
    # Left running, the other rank would wait at its next collective until the 300-s wait above gives up; 60 s
    # tells the two apart with room for a loaded two-core machine (stopping takes a few seconds on a quiet one).
    assert time.monotonic() - failed_at < 60, "the other rank was not stopped within a minute"
    # Rank 0, stopped because rank 1 failed, must not turn the failure into an interruption.
    assert process.returncode == 1


def _weights(run: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(run / "model.safetensors")


def test_sigterm_then_resume_ends_where_an_uninterrupted_run_ends(tmp_path):
    """Two DDP processes: stopped by SIGTERM after step 3, resumed, the weights equal an unbroken run's."""
    unbroken, broken = tmp_path / "unbroken", tmp_path / "broken"
    unbroken.mkdir(), broken.mkdir()
    whole = start(unbroken, None, 8)
    out = whole.communicate(timeout=300)[0]
    assert whole.returncode == 0, out

    code, out = signal_at_step(start(broken, None, 8), 3)
    assert code == 143, out
    resumed = start(broken, None, 8, "--resume")
    out = resumed.communicate(timeout=300)[0]
    assert resumed.returncode == 0, out

    expected, got = _weights(unbroken / "run"), _weights(broken / "run")
    assert expected.keys() == got.keys()
    for name, tensor in expected.items():
        scale = tensor.abs().max().clamp_min(1e-12)
        assert ((got[name] - tensor).abs().max() / scale) <= 1e-6, name
