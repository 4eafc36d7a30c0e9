"""`autotrain predict` throughput against a hand-written transformers `pipeline("text-classification")`,
measured in the same run.

    python benchmarks/predict.py [--reps N] [--repeat K] [--threads N]

The text quick start (configs/text-classification/quickstart.yml) is trained once into a temporary
folder; its data file, tests/assets/data/sentiment.csv, repeated K times (default 10: 3,200 rows) so each
timing lasts long enough to measure, is the input of every candidate:

- autotrain: `autotrain predict`'s own code path, in this process: read the file through the run's
  column mapping, predict, write JSON lines;
- pipeline, batch 16: what a user writes with transformers alone: read the CSV, run
  `pipeline("text-classification", model=RUN)` over the texts with the same batch size (the run's
  batch_size) and truncation (the run's max_length), write JSON lines;
- pipeline, batch 1: the same with the pipeline's default batch size.

Models are loaded before the clock starts (the figure is rows/s of inference, not start-up). Candidates are
interleaved (A B C, C B A, ...) after one warm-up each; the table shows medians. Torch runs one thread by
default (`--threads`): on a small machine shared with other work, more threads mostly measure contention.
The wall time of the whole `autotrain predict` command, process start to exit, is compared with the same
pipeline script run as a process (batch 16), alternating, 5 runs each.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _common import AUTOTRAIN, BASELINES, ROOT, print_table, run_timed

QUICKSTART = ROOT / "configs" / "text-classification" / "quickstart.yml"
SENTIMENT = ROOT / "tests" / "assets" / "data" / "sentiment.csv"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
ENV.pop("AUTOTRAIN_DEBUG", None)


# The hand-written baseline: a user's script around transformers' pipeline (run in-process for rows/s, as
# a process for the wall time).
PIPELINE_SCRIPT = BASELINES / "pipeline_predict.py"


def train_quickstart(project: Path) -> None:
    run_timed([*AUTOTRAIN, "text-classification", "--config", str(QUICKSTART), "--set", f"project_name={project}"],
              env=ENV)  # fmt: skip


def repeated_data(path: Path, repeat: int) -> Path:
    with SENTIMENT.open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=["text", "label"])
        writer.writeheader()
        writer.writerows(rows * repeat)
    return path


def autotrain_candidate(project: Path, data: Path, out: Path) -> Callable[[], list[str]]:
    from autotrain.inference.inputs import read_rows
    from autotrain.inference.load import load_run
    from autotrain.inference.predict import batch_size_of, jsonl_writer, predict_rows

    run = load_run(project, "cpu")
    size = batch_size_of(run, None)

    def predict() -> list[str]:
        rows = read_rows(run.config, data)
        with jsonl_writer(out) as write:
            predict_rows(run, rows, write, size)
        return [json.loads(line)["label"] for line in out.read_text(encoding="utf-8").splitlines()]

    return predict


def pipeline_candidate(project: Path, data: Path, out: Path, batch_size: int) -> Callable[[], list[str]]:
    """PIPELINE_SCRIPT in this process, its model loaded once."""
    from transformers import pipeline

    classify = pipeline("text-classification", model=str(project), device="cpu")

    def predict() -> list[str]:
        with data.open(encoding="utf-8") as f:
            texts = [row["text"] for row in csv.DictReader(f)]
        results = classify(texts, batch_size=batch_size, truncation=True, max_length=32)
        with out.open("w", encoding="utf-8") as f:
            for i, (text, result) in enumerate(zip(texts, results, strict=True)):
                f.write(json.dumps({"row": i, "text": text, "label": result["label"], "score": result["score"]}) + "\n")
        return [result["label"] for result in results]

    return predict


def wall_times(tmp: Path, project: Path, data: Path, reps: int = 5) -> dict[str, list[float]]:
    """Process start to exit: `autotrain predict` and the pipeline script, alternating."""
    out = tmp / "wall.jsonl"
    commands = {
        "autotrain": [*AUTOTRAIN, "predict", str(project), "--input", str(data), "--output", str(out), "--force"],
        "pipeline": [sys.executable, str(PIPELINE_SCRIPT), str(project), str(data), str(out), "16"],
    }
    walls: dict[str, list[float]] = {name: [] for name in commands}
    for rep in range(reps):
        for name in commands if rep % 2 == 0 else list(commands)[::-1]:
            walls[name].append(run_timed(commands[name], env=ENV))
    return walls


def interleave(reps: int, candidates: dict[str, Callable[[], list[str]]]) -> tuple[dict[str, list[float]], dict]:
    """One warm-up call each, then `reps` rounds alternating the order; seconds per call, and the labels."""
    labels = {name: run() for name, run in candidates.items()}
    times: dict[str, list[float]] = {name: [] for name in candidates}
    names = list(candidates)
    for rep in range(reps):
        for name in names if rep % 2 == 0 else names[::-1]:
            start = time.perf_counter()
            candidates[name]()
            times[name].append(time.perf_counter() - start)
            print(f"  {name} #{rep + 1}: {times[name][-1]:.3f} s", file=sys.stderr, flush=True)
    return times, labels


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7, help="Timed repetitions of each candidate (default 7).")
    parser.add_argument("--repeat", type=int, default=10, help="Copies of sentiment.csv in the input (default 10).")
    parser.add_argument("--threads", type=int, default=1, help="Torch CPU threads (default 1).")
    args = parser.parse_args()
    for key in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        os.environ[key] = "1"
    ENV.update(OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    import torch

    from autotrain.training.quiet import quiet_libraries

    torch.set_num_threads(args.threads)
    quiet_libraries()
    median = statistics.median
    with tempfile.TemporaryDirectory(prefix="autotrain-predict-") as name:
        tmp = Path(name)
        project = tmp / "run"
        print("training the text quick start ...", file=sys.stderr, flush=True)
        train_quickstart(project)
        data = repeated_data(tmp / "input.csv", args.repeat)
        count = sum(1 for _ in data.open(encoding="utf-8")) - 1
        candidates = {
            "autotrain": autotrain_candidate(project, data, tmp / "autotrain.jsonl"),
            "pipeline-16": pipeline_candidate(project, data, tmp / "pipeline16.jsonl", 16),
            "pipeline-1": pipeline_candidate(project, data, tmp / "pipeline1.jsonl", 1),
        }
        print(f"predicting {count} rows ({args.reps} reps each)", file=sys.stderr, flush=True)
        times, labels = interleave(args.reps, candidates)
        rate = {k: count / median(v) for k, v in times.items()}
        same = sum(a == b for a, b in zip(labels["autotrain"], labels["pipeline-16"], strict=True)) / count
        print("wall time, process start to exit (5 reps each)", file=sys.stderr, flush=True)
        walls = {k: median(v) for k, v in wall_times(tmp, project, data).items()}
    rows = [
        ["rows/s, autotrain vs pipeline (batch 16)", f"{rate['autotrain']:.0f}", f"{rate['pipeline-16']:.0f}",
         f"{rate['autotrain'] / rate['pipeline-16']:.2f}"],
        ["rows/s, autotrain vs pipeline (batch 1, its default)", f"{rate['autotrain']:.0f}",
         f"{rate['pipeline-1']:.0f}", f"{rate['autotrain'] / rate['pipeline-1']:.2f}"],
        [f"wall s, {count} rows, process start to exit (vs pipeline script)", f"{walls['autotrain']:.2f}",
         f"{walls['pipeline']:.2f}", f"{walls['autotrain'] / walls['pipeline']:.2f}"],
    ]  # fmt: skip
    print_table(rows, ["figure", "autotrain", "baseline", "ratio"])
    print(
        f"(medians of {args.reps} interleaved runs after one warm-up; {count} rows; python "
        f"{sys.version.split()[0]}, {os.cpu_count()} CPUs, {args.threads} torch thread(s))"
    )
    print(f"  same label as the pipeline on {same:.1%} of rows")
    for k, v in times.items():
        print(f"  {k} s: " + " ".join(f"{t:.3f}" for t in v))
    return 0


if __name__ == "__main__":
    sys.exit(main())
