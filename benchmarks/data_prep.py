"""Data preparation at the scale users bring: `autotrain llm` (SFT, tiny Llama, 5 optimizer steps) against a bare
TRL SFTTrainer on synthetic chat data of 5,000 to 1,000,000 rows.

    python benchmarks/data_prep.py [--sizes 5000,50000,200000,1000000] [--trl-sizes SIZES] [--smoke]

The data: JSON lines of a system, a user and an assistant turn, 20-400 words a row in all, from a seeded
generator (`generate`). For each size, each run in a process of its own, with caches of its own:

1. autotrain, first run (an empty data cache): time from the process start to the first optimizer step,
   peak RSS, the preparation's rows/s (its cache record), the cache's size against the file's, and the
   longest gap between two progress lines (output to a pipe: no terminal); a preparation of under 20 s is run
   3 times (each from an empty cache) and its rows/s is the median (a 2-s preparation moved 15% between runs);
2. a bare TRL SFTTrainer on the same file (a fresh datasets cache): time to the first step, peak RSS;
3. autotrain, second run (the cache of 1): time to the first step, peak RSS;
4. autotrain with `data.streaming: true`: time to the first step, peak RSS.

Then the three-source 0.5 / 0.3 / 0.2 mixture (`data.sources`), drawn by the training set's own code in two
processes with one seed: its realised shares in each of three epochs, whether the epochs' orders differ,
and whether the same seed drew the same order. Peak RSS is the largest process's (the preparation's worker
processes are forked from the run's, and share its pages).

Targets: at 1M rows (about 1 GB), the first run's time to first step <= 0.5x TRL's and peak RSS <= 2 GiB,
the second run <= 10 s, the streaming run's peak within 10% of the 50,000-row run's; preparation rows/s
within 15% across sizes; the second run's peak at the largest size within 10% of its peak at the smallest;
cache <= 3x the data; progress lines at most 10 s apart; mixture shares within 2 points of 0.5 / 0.3 / 0.2,
different orders in different epochs, the same order for the same seed. Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from _common import AUTOTRAIN, BASELINES, ROOT, child, child_result, command_usage, print_table

TINY = ROOT / "tests" / "assets" / "tiny-llama"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
ENV.pop("AUTOTRAIN_DEBUG", None)
STEPS, BATCH, MAX_LENGTH = 5, 4, 512
REPEATS, SHORT = 3, 20.0  # a preparation shorter than SHORT s is timed REPEATS times: the median rows/s
WORDS = [
    "the", "a", "of", "and", "to", "in", "is", "it", "that", "was", "for", "on", "are", "with", "as", "be",
    "at", "by", "this", "from", "have", "or", "an", "they", "which", "one", "you", "had", "not", "but", "what",
    "all", "were", "when", "we", "there", "can", "said", "each", "she", "do", "how", "their", "if", "will",
    "up", "other", "about", "out", "many", "then", "them", "these", "so", "some", "her", "would", "make", "like",
    "him", "into", "time", "has", "look", "two", "more", "write", "go", "see", "number", "no", "way", "could",
    "people", "my", "than", "first", "water", "been", "call", "who", "oil", "its", "now", "find", "long", "down",
    "day", "did", "get", "come", "made", "may", "part", "sky", "blue", "green", "river", "mountain", "question",
    "answer", "system", "assistant", "explain", "describe", "carefully", "because", "although",
]  # fmt: skip


def generate(path: str, rows: str, seed: str = "0") -> None:
    """`rows` chat rows as JSON lines: a system, a user and an assistant turn, 20-400 words in all."""
    rng = random.Random(int(seed))
    with open(path, "w", encoding="utf-8") as handle:
        for _ in range(int(rows)):
            words = rng.randint(20, 400)
            system, user = max(2, words // 10), max(4, words * 3 // 10)
            parts = [" ".join(rng.choices(WORDS, k=n)) for n in (system, user, max(4, words - system - user))]
            turns = [
                {"role": role, "content": text}
                for role, text in zip(("system", "user", "assistant"), parts, strict=True)
            ]
            handle.write(json.dumps({"messages": turns}) + "\n")


def mixture_draws(seed: str) -> dict:
    """The 0.5 / 0.3 / 0.2 mixture of three sources (50,000, 20,000 and 30,000 rows) drawn for three epochs by
    autotrain's training set: each epoch's realised shares, and a digest of each epoch's order."""
    import hashlib

    import numpy as np

    from autotrain.data.mixture import Mixture

    mixture = Mixture([50_000, 20_000, 30_000], [0.5, 0.3, 0.2], int(seed))
    out = {"shares": [], "orders": []}
    for epoch in range(3):
        mixture.set_epoch(epoch)
        out["shares"].append((np.bincount(mixture.source, minlength=3) / len(mixture.source)).round(4).tolist())
        digest = hashlib.sha256(mixture.source.tobytes() + mixture.row.tobytes()).hexdigest()[:16]
        out["orders"].append(digest)
    return out


def _config(tmp: Path, name: str, data: Path, **extra) -> Path:
    config = {
        "task": "llm",
        "trainer": "sft",
        "base_model": str(TINY),
        "project_name": str(tmp / f"run-{name}"),
        "log": "none",
        "data": {"path": str(data), **extra},
        "training_args": {"max_steps": STEPS, "batch_size": BATCH, "max_length": MAX_LENGTH, "logging_steps": 1,
                          "mixed_precision": "no", "save_steps": 10**6, "optimizer": "adamw_torch"},
    }  # fmt: skip
    path = tmp / f"{name}.yml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def _run(argv: list[str], tmp: Path, name: str, env: dict) -> dict:
    """One run, its output read line by line as it comes (a pipe: no terminal): wall time, peak RSS, the
    process start time, and the time each line came."""
    usage = tmp / f"{name}-usage.json"
    began = time.time()
    proc = subprocess.Popen(child(command_usage, usage, *argv), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    lines = [(time.time(), line.rstrip("\n")) for line in proc.stdout]
    if proc.wait():
        raise SystemExit(f"{name} exited {proc.returncode}:\n" + "\n".join(text for _, text in lines[-60:]))
    return {"began": began, "rss": json.loads(usage.read_text())["maxrss_kib"] * 1024, "lines": lines}


def _first_step(log: Path, began: float) -> float:
    records = [json.loads(line) for line in log.read_text().splitlines()]
    return next(r["time"] for r in records if "loss" in r) - began


def autotrain_run(tmp: Path, name: str, data: Path, cache: Path, **extra) -> dict:
    config = _config(tmp, name, data, **extra)
    run = _run([*AUTOTRAIN, "llm", "--config", str(config)], tmp, name, {**ENV, "AUTOTRAIN_DATA_CACHE": str(cache)})
    project = tmp / f"run-{name}"
    run["first_step"] = _first_step(project / "logs" / "metrics.jsonl", run["began"])
    shutil.rmtree(project, ignore_errors=True)
    return run


def trl_run(tmp: Path, name: str, data: Path) -> dict:
    log = tmp / f"{name}.jsonl"
    settings = {
        "model": str(TINY), "data": str(data), "log": str(log),
        "args": {"output_dir": str(tmp / f"run-{name}"), "max_steps": STEPS, "per_device_train_batch_size": BATCH,
                 "max_length": MAX_LENGTH, "logging_steps": 1, "save_strategy": "no", "report_to": "none",
                 "use_cpu": True, "bf16": False, "optim": "adamw_torch"},
    }  # fmt: skip
    env = {**ENV, "HF_DATASETS_CACHE": str(tmp / f"hf-{name}")}
    run = _run([sys.executable, str(BASELINES / "trl_sft_stamped.py"), json.dumps(settings)], tmp, name, env)
    run["first_step"] = _first_step(log, run["began"])
    shutil.rmtree(tmp / f"hf-{name}", ignore_errors=True)
    shutil.rmtree(tmp / f"run-{name}", ignore_errors=True)
    return run


def preparation(cache: Path) -> dict:
    """The cache record of the one split prepared (rows, seconds) and the cache's size in bytes."""
    record = json.loads(next(cache.rglob("done.json")).read_text())
    return {**record, "cache_bytes": sum(f.stat().st_size for f in cache.rglob("*") if f.is_file())}


def longest_gap(lines: list[tuple[float, str]]) -> float:
    """The longest time between two progress lines of the preparation (its summary line the last)."""
    times = [t for t, text in lines if text.startswith("data ") and ("rows/s" in text or "prepared in" in text)]
    return max((b - a for a, b in zip(times, times[1:], strict=False)), default=0.0)


def measure(tmp: Path, rows: int, with_trl: bool) -> dict:
    data = tmp / f"chat-{rows}.jsonl"
    generate(str(data), str(rows))
    cache = tmp / f"cache-{rows}"
    first = autotrain_run(tmp, f"first-{rows}", data, cache)
    figures = {"rows": rows, "data_bytes": data.stat().st_size, "first": first, "prep": preparation(cache)}
    figures["gap"] = longest_gap(first["lines"])
    figures["rates"] = [figures["prep"]["rows"] / figures["prep"]["seconds"]]
    while sum(figures["rates"]) and len(figures["rates"]) < REPEATS and figures["prep"]["seconds"] < SHORT:
        again = tmp / f"cache-{rows}-again"  # a short preparation again, from an empty cache: the median rate
        autotrain_run(tmp, f"again-{rows}-{len(figures['rates'])}", data, again)
        record = preparation(again)
        figures["rates"].append(record["rows"] / record["seconds"])
        shutil.rmtree(again, ignore_errors=True)
    figures["second"] = autotrain_run(tmp, f"second-{rows}", data, cache)
    figures["stream"] = autotrain_run(tmp, f"stream-{rows}", data, tmp / "cache-stream", streaming=True)
    figures["trl"] = trl_run(tmp, f"trl-{rows}", data) if with_trl else None
    shutil.rmtree(cache, ignore_errors=True)
    data.unlink()
    for run in ("first", "second", "stream", "trl"):
        if figures[run]:
            figures[run].pop("lines", None)
    print(f"  {rows:,} rows: {json.dumps(figures)}", file=sys.stderr, flush=True)
    return figures


def report(results: list[dict], mixture: list[dict]) -> None:
    mib = 2**20
    rows = []
    for r in results:
        trl = r["trl"]
        ratio = f"{r['first']['first_step'] / trl['first_step']:.2f}" if trl else "-"
        rows.append([
            f"{r['rows']:,}", f"{r['first']['first_step']:.1f}", f"{trl['first_step']:.1f}" if trl else "-", ratio,
            f"{r['second']['first_step']:.1f}", f"{r['stream']['first_step']:.1f}",
            f"{r['first']['rss'] / mib:.0f}", f"{trl['rss'] / mib:.0f}" if trl else "-",
            f"{r['second']['rss'] / mib:.0f}", f"{r['stream']['rss'] / mib:.0f}",
            f"{statistics.median(r['rates']):,.0f}", f"{r['prep']['cache_bytes'] / r['data_bytes']:.2f}",
            f"{r['gap']:.1f}",
        ])  # fmt: skip
    header = ["rows", "first run s", "TRL s", "ratio", "second s", "streaming s", "peak MiB", "TRL MiB",
              "second MiB", "streaming MiB", "prep rows/s", "cache / data", "longest gap s"]  # fmt: skip
    print_table(rows, header)
    rates = [statistics.median(r["rates"]) for r in results]
    largest, smallest = results[-1], results[0]
    middle = next((r for r in results if r["rows"] == 50_000), None)
    print(f"preparation rows/s, largest / smallest across sizes: {max(rates) / min(rates):.2f} (target <= 1.15)")
    second = largest["second"]["rss"] / smallest["second"]["rss"]
    print(f"second run's peak, {largest['rows']:,} / {smallest['rows']:,} rows: {second:.2f} (target <= 1.10)")
    if middle is not None:
        stream = largest["stream"]["rss"] / middle["first"]["rss"]
        print(f"streaming peak at {largest['rows']:,} rows / the 50,000-row run's: {stream:.2f} (target <= 1.10)")
    shares = [share for run in mixture for share in run["shares"]]
    off = max(abs(a - b) for s in shares for a, b in zip(s, (0.5, 0.3, 0.2), strict=True))
    orders = mixture[0]["orders"]
    print(
        f"mixture 0.5/0.3/0.2: largest share off by {off * 100:.2f} points (target <= 2); epochs' orders differ: "
        f"{len(set(orders)) == len(orders)}; the same seed, the same orders: {orders == mixture[1]['orders']}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="5000,50000,200000,1000000", help="Rows of each data file.")
    parser.add_argument("--trl-sizes", default=None, help="The sizes TRL is run at too (default: every size).")
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of every run; 0 = torch's.")
    parser.add_argument("--smoke", action="store_true", help="300 rows, every run once: checks nothing.")
    args = parser.parse_args()
    if args.threads:
        ENV["OMP_NUM_THREADS"] = str(args.threads)
    sizes = [300] if args.smoke else [int(s) for s in args.sizes.split(",")]
    trl = sizes[:1] if args.smoke else [int(s) for s in (args.trl_sizes or args.sizes).split(",")]
    results = []
    with tempfile.TemporaryDirectory(prefix="autotrain-data-prep-") as name:
        for rows in sizes:
            results.append(measure(Path(name), rows, rows in trl))
    mixture = [child_result(child(mixture_draws, 42), env=ENV) for _ in range(2)]
    report(results, mixture)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
