"""The same tiny training in 2 Ray Train workers and in 2 DDP processes (accelerate): wall time and how far
the results are apart (final loss, weights). CPU, gloo; needs `pip install -e '.[ray]'`.

    python benchmarks/ray_vs_ddp.py [--steps 20]

The DDP run, measured in the same run, is the baseline. The Ray run starts a local Ray for itself (as a
user's first `backend: ray` run on a workstation does); Ray's start-up is part of its time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import yaml
from _common import print_table, run_timed

ASSETS = Path(__file__).resolve().parents[1] / "tests" / "assets"


def train(folder: Path, steps: int, backend: str) -> tuple[float, list[float], dict]:
    config = {
        "task": "llm",
        "trainer": "sft",
        "base_model": str(ASSETS / "tiny-llama"),
        "project_name": str(folder / "run"),
        "data": {"path": str(ASSETS / "data" / "text.jsonl"), "column_mapping": {"text": "text"}},
        "training_args": {"max_steps": steps, "batch_size": 2, "max_length": 32, "mixed_precision": "no"},
        "distributed": {"num_processes": 2, "backend": backend},
    }
    (folder / "config.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "AUTOTRAIN_LAUNCHED")}
    env["CUDA_VISIBLE_DEVICES"] = ""
    argv = [sys.executable, "-m", "autotrain.cli.main", "llm", "--config", str(folder / "config.yml")]
    seconds = run_timed(argv, cwd=folder, env=env)
    state = json.loads((folder / "run" / "trainer_state.json").read_text())
    from safetensors.torch import load_file

    return (
        seconds,
        [e["loss"] for e in state["log_history"] if "loss" in e],
        load_file(folder / "run" / "model.safetensors"),
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    steps = parser.parse_args().steps
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        ddp_s, ddp_loss, ddp_w = train(Path(a), steps, "accelerate")
        ray_s, ray_loss, ray_w = train(Path(b), steps, "ray")
    loss_diff = max(abs(x - y) for x, y in zip(ray_loss, ddp_loss, strict=True))
    weight_diff = max((ray_w[k] - ddp_w[k]).abs().max().item() for k in ddp_w)
    print(f"{steps} steps; final loss ray {ray_loss[-1]:.6f}, ddp {ddp_loss[-1]:.6f}")
    print_table(
        [
            ["DDP, 2 processes (baseline)", f"{ddp_s:.1f}", "1.0x", "-", "-"],
            ["Ray Train, 2 workers", f"{ray_s:.1f}", f"{ray_s / ddp_s:.1f}x", f"{loss_diff:.1e}", f"{weight_diff:.1e}"],
        ],
        ["run", "wall s", "vs DDP", "max |loss diff|", "max |weight diff|"],
    )


if __name__ == "__main__":
    main()
