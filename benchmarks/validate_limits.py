"""`autotrain validate` on hostile configs: wall time and peak memory, against a small valid config.

    python benchmarks/validate_limits.py [--repeat 5] [--smoke]

Cases: the shipped quick start (the baseline), a valid config padded to just under 1 MiB with comments,
a config of just under 1 MiB with 60,000 keys in an unknown section (refused: the error path over many
values), 20,000 unknown keys inside `training_args` (each one reported: the suggestion search), the 1 KB YAML
alias bomb, and 1,000 nested lists. Each runs in a fresh interpreter; medians of
interleaved repetitions; the ratio is against the baseline's wall time. `--smoke`: one repetition.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import ROOT, child, command_usage

QUICKSTART = ROOT / "configs" / "llm" / "quickstart.yml"


def cases(folder: Path) -> dict[str, Path]:
    valid = QUICKSTART.read_text(encoding="utf-8")
    padded = folder / "padded-1mib.yml"
    filler = "# " + "x" * 98 + "\n"
    padded.write_text(valid + filler * (((1 << 20) - len(valid) - 200) // len(filler)), encoding="utf-8")
    wide = folder / "many-keys.yml"
    rows = "".join(f"  k{i}: v{i}\n" for i in range(60_000))
    wide.write_text(valid + "extra:\n" + rows[: (1 << 20) - len(valid) - 100].rsplit("\n", 1)[0] + "\n")
    unknown = folder / "unknown-keys.yml"
    names = ("".join(chr(97 + (i * 7 + j * 13) % 26) for j in range(10)) + str(i) for i in range(20_000))
    unknown.write_text(valid + "".join(f"  {name}: 1\n" for name in names), encoding="utf-8")
    bomb = folder / "alias-bomb.yml"
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    bomb.write_text("\n".join(lines) + "\n", encoding="utf-8")
    nested = folder / "nested.yml"
    nested.write_text("a: " + "[" * 1000 + "]" * 1000 + "\n", encoding="utf-8")
    return {
        "quickstart (baseline)": QUICKSTART,
        "1 MiB, comments": padded,
        "1 MiB, 60k keys": wide,
        "20k unknown keys": unknown,
        "alias bomb (1 KB)": bomb,
        "1000 nested lists": nested,
    }


def measure(path: Path) -> dict:
    """Exit code, wall seconds and peak RSS (MiB) of `autotrain validate path` in a fresh process."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [sys.executable, "-m", "autotrain.cli.main", "validate", str(path)]
        subprocess.run(child(command_usage, out.name, *cmd), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        usage = json.loads(Path(out.name).read_text())
        return {"code": usage["code"], "wall": usage["wall"], "rss": usage["maxrss_kib"] / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="One repetition, to check the script works.")
    args = parser.parse_args()
    if args.smoke:
        args.repeat = 1
    with tempfile.TemporaryDirectory() as tmp:
        named = cases(Path(tmp))
        runs: dict[str, list[dict]] = {name: [] for name in named}
        for _ in range(args.repeat):  # interleaved: machine noise hits every case alike
            for name, path in named.items():
                runs[name].append(measure(path))
    base = statistics.median(r["wall"] for r in runs["quickstart (baseline)"])
    print(f"{'case':24} {'exit':>4} {'wall s':>7} {'x base':>7} {'peak MiB':>9}")
    for name, results in runs.items():
        wall = statistics.median(r["wall"] for r in results)
        rss = max(r["rss"] for r in results)
        print(f"{name:24} {results[0]['code']:>4} {wall:7.3f} {wall / base:7.2f} {rss:9.1f}")


if __name__ == "__main__":
    main()
