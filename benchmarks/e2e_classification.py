"""End-to-end `autotrain text-classification` / `image-classification` figures, against baselines measured
in the same run.

    python benchmarks/e2e_classification.py [--reps N] [--threads N]

1. Train samples/s of `autotrain text-classification` (the tiny BERT in tests/assets, sentiment.csv) against
   a hand-written transformers `Trainer` script with the same model, data split, tokenization and
   TrainingArguments values. Both read the Trainer's own `train_samples_per_second`. Evaluation and
   checkpoints are off on both sides, so the figure compares the training loops. Target: ratio >= 0.98.
2. Wall time (process start to exit) and train samples/s of both quick starts
   (configs/{text,image}-classification/quickstart.yml), against `import torch, transformers`.

Candidates are interleaved (A B, B A, ...) after one warm-up run each, so load on the machine affects them
alike; the table shows medians. Everything runs offline on the CPU, with one torch thread per process
by default (`--threads`): on a small machine shared with other work, extra threads mostly measure contention.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import yaml
from _common import AUTOTRAIN, BASELINES, ROOT, print_table, run_timed

TINY_BERT = ROOT / "tests" / "assets" / "tiny-bert"
SENTIMENT = ROOT / "tests" / "assets" / "data" / "sentiment.csv"
QUICKSTARTS = {
    "text": ROOT / "configs" / "text-classification" / "quickstart.yml",
    "image": ROOT / "configs" / "image-classification" / "quickstart.yml",
}
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
ENV.pop("AUTOTRAIN_DEBUG", None)

# The settings both sides of the samples/s comparison share.
EPOCHS, BATCH, LR, MAX_LENGTH, SEED, LOGGING_STEPS = 30, 16, 3e-3, 32, 42, 10

# What a user would write with transformers alone, given the TrainingArguments values of `baseline_args`.
BASELINE_SCRIPT = BASELINES / "trainer_classification.py"


def autotrain_config(path: Path, project: Path, data: Path) -> Path:
    config = {
        "task": "text-classification",
        "base_model": str(TINY_BERT),
        "project_name": str(project),
        "data": {"path": str(data), "valid_split": "validation"},
        "training_args": {
            "epochs": EPOCHS,
            "batch_size": BATCH,
            "lr": LR,
            "max_length": MAX_LENGTH,
            "seed": SEED,
            "mixed_precision": "no",
            "optimizer": "adamw_torch",
            "logging_steps": LOGGING_STEPS,
            "eval_strategy": "no",
            "save_steps": 1_000_000,  # no checkpoint during the timed loop (the baseline saves none either)
        },
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def baseline_args(output_dir: Path) -> dict:
    """The TrainingArguments values autotrain derives from `autotrain_config`; progress bars left at their
    default, as in a hand-written script."""
    return {
        "output_dir": str(output_dir),
        "num_train_epochs": EPOCHS,
        "per_device_train_batch_size": BATCH,
        "learning_rate": LR,
        "seed": SEED,
        "data_seed": SEED,
        "lr_scheduler_type": "linear",
        "warmup_steps": 0,
        "weight_decay": 0.0,
        "max_grad_norm": 1.0,
        "optim": "adamw_torch",
        "logging_steps": LOGGING_STEPS,
        "logging_first_step": True,
        "save_strategy": "no",
        "eval_strategy": "no",
        "report_to": "none",
        "use_cpu": True,
    }


def split_data(folder: Path) -> Path:
    """train.csv and validation.csv (every fifth row) from sentiment.csv: both sides use the same rows."""
    with SENTIMENT.open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    folder.mkdir(parents=True, exist_ok=True)
    for name, part in (("train", [r for i, r in enumerate(rows) if i % 5]), ("validation", rows[::5])):
        with (folder / f"{name}.csv").open("w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=["text", "label"])
            writer.writeheader()
            writer.writerows(part)
    return folder


class Runs:
    """Fresh project folders inside one temporary directory."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.count = 0
        self.data = split_data(tmp / "data")
        self.baseline_script = BASELINE_SCRIPT

    def _fresh(self, name: str) -> Path:
        self.count += 1
        return self.tmp / f"{name}-{self.count}"

    def autotrain(self) -> tuple[float, dict]:
        project = self._fresh("autotrain")
        config = autotrain_config(self.tmp / "text.yml", project, self.data)
        wall = run_timed([*AUTOTRAIN, "text-classification", "--config", str(config)], env=ENV)
        metrics = json.loads((project / "train_results.json").read_text())
        shutil.rmtree(project, ignore_errors=True)
        return wall, metrics

    def baseline(self) -> tuple[float, dict]:
        project = self._fresh("trainer")
        metrics_file = self.tmp / "trainer_metrics.json"
        settings = {
            "model": str(TINY_BERT),
            "train": str(self.data / "train.csv"),
            "max_length": MAX_LENGTH,
            "metrics": str(metrics_file),
            "args": baseline_args(project),
        }
        wall = run_timed([sys.executable, str(self.baseline_script), json.dumps(settings)], env=ENV)
        metrics = json.loads(metrics_file.read_text())
        shutil.rmtree(project, ignore_errors=True)
        return wall, metrics

    def quickstart(self, task: str) -> tuple[float, dict]:
        project = self._fresh(f"quickstart-{task}")
        command = f"{task}-classification"
        argv = [*AUTOTRAIN, command, "--config", str(QUICKSTARTS[task]), "--set", f"project_name={project}"]
        wall = run_timed(argv, env=ENV)
        metrics = {
            **json.loads((project / "train_results.json").read_text()),
            **json.loads((project / "eval_results.json").read_text()),
        }
        shutil.rmtree(project, ignore_errors=True)
        return wall, metrics

    def import_floor(self) -> tuple[float, dict]:
        return run_timed([sys.executable, str(BASELINES / "import_transformers.py")], env=ENV), {}


def interleave(reps: int, candidates: dict[str, Callable[[], tuple[float, dict]]]) -> dict[str, list]:
    """One warm-up call of each candidate (not kept), then `reps` rounds, alternating the order."""
    for run in candidates.values():
        run()
    results: dict[str, list] = {name: [] for name in candidates}
    names = list(candidates)
    for rep in range(reps):
        for name in names if rep % 2 == 0 else names[::-1]:
            results[name].append(candidates[name]())
            wall, metrics = results[name][-1]
            sps = metrics.get("train_samples_per_second")
            shown = f"  {sps:.1f} samples/s" if sps else ""
            print(f"  {name} #{rep + 1}: {wall:.2f} s{shown}", file=sys.stderr, flush=True)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="Repetitions of each timed run (default 5).")
    parser.add_argument("--threads", type=int, default=1, help="Torch CPU threads per process (default 1).")
    args = parser.parse_args()
    reps = args.reps
    ENV.update(OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    median = statistics.median

    rows: list[list[str]] = []
    notes: list[str] = []
    missed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="autotrain-e2e-cls-") as name:
        runs = Runs(Path(name))

        print(
            f"[1/2] text classification, {EPOCHS} epochs: autotrain vs hand-written Trainer ({reps} reps)",
            file=sys.stderr,
        )
        train = interleave(reps, {"autotrain": runs.autotrain, "trainer": runs.baseline})
        sps = {k: median([m["train_samples_per_second"] for _, m in v]) for k, v in train.items()}
        ratio = sps["autotrain"] / sps["trainer"]
        rows.append(
            [
                "train samples/s, tiny BERT (Trainer's figure)",
                f"{sps['autotrain']:.1f}",
                f"{sps['trainer']:.1f}",
                f"{ratio:.3f}",
                ">= 0.98",
            ]
        )
        if ratio < 0.98:
            missed.append("train samples/s")
        losses = {k: median([m["train_loss"] for _, m in v]) for k, v in train.items()}
        notes.append(f"train_loss autotrain {losses['autotrain']:.4f} vs Trainer {losses['trainer']:.4f} (same work)")
        for k, v in train.items():
            notes.append(f"{k} samples/s: " + " ".join(f"{m['train_samples_per_second']:.1f}" for _, m in v))

        print(f"[2/2] quick starts, process start to exit ({reps} reps)", file=sys.stderr)
        quick = interleave(
            reps,
            {
                "text": lambda: runs.quickstart("text"),
                "image": lambda: runs.quickstart("image"),
                "import": runs.import_floor,
            },
        )
        floor = median([w for w, _ in quick["import"]])
        for task in ("text", "image"):
            wall = median([w for w, _ in quick[task]])
            task_sps = median([m["train_samples_per_second"] for _, m in quick[task]])
            accuracy = median([m["eval_accuracy"] for _, m in quick[task]])
            rows.append(
                [
                    f"wall s, {task} quick start (vs import torch+transformers)",
                    f"{wall:.2f}",
                    f"{floor:.2f}",
                    f"{wall / floor:.2f}",
                    "report",
                ]
            )
            rows.append([f"  train samples/s, {task} quick start", f"{task_sps:.1f}", "", "", "report"])
            notes.append(
                f"{task} quick start: eval accuracy {accuracy:.3f}; wall s "
                + " ".join(f"{w:.2f}" for w, _ in quick[task])
            )

    print_table(rows, ["figure", "value", "baseline", "ratio", "target"])
    print(
        f"(medians of {reps} interleaved runs each after one warm-up; python {sys.version.split()[0]}, "
        f"{os.cpu_count()} CPUs, {args.threads} torch thread(s) per process)"
    )
    for note in notes:
        print("  " + note)
    if missed:
        print("missed target: " + ", ".join(missed))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
