"""How fast a two-process run stops: SIGTERM to the launcher -> one complete checkpoint -> exit 143, and a
failing rank -> the whole run ends. CPU, gloo, the tiny shipped model.

    python benchmarks/distributed_stop.py [--reps 3]

The baseline is the same figure for one process (SIGTERM -> exit), measured in the same run: the ratio is
what agreeing across ranks and the final barrier add.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ASSETS = Path(__file__).resolve().parents[1] / "tests" / "assets"


def start(folder: Path, processes: int) -> subprocess.Popen:
    config = {
        "task": "llm",
        "trainer": "sft",
        "base_model": str(ASSETS / "tiny-llama"),
        "project_name": str(folder / "run"),
        "data": {"path": str(ASSETS / "data" / "text.jsonl")},
        "training_args": {"max_steps": 200, "batch_size": 2, "max_length": 48, "logging_steps": 1},
        "distributed": {"num_processes": processes},
    }
    (folder / "config.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "AUTOTRAIN_LAUNCHED")}
    return subprocess.Popen(
        [sys.executable, "-m", "autotrain.cli.main", "llm", "--config", str(folder / "config.yml")],
        env={**env, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def sigterm_to_exit(processes: int) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as tmp:
        run = start(Path(tmp), processes)
        for line in run.stdout:
            if line.startswith("step 3/"):
                sent = time.perf_counter()
                os.kill(run.pid, signal.SIGTERM)
                break
        run.stdout.read()
        code = run.wait(timeout=120)
        return time.perf_counter() - sent, code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    reps = parser.parse_args().reps
    one, two = [], []
    for _ in range(reps):  # interleaved
        seconds, code = sigterm_to_exit(1)
        assert code == 143, code
        one.append(seconds)
        seconds, code = sigterm_to_exit(2)
        assert code == 143, code
        two.append(seconds)
    a, b = statistics.median(one), statistics.median(two)
    print(f"SIGTERM -> checkpoint -> exit 143: 2 ranks {b:.2f} s, 1 process {a:.2f} s (ratio {b / a:.2f})")


if __name__ == "__main__":
    main()
