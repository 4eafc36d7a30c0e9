"""The memory estimate against the peak each run measured, on the CPU: tiny Llama and SmolLM2-135M, full and
LoRA, AdamW and CAME8Bit, gradient checkpointing on and off.

    python benchmarks/memory_estimate.py [--only tiny|smollm2] [--steps 2] [--allocator returning|default] [--smoke]

Each configuration trains `--steps` steps through `autotrain llm` in its own process, one at a time, on rows
of text longer than max_length (every batch is full); run.json then holds the estimate made before the run
and the measured peak: on the CPU the growth of resident memory from just before the model was loaded
(`peak_above_baseline`; what the process held before, torch and the libraries, is left out of both). Memory
does not depend on how busy the machine is, so this runs anywhere; it prints estimate, measured and
their ratio (target: within 0.85 .. 1.15). `--smoke`: the first configuration only, to check the script works.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml
from _common import AUTOTRAIN, print_table, smollm2_folder

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "assets" / "tiny-llama"

# (name, model, batch, max_length, peft, optimizer, gradient checkpointing)
CASES = [
    ("tiny full adamw", "tiny", 16, 512, False, "adamw_torch", False),
    ("tiny full adamw ckpt", "tiny", 16, 512, False, "adamw_torch", True),
    ("tiny full came8bit", "tiny", 16, 512, False, "came_8bit", False),
    ("tiny lora adamw", "tiny", 16, 512, True, "adamw_torch", False),
    ("tiny lora came8bit ckpt", "tiny", 16, 512, True, "came_8bit", True),
    ("smollm2 full adamw", "smollm2", 2, 256, False, "adamw_torch", False),
    ("smollm2 full came8bit ckpt", "smollm2", 2, 256, False, "came_8bit", True),
    ("smollm2 lora adamw", "smollm2", 2, 256, True, "adamw_torch", False),
    ("smollm2 lora came8bit ckpt", "smollm2", 4, 256, True, "came_8bit", True),
]


def write_data(path: Path, rows: int = 64) -> Path:
    """Plain text rows of a few thousand characters: longer than any max_length here, in either tokenizer."""
    words = "the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing matches"
    words = words.split()
    lines = []
    for i in range(rows):
        text = " ".join(words[(i * 7 + j * 3) % len(words)] for j in range(900))
        lines.append(json.dumps({"text": text}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def config(tmp: Path, name: str, model: Path, data: Path, case, steps: int) -> Path:
    _, _, batch, length, peft, optimizer, ckpt = case
    cfg = {
        "task": "llm",
        "trainer": "sft",
        "base_model": str(model),
        "project_name": str(tmp / name.replace(" ", "-")),
        "log": "none",
        "data": {"path": str(data), "chat_template": "none"},
        "peft": {"enabled": peft, "r": 16, "alpha": 32, "dropout": 0.05},
        "training_args": {
            "batch_size": batch,
            "max_length": length,
            "max_steps": steps,
            "optimizer": optimizer,
            "gradient_checkpointing": ckpt,
            "mixed_precision": "no",
            "logging_steps": 1,
            "save_steps": 1000,
            "padding_free": False,
        },
    }
    path = tmp / f"{name.replace(' ', '-')}.yml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


def run_case(tmp: Path, case, models: dict[str, Path], data: Path, steps: int, allocator: str) -> dict:
    name = case[0]
    path = config(tmp, name, models[case[1]], data, case, steps)
    env = dict(os.environ)
    if allocator == "returning":  # large blocks go back to the system when freed: resident = live memory
        env["MALLOC_MMAP_THRESHOLD_"] = "131072"
    done = subprocess.run(
        [*AUTOTRAIN, "llm", "--config", str(path)], capture_output=True, text=True, check=False, env=env
    )
    if done.returncode != 0:
        return {"case": name, "error": (done.stderr.strip().splitlines() or ["?"])[-1]}
    memory = json.loads((tmp / name.replace(" ", "-") / "run.json").read_text())["memory"]
    measured = memory["measured"]["peak_above_baseline"]
    return {
        "case": name,
        "estimate_mib": memory["bytes_per_device"] / 2**20,
        "measured_mib": measured / 2**20,
        "ratio": memory["bytes_per_device"] / measured,
        "peak_during": memory["peak_during"],
        "parts_mib": {k: round(v / 2**20, 1) for k, v in memory["parts"].items()},
        "baseline_mib": memory["measured"]["rss_before_model"] / 2**20,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["tiny", "smollm2"])
    parser.add_argument("--steps", type=int, default=2, help="steps per run (2: the optimizer state exists)")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--allocator",
        choices=["returning", "default"],
        default="returning",
        help="returning: MALLOC_MMAP_THRESHOLD_=131072 (freed large blocks leave the resident set); default: "
        "glibc's dynamic threshold, which keeps them",
    )
    parser.add_argument("--smoke", action="store_true", help="the first configuration only (the tiny Llama)")
    args = parser.parse_args()
    cases = CASES[:1] if args.smoke else CASES
    if args.smoke:
        args.only = "tiny"
    models = {"tiny": TINY}
    if args.only != "tiny":
        models["smollm2"] = smollm2_folder()
    results = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        data = write_data(tmp / "long.jsonl")
        for case in cases:
            if args.only and case[1] != args.only:
                continue
            results.append(run_case(tmp, case, models, data, args.steps, args.allocator))
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    rows = [
        [r["case"], f"{r['estimate_mib']:.1f}", f"{r['measured_mib']:.1f}", f"{r['ratio']:.2f}", r["peak_during"]]
        if "error" not in r
        else [r["case"], "-", "-", "-", r["error"]]
        for r in results
    ]
    print_table(rows, ["configuration", "estimate MiB", "measured MiB", "ratio", "peak during"])
    within = [r for r in results if "ratio" in r and 0.85 <= r["ratio"] <= 1.15]
    print(f"within +-15%: {len(within)} of {len(results)}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
