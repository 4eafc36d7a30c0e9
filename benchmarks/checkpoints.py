"""Checkpoint figures: how long SIGTERM takes to produce a complete checkpoint, and what atomic
checkpointing costs against plain saves, all measured in this run on the tiny shipped Llama.

    python benchmarks/checkpoints.py [--reps 5]
"""

from __future__ import annotations

import argparse
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT / "tests" / "assets"


def write_config(folder: Path, max_steps: int) -> Path:
    config = {
        "task": "llm",
        "trainer": "sft",
        "base_model": str(ASSETS / "tiny-llama"),
        "project_name": str(folder / "run"),
        "data": {"path": str(ASSETS / "data" / "text.jsonl")},
        "training_args": {
            "max_steps": max_steps,
            "batch_size": 4,
            "max_length": 48,
            "lr": 1e-3,
            "logging_steps": 1,
            "mixed_precision": "no",
            "save_steps": 10_000,
        },
    }
    path = folder / "config.yml"
    path.write_text(yaml.safe_dump(config))
    return path


def sigterm_latency(reps: int) -> tuple[list[float], list[float]]:
    """Seconds from SIGTERM to a checkpoint marked complete, and to the process exit."""
    to_checkpoint, to_exit = [], []
    for _ in range(reps):
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "autotrain.cli.main",
                    "llm",
                    "--config",
                    str(write_config(folder, 10_000)),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for line in proc.stdout:
                if line.startswith("step 3/"):
                    break
            start = time.perf_counter()
            proc.send_signal(signal.SIGTERM)
            marker = None
            while marker is None and proc.poll() is None:
                marker = next((folder / "run").glob("checkpoint-*/.autotrain-complete"), None)
                time.sleep(0.002)
            checkpoint_at = time.perf_counter()
            proc.communicate(timeout=120)
            exit_at = time.perf_counter()
            if proc.returncode != 143:
                raise SystemExit(f"expected exit 143 after SIGTERM, got {proc.returncode}")
            marker = marker or next((folder / "run").glob("checkpoint-*/.autotrain-complete"))
            to_checkpoint.append(checkpoint_at - start)
            to_exit.append(exit_at - start)
    return to_checkpoint, to_exit


def save_costs(reps: int) -> dict[str, list[float]]:
    """Interleaved timings of: model.save_pretrained, the Trainer's own checkpoint, our atomic one
    (the Trainer's checkpoint plus AtomicCheckpoints.on_save: fsync of every file, then the marker)."""
    import transformers

    from autotrain.config.load import load_config
    from autotrain.trainers import build_trainer
    from autotrain.training.checkpoints import AtomicCheckpoints
    from autotrain.training.plan import resolve_plan

    transformers.logging.set_verbosity_error()
    times: dict[str, list[float]] = {"save_pretrained": [], "trainer checkpoint": [], "atomic checkpoint": []}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        cfg = load_config(write_config(folder, 1)).config
        trainer, _ = build_trainer(cfg, resolve_plan(cfg), [])
        trainer.train()  # one step, so the optimizer and scheduler have state to save
        project = Path(cfg.project_name)
        atomic = AtomicCheckpoints(project, None).attach(trainer)
        for i in range(reps):
            target = folder / f"pretrained-{i}"
            start = time.perf_counter()
            trainer.model.save_pretrained(target)
            times["save_pretrained"].append(time.perf_counter() - start)

            trainer.args.output_dir = str(folder / f"plain-{i}")
            start = time.perf_counter()
            trainer._save_checkpoint(trainer.model, None)  # the Trainer's own save, timed alone
            times["trainer checkpoint"].append(time.perf_counter() - start)

            trainer.args.output_dir = str(project)
            start = time.perf_counter()
            trainer._save_checkpoint(trainer.model, None)
            atomic.on_save(trainer.args, trainer.state, trainer.control)
            times["atomic checkpoint"].append(time.perf_counter() - start)
            for path in (target, folder / f"plain-{i}", project / f"checkpoint-{trainer.state.global_step}"):
                shutil.rmtree(path, ignore_errors=True)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()

    costs = save_costs(args.reps)
    med = {k: statistics.median(v) for k, v in costs.items()}
    to_checkpoint, to_exit = sigterm_latency(max(1, args.reps // 2 + 1))
    print("| figure | median | baseline | ratio |")
    print("|---|---|---|---|")
    print(f"| SIGTERM -> complete checkpoint on disk | {statistics.median(to_checkpoint):.3f} s | | |")
    print(f"| SIGTERM -> process exit (exit code 143) | {statistics.median(to_exit):.3f} s | | |")
    print(
        f"| atomic checkpoint (model+optimizer+scheduler+rng+state, fsync, marker) | "
        f"{med['atomic checkpoint']:.3f} s | plain save_pretrained {med['save_pretrained']:.3f} s | "
        f"{med['atomic checkpoint'] / med['save_pretrained']:.2f} |"
    )
    print(
        f"| atomic checkpoint vs the Trainer's own checkpoint (same content, no fsync/marker) | "
        f"{med['atomic checkpoint']:.3f} s | {med['trainer checkpoint']:.3f} s | "
        f"{med['atomic checkpoint'] / med['trainer checkpoint']:.2f} |"
    )


if __name__ == "__main__":
    main()
