"""The memory estimate against the peak each run measured, on the CPU: tiny Llama and SmolLM2-135M, full and
LoRA, AdamW and CAME8Bit, gradient checkpointing on and off, gradient accumulation, the chunked loss (SFT and
CLM's default, `training_args.cross_entropy: chunked`) and the full-logits loss (`cross_entropy: full`), and
`batch_size: auto` under a memory budget.

    python benchmarks/memory_estimate.py [--only tiny|smollm2] [--case NAME] [--steps 2] [--json F]
                                         [--malloc returning|system] [--smoke]
    python benchmarks/memory_estimate.py --phases NAME   # one configuration, each moment of a step measured

Each configuration trains `--steps` steps through `autotrain llm` in its own process, one at a time, on rows
of text longer than max_length (every batch is full), after a dry run of the same config (which measures the
runtime's baseline once and caches it, so that the probe does not run inside the measured process). The
measured peak is the process's peak resident memory over its whole life (`ru_maxrss` of the child, from
`wait4`); the estimate is the one run.json records, made before the run. The target: the estimate within
-5% / +10% of the measured peak (ratio 0.95 .. 1.10).

`batch_size: auto` rows: the run chooses its batch under `memory_budget`; the next larger batch is then
trained as a fixed batch, to show that it would have gone over the budget (measured peaks of both).

`--phases NAME`: the configuration runs in a child interpreter with hooks at the moments the estimate
follows (the loss's forward, its backward, the last decoder layer's backward, the end of backward, the
optimizer step); the peak resident memory within each (`VmHWM`, reset at each boundary through
/proc/self/clear_refs) is printed beside the estimate's figure for that moment.

`--malloc system` runs with glibc's own malloc behaviour (AUTOTRAIN_MALLOC=system), which keeps freed
blocks: the estimate then says it could be low. Each row of `--json` holds the run's wall `seconds`, for the
time the fixed mmap threshold costs (compare the two modes on a quiet machine). Memory does not depend on
how busy the machine is, so the table itself runs anywhere. `--smoke`: the first configuration only, to
check the script works.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from _common import AUTOTRAIN, child, child_result, print_table, smollm2_folder

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "assets" / "tiny-llama"
LOW, HIGH = 0.95, 1.10  # estimate / measured


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    model: str  # tiny | smollm2
    batch: int | str
    length: int
    peft: bool = False
    optimizer: str = "adamw_torch"
    checkpointing: bool = False
    trainer: str = "sft"
    more: tuple[tuple[str, object], ...] = ()  # other training_args
    next_larger: bool = False  # batch_size auto: train the next larger batch too


FULL_LOSS = (("cross_entropy", "full"),)  # the model's whole logits; every other case: the chunked loss
CASES = [
    Case("tiny full adamw", "tiny", 16, 512),
    Case("tiny full adamw ckpt", "tiny", 16, 512, checkpointing=True),
    Case("tiny full came8bit", "tiny", 16, 512, optimizer="came_8bit"),
    Case("tiny lora adamw", "tiny", 16, 512, peft=True),
    Case("tiny lora came8bit ckpt", "tiny", 16, 512, peft=True, optimizer="came_8bit", checkpointing=True),
    Case("tiny full adamw (full logits)", "tiny", 16, 512, more=FULL_LOSS),
    Case("tiny clm full adamw (full logits)", "tiny", 16, 512, trainer="clm", more=FULL_LOSS),
    Case("smollm2 full adamw", "smollm2", 2, 256),
    Case("smollm2 full adamw accum 2", "smollm2", 2, 256, more=(("gradient_accumulation", 2),)),
    Case("smollm2 full came8bit ckpt", "smollm2", 2, 256, optimizer="came_8bit", checkpointing=True),
    Case("smollm2 lora adamw", "smollm2", 2, 256, peft=True),
    Case("smollm2 lora came8bit ckpt", "smollm2", 4, 256, peft=True, optimizer="came_8bit", checkpointing=True),
    Case("smollm2 full adamw (full logits)", "smollm2", 2, 256, more=FULL_LOSS),
    Case("smollm2 lora adamw (full logits)", "smollm2", 2, 256, peft=True, more=FULL_LOSS),
    Case("smollm2 clm lora adamw", "smollm2", 2, 256, peft=True, trainer="clm"),
    Case("smollm2 clm lora adamw (full logits)", "smollm2", 2, 256, peft=True, trainer="clm", more=FULL_LOSS),
    Case(
        "smollm2 lora adamw auto, budget 3GiB",
        "smollm2",
        "auto",
        256,
        peft=True,
        more=(("target_batch_size", 16), ("memory_budget", "3GiB")),
        next_larger=True,
    ),
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


def config(tmp: Path, case: Case, model: Path, data: Path, steps: int, **override) -> Path:
    slug = case.name.replace(" ", "-").replace(",", "").replace("(", "").replace(")", "")
    slug += "".join(f"-{key}{value}" for key, value in override.items())
    training = {
        "batch_size": case.batch,
        "max_length": case.length,
        "max_steps": steps,
        "optimizer": case.optimizer,
        "gradient_checkpointing": case.checkpointing,
        "mixed_precision": "no",
        "logging_steps": 1,
        "save_steps": 1000,
        **dict(case.more),
        **override,
    }
    if case.trainer == "sft":
        training["padding_free"] = False
    cfg = {
        "task": "llm",
        "trainer": case.trainer,
        "base_model": str(model),
        "project_name": str(tmp / slug),
        "log": "none",
        "data": {"path": str(data), **({"chat_template": "none"} if case.trainer == "sft" else {})},
        "peft": {"enabled": case.peft, "r": 16, "alpha": 32, "dropout": 0.05},
        "training_args": training,
    }
    path = tmp / f"{slug}.yml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


def peak_of(argv: list[str], env: dict[str, str]) -> tuple[int, int, str]:
    """(exit code, the process's peak resident bytes over its whole life, the tail of its stderr)."""
    with tempfile.TemporaryFile() as errors:
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=errors, env=env)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        errors.seek(0)
        tail = errors.read().decode(errors="replace").strip().splitlines()
    return process.returncode, usage.ru_maxrss * 1024, (tail or ["?"])[-1]


def run_case(path: Path, env: dict[str, str]) -> dict:
    """Dry run (caches the runtime probe), then the run, measured; what run.json says beside it."""
    subprocess.run([*AUTOTRAIN, "llm", "--config", str(path), "--dry-run"], capture_output=True, env=env)
    start = time.perf_counter()
    code, peak, last = peak_of([*AUTOTRAIN, "llm", "--config", str(path)], env)
    seconds = round(time.perf_counter() - start, 1)  # for --malloc's cost in time, on a quiet machine
    if code != 0:
        return {"error": f"exit {code}: {last}"}
    folder = Path(yaml.safe_load(path.read_text())["project_name"])
    run = json.loads((folder / "run.json").read_text())
    memory = run["memory"]
    return {
        "estimate": memory["bytes_per_device"],
        "measured": peak,
        "ratio": memory["bytes_per_device"] / peak,
        "peak_during": memory["peak_during"],
        "parts_mib": {k: round(v / 2**20, 1) for k, v in memory["parts"].items()},
        "phases_mib": {k: round(v / 2**20, 1) for k, v in memory.get("phases", {}).items()},
        "could_be_low": memory.get("could_be_low", []),
        "run_json_measured": memory.get("measured"),
        "batch_size": memory.get("batch_size_auto", {}).get("batch_size"),
        "auto": memory.get("batch_size_auto"),
        "seconds": seconds,
    }


def measure(case: Case, tmp: Path, models: dict[str, Path], data: Path, steps: int, env) -> list[dict]:
    result = run_case(config(tmp, case, models[case.model], data, steps), env)
    rows = [{"case": case.name, **result}]
    auto = result.get("auto")
    if case.next_larger and auto and auto.get("next_larger"):
        larger = auto["next_larger"]["batch_size"]
        target = auto["target_batch_size"]
        fixed = dataclasses.replace(case, batch=larger, more=())
        path = config(tmp, fixed, models[case.model], data, steps, gradient_accumulation=target // larger)
        bigger = run_case(path, env)
        rows.append({"case": f"  next larger: batch {larger} x gradient_accumulation {target // larger}", **bigger})
        rows[0]["budget"] = auto["budget"]
        rows[-1]["budget"] = auto["budget"]
    return rows


def verdict(row: dict) -> str:
    if "error" in row:
        return row["error"]
    within = LOW <= row["ratio"] <= HIGH
    text = "yes" if within else "no"
    if "budget" in row:
        under = row["measured"] <= row["budget"]
        text += f"; measured {'within' if under else 'over'} the budget"
    return text


def table(results: list[dict]) -> None:
    rows = []
    for r in results:
        if "error" in r:
            rows.append([r["case"], "-", "-", "-", "-", r["error"]])
            continue
        name = r["case"] + (f" -> batch {r['batch_size']}" if r.get("auto") else "")
        estimate, measured = f"{r['estimate'] / 2**20:.1f}", f"{r['measured'] / 2**20:.1f}"
        rows.append([name, estimate, measured, f"{r['ratio']:.3f}", r["peak_during"], verdict(r)])
    header = ["configuration", "estimate MiB", "measured peak RSS MiB", "ratio", "estimated peak during", "within?"]
    print_table(rows, header)
    scored = [r for r in results if "ratio" in r]
    inside = sum(LOW <= r["ratio"] <= HIGH for r in scored)
    print(f"within -5% / +10%: {inside} of {len(scored)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["tiny", "smollm2"])
    parser.add_argument("--case", help="run the configurations whose name contains this")
    parser.add_argument("--steps", type=int, default=2, help="steps per run (2: the optimizer state exists)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--malloc", choices=["returning", "system"], default="returning")
    parser.add_argument("--phases", metavar="NAME", help="one configuration, each moment of a step measured")
    parser.add_argument("--smoke", action="store_true", help="the first configuration only (the tiny Llama)")
    args = parser.parse_args()
    cases = CASES
    if args.smoke:
        cases, args.only = cases[:1], "tiny"
    cases = [c for c in cases if (not args.only or c.model == args.only) and (not args.case or args.case in c.name)]
    if args.phases:
        cases = [c for c in CASES if c.name == args.phases]
        if not cases:
            raise SystemExit(f"no configuration named {args.phases!r}: " + ", ".join(c.name for c in CASES))
    models = {"tiny": TINY}
    if any(c.model == "smollm2" for c in cases):
        models["smollm2"] = smollm2_folder()
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    if args.malloc == "system":
        env["AUTOTRAIN_MALLOC"] = "system"
    results = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        data = write_data(tmp / "long.jsonl")
        if args.phases:
            return phases(config(tmp, cases[0], models[cases[0].model], data, args.steps), env)
        for case in cases:
            for row in measure(case, tmp, models, data, args.steps, env):
                results.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    table(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


# --- one configuration, moment by moment ---------------------------------------------------------------


def phases(path: Path, env: dict[str, str]) -> int:
    subprocess.run([*AUTOTRAIN, "llm", "--config", str(path), "--dry-run"], capture_output=True, env=env)
    measured = child_result(child(measure_moments, path), env=env)
    folder = Path(yaml.safe_load(path.read_text())["project_name"])
    estimate = json.loads((folder / "run.json").read_text())["memory"]
    rows = []
    for moment, bytes_ in estimate["phases"].items():
        peaks = measured.get(moment, [])
        shown = " / ".join(f"{p / 2**20:.1f}" for p in peaks) or "-"
        rows.append([moment, f"{bytes_ / 2**20:.1f}", shown, f"{bytes_ / max(peaks):.3f}" if peaks else "-"])
    print(f"{path.stem}: the estimate's moments against the peak resident memory measured in each (step 1 / 2)")
    print_table(rows, ["moment", "estimate MiB", "measured MiB (each step)", "ratio to the highest"])
    parts = {k: round(v / 2**20, 1) for k, v in estimate["parts"].items()}
    print(f"parts at the estimated peak (MiB): {json.dumps(parts)}")
    print(f"runtime baseline measured by the run as training started: {measured['start'] / 2**20:.1f} MiB")
    return 0


def measure_moments(path: str) -> dict:
    """In a child interpreter: run `autotrain llm --config PATH` with hooks at each moment the estimate
    follows, and return the peak resident bytes within each (one figure per step)."""
    import torch
    from accelerate import Accelerator
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
    from transformers import Trainer

    from autotrain.cli.main import main as cli

    clock = _Moments()
    backward = Accelerator.backward

    def timed_backward(self, loss, **kwargs):
        clock.begin("loss backward")
        clock.backward = True
        backward(self, loss, **kwargs)
        clock.backward = False
        clock.end()

    Accelerator.backward = timed_backward
    step = Trainer.training_step

    def training_step(self, model, *args, **kwargs):
        if clock.start is None:
            clock.start = _status()["VmRSS"]
            clock.hook_layers(model, torch)
        return step(self, model, *args, **kwargs)

    Trainer.training_step = training_step
    register_optimizer_step_pre_hook(lambda *a: clock.begin("optimizer step"))
    register_optimizer_step_post_hook(lambda *a: clock.end())
    sys.argv = ["autotrain", "llm", "--config", path]
    with contextlib.suppress(SystemExit):
        cli()
    return {**clock.peaks, "start": clock.start}


class _Moments:
    """Peak resident memory per named span of time, the high-water mark reset as each begins."""

    def __init__(self):
        self.peaks: dict[str, list[int]] = {}
        self.current: str | None = None
        self.start: int | None = None
        self.backward = False  # a checkpointed layer's forward runs again in backward: not the loss's forward

    def begin(self, name: str) -> None:
        self.end()
        self.current = name
        Path("/proc/self/clear_refs").write_text("5")

    def end(self) -> None:
        if self.current is not None:
            self.peaks.setdefault(self.current, []).append(_status()["VmHWM"])
        self.current = None

    def hook_layers(self, model, torch) -> None:
        lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList) and len(m) > 0]
        layers = max(lists, key=lambda m: sum(p.numel() for p in m.parameters()))
        last, first = layers[len(layers) - 1], layers[0]
        last.register_forward_hook(lambda *a: None if self.backward else self.begin("loss forward"))
        last.register_full_backward_pre_hook(lambda *a: self.begin("layer backward"))
        last.register_full_backward_hook(lambda *a: self.end())
        first.register_full_backward_hook(lambda *a: self.begin("embedding backward"))


def _status() -> dict[str, int]:
    found = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmHWM", "VmRSS"):
            found[name] = int(value.split()[0]) * 1024
    return found


if __name__ == "__main__":
    raise SystemExit(main())
