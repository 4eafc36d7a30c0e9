"""`distributed.backend: ray`: the same training in 2 Ray Train workers, equal to a 2-process DDP run, and a
SIGTERM that leaves a checkpoint the run resumes from.

One local Ray serves the module (started here, joined by each run through `distributed.ray_address`, so
the runs do not each pay Ray's start-up); the runs are real `autotrain llm` processes on the CPU (gloo).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from test_distributed import ASSETS, assert_trained_once, cli_env, write_config

pytestmark = pytest.mark.slow
ray = pytest.importorskip("ray", reason="needs Ray Train: pip install -e '.[ray]'")


# Loaded by every Ray worker process this module's Ray starts (sitecustomize on their PYTHONPATH): where the
# run's folder holds HOLD, a worker in step 3 says so (held-RANK) and waits for the stop file before going
# on: the SIGTERM test signals once both wait, so the run stops at step 3 however fast the machine trains.
HOLD = "hold-after-step-2"
SITECUSTOMIZE = f"""
import os, sys, time
if any("default_worker" in arg for arg in sys.argv):
    import transformers
    _step = transformers.Trainer.training_step
    def _held_step(self, *args, **kwargs):
        out = _step(self, *args, **kwargs)
        stop = os.environ.get("AUTOTRAIN_STOP_FILE")
        if stop and os.path.exists("{HOLD}") and self.state.global_step >= 2:
            open("held-" + os.environ["RANK"], "w").close()
            deadline = time.time() + 600
            while not os.path.exists(stop) and time.time() < deadline:
                time.sleep(0.05)
        return out
    transformers.Trainer.training_step = _held_step
"""


@pytest.fixture(scope="module")
def ray_address(tmp_path_factory):
    import os

    hooks = tmp_path_factory.mktemp("worker-hooks")
    (hooks / "sitecustomize.py").write_text(SITECUSTOMIZE)
    previous = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(hooks), previous) if p)  # inherited by the workers
    # On loopback: the test cluster talks to no other interface of the machine.
    ray.init(num_cpus=4, include_dashboard=False, configure_logging=False, _node_ip_address="127.0.0.1")
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()
        if previous is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = previous


def run(config: Path, *args: str, timeout: int = 900) -> tuple[int, str, float]:
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "autotrain.cli.main", "llm", "--config", str(config), *args],
        cwd=config.parent,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return done.returncode, done.stdout + done.stderr, time.monotonic() - began


def losses(run_dir: Path) -> list[float]:
    state = json.loads((run_dir / "trainer_state.json").read_text())
    return [entry["loss"] for entry in state["log_history"] if "loss" in entry]


def test_two_ray_workers_train_as_two_ddp_processes_do(tmp_path, ray_address):
    (tmp_path / "ray").mkdir()
    (tmp_path / "ddp").mkdir()
    ray_config = write_config(tmp_path / "ray", {"num_processes": 2, "backend": "ray", "ray_address": ray_address})
    ddp_config = write_config(tmp_path / "ddp", {"num_processes": 2})
    # The Ray run's config leaves `task:` out (`autotrain llm` names it): each worker loads it again.
    text = ray_config.read_text()
    ray_config.write_text("".join(line for line in text.splitlines(True) if not line.startswith("task:")))
    code, output, ray_seconds = run(ray_config)
    assert code == 0, output[-4000:]
    assert "launching 2 Ray Train workers (CPU, DDP)" in output
    code, output, ddp_seconds = run(ddp_config)
    assert code == 0, output[-4000:]
    assert_trained_once(tmp_path / "ray" / "run")
    from safetensors.torch import load_file

    ray_weights = load_file(tmp_path / "ray" / "run" / "model.safetensors")
    ddp_weights = load_file(tmp_path / "ddp" / "run" / "model.safetensors")
    weight_diff = max((ray_weights[k] - ddp_weights[k]).abs().max().item() for k in ddp_weights)
    ray_losses, ddp_losses = losses(tmp_path / "ray" / "run"), losses(tmp_path / "ddp" / "run")
    loss_diff = max(abs(a - b) for a, b in zip(ray_losses, ddp_losses, strict=True))
    print(f"\nray {ray_seconds:.1f} s, ddp {ddp_seconds:.1f} s; losses {ray_losses} vs {ddp_losses}")
    print(f"max |loss difference| {loss_diff:.2e}, max |weight difference| {weight_diff:.2e}")
    assert loss_diff <= 1e-6 and weight_diff <= 1e-6


def test_sigterm_to_a_ray_run_leaves_a_checkpoint_that_resumes(tmp_path, ray_address):
    rows = (ASSETS / "data" / "text.jsonl").read_text().splitlines()[:96]
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(rows) + "\n")
    dist = {"num_processes": 2, "backend": "ray", "ray_address": ray_address}
    config = write_config(tmp_path, dist, data_path=str(data), save_steps=1000)  # 24 steps; no periodic save
    (tmp_path / HOLD).write_text("")
    held = [tmp_path / "held-0", tmp_path / "held-1"]  # both workers wait inside step 3
    process = subprocess.Popen(
        [sys.executable, "-m", "autotrain.cli.main", "llm", "--config", str(config)],
        cwd=tmp_path,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 600
        while not all(p.exists() for p in held) and time.monotonic() < deadline:
            assert process.poll() is None, process.communicate()[0][-4000:]
            time.sleep(0.2)
        process.send_signal(signal.SIGTERM)
        output = process.communicate(timeout=600)[0]
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 143, output[-4000:]
    checkpoints = sorted((tmp_path / "run").glob("checkpoint-*"))
    assert checkpoints and (checkpoints[-1] / ".autotrain-complete").is_file(), output[-4000:]
    assert checkpoints[-1].name == "checkpoint-3", "every worker stops after the step it was in"
    assert not (tmp_path / "run" / ".autotrain-stop").exists()
    (tmp_path / HOLD).unlink()

    code, output, _ = run(config, "--resume")
    assert code == 0, output[-4000:]
    assert f"resuming from {checkpoints[-1]}" in output
    state = json.loads((tmp_path / "run" / "trainer_state.json").read_text())
    assert state["global_step"] == 24
    assert all(torch.isfinite(torch.tensor(losses(tmp_path / "run"))))
    assert yaml.safe_load((tmp_path / "run" / "autotrain.yaml").read_text()) is not None
